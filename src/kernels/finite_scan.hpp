#pragma once
// Whether every value the forward reads is finite: the CUDA backend runs its specialised forward kernels, which
// widen values by placing their bits (numerics/exact_filter.hpp, scaled_value), only on slabs without an
// infinity or a NaN. A host-side scan of the slab before it is launched.
#include "kernels/tensors.hpp"

namespace mhc {

// x, residual, post and comb of `in` (grad_out is not read): bf16 values with an exponent field below all ones,
// binary32 values by the same test on their bits. `threads` OpenMP threads (0: all hardware threads, as
// CpuOptions); the answer does not depend on their number.
bool forward_inputs_finite(const InputsView& in, int threads = 0);

}  // namespace mhc
