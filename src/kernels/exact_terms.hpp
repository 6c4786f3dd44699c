#pragma once
// The exact policy's multiprecision fallback for one output element, shared by the CPU driver and the
// CUDA backend's host side: which binary64 terms sum to element i of each tensor (SPEC §1), and where
// the correctly rounded result is stored. Host only.
#include <cstdint>
#include <vector>

#include "kernels/tensors.hpp"
#include "numerics/exact_fallback.hpp"

namespace mhc {

// The output tensors of the exact policy (values fixed: the GPU encodes them in its fallback list).
enum class ExactTensor : unsigned { out = 0, grad_x = 1, grad_residual = 2, grad_post = 3, grad_comb = 4 };

// Replaces `terms` with the products whose exact sum is element `i` (row-major offset) of `tensor`:
//   out[s,ho,d]: p·x and c_k·r_k; grad_x[s,d]: post[ho]·g[ho,d]; grad_residual[s,hi,d]: comb[hi,ho]·g[ho,d];
//   grad_post[s,ho]: g[ho,d]·x[d] over d; grad_comb[s,hi,ho]: g[ho,d]·r[hi,d] over d.
void exact_element_terms(const InputsView& in, ExactTensor tensor, int64_t i, std::vector<double>& terms);

// Computes element i of `tensor` with the multiprecision backend and stores it, with its binary64 twin
// when that is stored. `fwd` is used for out, `bwd` for the gradients. `terms` is scratch.
void finish_exact_element(const InputsView& in, ExactTensor tensor, int64_t i, const ForwardOutputs& fwd,
                          const BackwardOutputs& bwd, ExactBackend backend, std::vector<double>& terms);

// Stores an exact result (bf16 or fp32 by the tensor's dtype, plus RN64 into the *_f64 twin if present).
void store_exact_element(ExactTensor tensor, int64_t i, const ExactRounded& r, const ForwardOutputs& fwd,
                         const BackwardOutputs& bwd);

}  // namespace mhc
