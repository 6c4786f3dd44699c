// The forward kernels: one thread per (token, chunk of 8 d). Every value comes from forward_value /
// forward_exact_bf16 / forward_exact (kernels/operator_math.hpp), as on the CPU.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "kernels/cuda/cuda_check.hpp"
#include "kernels/cuda/kernel_common.cuh"
#include "kernels/cuda/operator_kernels.hpp"

namespace mhc::cuda {
namespace {

using namespace detail;

// ---- Forward ----------------------------------------------------------------------------------------------
// One thread per (token, chunk of 8 d): it loads x and the H residual rows of its chunk (16 bytes each when
// aligned) and writes the H output chunks. HC is H as a constant (0: the generic kernel, H read at run time).

constexpr int kForwardThreads = 128;
// Blocks per multiprocessor the kernels are compiled for: a register cap. With the fully unrolled d loop
// ptxas otherwise keeps far more values live than latency hiding needs (binary32 at H = 4: 96 registers
// where 55 suffice). Binary64 at H = 4: four blocks of 128 registers (98 % of copy; five, with spills:
// 0.48 ms). Exact at H = 4 (the binary64 filter, which exact without the twin ran at every H until session
// 10 and still runs at H = 8; with the twin, the certified path) computes its outputs in two blocks of two
// (kForwardOutputs) in 96 registers, five blocks (H200, 16384 x 4 x 4096, with the shared weights below:
// 0.367 ms; six blocks, 80 registers and spills: 0.395 ms; all four outputs at once in 128 registers, four
// blocks: 0.48 ms before the shared weights, when two blocks of two took 0.43). Binary64 and exact at H = 8
// compute the outputs in blocks to fit in 168 (exact: four blocks of 128 registers were no faster).
template <Mode M, int HC>
inline constexpr int kForwardMinBlocks = M == Mode::fp32 ? (HC == 8 ? 4 : 8)
                                         : M == Mode::fp64 ? (HC == 8 ? 3 : 4)
                                                           : (HC == 8 ? 3 : HC == 4 ? 5 : 4);
// Outputs computed together per d (x and r are unpacked and widened once per block of outputs).
template <Mode M, int HC>
inline constexpr int kForwardOutputs = HC < 4 || M == Mode::fp32 ? HC : M == Mode::fp64 ? (HC == 8 ? 4 : HC) : 2;

// The binary64 kernels at H <= 4 loop over tokens and copy the next tokens' chunks into a per-thread ring in shared
// memory (cp.async, kForwardStages slots) while computing the current one; their grid is one wave of resident blocks
// (forward_grid). Measured on the H200 (docs/performance.md): fp64 at H = 4 80 -> 89 % of copy (98 % with four blocks
// of 128 registers); the exact kernels and every kernel at H = 8 were slower with the ring (exact 0.55 -> 0.83 ms in
// session 4; with the shared weights below and the next token's weights loaded a step ahead, 0.367 -> 0.407 ms at H = 4
// and 0.475 -> 0.506 ms at H = 8) and load directly.
template <Mode M, int HC>
inline constexpr bool kForwardRing = HC > 0 && HC < 8 && M == Mode::fp64;
constexpr int kForwardStages = 3;
constexpr size_t forward_ring_bytes(int H) {
  return size_t(kForwardStages) * (1 + H) * kForwardThreads * sizeof(uint4);
}

// The exact value of an element the bf16 filter could not settle, out of line: the rare path keeps its
// registers to itself.
__device__ __noinline__ ExactRounded forward_exact_out_of_line(float p, float x, const float* c, const float* r,
                                                              int H) {
  return forward_exact(p, x, c, r, H).result();
}

// One output element before its bf16 packing: the policy's value (forward_value, or the exact value through
// the bf16 filter and the certified path), for the binary32 kernels, the generic ones and exact with the twin
// (the specialised binary64 and exact-filter paths call forward_value / forward_exact_chain on scaled values
// directly). x and r come as floats and as the arithmetic's type V (binary32 or binary64, widened once per d
// by the caller). `twin` receives the binary64 twin.
template <Mode M, bool kTwin, class V>
__device__ __forceinline__ bf16_bits forward_element(const PolicyDesc& pd, float p, const float* cc, float xv,
                                                     const float* r, V xw, const V* rw, int H, double& twin,
                                                     const FallbackList& fb, int64_t index, bool valid) {
  if constexpr (M == Mode::exact) {
    // Without the twin, the filter settles almost every element; the rest (and every element when the twin
    // is stored) take the certified path, and what that cannot certify is finished on the host.
    bf16_bits b;
    bool settled = false;
    if constexpr (!kTwin) settled = forward_exact_bf16(p, xv, cc, r, H, b);
    if (!settled) {
      const ExactRounded v = kTwin ? forward_exact(p, xv, cc, r, H).result() : forward_exact_out_of_line(p, xv, cc, r, H);
      b = v.bf16();
      twin = v.rn64;
      if (!v.certified && valid) push_fallback(fb, FallbackKind::out, index);
    }
    return b;
  } else {
    const RoundedT<M> v = forward_value<RoundedT<M>>(pd, p, xw, cc, rw, H);
    if constexpr (M == Mode::fp64) twin = v;
    return round_to_bf16_rne(v);
  }
}

// A block of elements (outputs h0 .. h0 + n_out - 1 of token s at d0 .. d0 + 7; aligned rows) in which the
// bf16 filter declined one, from the inputs in device memory: every load first (one memory latency, not one
// per element: this runs in a single thread while its warp waits), then the filter again per element and
// the certified path where it declines. Out of line, so that the kernel's main loop keeps its registers.
template <Mode M>
__device__ __noinline__ void finish_forward_block(PolicyDesc pd, InputsView in, bf16_bits* out, FallbackList fb,
                                                  int64_t s, int h0, int n_out, int64_t d0) {
  const int H = in.shape.H;
  const int64_t D = in.shape.D;
  const Chunk xc = load_chunk<true>(in.x + s * D + d0, kChunk);
  Chunk rc[kMaxStreams];
  for (int k = 0; k < H; ++k) rc[k] = load_chunk<true>(in.residual + (s * H + k) * D + d0, kChunk);
  for (int ho = h0; ho < h0 + n_out; ++ho) {
    float cc[kMaxStreams];
    for (int k = 0; k < H; ++k) cc[k] = in.comb[(s * H + k) * H + ho];
    const float p = in.post[s * H + ho];
    for (int e = 0; e < kChunk; ++e) {
      float r[kMaxStreams];
      double rw[kMaxStreams];
      for (int k = 0; k < H; ++k) rw[k] = r[k] = chunk_elem(rc[k], e);
      const float xv = chunk_elem(xc, e);
      const int64_t index = (s * H + ho) * D + d0 + e;
      double unused;
      out[index] = forward_element<M, false>(pd, p, cc, xv, r, double(xv), rw, H, unused, fb, index, true);
    }
  }
}

// One thread per (token, chunk of 8 d): it loads x and the H residual rows of its chunk (16 bytes each when
// aligned) and writes the H output chunks. HC is H as a constant (0: the generic kernel, H read at run time).
// kTwin: the binary64 twin (out_f64) is stored (fp64 and exact only).
// With a constant H the loop runs d outside and the output streams inside, so each x and r value is
// unpacked (and widened) once for all H outputs; the generic kernel runs the streams outside instead (its
// arrays are indexed at run time, and H output chunks would not fit in registers).
template <Mode M, int HC, bool kAligned, bool kTwin, class Pol>
__global__ void __launch_bounds__(kForwardThreads, kForwardMinBlocks<M, HC>)
    forward_kernel(Pol pol, InputsView in, ForwardOutputs out, FallbackList fb) {
  using V = std::conditional_t<M == Mode::fp32, float, double>;
  constexpr int HA = HC > 0 ? HC : kMaxStreams;
  const int H = HC > 0 ? HC : in.shape.H;
  const PolicyDesc pd = pol.get();
  const int64_t D = in.shape.D;
  const int64_t chunks = (D + kChunk - 1) / kChunk;
  const int64_t c = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  // The ring (kForwardRing): this thread's slot of (stage, row) is ring[(stage * (1 + H) + row) * threads].
  constexpr bool kRing = kForwardRing<M, HC>;
  // exact without the twin (at H = 8 and in the generic kernel; H <= 4 runs forward_exact_kernel below): the
  // binary64 bf16 filter; its bound from the weights of each output and the largest value magnitude in this
  // thread's chunks. It and fp64 take the weights times 2^896 (scaled_weight) and the values by scaled_value
  // (once per d): integer instructions, not conversions, and the same products.
  constexpr bool kFilter = M == Mode::exact && !kTwin;
  constexpr bool kScaled = HC > 0 && (kFilter || M == Mode::fp64);
  // A block works on one token at a time (all its threads share blockIdx.y), so the exact filter's scaled
  // weights and weight bounds are computed once per block and token into shared memory, one by each of the
  // first kWeightThreads threads (per output ho, kWeightStride doubles: post, the comb column, the bound's
  // weight half), instead of all of them by every thread (exact forward at 16384 x 4 x 4096: 0.43 ->
  // 0.37 ms; H = 8: 0.58 -> 0.47 ms).
  constexpr bool kSharedWeights = kFilter && HC > 0;
  static_assert(!(kSharedWeights && kRing), "the ring kernels (binary64) compute their weights per thread");
  constexpr int kWeightStride = HC + 2;
  constexpr int kWeightThreads = HC * kWeightStride;
  __shared__ __align__(16) double shared_weights[kSharedWeights ? kWeightThreads : 1];
  // Threads past the last chunk have no elements; they stay for the block's barriers when there are any.
  const bool active = c < chunks;
  if (!active && !kSharedWeights) return;
  const int64_t d0 = c * kChunk;
  const int n = static_cast<int>(D - d0 < kChunk ? D - d0 : kChunk);
  extern __shared__ uint4 ring_memory[];
  uint4* const ring = ring_memory + threadIdx.x;
  auto fetch = [&](int64_t s, int stage) {
    uint4* slot = ring + stage * (1 + HC) * kForwardThreads;
    copy16_async(slot, in.x + s * D + d0);
#pragma unroll
    for (int k = 0; k < HC; ++k) copy16_async(slot + (1 + k) * kForwardThreads, in.residual + (s * HC + k) * D + d0);
  };
  if constexpr (kRing) {
#pragma unroll
    for (int i = 0; i < kForwardStages - 1; ++i) {
      if (blockIdx.y + int64_t(i) * gridDim.y < in.shape.S) fetch(blockIdx.y + int64_t(i) * gridDim.y, i);
      commit_copies();
    }
  }
  int stage = 0;  // s = blockIdx.y + step·gridDim.y is in ring stage step mod kForwardStages
  for (int64_t s = blockIdx.y; s < in.shape.S; s += gridDim.y, stage = stage + 1 == kForwardStages ? 0 : stage + 1) {
    Chunk xc, rc[HA];
    if constexpr (kRing) {
      // The slot read one step ago (stage - 1) receives the token kForwardStages - 1 steps ahead.
      const int64_t ahead = s + int64_t(kForwardStages - 1) * gridDim.y;
      if (ahead < in.shape.S) fetch(ahead, stage == 0 ? kForwardStages - 1 : stage - 1);
      commit_copies();
      wait_copies<kForwardStages - 1>();  // this step's group has landed
      const uint4* slot = ring + stage * (1 + HC) * kForwardThreads;
      xc = chunk_from(slot[0]);
#pragma unroll
      for (int k = 0; k < HC; ++k) rc[k] = chunk_from(slot[(1 + k) * kForwardThreads]);
    } else if (active) {
      xc = load_chunk<kAligned>(in.x + s * D + d0, n);
#pragma unroll
      for (int k = 0; k < HA; ++k)
        if (k < H) rc[k] = load_chunk<kAligned>(in.residual + (s * H + k) * D + d0, n);
    }
    const float* post = in.post + s * H;
    const float* comb = in.comb + s * H * H;
    if constexpr (kSharedWeights) {
      __syncthreads();  // every thread is done with the previous token's weights
      if (threadIdx.x < kWeightThreads) {
        const int ho = threadIdx.x / kWeightStride, j = threadIdx.x % kWeightStride;
        double v;
        if (j <= HC) {  // the exact sum takes the weights as stored
          v = scaled_weight(__ldg(j == 0 ? post + ho : comb + (j - 1) * HC + ho));
        } else {
          float column[HC > 0 ? HC : 1];
#pragma unroll
          for (int k = 0; k < HC; ++k) column[k] = __ldg(comb + k * HC + ho);
          v = forward_error_weight(__ldg(post + ho), column, HC, true);
        }
        shared_weights[threadIdx.x] = v;
      }
      __syncthreads();
      if (!active) continue;
    }
    if constexpr (HC > 0) {
      static_assert(kAligned, "the specialised kernels need aligned rows");
      // The outputs in blocks of kOutputs (kForwardOutputs): all of them, except exact at H = 4 and binary64 and
      // exact at H = 8, whose weights, chunks and sums for all outputs do not fit; x and r are then unpacked
      // once per block.
      constexpr int kOutputs = kForwardOutputs<M, HC>;
      double max_value = 0.0;
      if constexpr (kFilter) {
        uint32_t pairs = max_magnitude_pairs(xc, 0);
#pragma unroll
        for (int k = 0; k < HC; ++k) pairs = max_magnitude_pairs(rc[k], pairs);
        max_value = scaled_value(max_pair_word(pairs));
      }
#pragma unroll 1
      for (int h0 = 0; h0 < HC; h0 += kOutputs) {
        float pw[kOutputs], cw[kOutputs][HC];  // post[s, ho] and the column of ho: cw[ho][k] = comb[s, k, ho]
        double ps[kOutputs], cs[kOutputs][HC], error[kOutputs];  // kScaled; error: kFilter
#pragma unroll
        for (int i = 0; i < kOutputs; ++i) {
          if constexpr (kSharedWeights) {
            const double* sw = shared_weights + (h0 + i) * kWeightStride;
            ps[i] = sw[0];
#pragma unroll
            for (int k = 0; k < HC; ++k) cs[i][k] = sw[1 + k];
            error[i] = exact_error(sw[1 + HC], max_value);
          } else {
            pw[i] = __ldg(post + h0 + i);
#pragma unroll
            for (int k = 0; k < HC; ++k) cw[i][k] = __ldg(comb + k * HC + h0 + i);
            if constexpr (kScaled) {  // binary64: the policy's coefficients, scaled
              ps[i] = scaled_weight(coefficient(pd, pw[i]));
#pragma unroll
              for (int k = 0; k < HC; ++k) cs[i][k] = scaled_weight(coefficient(pd, cw[i][k]));
            }
          }
        }
        Chunk oc[kOutputs];
        double twin[kOutputs][2];
        // kFilter: the interval's lower roundings are packed like the outputs, and a pair of elements is settled
        // when its two words agree; `declined` collects the differences (one XOR-OR per pair, where comparing
        // each element's 16-bit results cost four instructions: 0.376 -> 0.359 ms at 16384 x 4 x 4096).
        uint32_t declined = 0;
        Chunk lower[kOutputs];
#pragma unroll
        for (int e = 0; e < kChunk; ++e) {
          if constexpr (kScaled) {
            double rs[HC];
            const double xs = chunk_scaled(xc, e);
#pragma unroll
            for (int k = 0; k < HC; ++k) rs[k] = chunk_scaled(rc[k], e);
#pragma unroll
            for (int i = 0; i < kOutputs; ++i) {
              if constexpr (kFilter) {
                bf16_bits lo, hi;
                forward_exact_chain(ps[i], xs, cs[i], rs, HC).bounds(error[i], lo, hi);
                chunk_set(oc[i], e, hi);
                chunk_set(lower[i], e, lo);
                if (e & 1) declined |= oc[i].w[e >> 1] ^ lower[i].w[e >> 1];
              } else {
                const double v = forward_value<double>(pd, ps[i], xs, cs[i], rs, HC);
                twin[i][e & 1] = v;
                chunk_set(oc[i], e, round_to_bf16_rne(v));
              }
            }
          } else {
            const float xv = chunk_elem(xc, e);
            float r[HC];
            V rw[HC];
#pragma unroll
            for (int k = 0; k < HC; ++k) rw[k] = V(r[k] = chunk_elem(rc[k], e));
#pragma unroll
            for (int i = 0; i < kOutputs; ++i) {
              const int64_t index = (s * HC + h0 + i) * D + d0 + e;
              chunk_set(oc[i], e, forward_element<M, kTwin>(pd, pw[i], cw[i], xv, r, V(xv), rw, HC, twin[i][e & 1], fb,
                                                            index, true));
            }
          }
          if constexpr (kTwin)
            if (e & 1)
#pragma unroll
              for (int i = 0; i < kOutputs; ++i)
                *reinterpret_cast<double2*>(out.out_f64 + (s * HC + h0 + i) * D + d0 + e - 1) =
                    make_double2(twin[i][0], twin[i][1]);
        }
#pragma unroll
        for (int i = 0; i < kOutputs; ++i) store_chunk<true>(out.out + (s * HC + h0 + i) * D + d0, kChunk, oc[i]);
        // Rare (exact without the twin: bf16 ties, sums within ~2^-45 of one, deep cancellation; about one block
        // in 10^5): the block's elements are recomputed out of line over what was just stored, the declined ones
        // by the certified path.
        if (declined != 0) finish_forward_block<M>(pd, in, out.out, fb, s, h0, kOutputs, d0);
      }
    } else {
      for (int ho = 0; ho < H; ++ho) {
        float cc[HA];  // comb[s, k, ho]: the column of ho
        for (int k = 0; k < H; ++k) cc[k] = __ldg(comb + k * H + ho);
        const float p = __ldg(post + ho);
        const int64_t base = (s * H + ho) * D + d0;
        Chunk oc;
#pragma unroll
        for (int e = 0; e < kChunk; ++e) {
          const float xv = chunk_elem(xc, e);
          float r[HA];
          V rw[HA];
          for (int k = 0; k < H; ++k) rw[k] = V(r[k] = chunk_elem(rc[k], e));
          double twin = 0.0;
          chunk_set(oc, e, forward_element<M, kTwin>(pd, p, cc, xv, r, V(xv), rw, H, twin, fb, base + e, e < n));
          if constexpr (kTwin)
            if (e < n) out.out_f64[base + e] = twin;
        }
        store_chunk<kAligned>(out.out + base, n, oc);
      }
    }
  }
}

// ---- Exact forward without the twin at H in {1, 2, 4} -------------------------------------------------------
// One thread per (token, chunk of 8 d), as above, all H outputs' sums from binary32 values: each output by the
// binary32 first test of numerics/exact_filter.hpp (ExactBf16Filter32: a chain of one FMUL and H FFMAs, its
// interval's ends rounded down and up and both packed by cvt.rn.bf16x2.f32). Unpacking a bf16 to binary32 is
// one integer instruction, where placing it in a binary64 took three and a register pair (session 9: 0.36 ms
// at 16384 x 4 x 4096 with the binary64 filter on every element; session 10: 0.31 ms). The first test
// declines about 1 output in 500 at H = 4 (a bf16 rounding boundary within ~2^-24·Σ|weights|·max|value| of
// the sum), so nearly every warp has one. Finishing them where they arose (the owner lane, out of line) left
// most lanes idle (0.45 ms); a block queue behind a barrier made every warp wait for the block's slowest
// (0.34 ms); a second kernel took 42 us or more to reach their inputs and outputs again in device memory. So
// each warp finishes its own after storing its chunks: the owners stage their declined pairs of elements, with
// the pairs' input words, in shared memory, and the warp's lanes take one element each (two lanes per pair,
// finish_staged_element: the binary64 test, the certified path where that declines too), overwriting what the
// owner stored, once per token (from session 13 to 33 once per two, each warp taking two tokens: 0.32 -> 0.31 ms
// then; since session 15's retest that costs more at the end of the kernel than it saves, below). Before staging,
// each owner lane retests its declined pairs with a tighter binary32 bound (retest_declined), which leaves about
// one in seven of them for the round and about one warp-token in four with anything to stage (session 15:
// 0.3116-0.3179 -> 0.3080-0.3100 ms). A bound that tight in the main loop (one more FFMA per chain step) cost
// what it saved there (0.314-0.316 ms), as did proving the rest in the owner lane instead of a round. At H = 8
// (nine terms, 72 weights: the outputs in blocks, about 1 output in 200 declined) this was slower than the
// binary64 filter of forward_kernel (0.73 against 0.46 ms at 8192 x 8 x 4096), which H = 8 keeps.

// Six blocks of 80 registers (eight of 64 spill 128 bytes: 0.60 ms against 0.32 at 16384 x 4 x 4096).
inline constexpr int kExactForwardMinBlocks = 6;
constexpr int kPairsPerChunk = kChunk / 2;
// A staged pair: its output (bits 8..11), lane (bits 2..6) and pair in the lane's chunk (bits 0..1), its token,
// then the pair's words of x and of the H residual rows (elements 2j and 2j + 1).
template <int HC>
inline constexpr int kSlotWords = 3 + HC;
constexpr int kWarpsPerForwardBlock = kForwardThreads / kReduceLanes;

// The H weights of a row of post or comb (16-byte aligned rows at H >= 4: vector loads).
template <int HC>
__device__ __forceinline__ void load_weight_row(const float* p, float* w) {
  if constexpr (HC % 4 == 0) {
#pragma unroll
    for (int j = 0; j < HC; j += 4) {
      const float4 v = __ldg(reinterpret_cast<const float4*>(p + j));
      w[j] = v.x, w[j + 1] = v.y, w[j + 2] = v.z, w[j + 3] = v.w;
    }
  } else if constexpr (HC == 2) {
    const float2 v = __ldg(reinterpret_cast<const float2*>(p));
    w[0] = v.x, w[1] = v.y;
  } else {
    w[0] = __ldg(p);
  }
}

// Element e (0 or 1) of a staged pair, from its slot: the binary64 test, and the certified path where that
// declines too (what it cannot certify goes to the host's fallback list); stored over the owner's element.
// Two lanes per pair halve the round's dependent chain (session 13: 0.3143-0.3184 -> 0.3136-0.3138 ms at
// 16384 x 4 x 4096; the round's binary64 work is about 15 us of the kernel, docs/performance.md s13-7).
template <int HC>
__device__ __forceinline__ void finish_staged_element(const InputsView& in, bf16_bits* out, const FallbackList& fb,
                                                      int64_t first_chunk, const uint32_t* slot, int e) {
  const uint32_t entry = slot[0];
  const int64_t s = slot[1];
  const int ho = int(entry >> 8);
  const int64_t chunk = first_chunk + ((entry >> 2) & (kReduceLanes - 1));
  const int64_t index = (s * HC + ho) * in.shape.D + chunk * kChunk + 2 * (entry & 3) + e;
  float c[HC], r[HC];
#pragma unroll
  for (int k = 0; k < HC; ++k) {
    c[k] = __ldg(in.comb + (s * HC + k) * HC + ho);
    r[k] = bf16_to_float(static_cast<bf16_bits>(slot[3 + k] >> (16 * e)));
  }
  const float p = __ldg(in.post + s * HC + ho);
  const float x = bf16_to_float(static_cast<bf16_bits>(slot[2] >> (16 * e)));
  bf16_bits b;
  if (!forward_exact_bf16(p, x, c, r, HC, b)) {
    const ExactRounded v = forward_exact_out_of_line(p, x, c, r, HC);
    b = v.bf16();
    if (!v.certified) push_fallback(fb, FallbackKind::out, index);
  }
  out[index] = b;
}

// A warp's staged pairs (`staged` of them, warp-uniform), finished two lanes per pair.
template <int HC>
__device__ __forceinline__ void finish_staged_pairs(const InputsView& in, bf16_bits* out, const FallbackList& fb,
                                                    int64_t first_chunk, int staged, const uint32_t* staging) {
  detail::finish_staged_pairs<kSlotWords<HC>>(staged, staging, [&](const uint32_t* slot, int e) {
    finish_staged_element<HC>(in, out, fb, first_chunk, slot, e);
  });
}

// Stages the pairs a warp's first test declined for token s (`declined` per lane, bit kPairsPerChunk·ho + j;
// the lane's chunk is first_chunk + lane) after the `staged` ones already waiting, finishing what is staged
// whenever all 32 slots are taken and more remain; returns how many wait (a block row with more than one token,
// past the grid's rows, finishes its pairs once for all of them).
template <int HC>
__device__ __forceinline__ int stage_warp_pairs(const InputsView& in, bf16_bits* out, const FallbackList& fb,
                                                int64_t s, int64_t first_chunk, uint32_t declined, const Chunk& xc,
                                                const Chunk* rc, uint32_t* staging, int staged) {
  const int lane = threadIdx.x % kReduceLanes;
  return detail::stage_warp_pairs(
      declined, staged,
      [&](int bit, int i) {
        const int j = bit % kPairsPerChunk;
        uint32_t* slot = staging + i * kSlotWords<HC>;
        slot[0] = static_cast<uint32_t>(bit / kPairsPerChunk << 8 | lane << 2 | j);
        slot[1] = static_cast<uint32_t>(s);
        slot[2] = chunk_word(xc, j);
#pragma unroll
        for (int k = 0; k < HC; ++k) slot[3 + k] = chunk_word(rc[k], j);
      },
      [&](int n) { finish_staged_pairs<HC>(in, out, fb, first_chunk, n, staging); });
}

// The owner lane's second binary32 test of its declined pairs (`declined`, bit kPairsPerChunk·ho + j): the same
// chains, each step bounded by its own partial sum instead (ExactBf16Filter32 with the whole chain as its
// tail), which declines about 1 output in 3200 instead of 1 in 480 (scripts/sim_forward_declines.py: the
// first test's bound is loose exactly where the sum cancels). A pair it proves is stored over the owner's
// word; the rest are returned for the warp's round. The weights are read again (L1) rather than kept in
// registers across the stores, which spilled 52 bytes. Finite inputs only, as the first test (a NaN would make
// e NaN and both ends equal): cuda::forward sends slabs with a NaN or an infinity to the generic kernels.
template <int HC>
__device__ __forceinline__ uint32_t retest_declined(const InputsView& in, int64_t s, int64_t d0, const Chunk& xc,
                                                    const Chunk* rc, uint32_t declined, bf16_bits* out) {
  const int64_t D = in.shape.D;
  bf16_bits* rows = out + s * HC * D + d0;
  uint32_t left = declined;
  for (uint32_t m = declined; m != 0; m &= m - 1) {
    const int bit = __ffs(m) - 1, ho = bit / kPairsPerChunk, j = bit % kPairsPerChunk;
    const uint32_t xw = chunk_word(xc, j);
    uint32_t rw[HC];
    float c[HC];
#pragma unroll
    for (int k = 0; k < HC; ++k) rw[k] = chunk_word(rc[k], j), c[k] = __ldg(in.comb + (s * HC + k) * HC + ho);
    const float p = __ldg(in.post + s * HC + ho);
    ExactBf16Filter32 f[2];
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      f[half].e = exact_error32(0.0f, 0.0f);  // no head: 2^-145
      f[half].first(c[0], bf16_to_float(static_cast<bf16_bits>(rw[0] >> (16 * half))));
      f[half].bound_step();
#pragma unroll
      for (int k = 1; k < HC; ++k) {
        f[half].add(c[k], bf16_to_float(static_cast<bf16_bits>(rw[k] >> (16 * half))));
        f[half].bound_step();
      }
      f[half].add(p, bf16_to_float(static_cast<bf16_bits>(xw >> (16 * half))));
      f[half].bound_step();
    }
    uint32_t lo, hi;
    ExactBf16Filter32::bounds_pair(f[1], f[0], lo, hi);
    if (lo == hi) {
      *reinterpret_cast<uint32_t*>(rows + ho * D + 2 * j) = hi;
      left &= ~(1u << bit);
    }
  }
  return left;
}

// ---- The exact forward at H <= 4 ------------------------------------------------------------------------
// One token per block row up to the grid's 65535 rows (forward_grid), then the rows loop over tokens. From session
// 13 to 33 every row took two tokens from 1024 on, so that a warp finished the declined pairs of both in one round;
// since session 15's retest leaves a round for about one warp-token in four, that only made the last blocks twice
// as long: one token per row took 1.8 % less at 16384 x 4 x 4096 (0.4271 -> 0.4192 ms), 3.9 % less at
// 1024 x 4 x 7168 (medians of seven alternating rounds), 3.4 % at 8192 x 4 x 4096 (four) and 2.0 % at
// 4096 x 4 x 4096 (three; H100, s34-4). The last one or two waves of rows with one token and the rest with two
// (`tail`, `tail2`) were between the two.
// Where rows loop, the next token's rows are requested early. The kernel waits on latency (ncu, session 6: neither
// a pipe nor DRAM saturated) and a warp's finishing (retest, staging round) and its next token's weight loads have
// no memory request in flight, so at the start of a token each lane asks L2 for its chunks of the block row's next
// token (prefetch.L2: no registers). H200, 16384 x 4 x 4096 with two tokens per row, alternating rounds: s20-1
// 0.3092 -> 0.3067 ms, s20-2 0.3118 -> 0.3077 ms. Slower in those runs: loading them into registers after the
// stores (five blocks of 94 registers) 0.3200 ms; four tokens per block row, three in four prefetched, 0.3127; the
// next token's post and comb prefetched too (two lanes per warp) 0.3108.

// Asks L2 for this lane's chunks of token s (x and the HC residual rows).
template <int HC>
__device__ __forceinline__ void prefetch_token_l2(const InputsView& in, int64_t s, int64_t d0) {
  const int64_t D = in.shape.D;
  prefetch_l2(in.x + s * D + d0);
#pragma unroll
  for (int k = 0; k < HC; ++k) prefetch_l2(in.residual + (s * HC + k) * D + d0);
}

template <int HC>
__global__ void __launch_bounds__(kForwardThreads, kExactForwardMinBlocks)
    forward_exact_kernel(InputsView in, bf16_bits* out, FallbackList fb) {
  static_assert(HC <= 4, "H = 8 runs forward_kernel's binary64 filter (its weights would not fit beside the chunks)");
  __shared__ uint32_t staging[kWarpsPerForwardBlock][kReduceLanes * kSlotWords<HC>];
  const int64_t D = in.shape.D;
  const int64_t c = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  // Threads past the last chunk compute on zeros and store nothing: they stay for the warp's shuffles.
  const bool active = c < D / kChunk;
  const int64_t d0 = c * kChunk;
  const int lane = threadIdx.x % kReduceLanes;
  int staged = 0;  // this warp's declined pairs waiting in staging (warp-uniform)
  for (int64_t s = blockIdx.y; s < in.shape.S; s += gridDim.y) {
    Chunk xc, rc[HC];
    if (active) {
      xc = load_chunk<true>(in.x + s * D + d0, kChunk);
#pragma unroll
      for (int k = 0; k < HC; ++k) rc[k] = load_chunk<true>(in.residual + (s * HC + k) * D + d0, kChunk);
    }
    if (active && s + gridDim.y < in.shape.S) prefetch_token_l2<HC>(in, s + gridDim.y, d0);  // see above
    float post[HC], comb[HC][HC];  // comb[k][ho]
    load_weight_row<HC>(in.post + s * HC, post);
#pragma unroll
    for (int k = 0; k < HC; ++k) load_weight_row<HC>(in.comb + (s * HC + k) * HC, comb[k]);
    // The bound's weight halves, one output per lane (lane mod H), then shared across the warp; each lane loads
    // its output's column again (from L1), as picking it out of the registers by lane would move them to local
    // memory. Each output's chain runs comb[0][ho]·r[0], ..., comb[H-1][ho]·r[H-1], post[ho]·x:
    // exact_error32_weight weighs the earlier terms more, and post is the largest weight on mHC's data.
    float error_weight[HC];
    {
      const int mine = lane % HC;
      float w[HC + 1];
#pragma unroll
      for (int k = 0; k < HC; ++k) w[k] = __ldg(in.comb + (s * HC + k) * HC + mine);
      w[HC] = __ldg(in.post + s * HC + mine);
      const float own = exact_error32_weight(w, HC + 1);
#pragma unroll
      for (int ho = 0; ho < HC; ++ho) error_weight[ho] = __shfl_sync(kFullMask, own, ho);
    }
    // The bound's value half: the largest magnitude among this thread's values.
    uint32_t magnitudes = max_magnitude_pairs(xc, 0);
#pragma unroll
    for (int k = 0; k < HC; ++k) magnitudes = max_magnitude_pairs(rc[k], magnitudes);
    const float max_value = float_from_bits(max_pair_word(magnitudes));
    float error[HC];
#pragma unroll
    for (int ho = 0; ho < HC; ++ho) error[ho] = exact_error32(error_weight[ho], max_value);
    uint32_t declined = 0;  // bit kPairsPerChunk·ho + j: pair j of output ho
    Chunk oc[HC];
#pragma unroll
    for (int j = 0; j < kPairsPerChunk; ++j) {
      float xv[2], rv[2][HC];
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        xv[half] = chunk_elem(xc, 2 * j + half);
#pragma unroll
        for (int k = 0; k < HC; ++k) rv[half][k] = chunk_elem(rc[k], 2 * j + half);
      }
#pragma unroll
      for (int ho = 0; ho < HC; ++ho) {
        ExactBf16Filter32 f[2];
#pragma unroll
        for (int half = 0; half < 2; ++half) {
          f[half].e = error[ho];
          f[half].first(comb[0][ho], rv[half][0]);
#pragma unroll
          for (int k = 1; k < HC; ++k) f[half].add(comb[k][ho], rv[half][k]);
          f[half].add(post[ho], xv[half]);
        }
        uint32_t lo, hi;
        ExactBf16Filter32::bounds_pair(f[1], f[0], lo, hi);
        oc[ho].w[j] = hi;
        declined |= (lo != hi ? 1u : 0u) << (kPairsPerChunk * ho + j);
      }
    }
    if (active)
#pragma unroll
      for (int ho = 0; ho < HC; ++ho) store_chunk<true>(out + (s * HC + ho) * D + d0, kChunk, oc[ho]);
    if (!active) declined = 0;
    if (__any_sync(kFullMask, declined != 0) && declined != 0)
      declined = retest_declined<HC>(in, s, d0, xc, rc, declined, out);
    if (__any_sync(kFullMask, declined != 0))
      staged = stage_warp_pairs<HC>(in, out, fb, s, c - lane, declined, xc, rc, staging[threadIdx.x / kReduceLanes],
                                    staged);
  }
  if (staged != 0) finish_staged_pairs<HC>(in, out, fb, c - lane, staged, staging[threadIdx.x / kReduceLanes]);
}

