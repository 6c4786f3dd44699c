#pragma once
// The operator on an NVIDIA GPU: the same policies and the same arithmetic (kernels/operator_math.hpp)
// as kernels/cpu, bit for bit. Host-in, host-out entry points (the kernels stream slabs through the GPU).
#include <string>

#include "kernels/tensors.hpp"
#include "numerics/exact_fallback.hpp"
#include "policy/policy.hpp"

namespace mhc::cuda {

// Exact elements the GPU lists for the host per slab; beyond this the slab's exact results are recomputed on the
// CPU instead (same bits: the CPU path is the reference).
inline constexpr unsigned long long kFallbackCapacity = 1ull << 20;

bool device_available();
std::string device_name();

// Elements the GPU's exact fast path cannot certify are finished on the CPU with the multiprecision
// fallback; RunStats says how many. cpu_threads bounds the host's share (that finishing, and the forward's scan
// of each slab for non-finite values) like CpuOptions::threads: 0 is all hardware threads.
RunStats forward(const PolicyDesc& pd, const InputsView& in, const ForwardOutputs& out, ExactBackend backend,
                 int cpu_threads = 0);
RunStats backward(const PolicyDesc& pd, const InputsView& in, const BackwardOutputs& out, ExactBackend backend,
                  int cpu_threads = 0);

}  // namespace mhc::cuda
