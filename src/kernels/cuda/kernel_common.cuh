#pragma once
// What the forward and backward kernels share: the policy providers (presets as compile-time constants),
// 16-byte chunks of 8 bf16, the fallback list and the warp reductions in the canonical tree order.
// Device code only decides who computes what; the arithmetic is kernels/operator_math.hpp (docs/cuda.md).
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

#include "io/errors.hpp"
#include "kernels/cuda/cuda_check.hpp"
#include "kernels/cuda/operator_kernels.hpp"
#include "kernels/operator_math.hpp"

namespace mhc::cuda::detail {

enum class Mode { fp32, fp64, exact };

constexpr Mode mode_of(Accumulator a) {
  return a == Accumulator::fp32 ? Mode::fp32 : a == Accumulator::fp64 ? Mode::fp64 : Mode::exact;
}

template <Mode M>
using RoundedT = std::conditional_t<M == Mode::fp32, float, double>;

// ---- Policies: compile-time constants or data ------------------------------------------------------------
// A built-in preset is a template constant, so every `if (pd.field == ...)` in operator_math.hpp folds away
// and the kernel runs at memory speed; any other description (--policy-file) is passed as data to the
// generic kernels. Both call the same functions, so they agree bit for bit (tests/gpu checks both).

template <PolicyDesc PD>
struct StaticPolicy {
  __device__ __forceinline__ static constexpr PolicyDesc get() { return PD; }
};

struct RuntimePolicy {
  PolicyDesc pd;
  __device__ __forceinline__ PolicyDesc get() const { return pd; }
};


// ---- 16-byte chunks of 8 bf16 ----------------------------------------------------------------------------
// A chunk is the canonical reduction chunk of operator_math.hpp (kReduceChunk elements) and one 16-byte
// load or store when rows are aligned.

inline constexpr int kChunk = kReduceChunk;
static_assert(kChunk == 8, "a chunk is one 16-byte vector of bf16");

struct Chunk {
  uint32_t w[4] = {0, 0, 0, 0};
};

__device__ __forceinline__ bf16_bits chunk_bits(const Chunk& c, int e) {
  const uint32_t word = c.w[e >> 1];
  return static_cast<bf16_bits>((e & 1) ? (word >> 16) : (word & 0xffffu));
}

__device__ __forceinline__ float chunk_elem(const Chunk& c, int e) { return bf16_to_float(chunk_bits(c, e)); }

// Element e as scaled_value (numerics/exact_filter.hpp: v·2^-896, integer instructions only); the odd
// element of a pair already sits in the high half of its word.
__device__ __forceinline__ double chunk_scaled(const Chunk& c, int e) {
  const uint32_t word = c.w[e >> 1];
  return scaled_value((e & 1) ? word : word << 16);
}

// The largest magnitude among the bf16 values of chunks, for the exact filter's bound: pairs are folded into m
// (two 16-bit lanes, signs cleared) with __vmaxu2, and max_pair_word gives the larger lane as bf16 bits in the
// high half of a word (float bits of the value; scaled_value's input).
__device__ __forceinline__ uint32_t max_magnitude_pairs(const Chunk& c, uint32_t m) {
#pragma unroll
  for (int j = 0; j < 4; ++j) m = __vmaxu2(m, c.w[j] & 0x7fff7fffu);
  return m;
}
__device__ __forceinline__ uint32_t max_pair_word(uint32_t m) { return max(m & 0xffff0000u, m << 16); }

// The smallest non-zero bf16 magnitude among chunks (exact_chain_spread's), folded into m (start: 0x7fff7fff) as
// pairs of magnitude - 1 with __vminu2 (a zero half becomes 0x7fff: (0 + 0x7fff) & 0x7fff; no carry crosses the
// halves), and min_pair_word: the smaller lane plus one, 0x8000 when every value was zero.
__device__ __forceinline__ uint32_t min_nonzero_magnitude_pairs(const Chunk& c, uint32_t m) {
#pragma unroll
  for (int j = 0; j < 4; ++j) m = __vminu2(m, ((c.w[j] & 0x7fff7fffu) + 0x7fff7fffu) & 0x7fff7fffu);
  return m;
}
__device__ __forceinline__ uint32_t min_pair_word(uint32_t m) { return min(m & 0xffffu, m >> 16) + 1; }

// Word j (elements 2j and 2j + 1) for a j known only at run time, without indexing the registers (which
// would put the chunk in local memory).
__device__ __forceinline__ uint32_t chunk_word(const Chunk& c, int j) {
  return j < 2 ? (j == 0 ? c.w[0] : c.w[1]) : (j == 2 ? c.w[2] : c.w[3]);
}

// Element e for an e known only at run time (a rolled loop), through chunk_word. chunk_bits, for the unrolled
// loops, indexes the words directly: the same value, but the kernels' machine code differs between the two forms.
__device__ __forceinline__ bf16_bits chunk_bits_rolled(const Chunk& c, int e) {
  return static_cast<bf16_bits>(chunk_word(c, e >> 1) >> ((e & 1) * 16));  // the low half of word e / 2 first
}

__device__ __forceinline__ void chunk_set(Chunk& c, int e, bf16_bits b) {
  uint32_t& word = c.w[e >> 1];
  word = (e & 1) ? ((word & 0xffffu) | (static_cast<uint32_t>(b) << 16)) : ((word & 0xffff0000u) | b);
}

// Aligned: one 16-byte load (n is 8). Otherwise element by element, the missing tail read as +0.
template <bool kAligned>
__device__ __forceinline__ Chunk load_chunk(const bf16_bits* p, int n) {
  Chunk c;
  if constexpr (kAligned) {
    const uint4 v = __ldg(reinterpret_cast<const uint4*>(p));
    c.w[0] = v.x, c.w[1] = v.y, c.w[2] = v.z, c.w[3] = v.w;
  } else {
#pragma unroll
    for (int e = 0; e < kChunk; ++e) chunk_set(c, e, e < n ? p[e] : bf16_bits{0});
  }
  return c;
}

template <bool kAligned>
__device__ __forceinline__ void store_chunk(bf16_bits* p, int n, const Chunk& c) {
  if constexpr (kAligned) {
    *reinterpret_cast<uint4*>(p) = make_uint4(c.w[0], c.w[1], c.w[2], c.w[3]);
  } else {
#pragma unroll
    for (int e = 0; e < kChunk; ++e)
      if (e < n) p[e] = static_cast<bf16_bits>((e & 1) ? (c.w[e >> 1] >> 16) : (c.w[e >> 1] & 0xffffu));
  }
}

// ---- cp.async: rows copied into shared memory while the current values are computed ----------------------
// Each thread (or lane) copies into slots of a ring only it reads, so no barrier is needed: a slot is
// refilled one iteration after its values were read into registers and used.

__device__ __forceinline__ void copy16_async(uint4* smem, const bf16_bits* gmem) {
#if __CUDA_ARCH__ >= 800
  const unsigned address = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(address), "l"(gmem) : "memory");
#else
  *smem = __ldg(reinterpret_cast<const uint4*>(gmem));
#endif
}