// ---- Launch configuration ---------------------------------------------------------------------------------

constexpr unsigned kMaxGridY = 65535;

// One block row per token; a ring kernel gets at most `resident` blocks in all (one wave: each thread then
// loops over about S·grid.x / resident tokens).
dim3 forward_grid(const Shape& sh, int64_t resident = std::numeric_limits<int64_t>::max()) {
  const int64_t chunks = (sh.D + kChunk - 1) / kChunk;
  const int64_t columns = (chunks + kForwardThreads - 1) / kForwardThreads;
  const int64_t rows = std::min<int64_t>({sh.S, kMaxGridY, std::max<int64_t>(resident / columns, 1)});
  return dim3(static_cast<unsigned>(columns), static_cast<unsigned>(rows));
}

template <Mode M, int HC, bool kAligned, bool kTwin, class Pol>
void launch_forward_variant(Pol pol, const InputsView& in, const ForwardOutputs& out, const FallbackList& fb,
                            cudaStream_t stream) {
  const auto kernel = forward_kernel<M, HC, kAligned, kTwin, Pol>;
  if constexpr (kForwardRing<M, HC>) {
    constexpr size_t bytes = forward_ring_bytes(HC);
    // Set once per kernel: the ring may exceed the default 48 KB of dynamic shared memory; the number of
    // blocks that fit on the device at once is the grid.
    static const int64_t resident = [&] {
      MHC_CUDA_CHECK(
          cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
      int per_sm = 0;
      MHC_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kForwardThreads, bytes));
      return std::max<int64_t>(int64_t(per_sm) * multiprocessor_count(), 1);
    }();
    kernel<<<forward_grid(in.shape, resident), kForwardThreads, bytes, stream>>>(pol, in, out, fb);
  } else {
    kernel<<<forward_grid(in.shape), kForwardThreads, 0, stream>>>(pol, in, out, fb);
  }
  MHC_CUDA_CHECK_LAUNCH();
}

