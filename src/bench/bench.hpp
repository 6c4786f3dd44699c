#pragma once
// `mhcdiff bench` (SPEC §8): per policy, forward and backward, time, GB/s and % of a copy of the same
// bytes measured in the same run. On the GPU the timing is of device-resident data (CUDA events, median
// of reps, kernels/cuda/bench_cuda.hpp); on the CPU it is wall time of the CPU path (median of reps).
// A benchmark, never a test: nothing here asserts a speed.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "gen/presets.hpp"
#include "kernels/dispatch.hpp"
#include "kernels/tensors.hpp"
#include "policy/policy.hpp"

namespace mhc::bench {

struct BenchOptions {
  std::vector<Shape> shapes;  // empty: default_shapes(device)
  std::vector<Policy> policies;
  Device device = Device::cpu;
  int reps = 0;  // 0: 40 on the GPU, 3 on the CPU
  uint64_t seed = 1;
  // The inputs: unset, the bench's own randn-like data (x, residual, grad_out ~ N(0, 1) in bf16, post ~ U[0, 2),
  // comb ~ U[0, 1); made on the GPU there); set, `mhcdiff gen`'s preset of that name at `seed` (made on the host and
  // copied to the GPU), so that data-dependent paths (the exact filters and chains) are timed on that data too.
  std::optional<gen::Preset> preset;
  bool backward = true;
  int threads = 0;       // CPU only
  std::string dump_dir;  // GPU only: raw inputs/outputs of the first shape for scripts/torch_peer.py
};

struct BenchRow {
  Shape shape;
  std::string policy;
  std::string direction;  // "fwd" or "bwd"
  double median_ms = 0;
  int64_t bytes = 0;
  double gbps = 0;         // bytes / median time
  double pct_of_copy = 0;  // gbps / copy_gbps of the same shape, in %
  double copy_gbps = 0;
  int64_t fallback_elements = 0;
};

struct BenchReport {
  std::string device;  // "cpu" or the GPU's name
  int reps = 0;
  std::string inputs;  // what the inputs were: "randn-like" or "preset NAME, seed N"
  std::vector<BenchRow> rows;
};

// SPEC §8's shapes on the GPU: S=16384,H=4,D=4096 (the target), S=128 (launch cost), S=1024 with D=7168,
// and H=8. On the CPU one small shape, so the run takes seconds.
std::vector<Shape> default_shapes(Device device);

// Parses "S,H,D"; InputError on anything else.
Shape parse_shape(const std::string& text);

BenchReport run_bench(const BenchOptions& options);

std::string format_text(const BenchReport& report);
std::string format_csv(const BenchReport& report);
std::string format_markdown(const BenchReport& report);

}  // namespace mhc::bench
