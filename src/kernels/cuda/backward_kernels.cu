// The backward kernels: ∂x and ∂residual per element (stream_grad_value / stream_grad_exact), ∂post and
// ∂comb as dot products over D in the canonical lane order with a shuffle tree (dot_step,
// combine_lane_partials' tree, finish_param_grad), all from kernels/operator_math.hpp as on the CPU.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "kernels/cuda/cuda_check.hpp"
#include "kernels/cuda/kernel_common.cuh"
#include "kernels/cuda/operator_kernels.hpp"

namespace mhc::cuda {
namespace {

using namespace detail;

// ---- Dot products: q < H is ∂post[q]; q = H + hi·H + ho is ∂comb[hi, ho] -----------------------------------

// The dot product of stream row `row` (0: x; 1 + hi: residual[hi]) with grad_out[ho].
__device__ __forceinline__ int dot_number(int row, int ho, int H) { return row == 0 ? ho : H + (row - 1) * H + ho; }

// The inverse: dot product q's gradient row ho, and (q >= H) its residual row hi.
__device__ __forceinline__ int dot_grad_row(int q, int H) { return q < H ? q : (q - H) % H; }
__device__ __forceinline__ int dot_residual_row(int q, int H) { return (q - H) / H; }

// Its index in ∂post (q < H) or ∂comb of token s.
__device__ __forceinline__ int64_t dot_index(int64_t s, int q, int H) {
  return q < H ? s * H + q : s * H * H + (q - H);
}

// ---- The exact backward's rare paths, out of line (the main loops keep their registers) ---------------------

// The ∂x (row 0) / ∂residual[row - 1] elements of stream rows row0 .. row0 + rows - 1 of token s at d0 .. d0 + 7
// when the bf16 filter declined one of them: every element is stored again, from the filter with its own
// per-element bound (tighter than the main loop's per-step one, so it may accept what that declined) or, where
// it declines, the certified path; listed for the host when even that cannot certify it. The gradient chunks
// are still in the lane's ring slots (grad[ho · 32]), so no global memory latency is paid while the warp waits.
__device__ __noinline__ void finish_stream_grad_step(InputsView in, BackwardOutputs out, FallbackList fb, int64_t s,
                                                     int row0, int rows, int64_t d0, const uint4* grad) {
  const int H = in.shape.H;
  const int64_t D = in.shape.D;
  for (int row = row0; row < row0 + rows; ++row) {
    const float* weights = row == 0 ? in.post + s * H : in.comb + (s * H + row - 1) * H;
    float w[kMaxStreams];
    for (int ho = 0; ho < H; ++ho) w[ho] = weights[ho];
    for (int e = 0; e < kChunk; ++e) {
      float g[kMaxStreams];
      for (int ho = 0; ho < H; ++ho) g[ho] = chunk_elem(chunk_from(grad[ho * kReduceLanes]), e);
      const int64_t index = row == 0 ? s * D + d0 + e : (s * H + row - 1) * D + d0 + e;
      bf16_bits& dst = (row == 0 ? out.grad_x : out.grad_residual)[index];
      bf16_bits b;
      if (stream_grad_exact_bf16(w, g, H, b)) {
        dst = b;
        continue;
      }
      const ExactRounded v = stream_grad_exact(w, g, H).result();
      dst = v.bf16();
      if (!v.certified) push_fallback(fb, row == 0 ? FallbackKind::grad_x : FallbackKind::grad_residual, index);
    }
  }
}

// The dot products (∂post, ∂comb) without binary64 twins: each lane runs an ExactDotFilter over its
// canonical chunks; the filters merge along the canonical tree and lane 0's answer is accepted when the filter
// proves it (numerics/exact_filter.hpp). What it declines (about 1 % of randn dot products, nearly all exact
// binary32 ties) is settled by finish_dot_exact from device memory.

// The most roundings a term meets: a lane's chain over its chunks of D, then the five tree levels.
__device__ __forceinline__ int dot_filter_depth(int64_t D) {
  return kChunk * static_cast<int>((D + kReduceLanes * kChunk - 1) / (kReduceLanes * kChunk)) + 5;
}

// The diagnostic of the exact backward at H = 4 and H = 8 (every kernel past the few-token one and the few-token
// ones; MHCDIFF_CUDA_BACKWARD=probe, docs/decisions.md), a bit of the kernel's kX: the default with clock64() counts
// of the tokens and of their finishing, in g_probe, printed to stderr after each launch: what a token and its
// finishing take on the device. The experiments that used the same switch are listed in docs/cuda.md.
enum : unsigned { kProbe = 2 };
// MHCDIFF_CUDA_BACKWARD=defer / inline: the declined dot products deferred to finish_deferred_dots_kernel at every S,
// or at none (at H = 4 and H = 8; the default defers below a few waves of tokens, Deferral). The launch's choice, not
// a bit of kX.
enum : unsigned { kDeferAll = 4, kDeferNever = 8 };
struct Probe {
  unsigned long long tokens, token_cycles, token_max, finishing_tokens, finishing_dots, finishing_cycles, finishing_max;
};
__device__ Probe g_probe;  // one set of counters: probed launches must not overlap (mhcdiff runs one stream)

// How finish_dot_exact reads and walks the two rows. Every form takes the same values in the same order, so the
// results are the same.
//   scalar: one value per load and iteration, for any alignment (the generic kernel's rows).
//   chunks: rows aligned and D % 8 == 0 (the specialised kernels): 16-byte loads, four chunks of each row in flight
//     per round; the first pass unrolled over a chunk's eight values, the certified pass rolled over one chunk at a
//     time and one value per iteration. Short machine code: the finishing runs for about one token in 25 (bench
//     data, H = 4), so its code is cold when it runs, and fetching it waits on L2 while the multiprocessor's other
//     warps keep theirs. The kernel at H = 4 past the few-token one is 5024 instructions with it, 10552 with the same
//     loads and every loop unrolled (eight chunks in flight; `vf`, session 31's default there). H200, s32-1 (medians
//     of three alternating rounds): against `vf` 16384 x 4 x 4096 0.5020 -> 0.4939 ms (90.2 -> 91.8 % of copy),
//     4096 x 4 x 4096 0.1602 -> 0.1580 ms; against `scalar` 0.5217 and 0.1698 ms. H100, s32-2, against `scalar`
//     (the form of every other specialised kernel until then): 16384 x 4 x 4096 -2.6 %, 4096 x 4 x 4096 -3.2 %,
//     8192 x 8 x 4096 -2.5 %, 128 x 4 x 4096 (the few-token kernel) -8.2 %; the H = 1 and H = 2 exact kernels take
//     it untimed (their GPU tests pass with it). Not adopted (H100, s32-2 and s32-3): the first pass rolled too
//     (`tiny`: +1.3 % at the target shape, -4.9 % at 128 tokens), and asking L2 for every line of both rows first,
//     with (`prefetch4`) or without (`prefetch`) four chunks per round in the certified pass (within the spread).
enum class FinishForm { scalar, chunks };
constexpr int kFinishBatch = 4;  // chunks of each row per round of loads (chunks)

// The canonical chunks first, first + kStride, ... of rows a and b (a lane's with the default stride, a thread's
// of a block with the block's width), kBatch of each row per round of loads, passed to f(chunk of a, chunk of b)
// in ascending order. Nothing past the last chunk is passed: a zero padding term would change the sign of a zero
// sum.
template <int kBatch, int kStride = kReduceLanes, class F>
__device__ __forceinline__ void for_lane_chunks(const bf16_bits* a, const bf16_bits* b, int64_t D, int first, F&& f) {
  const uint4* const a4 = reinterpret_cast<const uint4*>(a);
  const uint4* const b4 = reinterpret_cast<const uint4*>(b);
  const int64_t chunks = D / kChunk;
  for (int64_t j0 = first; j0 < chunks; j0 += kBatch * kStride) {
    uint4 va[kBatch], vb[kBatch];  // every load of the round in flight before f
#pragma unroll
    for (int k = 0; k < kBatch; ++k) {
      const int64_t j = j0 + k * kStride;
      va[k] = j < chunks ? __ldg(a4 + j) : make_uint4(0, 0, 0, 0);
      vb[k] = j < chunks ? __ldg(b4 + j) : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int k = 0; k < kBatch; ++k)
      if (j0 + k * kStride < chunks) f(chunk_from(va[k]), chunk_from(vb[k]));
  }
}

// Warp-collective, out of line: dot product q of token s (q < H: ∂post[q]; else ∂comb[hi, ho] with
// q - H = hi·H + ho) that settle_dot_exact's filter declined; `merged` is the filter merged over the warp (valid in
// lane 0). First the exactness test (ExactDotFilter::fp32_if_exact, from the smallest non-zero magnitude of
// each row), which settles the exact binary32 ties; then the certified accumulators, lane l over the
// canonical chunks l, l + 32, ...; lane 0 stores the result and lists it for the host when even that cannot
// certify it. kForm: how the rows are read (FinishForm).
template <FinishForm kForm>
__device__ __noinline__ void finish_dot_exact(InputsView in, BackwardOutputs out, FallbackList fb, int64_t s, int q,
                                              ExactDotFilter merged) {
  const int H = in.shape.H;
  const int64_t D = in.shape.D;
  const int lane = threadIdx.x & 31;
  const bool post_path = q < H;
  const int ho = dot_grad_row(q, H);
  const bf16_bits* a = in.grad_out + (s * H + ho) * D;
  const bf16_bits* b = post_path ? in.x + s * D : in.residual + (s * H + dot_residual_row(q, H)) * D;
  const int64_t index = dot_index(s, q, H);
  float* dst = post_path ? out.grad_post : out.grad_comb;

  // The exactness test needs a bound on Σ|a·b|; a lane's chain of |a|·|b| (ExactDotFilter::add's) is tighter
  // than the per-lane bound the main loop may have used (lane_bound), so it is recomputed here with the
  // minima, in the same pass over the rows.
  uint32_t min_a = ~0u, min_b = ~0u;  // the smallest non-zero magnitude minus one (zero wraps to the top)
  float bound = 0.0f;
  auto first_pass = [&](bf16_bits va, bf16_bits vb) {
    min_a = min(min_a, (va & 0x7fffu) - 1u);
    min_b = min(min_b, (vb & 0x7fffu) - 1u);
    bound = fma_rn32(std::fabs(bf16_to_float(va)), std::fabs(bf16_to_float(vb)), bound);
  };
  if constexpr (kForm == FinishForm::scalar) {
    for (int64_t d0 = int64_t(lane) * kChunk; d0 < D; d0 += kReduceLanes * kChunk)
      for (int64_t d = d0; d < d0 + kChunk && d < D; ++d) first_pass(a[d], b[d]);
  } else {
    for_lane_chunks<kFinishBatch>(a, b, D, lane, [&](const Chunk& ca, const Chunk& cb) {
#pragma unroll
      for (int e = 0; e < kChunk; ++e) first_pass(chunk_bits(ca, e), chunk_bits(cb, e));
    });
  }
#pragma unroll
  for (int offset = kReduceLanes / 2; offset > 0; offset /= 2) {
    min_a = min(min_a, __shfl_xor_sync(kFullMask, min_a, offset));
    min_b = min(min_b, __shfl_xor_sync(kFullMask, min_b, offset));
    bound = add_rn32(bound, __shfl_down_sync(kFullMask, bound, offset));
  }
  merged.bound = bound;  // valid in lane 0, like merged
  float v = 0.0f;
  const int lsb = bf16_lsb_exponent(min_a + 1u) + bf16_lsb_exponent(min_b + 1u);
  const bool exact = merged.fp32_if_exact(lsb, dot_filter_depth(D), v);
  if (__shfl_sync(kFullMask, exact, 0)) {
    if (lane == 0) dst[index] = v;
    return;
  }

  ExactAccumulator acc;
  if constexpr (kForm == FinishForm::scalar) {
    for (int64_t d0 = int64_t(lane) * kChunk; d0 < D; d0 += kReduceLanes * kChunk)
      for (int64_t d = d0; d < d0 + kChunk && d < D; ++d) acc.add(mul_rn64(bf16_to_float(a[d]), bf16_to_float(b[d])));
  } else {
    for_lane_chunks<1>(a, b, D, lane, [&](const Chunk& ca, const Chunk& cb) {
#pragma unroll 1
      for (int e = 0; e < kChunk; ++e)
        acc.add(mul_rn64(bf16_to_float(chunk_bits_rolled(ca, e)), bf16_to_float(chunk_bits_rolled(cb, e))));
    });
  }
  const ExactRounded r = warp_tree_merge(acc).result();
  if (lane != 0) return;
  dst[index] = r.fp32();
  if (!r.certified) push_fallback(fb, post_path ? FallbackKind::grad_post : FallbackKind::grad_comb, index);
}

// Warp-collective: lists dot product q of token s for finish_deferred_dots_kernel; false when there is no list or
// it is full, and the caller finishes it. The count goes on past the capacity: more than 2^32 declined dot products
// in one launch (only under MHCDIFF_CUDA_BACKWARD=defer, at tens of millions of tokens) would wrap it.
__device__ __noinline__ bool defer_dot(const DeferredDots& dd, int64_t s, int q) {
  if (dd.items == nullptr) return false;
  const bool leader = (threadIdx.x & 31) == 0;
  unsigned slot = 0;
  if (leader) slot = atomicAdd(dd.counters, 1u);
  slot = __shfl_sync(kFullMask, slot, 0);
  if (slot >= dd.capacity) return false;
  if (leader) dd.items[slot] = DeferredDot{s, q};
  return true;
}

// Warp-collective: settles dot product q of token s from the lanes' filters (lane 0 stores it), through
// finish_dot_exact when the filter declines.
__device__ __forceinline__ void settle_dot_exact(InputsView in, BackwardOutputs out, FallbackList fb, int64_t s, int q,
                                                 ExactDotFilter f, int depth) {
#pragma unroll
  for (int offset = kReduceLanes / 2; offset > 0; offset /= 2)
    f.merge(__shfl_down_sync(kFullMask, f.s, offset), __shfl_down_sync(kFullMask, f.bound, offset));
  float v = 0.0f;
  if (!__shfl_sync(kFullMask, f.fp32(depth, v), 0)) return finish_dot_exact<FinishForm::scalar>(in, out, fb, s, q, f);
  const int H = in.shape.H;
  // dot_index's position, written out like settle_dots_exact's (why: there). This store (the generic kernel's)
  // changed with it in that measurement but was not timed on its own.
  if ((threadIdx.x & 31) == 0) (q < H ? out.grad_post[s * H + q] : out.grad_comb[s * H * H + q - H]) = v;
}

// The N = R·H dot products of a warp's rows for token s (dot i: stream row row0 + i / H with grad_out[i % H]),
// settled together: each lane's filter of dot i, unscaled, is in scratch at lane · DotScratch<N>::kStride + i
// (the warp's ring, idle between tokens: every lane has waited for its own copies and read its last slots;
// the kernel writes them with DotScratch::put), and lane i < N merges dot product i's 32 partials along
// combine_lane_partials' tree, the order of the shuffle tree in settle_dot_exact, so that its sum and bound
// are settle_dot_exact's bit for bit; it stores what the filter proves, and the warp takes the rest to
// finish_dot_exact one at a time. Where settle_dot_exact runs N dependent five-level shuffle chains, this is
// one round of shared-memory traffic and N trees side by side (H200, session 12: 16384 x 4 x 4096
// 0.598-0.602 -> 0.559-0.566 ms, 8192 x 8 x 4096 1.703-1.712 -> 1.557-1.572 ms).
template <int N>
struct DotScratch {
  static constexpr int kStride = N | 1;  // odd, so that lanes reading one column hit different banks
  static constexpr size_t kBytes = kReduceLanes * kStride * (sizeof(double) + sizeof(float));
  double* sums;
  float* bounds;
  __device__ explicit DotScratch(uint4* p)
      : sums(reinterpret_cast<double*>(p)), bounds(reinterpret_cast<float*>(sums + kReduceLanes * kStride)) {}
  __device__ void put(int lane, int i, const ExactDotFilter& f) const {
    sums[lane * kStride + i] = f.s;
    bounds[lane * kStride + i] = f.bound;
  }
};

// Node (L, K) of combine_lane_partials' tree over the 32 values column[l · stride]: K levels merged, so that
// (0, 5) is lane 0's value after the shuffle tree (lane l += lane l + 16, then + 8, + 4, + 2, + 1). The same
// order as that function, unrolled at compile time over a strided shared-memory column: combine_lane_partials
// merges a contiguous array in place, which here would be 31 stores and loads through shared memory. The GPU
// tests compare the results with the CPU's, bit for bit.
template <int L, int K, class T>
__device__ __forceinline__ T lane_tree(const T* column, int stride) {
  static_assert(kReduceLanes == 32, "five levels");
  if constexpr (K == 0) return column[L * stride];
  else return op_add(lane_tree<L, K - 1>(column, stride), lane_tree<L + (kReduceLanes >> K), K - 1>(column, stride));
}

template <int H, int N, FinishForm kForm, unsigned kX = 0>
__device__ __forceinline__ void settle_dots_exact(const InputsView& in, const BackwardOutputs& out,
                                                  const FallbackList& fb, const DeferredDots& dd, int64_t s, int row0,
                                                  DotScratch<N> scratch, int depth) {
  constexpr int kStride = DotScratch<N>::kStride;
  const double* const sums = scratch.sums;
  const float* const bounds = scratch.bounds;
  const int lane = threadIdx.x & 31;
  __syncwarp();  // every lane's partials are written
  ExactDotFilter f;
  bool settled = true;
  if (lane < N) {
    f.s = lane_tree<0, 5>(sums + lane, kStride);
    f.bound = lane_tree<0, 5>(bounds + lane, kStride);
    float v = 0.0f;
    settled = f.fp32(depth, v);
    const int q = dot_number(row0 + lane / H, lane % H, H);
    // dot_index's position, written out: with dot_index() here (and in settle_dot_exact) the specialised exact
    // backward ran 2-3 % slower at H = 4 and H = 8 (H200, session 14, run s14-7; docs/performance.md).
    if (settled) (q < H ? out.grad_post[s * H + q] : out.grad_comb[s * H * H + q - H]) = v;
  }
  __syncwarp();  // the reads above before the next token's copies into the ring
  const long long start = (kX & kProbe) != 0 ? clock64() : 0;
  const uint32_t declined = __ballot_sync(kFullMask, !settled);
  for (uint32_t m = declined; m != 0; m &= m - 1) {
    const int i = __ffs(m) - 1;
    ExactDotFilter merged;
    merged.s = __shfl_sync(kFullMask, f.s, i);
    merged.bound = __shfl_sync(kFullMask, f.bound, i);
    const int q = dot_number(row0 + i / H, i % H, H);
    if (!defer_dot(dd, s, q)) finish_dot_exact<kForm>(in, out, fb, s, q, merged);
  }
  if constexpr ((kX & kProbe) != 0)
    if (declined != 0 && lane == 0) {
      const auto cycles = static_cast<unsigned long long>(clock64() - start);
      atomicAdd(&g_probe.finishing_tokens, 1ull);
      atomicAdd(&g_probe.finishing_dots, static_cast<unsigned long long>(__popc(declined)));
      atomicAdd(&g_probe.finishing_cycles, cycles);
      atomicMax(&g_probe.finishing_max, cycles);
    }
}

// ---- Backward, specialised: warps per token, a cp.async ring in shared memory ------------------------------
// A token's H + 1 stream rows (row 0: x, for ∂x and ∂post; row 1 + hi: residual[hi], for ∂residual[hi] and
// ∂comb[hi, ·]) are shared by G warps (kTokenWarps), R = (H + 1) / G consecutive rows each; every warp also
// reads the H gradient rows. Lane l owns the chunks j = l, l+32, l+64, ... of the token (the canonical lane of
// operator_math.hpp), walks them in ascending d, writes its rows' ∂x / ∂residual for them and keeps their
// R·H dot-product partials in registers; a shuffle tree then combines the 32 partials. Rows are aligned
// (D % 8 == 0). G is 1 except for binary64 and exact at H = 8, whose 72 dot products per lane do not fit in
// registers (G = 3: three rows per warp), and for few tokens (kFewTokenWarps); the gradient rows are then read G
// times, from L2 after the first.
// The R + H rows of a lane's next chunks are copied into a per-lane ring of kStages slots in shared memory
// with cp.async while the current chunk is computed, so loads stay in flight without holding registers.

constexpr int kBackwardWarps = 4;  // per block when G = 1; a block is one token's G warps otherwise
constexpr int kStages = 3;

template <Mode M, int H>
inline constexpr int kTokenWarps = H == 8 && M != Mode::fp32 ? 3 : 1;
// G for few tokens (launch_backward_for_tokens): one stream row per warp at H = 4, and at H = 8 except fp32.
template <Mode M, int H>
inline constexpr int kFewTokenWarps = H == 4 ? 5 : H == 8 && M != Mode::fp32 ? 9 : kTokenWarps<M, H>;

constexpr int backward_block_warps(int G) { return G == 1 ? kBackwardWarps : G; }
constexpr int backward_rows(int H, int G) { return (H + 1) / G + H; }  // R stream rows, grad_out[0..H)
constexpr size_t backward_ring_bytes(int H, int G) {
  return size_t(backward_block_warps(G)) * kStages * backward_rows(H, G) * kReduceLanes * sizeof(uint4);
}

// The per-lane partial of one dot product: the policy's accumulator, or for exact the dot filter.
template <Mode M>
using FastDotAcc = std::conditional_t<M == Mode::exact, ExactDotFilter, RoundedT<M>>;

template <Mode M>
__device__ __forceinline__ FastDotAcc<M> fast_zero() {
  if constexpr (M == Mode::exact) return ExactDotFilter{};
  else return zero_accumulator<RoundedT<M>>();
}

// One element of ∂x (w = post) or ∂residual[hi] (w = comb[hi]) and its H dot-product steps (b: x or
// residual[hi] at d; bw widened, for exact scaled: b·2^-896). g: the H gradient values as floats, gw widened.
// For exact, the result is the upper rounding of the bf16 filter's interval and `lower` its lower one
// (`error`: the bound, from stream_error_weight of the row
// and the largest gradient magnitude in the step's H gradient chunks): the element is proved when they agree, which
// the caller tests on packed words; other modes leave `lower` alone. The binary64 twin of exact is never
// stored by this kernel. kLaneBound: the dot steps only add the products (the kernel bounds them per lane,
// ExactDotFilter::lane_bound). kExactChain: the chain is known not to round (kChains), so its RNb is the result and
// `lower` is left alone.
template <Mode M, int H, bool kLaneBound = false, bool kExactChain = false, class W>
__device__ __forceinline__ bf16_bits fast_element(const PolicyDesc& pd, const W* w, const float* g,
                                                  const RoundedT<M>* gw, float b, RoundedT<M> bw, bool post_path,
                                                  FastDotAcc<M>* acc, double* twin, double error, bf16_bits& lower) {
  using T = RoundedT<M>;
  if constexpr (M == Mode::exact) {
    bf16_bits out;
    if constexpr (kExactChain) out = round_to_bf16_rne(stream_grad_exact_chain(w, gw, H).s);
    else stream_grad_exact_chain(w, gw, H).bounds(error, lower, out);
#pragma unroll
    for (int ho = 0; ho < H; ++ho) {
      if constexpr (kLaneBound) acc[ho].add_term(gw[ho], bw);
      else acc[ho].add(g[ho], b, gw[ho], bw);
    }
    return out;
  } else {
    const T v = stream_grad_value<T>(pd, w, gw, H, post_path);
    if constexpr (M == Mode::fp64)
      if (twin) *twin = v;
#pragma unroll
    for (int ho = 0; ho < H; ++ho) acc[ho] = dot_step<T>(pd, acc[ho], gw[ho], bw, post_path);
    return round_to_bf16_rne(v);
  }
}

// The exact kernels ask for one resident block per multiprocessor: left to itself, ptxas gave the exact kernel
// at H = 8 in nine warps (the few-token one now) 96 registers and 284 bytes of spills (168 registers and 8 bytes
// this way). 0: unspecified.
template <Mode M>
inline constexpr int kBackwardMinBlocks = M == Mode::exact ? 1 : 0;
// kDotLaneBound (exact): the dot filters' bounds from each lane's largest gradient magnitude per row and a
// binary32 sum of |x| / |residual| per row (ExactDotFilter::lane_bound) instead of a binary32 fused
// multiply-add per product (H200: H = 4, one warp per token, 16384 x 4 x 4096: 0.786 -> 0.670 ms; H = 8,
// G = 9: 1.92 -> 1.75 ms). The few-token kernel at H = 4 (five warps per token, one row each) measured slower
// with it (S = 128: 29.7 -> 34.1 us; the cause was not established) and keeps the chain.
template <Mode M, int H, int G>
inline constexpr bool kDotLaneBound = M == Mode::exact && (H != 4 || G == 1);

// kChains (the exact kernels past the few-token one: H = 4 since session 30, H = 8 since session 29; docs/decisions.md):
// a lane step whose gradient values' exponent spread fits the token's weight window (exact_chain_spread <=
// exact_chain_window, numerics/exact_filter.hpp) has binary64 chains that never round, so its ∂x / ∂residual are
// RNb of the chains (one conversion each, as the fp64 policy's) with no interval; other steps take the interval
// filter. The test costs about three integer instructions per pair of gradient values and one comparison and vote
// per step, the interval two directed additions, a second conversion, packing and a comparison per element. The
// warp takes one path (a vote), as a warp whose lanes disagree would run both.
// H = 4 (session 30, the experiment `wide` until then): one warp per token, weights in registers (255 registers, two
// blocks per multiprocessor, as the fp64 backward runs) at every S past the few-token kernel. It replaced a compact
// kernel (weights and filter bounds in shared memory, 168 registers, three blocks, from a full wave of tokens on)
// with the same chains. H200, s30-1 (medians of two alternating rounds): 16384 x 4 x 4096 0.5418 -> 0.5242 ms
// (84.1 -> 86.9 % of copy), 4096 x 4 x 4096 0.1758 -> 0.1697 ms; below a wave (three rounds) 1024 x 4 x 7168
// 0.1295 -> 0.1257, 1024 x 4 x 4096 0.0873 -> 0.0830, 2048 x 4 x 4096 0.1181 -> 0.1096, 8192 x 4 x 4096 0.3008
// -> 0.2899 ms. The compact kernel's experiments (interval, lean, lean-vf, chains-pw) went with it: none had won.
// H = 8 (since session 29), past the few-token kernel: three warps per token (three stream rows each, 24 dot
// products per lane, weights in registers: the fp64 backward's configuration; 255 registers and 236 bytes of
// spills, the fp64 kernel 232) with kChains, instead of nine warps of one row each without them. H100, s29-4,
// medians of three alternating rounds: 8192 x 8 x 4096 1.5961 -> 1.2430 ms (-22 %), 1024 x 8 x 4096 0.2293 ->
// 0.1975 ms (-14 %); H200, s30-1: 1.2212 ms (1.6027 in s28-3). The nine-warp kernel with kChains was slower than
// without (1.59 -> 1.77 ms, s29-1): one row per warp pays the chain test once per row.
template <Mode M, int H, int G, class Pol, bool kChains = false, unsigned kX = 0>
__global__ void __launch_bounds__(backward_block_warps(G) * 32, kBackwardMinBlocks<M>)
    backward_fast_kernel(Pol pol, InputsView in, BackwardOutputs out, FallbackList fb, DeferredDots dd) {
  using T = RoundedT<M>;
  constexpr bool kLaneBound = kDotLaneBound<M, H, G>;
  static_assert(!kChains || M == Mode::exact, "chains: the exact kernels");
  // exact: the stream values (x, residual) enter only the dot products, which take them as placed bits alone
  // (chunk_scaled, b·2^-896: the filter's scaled chains, numerics/exact_filter.hpp); each lane's sums are
  // multiplied by 2^896 before they are merged (H200, 16384 x 4 x 4096: 0.621 -> 0.600 ms, 40 fewer binary64
  // multiplications per step of 1077 instructions). The gradient values are converted (one instruction on the
  // 16-per-clock pipe each, 32 per step): placing them and multiplying by 2^896 took four instructions each
  // (H200, session 11: 8192 x 8 x 4096 1.745 -> 1.708 ms; 16384 x 4 x 4096 0.600-0.609 -> 0.599-0.600 ms).
  // A non-finite stream value places as a wrong finite number, but the dot bounds, taken from the values
  // themselves, are then infinite or NaN, so the dot products that read it are declined and finished from the
  // stored inputs.
  constexpr bool kPlacedValues = M == Mode::exact;
  using Acc = FastDotAcc<M>;
  static_assert((H + 1) % G == 0, "every warp of a token takes the same number of stream rows");
  constexpr int R = (H + 1) / G;
  constexpr int kRows = backward_rows(H, G);
  constexpr int kWarps = backward_block_warps(G);
  extern __shared__ uint4 ring_memory[];
  const PolicyDesc pd = pol.get();
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x / 32;
  const int row0 = (warp % G) * R;  // this warp's first stream row (0 when G = 1)
  // This lane's slot of (stage, row) is ring[(stage * kRows + row) * 32].
  uint4* const ring = ring_memory + warp * kStages * kRows * kReduceLanes + lane;
  const int64_t D = in.shape.D;
  const int64_t chunks = D / kChunk;
  const int64_t steps = chunks > lane ? (chunks - lane + kReduceLanes - 1) / kReduceLanes : 0;
  const int64_t tokens_per_pass = int64_t(gridDim.x) * (kWarps / G);
  for (int64_t s = int64_t(blockIdx.x) * (kWarps / G) + warp / G; s < in.shape.S; s += tokens_per_pass) {
    const long long token_start = (kX & kProbe) != 0 ? clock64() : 0;
    // rows[r < R]: stream row row0 + r; rows[R + ho]: grad_out[ho].
    const bf16_bits* rows[kRows];
    rows[0] = row0 == 0 ? in.x + s * D : in.residual + (s * H + row0 - 1) * D;
#pragma unroll
    for (int i = 1; i < kRows; ++i)
      rows[i] = i < R ? in.residual + (s * H + row0 + i - 1) * D : in.grad_out + (s * H + i - R) * D;
    // Step i covers chunk j = lane + 32·i, in ring stage i mod kStages.
    auto fetch = [&](int64_t i) {
      uint4* slot = ring + (i % kStages) * kRows * kReduceLanes;
      const int64_t d0 = (lane + kReduceLanes * i) * kChunk;
#pragma unroll
      for (int r = 0; r < kRows; ++r) copy16_async(slot + r * kReduceLanes, rows[r] + d0);
    };
#pragma unroll
    for (int i = 0; i < kStages - 1; ++i) {
      if (i < steps) fetch(i);
      commit_copies();
    }

    float w[R][H];  // the weights of stream row row0 + r: post[s, ho] for row 0, comb[s, row - 1, ho] otherwise
    Acc acc[R][H];  // its dot products with grad_out[ho]
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const float* weights = row0 + r == 0 ? in.post + s * H : in.comb + (s * H + row0 + r - 1) * H;
#pragma unroll
      for (int ho = 0; ho < H; ++ho) w[r][ho] = __ldg(weights + ho);
    }
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
      for (int ho = 0; ho < H; ++ho) acc[r][ho] = fast_zero<M>();
    double error_weight[R];  // exact: the weights' half of each row's filter bound
    if constexpr (M == Mode::exact)
#pragma unroll
      for (int r = 0; r < R; ++r) error_weight[r] = stream_error_weight(w[r], H);
    int chain_window = 0;  // kChains: the smallest of the rows' exact_chain_window
    if constexpr (kChains) {
      chain_window = exact_chain_window(w[0], H);
#pragma unroll
      for (int r = 1; r < R; ++r) chain_window = min(chain_window, exact_chain_window(w[r], H));
    }
    // kLaneBound: the lane's largest gradient magnitude per row (bf16 pairs) and Σ|stream value| per row.
    uint32_t lane_pairs[H];
    float value_sum[R];
    if constexpr (kLaneBound) {
#pragma unroll
      for (int ho = 0; ho < H; ++ho) lane_pairs[ho] = 0;
#pragma unroll
      for (int r = 0; r < R; ++r) value_sum[r] = 0.0f;
    }

    for (int64_t i = 0; i < steps; ++i) {
      if (i + kStages - 1 < steps) fetch(i + kStages - 1);
      commit_copies();
      wait_copies<kStages - 1>();  // step i's group has landed
      const uint4* slot = ring + (i % kStages) * kRows * kReduceLanes;
      const int64_t d0 = (lane + kReduceLanes * i) * kChunk;
      Chunk gc[H];
#pragma unroll
      for (int ho = 0; ho < H; ++ho) gc[ho] = chunk_from(slot[(R + ho) * kReduceLanes]);
      uint32_t declined = 0;  // exact: nonzero when the filter declined an element of this step
      double max_value = 0.0;   // exact: the largest magnitude of the step's gradient values
      bool chains_exact = false;  // kChains: the step's chains never round
      if constexpr (M == Mode::exact) {
        uint32_t pairs = 0;
        uint32_t smallest = 0x7fff7fffu;  // kChains: the smallest non-zero magnitudes minus one, as pairs
#pragma unroll
        for (int ho = 0; ho < H; ++ho) {
          if constexpr (kLaneBound) {
            const uint32_t row_pairs = max_magnitude_pairs(gc[ho], 0);
            lane_pairs[ho] = __vmaxu2(lane_pairs[ho], row_pairs);
            pairs = __vmaxu2(pairs, row_pairs);
          } else {
            pairs = max_magnitude_pairs(gc[ho], pairs);
          }
          if constexpr (kChains) smallest = min_nonzero_magnitude_pairs(gc[ho], smallest);
        }
        const uint32_t max_word = max_pair_word(pairs);  // the largest magnitude, in the high half
        max_value = float_from_bits(max_word);
        // Decided for the warp (the lanes still in the loop): where some lanes' chains may round, every lane takes
        // the interval path, instead of the warp running both paths one after the other.
        if constexpr (kChains)
          chains_exact =
              __all_sync(__activemask(), exact_chain_spread(max_word >> 16, min_pair_word(smallest)) <= chain_window);
      }
      // One stream row at a time: its ∂x / ∂residual chunk and its H dot products with the gradient rows.
      // Gradient values are widened once (exact) for all the sums that read them. kExactChains: the step's chains
      // are known exact (kChains), so no interval is formed.
      auto stream_rows = [&](auto exact_chains) {
        constexpr bool kExactChains = decltype(exact_chains)::value;
#pragma unroll
        for (int r = 0; r < R; ++r) {
          const int row = row0 + r;
          const Chunk bc = chunk_from(slot[r * kReduceLanes]);
          bf16_bits* dst = row == 0 ? out.grad_x + s * D + d0 : out.grad_residual + (s * H + row - 1) * D + d0;
          double* dst64 = row == 0 ? out.grad_x_f64 : out.grad_residual_f64;
          if (dst64) dst64 += row == 0 ? s * D + d0 : (s * H + row - 1) * D + d0;
          Chunk oc, lower;  // lower: the filter's lower roundings (exact), packed like oc
          double error = 0.0;
          if constexpr (M == Mode::exact && !kExactChains)
            error = exact_error(error_weight[r], max_value);
#pragma unroll
          for (int e = 0; e < kChunk; ++e) {
            float g[H];
            T gw[H];
#pragma unroll
            for (int ho = 0; ho < H; ++ho) {
              g[ho] = chunk_elem(gc[ho], e);
              gw[ho] = T(g[ho]);
            }
            bf16_bits lo;
            const float b = chunk_elem(bc, e);
            const T bw = kPlacedValues ? chunk_scaled(bc, e) : T(b);
            if constexpr (kLaneBound) value_sum[r] = add_rn32(value_sum[r], std::fabs(b));
            chunk_set(oc, e, fast_element<M, H, kLaneBound, kExactChains>(pd, w[r], g, gw, b, bw, row == 0, acc[r],
                                                                          dst64 ? dst64 + e : nullptr, error, lo));
            if constexpr (M == Mode::exact && !kExactChains) {
              chunk_set(lower, e, lo);
              if (e & 1) declined |= oc.w[e >> 1] ^ lower.w[e >> 1];
            }
          }
          store_chunk<true>(dst, kChunk, oc);
        }
      };
      if constexpr (kChains) {
        if (chains_exact) stream_rows(std::true_type{});
        else stream_rows(std::false_type{});
      } else {
        stream_rows(std::false_type{});
      }
      // Rare (exact bf16 ties, sums within ~2^-45 of one, deep cancellation, non-finite values; about one step
      // in 10^4 on randn data): the step's elements are recomputed out of line over what was just stored, by
      // the filter with per-element bounds and, where it declines, the certified path.
      if (declined != 0) finish_stream_grad_step(in, out, fb, s, row0, R, d0, slot + R * kReduceLanes);
    }
    if constexpr (M == Mode::exact) {
      static_assert(DotScratch<R * H>::kBytes <= kStages * kRows * kReduceLanes * sizeof(uint4),
                    "the transposed partials fit in the warp's ring");
      const DotScratch<R * H> scratch(ring - lane);
      __syncwarp();  // every lane has read its last ring slots
#pragma unroll
      for (int i = 0; i < R * H; ++i) {
        const int r = i / H, ho = i % H;
        if constexpr (kLaneBound)
          acc[r][ho].bound = ExactDotFilter::lane_bound(float_from_bits(max_pair_word(lane_pairs[ho])), value_sum[r]);
        acc[r][ho].unscale();  // the lane's chain ran on scaled values (bw)
        scratch.put(lane, i, acc[r][ho]);
      }
      settle_dots_exact<H, R * H, FinishForm::chunks, kX>(in, out, fb, dd, s, row0, scratch, dot_filter_depth(D));
      if constexpr ((kX & kProbe) != 0)
        if (lane == 0) {
          const auto cycles = static_cast<unsigned long long>(clock64() - token_start);
          atomicAdd(&g_probe.tokens, 1ull);
          atomicAdd(&g_probe.token_cycles, cycles);
          atomicMax(&g_probe.token_max, cycles);
        }
    } else {
#pragma unroll
      for (int i = 0; i < R * H; ++i) {
        const int q = dot_number(row0 + i / H, i % H, H);
        const T v = finish_param_grad<T>(pd, warp_tree_sum(acc[i / H][i % H]));
        if (lane == 0) {
          const int64_t index = dot_index(s, q, H);
          (q < H ? out.grad_post : out.grad_comb)[index] = static_cast<float>(v);
          if constexpr (M == Mode::fp64) {
            double* dst64 = q < H ? out.grad_post_f64 : out.grad_comb_f64;
            if (dst64) dst64[index] = v;
          }
        }
      }
    }
  }
}

// ---- Backward, generic: one block per token, tiles staged in shared memory --------------------------------
// For any description, H, D and the exact policy. A tile is 32 canonical chunks (256 d) of x, the H residual
// rows and the H grad_out rows, as floats in shared memory. The block's warps share the H + H·H dot
// products (QPW each, in as many passes over D as needed); within a warp lane l still owns chunk l of every
// tile, so each partial runs in the canonical order. ∂x and ∂residual are computed in the first pass.

constexpr int kTileElems = kReduceLanes * kChunk;
// Lane l reads elements 8l..8l+7 of a row: one padding float after every 32 makes those reads hit 32
// different banks (element i is stored at i + i/32).
constexpr int kTileStride = kTileElems + kTileElems / 32;
__device__ __forceinline__ int padded(int i) { return i + i / 32; }
constexpr int kGenericMaxWarps = 16;

// The per-lane partial of a dot product: the policy's accumulator; for exact the certified accumulators
// (when the binary64 twins are stored) or the dot filter (kDotFilter: bf16 and binary32 results only).
template <Mode M, bool kDotFilter>
struct GenericAcc {
  using type = RoundedT<M>;
};
template <>
struct GenericAcc<Mode::exact, false> {
  using type = ExactAccumulator;
};
template <>
struct GenericAcc<Mode::exact, true> {
  using type = ExactDotFilter;
};

template <Mode M, bool kDotFilter>
constexpr int generic_qpw() {
  return M == Mode::exact ? (kDotFilter ? 8 : 4) : M == Mode::fp64 ? 8 : 12;
}

// HC is H as a constant for H in {1, 2, 4, 8} (the per-element stream sums then keep g[] in registers),
// 0 for any other H (read at run time).
// Launch bounds: blocks of up to 16 warps; fp64 at least two per multiprocessor (at most 64 registers: at
// H = 8, 9 warps a block, three blocks with a few spills measured 6.3 ms against 7.8 for two of 96 registers).
// The exact dot filter with a constant H (<= 8: at most 72 dot products, 9 warps) runs blocks of 9 warps, two
// per multiprocessor (96 registers; at 64 ptxas spills a third of a kilobyte per thread).
template <Mode M, int HC, bool kDotFilter>
inline constexpr int kGenericThreads = kDotFilter && HC > 0 ? 9 * 32 : kGenericMaxWarps * 32;
template <Mode M, int HC, bool kDotFilter>
inline constexpr int kGenericMinBlocks = M == Mode::fp64 || (kDotFilter && HC > 0) ? 2 : 1;

template <Mode M, int HC, bool kDotFilter = false>
__global__ void __launch_bounds__(kGenericThreads<M, HC, kDotFilter>, kGenericMinBlocks<M, HC, kDotFilter>)
    backward_generic_kernel(PolicyDesc pd, InputsView in, BackwardOutputs out, FallbackList fb) {
  using Acc = typename GenericAcc<M, kDotFilter>::type;
  constexpr int QPW = generic_qpw<M, kDotFilter>();
  constexpr int HA = HC > 0 ? HC : kMaxStreams;
  extern __shared__ float tile[];  // rows: x, residual[0..H), grad_out[0..H); kTileStride floats each
  const int H = HC > 0 ? HC : in.shape.H;
  const int64_t D = in.shape.D;
  const int nq = H + H * H;  // q < H: ∂post[q]; else ∂comb[hi, ho] with q - H = hi·H + ho
  const int nwarps = blockDim.x / 32;
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x & 31;
  const int per_pass = nwarps * QPW;
  const int passes = (nq + per_pass - 1) / per_pass;
  const int rows = 1 + 2 * H;
  const float* xs = tile;
  const float* rs = tile + kTileStride;
  const float* gs = tile + (1 + H) * kTileStride;


  for (int64_t s = blockIdx.x; s < in.shape.S; s += gridDim.x) {
    const float* post = in.post + s * H;
    const float* comb = in.comb + s * H * H;
    for (int pass = 0; pass < passes; ++pass) {
      Acc acc[QPW];
      if constexpr (M != Mode::exact)
#pragma unroll
        for (int qi = 0; qi < QPW; ++qi) acc[qi] = zero_accumulator<Acc>();
      for (int64_t t0 = 0; t0 < D; t0 += kTileElems) {
        __syncthreads();  // the previous tile is consumed
        for (int i = threadIdx.x; i < rows * kTileElems; i += blockDim.x) {
          const int row = i / kTileElems;
          const int64_t d = t0 + i % kTileElems;
          const bf16_bits* src = row == 0   ? in.x + s * D
                                 : row <= H ? in.residual + (s * H + row - 1) * D
                                            : in.grad_out + (s * H + row - 1 - H) * D;
          tile[row * kTileStride + padded(i % kTileElems)] = d < D ? bf16_to_float(src[d]) : 0.0f;
        }
        __syncthreads();
        if (pass == 0) {
          for (int i = threadIdx.x; i < (1 + H) * kTileElems; i += blockDim.x) {
            const int which = i / kTileElems;  // 0: ∂x; 1 + hi: ∂residual[hi]
            const int e = i % kTileElems;
            const int64_t d = t0 + e;
            if (d >= D) continue;
            float g[HA];
#pragma unroll
            for (int ho = 0; ho < HA; ++ho)
              if (ho < H) g[ho] = gs[ho * kTileStride + padded(e)];
            const float* w = which == 0 ? post : comb + (which - 1) * H;
            const int64_t index = which == 0 ? s * D + d : (s * H + which - 1) * D + d;
            bf16_bits* dst = which == 0 ? out.grad_x : out.grad_residual;
            double* dst64 = which == 0 ? out.grad_x_f64 : out.grad_residual_f64;
            if constexpr (M == Mode::exact) {
              bf16_bits b;
              if (dst64 || !stream_grad_exact_bf16(w, g, H, b)) {
                const ExactRounded v = stream_grad_exact(w, g, H).result();
                b = v.bf16();
                if (dst64) dst64[index] = v.rn64;
                if (!v.certified)
                  push_fallback(fb, which == 0 ? FallbackKind::grad_x : FallbackKind::grad_residual, index);
              }
              dst[index] = b;
            } else {
              const RoundedT<M> v = stream_grad_value<RoundedT<M>>(pd, w, g, H, which == 0);
              dst[index] = round_to_bf16_rne(v);
              if constexpr (M == Mode::fp64)
                if (dst64) dst64[index] = v;
            }
          }
        }
#pragma unroll
        for (int qi = 0; qi < QPW; ++qi) {
          const int q = pass * per_pass + warp * QPW + qi;
          if (q >= nq) break;
          const bool post_path = q < H;
          const float* a = gs + dot_grad_row(q, H) * kTileStride;
          const float* b = post_path ? xs : rs + dot_residual_row(q, H) * kTileStride;
#pragma unroll
          for (int e = 0; e < kChunk; ++e) {
            const int el = lane * kChunk + e;
            if (t0 + el >= D) break;
            if constexpr (M == Mode::exact) {
              if constexpr (kDotFilter) acc[qi].add(a[padded(el)], b[padded(el)]);
              else acc[qi].add(mul_rn64(a[padded(el)], b[padded(el)]));
            } else {
              acc[qi] = dot_step<Acc>(pd, acc[qi], a[padded(el)], b[padded(el)], post_path);
            }
          }
        }
      }
#pragma unroll
      for (int qi = 0; qi < QPW; ++qi) {
        const int q = pass * per_pass + warp * QPW + qi;
        if (q >= nq) break;  // uniform over the warp: the shuffles below see all 32 lanes
        const bool post_path = q < H;
        const int64_t index = dot_index(s, q, H);
        float* dst = post_path ? out.grad_post : out.grad_comb;
        double* dst64 = post_path ? out.grad_post_f64 : out.grad_comb_f64;
        if constexpr (M == Mode::exact && kDotFilter) {
          settle_dot_exact(in, out, fb, s, q, acc[qi], dot_filter_depth(D));
        } else if constexpr (M == Mode::exact) {
          const ExactRounded v = warp_tree_merge(acc[qi]).result();
          if (lane == 0) {
            dst[index] = v.fp32();
            if (dst64) dst64[index] = v.rn64;
            if (!v.certified) push_fallback(fb, post_path ? FallbackKind::grad_post : FallbackKind::grad_comb, index);
          }
        } else {
          const Acc v = finish_param_grad<Acc>(pd, warp_tree_sum(acc[qi]));
          if (lane == 0) {
            dst[index] = static_cast<float>(v);
            if constexpr (M == Mode::fp64)
              if (dst64) dst64[index] = v;
          }
        }
      }
    }
  }
}

// ---- Deferred finishing: the declined dot products of a launch, in a second kernel ----------------------------
// finish_dot_exact costs a token about half a token more (probe, s32-1), and a kernel whose last token finishes a dot
// product ends that much later: without it the H = 4 kernel took 4.2 % less at 16384 x 4 x 4096 and 11 % less at 4096
// tokens (H100, s31-1, `nofinish`), and it is most of the exact backward's gap to fp64's below a wave. Its first pass
// is cheap; what takes long is the certified accumulators of the one in about eleven that it cannot settle: one warp
// adding every product of two rows in a dependent chain per lane (on an idle GPU as long, s33-2: the list finished by a
// warp each, with finish_dot_exact, cost as much time as it saved). So, where a launch defers (Deferral, below), the
// warps list what their filters decline (defer_dot) and this kernel gives each listed dot product a whole block, every
// product in its own certified accumulator chain, eight warps' worth, merged in shared memory. It leaves out the
// exactness test: the accumulators' value, RN32 of the exact sum, is what that test stores when it holds (a sum it
// proves exact has a spread of at most 54 + log2(D) bits, so the accumulators certify it too), and they list for the
// host exactly what finish_dot_exact lists. The accumulators are exact and their certificate depends on the terms
// alone, not on the order (numerics/exact_sum.hpp), so any split of the terms gives the same bits. The last block to
// leave zeroes the counters for the next launch, after every block has read them.
constexpr int kDeferredWarps = 8;  // per block (a dot product); a block per multiprocessor, looping over the list
constexpr int kDeferredBatch = 2;  // chunks of each row per thread and round: D = 4096 in one round

__global__ void __launch_bounds__(kDeferredWarps * 32)
    finish_deferred_dots_kernel(InputsView in, BackwardOutputs out, FallbackList fb, DeferredDots dd) {
  // Raw storage: CUDA allows no __shared__ variable of a class whose constructor initializes members.
  __shared__ alignas(ExactAccumulator) unsigned char warp_sum_bytes[kDeferredWarps * sizeof(ExactAccumulator)];
  ExactAccumulator* const warp_sums = reinterpret_cast<ExactAccumulator*>(warp_sum_bytes);
  const unsigned listed = min(*dd.counters, dd.capacity);
  const int H = in.shape.H;
  const int64_t D = in.shape.D;
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x / 32;
  for (unsigned i = blockIdx.x; i < listed; i += gridDim.x) {
    const DeferredDot item = dd.items[i];
    const int64_t s = item.token;
    const int q = item.dot;
    const bool post_path = q < H;
    const bf16_bits* a = in.grad_out + (s * H + dot_grad_row(q, H)) * D;
    const bf16_bits* b = post_path ? in.x + s * D : in.residual + (s * H + dot_residual_row(q, H)) * D;
    ExactAccumulator acc;
    for_lane_chunks<kDeferredBatch, kDeferredWarps * 32>(a, b, D, threadIdx.x, [&](const Chunk& ca, const Chunk& cb) {
#pragma unroll
      for (int e = 0; e < kChunk; ++e)
        acc.add(mul_rn64(bf16_to_float(chunk_bits(ca, e)), bf16_to_float(chunk_bits(cb, e))));
    });
    acc = warp_tree_merge(acc);
    if (lane == 0) warp_sums[warp] = acc;
    __syncthreads();
    if (threadIdx.x == 0) {
      for (int w = 1; w < kDeferredWarps; ++w) acc.merge(warp_sums[w]);
      const ExactRounded r = acc.result();
      const int64_t index = dot_index(s, q, H);
      (post_path ? out.grad_post : out.grad_comb)[index] = r.fp32();
      if (!r.certified) push_fallback(fb, post_path ? FallbackKind::grad_post : FallbackKind::grad_comb, index);
    }
    __syncthreads();  // warp_sums read before the next dot product's
  }
  __syncthreads();  // every thread has read the counters
  if (threadIdx.x == 0) {
    __threadfence();
    if (atomicAdd(dd.counters + 1, 1u) == gridDim.x - 1) dd.counters[0] = dd.counters[1] = 0;
  }
}

// ---- Launch configuration ---------------------------------------------------------------------------------

// Whether a launch defers the dot products its exact kernel declines to finish_deferred_dots_kernel: never, always,
// or (the default past the few-token kernels at H = 4 and H = 8) when S is at most kDeferredWaves times the tokens
// the kernel holds on the device at once. H100, s33-5, medians of three alternating rounds against finishing where
// declined: 512 x 4 x 4096 -28.4 % (0.0581 -> 0.0416 ms; half a wave of the kernel's 1056 resident tokens at H = 4),
// 1024 x 4 x 7168 -24.4 %, 2048 x 4 x 4096 -9.0 %, 4096 x 4 x 4096 (3.9 waves) -3.1 %, 1024 x 8 x 4096 (3.9 waves of
// 264) -3.9 %; slower at 16384 x 4 x 4096 (15.5 waves) +1.4 %, 8192 x 8 x 4096 +0.7 % and, in the few-token kernel,
// 128 x 4 x 4096 +15 %, where the second kernel's launch costs more than the finishing it takes off the last token.
enum class Deferral { none, always, below_waves };
constexpr int64_t kDeferredWaves = 4;

// deferred: the scratch for DeferredDots, used as `deferral` says.
template <Mode M, int H, int G, class Pol, bool kChains = false, unsigned kX = 0>
void launch_backward_fast_kernel(Pol pol, const InputsView& in, const BackwardOutputs& out, const FallbackList& fb,
                                 const DeferredDots& deferred, Deferral deferral, cudaStream_t stream) {
  constexpr int kTokensPerBlock = backward_block_warps(G) / G;
  constexpr size_t bytes = backward_ring_bytes(H, G);
  const auto kernel = backward_fast_kernel<M, H, G, Pol, kChains, kX>;
  // Above 48 KB a kernel's dynamic shared memory must be allowed explicitly, once per kernel; then the blocks that fit
  // on the device at once are asked for (once per kernel), for the deferral's waves.
  static const int64_t resident_tokens = [&] {
    MHC_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
    int per_sm = 0;
    MHC_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, backward_block_warps(G) * 32, bytes));
    return std::max<int64_t>(int64_t(per_sm) * multiprocessor_count() * kTokensPerBlock, 1);
  }();
  const bool defer = deferral == Deferral::always ||
                     (deferral == Deferral::below_waves && in.shape.S <= kDeferredWaves * resident_tokens);
  const DeferredDots dd = defer ? deferred : DeferredDots{};
  const int64_t token_blocks = (in.shape.S + kTokensPerBlock - 1) / kTokensPerBlock;
  const auto blocks = static_cast<unsigned>(std::min<int64_t>(token_blocks, 1 << 24));
  kernel<<<blocks, backward_block_warps(G) * 32, bytes, stream>>>(pol, in, out, fb, dd);
  MHC_CUDA_CHECK_LAUNCH();
  if (dd.items == nullptr) return;
  finish_deferred_dots_kernel<<<multiprocessor_count(), kDeferredWarps * 32, 0, stream>>>(in, out, fb, dd);
  MHC_CUDA_CHECK_LAUNCH();
}

