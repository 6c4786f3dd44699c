#pragma once
// The operator on the CPU: every policy, forward and backward, multithreaded over tokens. Each output
// element is computed by one thread in a fixed order, so results do not depend on the thread count.
#include "kernels/tensors.hpp"
#include "numerics/exact_fallback.hpp"
#include "policy/policy.hpp"

namespace mhc {

struct CpuOptions {
  int threads = 0;  // 0: all hardware threads
  ExactBackend exact_backend = ExactBackend::boost;
};

RunStats forward_cpu(const PolicyDesc& pd, const InputsView& in, const ForwardOutputs& out, const CpuOptions& opt = {});

// Needs in.grad_out.
RunStats backward_cpu(const PolicyDesc& pd, const InputsView& in, const BackwardOutputs& out, const CpuOptions& opt = {});

// Allocates and fills a PolicyResult (f64 copies for fp64/exact policies; gradients when backward).
PolicyResult run_policy_cpu(const PolicyDesc& pd, const InputsView& in, bool backward, const CpuOptions& opt = {},
                            RunStats* stats = nullptr);

// Allocates the result vectors of one policy for `shape` and points `fwd`/`bwd` at them.
void allocate_result(PolicyResult& r, const Shape& shape, bool with_f64, bool backward);
ForwardOutputs forward_outputs(PolicyResult& r);
BackwardOutputs backward_outputs(PolicyResult& r);

}  // namespace mhc
