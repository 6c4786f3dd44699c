#pragma once
// Device-resident timing of the CUDA kernels (what `mhcdiff bench --device cuda` reports, SPEC §8):
// random inputs generated on the GPU (or on the host and copied, `bench --preset`), CUDA-event timing of each policy's forward and backward launch,
// median of `reps`, and a device-to-device copy of the forward's byte count measured in the same run.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "kernels/tensors.hpp"
#include "policy/policy.hpp"

namespace mhc::cuda {

struct KernelTiming {
  std::string policy;
  bool backward = false;
  double median_ms = 0, min_ms = 0;
  int64_t bytes = 0;              // fewest bytes the launch must move (each input read once, each output written once)
  int64_t fallback_elements = 0;  // exact: elements left to the CPU's multiprecision fallback (not timed)
};

struct ShapeTiming {
  Shape shape;
  double copy_median_ms = 0;
  int64_t copy_bytes = 0;  // bytes read + written by the copy (= the forward's byte count)
  std::vector<KernelTiming> kernels;
};

struct DeviceBenchOptions {
  int reps = 40;
  uint64_t seed = 1;
  bool backward = true;
  // When non-empty: write the inputs and each fp32/bf16 policy's outputs of the *first* shape as raw
  // little-endian files (x.bin, residual.bin, post.bin, comb.bin, grad_out.bin, <policy>.out.bin, ...) with
  // a meta.json, for an external peer check (scripts/torch_peer.py).
  std::string dump_dir;
  // When set: each input set made by this on the host (seed: `seed` + the set's number) and copied to the GPU,
  // instead of the GPU's own randn-like data.
  std::function<Inputs(const Shape&, uint64_t seed)> host_inputs;
};

ShapeTiming bench_shape(const Shape& shape, const std::vector<Policy>& policies, const DeviceBenchOptions& options,
                        bool dump);

}  // namespace mhc::cuda