// `probe`: one launch with the counters zeroed before it and printed after it (the host waits for the launch). With
// G > 1 warps per token, each warp counts its share of a token as one.
template <Mode M, int H, int G, class Pol, bool kChains>
void launch_backward_probe(Pol pol, const InputsView& in, const BackwardOutputs& out, const FallbackList& fb,
                           cudaStream_t stream) {
  Probe p{};
  MHC_CUDA_CHECK(cudaMemcpyToSymbolAsync(g_probe, &p, sizeof p, 0, cudaMemcpyHostToDevice, stream));
  launch_backward_fast_kernel<M, H, G, Pol, kChains, kProbe>(pol, in, out, fb, {}, Deferral::none, stream);
  MHC_CUDA_CHECK(cudaMemcpyFromSymbolAsync(&p, g_probe, sizeof p, 0, cudaMemcpyDeviceToHost, stream));
  MHC_CUDA_CHECK(cudaStreamSynchronize(stream));
  std::fprintf(stderr,
               "probe S=%lld/H=%d/G=%d: tokens %llu, cycles per token %.0f (max %llu); tokens finishing %llu, "
               "dots %llu, finishing cycles per token %.0f (max %llu)\n",
               static_cast<long long>(in.shape.S), H, G, p.tokens,
               double(p.token_cycles) / double(std::max(p.tokens, 1ull)), p.token_max, p.finishing_tokens,
               p.finishing_dots, double(p.finishing_cycles) / double(std::max(p.finishing_tokens, 1ull)),
               p.finishing_max);
}

