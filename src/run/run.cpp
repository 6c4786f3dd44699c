#include "run/run.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <chrono>

#include "kernels/cpu/operator_cpu.hpp"
#include "policy/policy_file.hpp"
#include "run/thread_count.hpp"

namespace mhc::run {
namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

constexpr int64_t kDefaultSlabBytes = int64_t(64) << 20;
constexpr int64_t kSlabAlign = 64;  // whole chunks of most datasets per slab (docs/format.md)

}  // namespace

RunSummary run_policies(const RunOptions& o) {
  const Clock::time_point t_start = Clock::now();
  const std::vector<Policy> policies = resolve_policies(o.policies, o.policy_files);
  // An empty list used to write a results file without a /results group, and exit 0.
  if (policies.empty())
    throw InputError(fmt::format("--policies '{}' names no policy to run: give 'all', a comma-separated list, or a "
                                 "--policy-file",
                                 o.policies));
  const Device device = resolve_device(o.device);
  require_thread_count(o.threads);
  if (o.slab_tokens < 0) throw InputError(fmt::format("--slab-tokens must be >= 0 (got {})", o.slab_tokens));
  // Before the writer exists (its own check comes after the temp file is made), as the CLI's --compress range.
  if (o.deflate_level < 0 || o.deflate_level > 9)
    throw InputError(fmt::format("--compress must be 0..9 (got {})", o.deflate_level));

  io::InputReader reader(o.input, o.read);
  if (o.backward && !reader.has_grad())
    throw InputError(fmt::format("{}: --backward needs dataset /inputs/grad_out, which this file does not have "
                                 "(make inputs with `mhcdiff gen --grad`, or add grad_out to the file)",
                                 o.input));
  const Shape shape = reader.shape();
  int64_t slab = o.slab_tokens;
  if (slab == 0) {
    slab = io::slab_tokens_for(shape, reader.has_grad(), kDefaultSlabBytes);
    if (slab > kSlabAlign) slab -= slab % kSlabAlign;
  }
  slab = std::min(slab, shape.S);

  RunSummary summary;
  summary.shape = shape;
  summary.batch_dims = reader.batch_dims();
  summary.device = device_name(device);
  summary.slab_tokens = slab;
  for (const Policy& p : policies) summary.policies.push_back({p.name, {}, 0.0});

  // Constructed after every check on the inputs: a bad input never creates even a temp file. A file that claims
  // huge dims (chunked datasets take no space until written) would otherwise be run for hours until the disk is
  // full, so the results' size is checked against the output's disk first, as gen does.
  std::vector<io::SourceFile> sources = {{"input", o.input}};
  for (const std::string& f : o.policy_files) sources.push_back({"policy", f});
  io::check_output_fits(o.output, "output",
                        io::results_bytes(shape, reader.has_grad(), policies, o.backward, o.deflate_level), sources);
  io::ResultWriter writer(o.output, sources);
  writer.set_batch_dims(reader.batch_dims());
  writer.set_compression(o.deflate_level);
  writer.declare_inputs(shape, reader.has_grad());
  for (const Policy& p : policies)
    writer.declare_policy(p, shape, o.backward, io::make_provenance(p, summary.device, ""));

  CpuOptions cpu;
  cpu.threads = o.threads;
  io::InputChecksum checksum;
  for (int64_t s0 = 0; s0 < shape.S; s0 += slab) {
    const int64_t count = std::min(slab, shape.S - s0);
    const Inputs in = reader.read_slab(s0, count, &summary.census);
    checksum.update(in);
    writer.append_inputs(s0, in);
    for (size_t i = 0; i < policies.size(); ++i) {
      const Policy& p = policies[i];
      PolicyResult r;
      allocate_result(r, in.shape, stores_f64(p.desc), o.backward);
      const Clock::time_point t0 = Clock::now();
      RunStats st = forward_on(device, p.desc, in.view(), forward_outputs(r), cpu);
      if (o.backward) st += backward_on(device, p.desc, in.view(), backward_outputs(r), cpu);
      summary.policies[i].seconds += seconds_since(t0);
      summary.policies[i].stats += st;
      writer.append_result(p.name, s0, r);
    }
    ++summary.slabs;
    spdlog::debug("slab {}: tokens [{}, {})", summary.slabs, s0, s0 + count);
    if (o.progress) o.progress(s0 + count, shape.S);
  }

  summary.input_checksum = checksum.hex();
  for (size_t i = 0; i < policies.size(); ++i) {
    const PolicyRunStats& ps = summary.policies[i];
    const std::string g = "/results/" + ps.policy;
    writer.set_attribute(g, "input_checksum", summary.input_checksum);
    if (policies[i].desc.accumulator == Accumulator::exact) {
      writer.set_integer_attribute(g, "exact_elements", ps.stats.exact_elements);
      writer.set_integer_attribute(g, "fallback_elements", ps.stats.fallback_elements);
    }
  }
  writer.describe_inputs(o.input, summary.input_checksum, summary.census);
  writer.describe_comb_layout(reader.comb_layout_text());
  writer.commit();
  summary.seconds_total = seconds_since(t_start);
  return summary;
}

}  // namespace mhc::run
