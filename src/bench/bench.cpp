#include "bench/bench.hpp"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <fstream>
#include <optional>
#include <random>
#include <string>

#include <fmt/format.h>

#include "gen/presets.hpp"
#include "io/errors.hpp"
#include "kernels/cpu/operator_cpu.hpp"
#include "run/thread_count.hpp"

#if MHCDIFF_HAVE_CUDA
#include "kernels/cuda/bench_cuda.hpp"
#endif

namespace mhc::bench {
namespace {

int64_t forward_bytes(const Shape& sh) { return 2 * sh.S * sh.D + 4 * sh.S * sh.H * sh.D + 4 * sh.S * sh.H * (1 + sh.H); }
int64_t backward_bytes(const Shape& sh) {
  return 2 * sh.S * sh.D * 2 + 2 * sh.S * sh.H * sh.D * 3 + 4 * sh.S * sh.H * (1 + sh.H) * 2;
}

BenchRow make_row(const Shape& sh, const std::string& policy, bool backward, double ms, int64_t bytes,
                  double copy_gbps, int64_t fallbacks) {
  BenchRow r;
  r.shape = sh;
  r.policy = policy;
  r.direction = backward ? "bwd" : "fwd";
  r.median_ms = ms;
  r.bytes = bytes;
  r.gbps = ms > 0 ? double(bytes) / (ms * 1e6) : 0;
  r.copy_gbps = copy_gbps;
  r.pct_of_copy = copy_gbps > 0 ? 100.0 * r.gbps / copy_gbps : 0;
  r.fallback_elements = fallbacks;
  return r;
}

// Bytes of one set of host inputs of `sh` (grad_out included, as random_inputs and the presets make it).
double host_input_bytes(const Shape& sh) {
  const double row = double(sh.H) * double(sh.D), weights = 4.0 * double(sh.H) * (1 + sh.H);
  return double(sh.S) * (2.0 * sh.D + 2.0 * 2.0 * row + weights);
}

// Bytes the CPU bench of `sh` holds at once: the inputs, the copy's two buffers and one policy's outputs.
double cpu_bench_bytes(const Shape& sh, bool backward) {
  const double tokens = double(sh.S), row = double(sh.H) * double(sh.D), weights = 4.0 * double(sh.H) * (1 + sh.H);
  const double outputs = tokens * (2.0 * row + (backward ? 2.0 * sh.D + 2.0 * row + weights : 0.0));
  return host_input_bytes(sh) + double(forward_bytes(sh)) + outputs;
}

// MemAvailable of /proc/meminfo in bytes; nothing where it cannot be read (not Linux).
std::optional<double> available_memory_bytes() {
  std::ifstream meminfo("/proc/meminfo");
  std::string key;
  double kib = 0;
  std::string unit;
  while (meminfo >> key >> kib >> unit)
    if (key == "MemAvailable:") return kib * 1024.0;
  return std::nullopt;
}

// Peer-test style random inputs (x, r, g ~ N(0,1) in bf16, post ~ U[0,2), comb ~ U[0,1)).
Inputs random_inputs(const Shape& sh, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> unit(0.0f, 1.0f);
  Inputs in;
  in.shape = sh;
  auto fill = [&](std::vector<bf16_bits>& v, size_t n) {
    v.resize(n);
    for (auto& b : v) b = round_to_bf16_rne(normal(rng));
  };
  fill(in.x, size_t(sh.S) * sh.D);
  fill(in.residual, size_t(sh.S) * sh.H * sh.D);
  fill(in.grad_out, size_t(sh.S) * sh.H * sh.D);
  in.post.resize(size_t(sh.S) * sh.H);
  for (float& p : in.post) p = 2.0f * unit(rng);
  in.comb.resize(size_t(sh.S) * sh.H * sh.H);
  for (float& c : in.comb) c = unit(rng);
  return in;
}

// gen's options for the preset asked for (opt.preset set), at one shape and seed, grad_out included.
gen::GenOptions preset_options(const BenchOptions& opt, const Shape& sh, uint64_t seed) {
  gen::GenOptions g;
  g.preset = *opt.preset;
  g.shape = sh;
  g.seed = seed;
  g.grad = true;
  return g;
}

// The inputs of one shape: gen's preset when one is asked for, else random_inputs.
Inputs bench_inputs(const BenchOptions& opt, const Shape& sh, uint64_t seed) {
  return opt.preset ? gen::generate(preset_options(opt, sh, seed)) : random_inputs(sh, seed);
}

// One untimed run first (OpenMP's thread pool, first-touch page faults), then the median of reps.
template <class F>
double median_ms(int reps, F&& fn) {
  fn();
  std::vector<double> ms;
  for (int i = 0; i < reps; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    fn();
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

void bench_cpu(const BenchOptions& opt, int reps, BenchReport& report) {
  run::require_thread_count(opt.threads);
  const CpuOptions cpu{opt.threads, ExactBackend::boost};
  // Every shape is checked before any is timed: past the memory there is, the allocations would succeed
  // (overcommit) and the kernel's out-of-memory killer end the process mid-run, or the machine would swap for hours.
  if (const std::optional<double> available = available_memory_bytes())
    for (const Shape& sh : opt.shapes)
      if (const double needed = cpu_bench_bytes(sh, opt.backward); needed > *available)
        throw InputError(fmt::format("bench --shape {},{},{}: about {:.3g} GB of memory needed on the CPU, {:.3g} GB "
                                     "available",
                                     sh.S, sh.H, sh.D, needed / 1e9, *available / 1e9));
  for (const Shape& sh : opt.shapes) {
    const Inputs in = bench_inputs(opt, sh, opt.seed);
    std::vector<char> src(size_t(forward_bytes(sh) / 2), 1), dst(src.size());
    const double copy_ms = median_ms(reps, [&] { std::memcpy(dst.data(), src.data(), src.size()); });
    const double copy_gbps = double(forward_bytes(sh)) / (copy_ms * 1e6);
    for (const Policy& p : opt.policies) {
      PolicyResult r;
      allocate_result(r, sh, false, opt.backward);
      RunStats st;
      const double f = median_ms(reps, [&] { st = forward_cpu(p.desc, in.view(), forward_outputs(r), cpu); });
      report.rows.push_back(make_row(sh, p.name, false, f, forward_bytes(sh), copy_gbps, st.fallback_elements));
      if (!opt.backward) continue;
      const double b = median_ms(reps, [&] { st = backward_cpu(p.desc, in.view(), backward_outputs(r), cpu); });
      report.rows.push_back(make_row(sh, p.name, true, b, backward_bytes(sh), copy_gbps, st.fallback_elements));
    }
  }
}

#if MHCDIFF_HAVE_CUDA
void bench_gpu(const BenchOptions& opt, int reps, BenchReport& report) {
  cuda::DeviceBenchOptions dev{reps, opt.seed, opt.backward, opt.dump_dir, {}};
  if (opt.preset) dev.host_inputs = [&opt](const Shape& sh, uint64_t seed) { return bench_inputs(opt, sh, seed); };
  for (size_t i = 0; i < opt.shapes.size(); ++i) {
    const cuda::ShapeTiming t = cuda::bench_shape(opt.shapes[i], opt.policies, dev, i == 0 && !opt.dump_dir.empty());
    const double copy_gbps = double(t.copy_bytes) / (t.copy_median_ms * 1e6);
    for (const cuda::KernelTiming& k : t.kernels)
      report.rows.push_back(make_row(t.shape, k.policy, k.backward, k.median_ms, k.bytes, copy_gbps, k.fallback_elements));
  }
}
#endif

std::string shape_text(const Shape& sh) { return fmt::format("{},{},{}", sh.S, sh.H, sh.D); }

}  // namespace

std::vector<Shape> default_shapes(Device device) {
  if (device == Device::cuda) return {{16384, 4, 4096}, {128, 4, 4096}, {1024, 4, 7168}, {8192, 8, 4096}};
  return {{256, 4, 4096}};
}

Shape parse_shape(const std::string& text) {
  // As `gen --shape` reads it (sscanf took blanks and '+', and wrapped an H beyond int).
  const Shape sh = gen::parse_shape(text);
  // Every byte count of the bench must fit an int64 (the largest, backward_bytes, is below 16·S·H·(D + H + 1)):
  // an overflow used to end as "internal error: vector::_M_default_append" instead of "not enough memory".
  if (16.0 * double(sh.S) * double(sh.H) * (double(sh.D) + double(sh.H) + 1.0) >= 0x1p62)
    throw InputError(fmt::format("--shape {}: S·H·D is too large to benchmark", text));
  return sh;
}

BenchReport run_bench(const BenchOptions& options) {
  BenchOptions opt = options;
  if (opt.shapes.empty()) {
    opt.shapes = default_shapes(opt.device);
    // seed-example is defined for H = 2 only: its default shapes are the usual ones with two streams (as gen's
    // default shape is), not a refusal of shapes the user never gave.
    if (opt.preset == gen::Preset::seed_example)
      for (Shape& sh : opt.shapes) sh.H = 2;
  }
  if (opt.policies.empty()) opt.policies = builtin_policies();
  const int reps = opt.reps > 0 ? opt.reps : (opt.device == Device::cuda ? 40 : 3);
  BenchReport report;
  report.device = device_name(opt.device);
  report.reps = reps;
  report.inputs = opt.preset ? fmt::format("preset {}, seed {}", gen::preset_name(*opt.preset), opt.seed)
                             : fmt::format("randn-like, seed {}", opt.seed);
  if (opt.preset)  // every shape checked before any is timed (seed-example needs H = 2, ...)
    for (const Shape& sh : opt.shapes) {
      gen::validate(preset_options(opt, sh, opt.seed));
      // On the GPU the preset's sets are made on the host one at a time: one set must fit its memory (the CPU
      // bench checks all it holds, below).
      if (const std::optional<double> available = available_memory_bytes();
          available && opt.device == Device::cuda && host_input_bytes(sh) > *available)
        throw InputError(fmt::format("bench --preset {} --shape {},{},{}: about {:.3g} GB of host memory needed to make "
                                     "the inputs, {:.3g} GB available",
                                     gen::preset_name(*opt.preset), sh.S, sh.H, sh.D, host_input_bytes(sh) / 1e9,
                                     *available / 1e9));
    }
#if MHCDIFF_HAVE_CUDA
  if (opt.device == Device::cuda) {
    bench_gpu(opt, reps, report);
    return report;
  }
#endif
  if (!opt.dump_dir.empty()) throw InputError("--dump needs --device cuda");
  bench_cpu(opt, reps, report);
  return report;
}

std::string format_text(const BenchReport& r) {
  std::string s = fmt::format("device: {}   (median of {} runs; % = of a copy of the same bytes, same run)\n", r.device, r.reps);
  s += fmt::format("inputs: {}\n", r.inputs);
  s += fmt::format("{:<16} {:<16} {:<4} {:>10} {:>9} {:>8} {:>10} {:>10}\n", "shape S,H,D", "policy", "dir", "ms",
                   "GB/s", "% copy", "copy GB/s", "fallbacks");
  for (const BenchRow& b : r.rows)
    s += fmt::format("{:<16} {:<16} {:<4} {:>10.4f} {:>9.1f} {:>7.1f}% {:>10.1f} {:>10}\n", shape_text(b.shape), b.policy,
                     b.direction, b.median_ms, b.gbps, b.pct_of_copy, b.copy_gbps, b.fallback_elements);
  return s;
}

std::string format_csv(const BenchReport& r) {
  std::string s = "device,S,H,D,policy,dir,median_ms,bytes,gbps,pct_of_copy,copy_gbps,fallback_elements\n";
  for (const BenchRow& b : r.rows)
    s += fmt::format("\"{}\",{},{},{},{},{},{:.6f},{},{:.3f},{:.3f},{:.3f},{}\n", r.device, b.shape.S, b.shape.H,
                     b.shape.D, b.policy, b.direction, b.median_ms, b.bytes, b.gbps, b.pct_of_copy, b.copy_gbps,
                     b.fallback_elements);
  return s;
}

std::string format_markdown(const BenchReport& r) {
  std::string s = fmt::format("Device: {} (median of {} runs), inputs: {}\n\n", r.device, r.reps, r.inputs);
  s += "| S,H,D | policy | dir | ms | GB/s | % of copy | copy GB/s | fallbacks |\n|---|---|---|---:|---:|---:|---:|---:|\n";
  for (const BenchRow& b : r.rows)
    s += fmt::format("| {} | {} | {} | {:.4f} | {:.1f} | {:.1f} % | {:.1f} | {} |\n", shape_text(b.shape), b.policy,
                     b.direction, b.median_ms, b.gbps, b.pct_of_copy, b.copy_gbps, b.fallback_elements);
  return s;
}

}  // namespace mhc::bench