// A specialised kernel, or at H = 4 and H = 8 for exact the variant MHCDIFF_CUDA_BACKWARD names.
template <Mode M, int H, int G, class Pol, bool kChains = false>
void launch_backward_fast(Pol pol, const InputsView& in, const BackwardOutputs& out, const FallbackList& fb,
                          const DeferredDots& deferred, cudaStream_t stream) {
  Deferral deferral = Deferral::none;
  if constexpr (M == Mode::exact && (H == 4 || H == 8)) {
    const unsigned experiment = backward_experiment();
    if (experiment == kProbe) return launch_backward_probe<M, H, G, Pol, kChains>(pol, in, out, fb, stream);
    if (experiment == kDeferAll) deferral = Deferral::always;
    else if (experiment != kDeferNever && G == kTokenWarps<M, H>) deferral = Deferral::below_waves;
  }
  launch_backward_fast_kernel<M, H, G, Pol, kChains>(pol, in, out, fb, deferred, deferral, stream);
}

// H in {1, 2, 4, 8}; callers check backward_is_specialised first. With fewer tokens than two per
// multiprocessor, one warp per token leaves most of the GPU idle: each token's rows are then spread over
// kFewTokenWarps warps (S = 128, H = 4: exact 72 -> 35-45 us, fp64 28 -> 21 us; at S = 1024 one warp per
// token was faster, and for exact at 512 to 4096 tokens it is still: the few-token kernels there were 16 to 101 %
// slower, H100, s33-3).
template <Mode M, int H, class Pol>
void launch_backward_for_tokens(Pol pol, const InputsView& in, const BackwardOutputs& out, const FallbackList& fb,
                                const DeferredDots& deferred, cudaStream_t stream) {
  if constexpr (kFewTokenWarps<M, H> != kTokenWarps<M, H>)
    if (in.shape.S < 2 * multiprocessor_count())
      return launch_backward_fast<M, H, kFewTokenWarps<M, H>>(pol, in, out, fb, deferred, stream);
  constexpr bool kChains = M == Mode::exact && (H == 4 || H == 8);  // the chains (above backward_fast_kernel)
  launch_backward_fast<M, H, kTokenWarps<M, H>, Pol, kChains>(pol, in, out, fb, deferred, stream);
}