template <Mode M, int HC, bool kAligned, class Pol>
void launch_forward_kernel(Pol pol, const InputsView& in, const ForwardOutputs& out, const FallbackList& fb,
                           cudaStream_t stream) {
  if (M != Mode::fp32 && out.out_f64) {
    launch_forward_variant<M, HC, kAligned, M != Mode::fp32>(pol, in, out, fb, stream);
  } else if constexpr (M == Mode::exact && HC > 0 && HC <= 4) {
    forward_exact_kernel<HC><<<forward_grid(in.shape), kForwardThreads, 0, stream>>>(in, out.out, fb);
    MHC_CUDA_CHECK_LAUNCH();
  } else {
    launch_forward_variant<M, HC, kAligned, false>(pol, in, out, fb, stream);
  }
}

// Specialised H in {1, 2, 4, 8}; false when H is another value.
template <Mode M, class Pol>
bool launch_forward_specialised(Pol pol, const InputsView& in, const ForwardOutputs& out, const FallbackList& fb,
                                cudaStream_t stream) {
  switch (in.shape.H) {
    case 1: launch_forward_kernel<M, 1, true>(pol, in, out, fb, stream); return true;
    case 2: launch_forward_kernel<M, 2, true>(pol, in, out, fb, stream); return true;
    case 4: launch_forward_kernel<M, 4, true>(pol, in, out, fb, stream); return true;
    case 8: launch_forward_kernel<M, 8, true>(pol, in, out, fb, stream); return true;
    default: return false;
  }
}