__device__ __forceinline__ void commit_copies() {
#if __CUDA_ARCH__ >= 800
  asm volatile("cp.async.commit_group;\n" ::: "memory");
#endif
}

// Waits until at most `kPending` committed groups are still in flight.
template <int kPending>
__device__ __forceinline__ void wait_copies() {
#if __CUDA_ARCH__ >= 800
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
#endif
}

// Asks L2 for the line holding p (no register written, no wait).
__device__ __forceinline__ void prefetch_l2(const void* p) {
  asm volatile("prefetch.L2 [%0];\n" ::"l"(p));  // generic address: no state space named
}

__device__ __forceinline__ Chunk chunk_from(const uint4& v) {
  Chunk c;
  c.w[0] = v.x, c.w[1] = v.y, c.w[2] = v.z, c.w[3] = v.w;
  return c;
}

__device__ __forceinline__ void push_fallback(const FallbackList& fb, FallbackKind kind, int64_t index) {
  const unsigned long long slot = atomicAdd(fb.count, 1ull);
  if (slot < fb.capacity)
    fb.items[slot] = (static_cast<unsigned long long>(kind) << kFallbackKindShift) | static_cast<unsigned long long>(index);
}

// ---- Warp reductions: combine_lane_partials as a shuffle-down tree --------------------------------------
// Lane l adds lane l+16, then l+8, +4, +2, +1: lane 0 ends with exactly the tree of combine_lane_partials.

inline constexpr unsigned kFullMask = 0xffffffffu;

template <class T>
__device__ __forceinline__ T warp_tree_sum(T v) {
#pragma unroll
  for (int offset = kReduceLanes / 2; offset > 0; offset /= 2) v = op_add(v, __shfl_down_sync(kFullMask, v, offset));
  return v;
}

// Any trivially copyable value, word by word.
template <class T>
__device__ __forceinline__ T shfl_down_words(const T& v, int offset) {
  static_assert(sizeof(T) % 4 == 0 && std::is_trivially_copyable_v<T>);
  uint32_t w[sizeof(T) / 4];
  memcpy(w, &v, sizeof(T));
#pragma unroll
  for (int i = 0; i < int(sizeof(T) / 4); ++i) w[i] = __shfl_down_sync(kFullMask, w[i], offset);
  T r;
  memcpy(&r, w, sizeof(T));
  return r;
}

// The exact accumulators merge along the same tree (certification does not depend on the order).
__device__ __forceinline__ ExactAccumulator warp_tree_merge(ExactAccumulator acc) {
#pragma unroll
  for (int offset = kReduceLanes / 2; offset > 0; offset /= 2) acc.merge(shfl_down_words(acc, offset));
  return acc;
}

// ---- A warp's declined pairs of elements, staged and finished by the warp -----------------------------------
// The exact kernels' binary32 first tests decline a few pairs of bf16 elements per warp; finishing each where it
// arose would leave the other lanes idle (docs/cuda.md). So the owner lanes stage their pairs, each in a slot of
// kSlotWords words of the warp's shared memory, and the warp finishes them together, two lanes per pair.