template <Mode M, class Pol>
void launch_backward_specialised(Pol pol, const InputsView& in, const BackwardOutputs& out, const FallbackList& fb,
                                 const DeferredDots& deferred, cudaStream_t stream) {
  switch (in.shape.H) {
    case 1: return launch_backward_for_tokens<M, 1>(pol, in, out, fb, deferred, stream);
    case 2: return launch_backward_for_tokens<M, 2>(pol, in, out, fb, deferred, stream);
    case 4: return launch_backward_for_tokens<M, 4>(pol, in, out, fb, deferred, stream);
    case 8: return launch_backward_for_tokens<M, 8>(pol, in, out, fb, deferred, stream);
  }
  // Reaching here would leave the gradients unwritten: fail loudly instead.
  throw std::logic_error("no specialised backward kernel for H = " + std::to_string(in.shape.H));
}

template <Mode M, int HC, bool kDotFilter>
void launch_backward_generic_kernel(const PolicyDesc& pd, const InputsView& in, const BackwardOutputs& out,
                                    const FallbackList& fb, cudaStream_t stream) {
  constexpr int qpw = generic_qpw<M, kDotFilter>();
  const int nq = in.shape.H + in.shape.H * in.shape.H;
  const int warps = std::clamp((nq + qpw - 1) / qpw, 1, kGenericMaxWarps);
  const size_t smem = size_t(1 + 2 * in.shape.H) * kTileStride * sizeof(float);
  const unsigned blocks = static_cast<unsigned>(std::min<int64_t>(in.shape.S, 1 << 24));
  backward_generic_kernel<M, HC, kDotFilter><<<blocks, warps * 32, smem, stream>>>(pd, in, out, fb);
  MHC_CUDA_CHECK_LAUNCH();
}

