#pragma once
// Runs a policy on the CPU or the GPU through one entry point. Both backends produce bit-identical
// results (SPEC §2 device independence); the GPU one exists only in builds with MHCDIFF_CUDA.
#include <string>

#include "kernels/cpu/operator_cpu.hpp"
#include "kernels/tensors.hpp"
#include "policy/policy.hpp"

namespace mhc {

enum class Device { cpu, cuda };

// True when this build has the CUDA backend and a usable GPU is present.
bool cuda_available();
// "cpu", or the GPU's name.
std::string device_name(Device device);
// "auto" → cuda when available, else cpu; "cpu"; "cuda" (InputError when unavailable).
Device resolve_device(const std::string& requested);

RunStats forward_on(Device device, const PolicyDesc& pd, const InputsView& in, const ForwardOutputs& out,
                    const CpuOptions& opt = {});
RunStats backward_on(Device device, const PolicyDesc& pd, const InputsView& in, const BackwardOutputs& out,
                     const CpuOptions& opt = {});

}  // namespace mhc
