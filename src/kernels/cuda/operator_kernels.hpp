#pragma once
// Device-level launchers of the operator's kernels: pointers are device memory, the whole call is
// asynchronous on `stream`. operator_cuda.cpp streams host data through these; bench_cuda.cu times them.
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/cuda_check.hpp"
#include "kernels/exact_terms.hpp"
#include "kernels/tensors.hpp"
#include "policy/policy.hpp"

namespace mhc::cuda {

// Where the exact kernels list the elements their certified fast path could not certify (SPEC §2); the
// host finishes those with the multiprecision fallback. Each item is (kind << 58) | index, index being
// the element's offset in its output tensor. When more than `capacity` elements need it, `count` still
// counts them all and the caller recomputes the whole slab on the CPU.
struct FallbackList {
  unsigned long long* count = nullptr;  // device counter, zeroed by the caller before the launch
  unsigned long long* items = nullptr;
  unsigned long long capacity = 0;
};

// The exact backward's dot products its filter declined, when a second kernel finishes them instead of the warp
// that declined them (launch_backward; docs/cuda.md, "Deferred finishing"): device scratch owned by the caller,
// `capacity` items and two counters that are zero when allocated and that every launch leaves zero. A dot product
// that finds the list full is finished where it was declined, as is every one when `items` is null.
struct DeferredDot {
  int64_t token;
  int dot;  // q < H: ∂post[q]; q = H + hi·H + ho: ∂comb[hi, ho]
};
struct DeferredDots {
  DeferredDot* items = nullptr;
  unsigned* counters = nullptr;  // [0]: items listed (may pass capacity); [1]: blocks of the second kernel done
  unsigned capacity = 0;
};

// DeferredDots' scratch, allocated and zeroed (256 KB at kDeferredDotCapacity; the counters zeroed on the legacy
// default stream, on which mhcdiff launches). The default defers up to four waves of tokens, where as many as
// S·(H + H²) dot products (84 480 at H = 4) could be declined; bench data declines about one in 444, and what finds
// the list full is finished where declined. A launch that fails between its two kernels leaves the counters set: the
// scratch is then discarded with the rest of the call's device state, never reused.
inline constexpr unsigned kDeferredDotCapacity = 1u << 14;
class DeferredDotScratch {
 public:
  // capacity 0 (a forward's slab): nothing allocated, and view() defers nothing.
  explicit DeferredDotScratch(unsigned capacity = kDeferredDotCapacity)
      : items_(capacity), counters_(capacity > 0 ? 2 : 0) {
    if (capacity > 0) MHC_CUDA_CHECK(cudaMemset(counters_.get(), 0, counters_.bytes()));
  }
  DeferredDots view() const { return {items_.get(), counters_.get(), static_cast<unsigned>(items_.size())}; }

 private:
  DeviceBuffer<DeferredDot> items_;
  DeviceBuffer<unsigned> counters_;
};

// The tensor an item belongs to: kernels/exact_terms.hpp finishes it on the host.
using FallbackKind = ExactTensor;
inline constexpr int kFallbackKindShift = 58;
inline constexpr unsigned long long kFallbackIndexMask = (1ull << kFallbackKindShift) - 1;

// in.* and out.* are device pointers; out.*_f64 may be null (not stored). A backward needs in.grad_out.
// finite_inputs: every x, residual, post and comb value is finite. The specialised binary64 and exact
// forwards widen by placing bits (numerics/exact_filter.hpp, scaled_value), which is exact for finite values
// only; with finite_inputs false the forward runs the generic kernels, which convert.
void launch_forward(const PolicyDesc& pd, const InputsView& in, const ForwardOutputs& out, const FallbackList& fallback,
                    cudaStream_t stream, bool finite_inputs = true);
// deferred: the scratch for DeferredDots (empty: none deferred).
void launch_backward(const PolicyDesc& pd, const InputsView& in, const BackwardOutputs& out,
                     const FallbackList& fallback, cudaStream_t stream, const DeferredDots& deferred = {});

// Where a kernel with its own tests starts, for those tests to reach it: the exact forward's block rows loop over
// tokens (where prefetching the next one matters) from this many on.
int64_t exact_forward_looping_min_tokens();

// The variant MHCDIFF_CUDA_BACKWARD names (docs/decisions.md), as the exact kernels' bits; 0 when unset.
// An unknown name is refused (InputError).
unsigned backward_experiment();

// Which kernel family a launch uses (docs/cuda.md): "specialised" (a built-in preset at H in {1,2,4,8}
// with 16-byte aligned rows) or "generic" (any description, any H, any D). Tests cover both.
const char* forward_kernel_family(const PolicyDesc& pd, const InputsView& in);
const char* backward_kernel_family(const PolicyDesc& pd, const InputsView& in);

}  // namespace mhc::cuda