template <Mode M, bool kDotFilter = false>
void launch_backward_generic(const PolicyDesc& pd, const InputsView& in, const BackwardOutputs& out,
                             const FallbackList& fb, cudaStream_t stream) {
  switch (in.shape.H) {
    case 1: return launch_backward_generic_kernel<M, 1, kDotFilter>(pd, in, out, fb, stream);
    case 2: return launch_backward_generic_kernel<M, 2, kDotFilter>(pd, in, out, fb, stream);
    case 4: return launch_backward_generic_kernel<M, 4, kDotFilter>(pd, in, out, fb, stream);
    case 8: return launch_backward_generic_kernel<M, 8, kDotFilter>(pd, in, out, fb, stream);
    default: return launch_backward_generic_kernel<M, 0, kDotFilter>(pd, in, out, fb, stream);
  }
}

bool backward_is_specialised(const PolicyDesc& pd, const InputsView& in, const BackwardOutputs& out) {
  if (!specialised_shape(in.shape) || !rows_aligned(in, out.grad_x, out.grad_residual)) return false;
  // exact: the fast kernel stores bf16 and binary32 results only; the binary64 twins need the certified
  // accumulators for every element (the generic kernel).
  if (pd.accumulator == Accumulator::exact)
    return !out.grad_x_f64 && !out.grad_residual_f64 && !out.grad_post_f64 && !out.grad_comb_f64;
  return with_static_preset(pd, [](auto) { return true; });
}

}  // namespace