template <Mode M>
void launch_forward_generic(const PolicyDesc& pd, const InputsView& in, const ForwardOutputs& out,
                            const FallbackList& fb, cudaStream_t stream, bool aligned) {
  if (aligned) launch_forward_kernel<M, 0, true>(RuntimePolicy{pd}, in, out, fb, stream);
  else launch_forward_kernel<M, 0, false>(RuntimePolicy{pd}, in, out, fb, stream);
}

bool forward_is_specialised(const PolicyDesc& pd, const InputsView& in, const ForwardOutputs& out) {
  if (!specialised_shape(in.shape) || !rows_aligned(in, out.out, out.out_f64)) return false;
  // forward_exact_kernel reads the weights in vectors of up to four.
  if (pd.accumulator == Accumulator::exact) return aligned16(in.post) && aligned16(in.comb);
  return with_static_preset(pd, [](auto) { return true; });
}

}  // namespace

void launch_forward(const PolicyDesc& pd, const InputsView& in, const ForwardOutputs& out, const FallbackList& fb,
                    cudaStream_t stream, bool finite_inputs) {
  if (in.shape.S == 0) return;
  const bool aligned = rows_aligned(in, out.out, out.out_f64);
  if (finite_inputs && forward_is_specialised(pd, in, out)) {
    if (pd.accumulator == Accumulator::exact) {
      launch_forward_specialised<Mode::exact>(RuntimePolicy{pd}, in, out, fb, stream);
      return;
    }
    with_static_preset(pd, [&](auto pol) {
      return launch_forward_specialised<static_mode<decltype(pol)>()>(pol, in, out, fb, stream);
    });
    return;
  }
  switch (pd.accumulator) {
    case Accumulator::fp32: launch_forward_generic<Mode::fp32>(pd, in, out, fb, stream, aligned); break;
    case Accumulator::fp64: launch_forward_generic<Mode::fp64>(pd, in, out, fb, stream, aligned); break;
    case Accumulator::exact: launch_forward_generic<Mode::exact>(pd, in, out, fb, stream, aligned); break;
  }
}

int64_t exact_forward_looping_min_tokens() { return int64_t{kMaxGridY} + 1; }

const char* forward_kernel_family(const PolicyDesc& pd, const InputsView& in) {
  ForwardOutputs aligned_out;  // the caller's outputs are cudaMalloc'ed: aligned
  return forward_is_specialised(pd, in, aligned_out) ? "specialised" : "generic";
}

}  // namespace mhc::cuda