// The staged pairs (`staged` of them, warp-uniform): lane l finishes element l mod 2 of pair l / 2, 16 pairs
// per round, by `element(slot, e)`. __syncwarp orders the owners' stores and staging before, and the reads
// before restaging.
template <int kSlotWords, class Element>
__device__ __forceinline__ void finish_staged_pairs(int staged, const uint32_t* staging, Element&& element) {
  const int lane = threadIdx.x % kReduceLanes;
  __syncwarp();
  for (int first = 0; first < staged; first += kReduceLanes / 2) {
    const int pair = first + lane / 2;
    if (pair < staged) element(staging + pair * kSlotWords, lane % 2);
  }
  __syncwarp();
}

// Stages the pairs of `declined` (per lane, one bit per pair) after the `staged` ones already waiting, in lane
// order: `fill(bit, i)` writes that pair into slot i of the warp's staging, and `finish(staged)` (finish_staged_pairs) runs whenever all
// 32 slots are taken and more remain. Returns how many wait (warp-uniform).
template <class Fill, class Finish>
__device__ __forceinline__ int stage_warp_pairs(uint32_t declined, int staged, Fill&& fill, Finish&& finish) {
  const int lane = threadIdx.x % kReduceLanes;
  int before = __popc(declined);  // inclusive, then exclusive, prefix of the lanes' counts
#pragma unroll
  for (int offset = 1; offset < kReduceLanes; offset *= 2) {
    const int below = __shfl_up_sync(kFullMask, before, offset);
    if (lane >= offset) before += below;
  }
  const int total = __shfl_sync(kFullMask, before, kReduceLanes - 1);
  before -= __popc(declined);
  if (staged + total > kReduceLanes) {
    finish(staged);
    staged = 0;
  }
  for (int round = 0; round < total; round += kReduceLanes) {
    int position = before;
    for (uint32_t m = declined; m != 0 && position < round + kReduceLanes; m &= m - 1, ++position) {
      if (position < round) continue;
      fill(__ffs(m) - 1, staged + position - round);
    }
    staged += min(total - round, kReduceLanes);
    if (staged == kReduceLanes && round + kReduceLanes < total) {
      finish(staged);
      staged = 0;
    }
  }
  return staged;
}

// ---- Launch helpers ----------------------------------------------------------------------------------------

// An experiment switch (docs/decisions.md): the value of the variant the environment variable `variable` names,
// `off` when it is unset or empty. Any other value is refused (InputError, exit 2): a misspelt variant would
// otherwise time the default under the variant's name.
template <class E>
E experiment_switch(const char* variable, std::initializer_list<std::pair<std::string_view, E>> variants, E off) {
  const char* v = std::getenv(variable);
  if (!v || !*v) return off;
  std::string known;
  for (const auto& [name, value] : variants) {
    if (name == v) return value;
    known += (known.empty() ? "" : ", ") + std::string(name);
  }
  throw InputError(std::string(variable) + "=" + v + " names no experiment (known: " + known + ")");
}

// The current device's multiprocessors (asked once per process: mhcdiff uses one device).
inline int multiprocessor_count() {
  static const int count = [] {
    int device = 0, sms = 0;
    MHC_CUDA_CHECK(cudaGetDevice(&device));
    MHC_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
    return sms;
  }();
  return count;
}

inline bool aligned16(const void* p) { return p == nullptr || reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// 16-byte vector access is possible when every row starts on a 16-byte boundary.
inline bool rows_aligned(const InputsView& in, const void* out_a, const void* out_b) {
  return in.shape.D % kChunk == 0 && aligned16(in.x) && aligned16(in.residual) && aligned16(in.grad_out) &&
         aligned16(out_a) && aligned16(out_b);
}

inline bool specialised_shape(const Shape& sh) { return sh.H == 1 || sh.H == 2 || sh.H == 4 || sh.H == 8; }

// The preset (policy.hpp's constexpr descriptions) that equals pd, as a StaticPolicy passed to f; false
// when none does. Matched by value, not by name: any other policy runs the generic kernels, slower but
// never different.
template <class F>
bool with_static_preset(const PolicyDesc& pd, F&& f) {
  if (pd == kHfBf16Desc) return f(StaticPolicy<kHfBf16Desc>{});
  if (pd == kFp32SeededDesc) return f(StaticPolicy<kFp32SeededDesc>{});
  if (pd == kFp32SeededFmaDesc) return f(StaticPolicy<kFp32SeededFmaDesc>{});
  if (pd == kFp32MixFirstDesc) return f(StaticPolicy<kFp32MixFirstDesc>{});
  if (pd == kFp64Desc) return f(StaticPolicy<kFp64Desc>{});
  return false;
}

template <class Pol>
constexpr Mode static_mode() {
  return mode_of(Pol::get().accumulator);
}

}  // namespace mhc::cuda::detail