void launch_backward(const PolicyDesc& pd, const InputsView& in, const BackwardOutputs& out, const FallbackList& fb,
                     cudaStream_t stream, const DeferredDots& deferred) {
  (void)backward_experiment();  // a misspelt variant is refused whatever the launch (it applies to exact kernels only)
  if (in.shape.S == 0) return;
  if (backward_is_specialised(pd, in, out)) {
    if (pd.accumulator == Accumulator::exact) {
      launch_backward_specialised<Mode::exact>(RuntimePolicy{pd}, in, out, fb, deferred, stream);
      return;
    }
    with_static_preset(pd, [&](auto pol) {
      launch_backward_specialised<static_mode<decltype(pol)>()>(pol, in, out, fb, {}, stream);
      return true;
    });
    return;
  }
  switch (pd.accumulator) {
    case Accumulator::fp32: launch_backward_generic<Mode::fp32>(pd, in, out, fb, stream); break;
    case Accumulator::fp64: launch_backward_generic<Mode::fp64>(pd, in, out, fb, stream); break;
    case Accumulator::exact:
      // Without binary64 twins of ∂post and ∂comb the dot products run the filter (ExactDotFilter).
      if (out.grad_post_f64 || out.grad_comb_f64) launch_backward_generic<Mode::exact>(pd, in, out, fb, stream);
      else launch_backward_generic<Mode::exact, true>(pd, in, out, fb, stream);
      break;
  }
}

unsigned backward_experiment() {
  return experiment_switch<unsigned>("MHCDIFF_CUDA_BACKWARD",
                                    {{"probe", kProbe}, {"defer", kDeferAll}, {"inline", kDeferNever}}, 0);
}

const char* backward_kernel_family(const PolicyDesc& pd, const InputsView& in) {
  BackwardOutputs aligned_out;
  return backward_is_specialised(pd, in, aligned_out) ? "specialised" : "generic";
}

}  // namespace mhc::cuda
