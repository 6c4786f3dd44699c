#pragma once
// The operator on the CPU: every policy, forward and backward, multithreaded over tokens. Each output
// element is computed by one thread in a fixed order, so results do not depend on the thread count.
#include <omp.h>

#include <algorithm>

#include "kernels/tensors.hpp"
#include "numerics/exact_fallback.hpp"
#include "policy/policy.hpp"

namespace mhc {

// The threads a requested count stands for: itself, or for 0 ("all cores") OpenMP's default team (OMP_NUM_THREADS
// where set, so a lower one is honoured) but at most the processors this process may run on: OMP_NUM_THREADS=50000
// made libgomp end the process (exit 1, a temp file left behind). Every parallel region of the CPU code takes its
// count from here.
inline int cpu_thread_count(int requested) {
  return requested > 0 ? requested : std::clamp(omp_get_max_threads(), 1, std::max(1, omp_get_num_procs()));
}

struct CpuOptions {
  int threads = 0;  // 0: all hardware threads (cpu_thread_count)
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
