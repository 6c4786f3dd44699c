#include "investigate/extract.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "io/errors.hpp"
#include "kernels/cpu/operator_cpu.hpp"
#include "metrics/comparison.hpp"
#include "metrics/ulp.hpp"
#include "run/thread_count.hpp"

namespace mhc::investigate {

uint64_t bf16_ulp_distance(bf16_bits a, bf16_bits b) {
  if (bf16_is_nan(a) && bf16_is_nan(b)) return 0;
  if (a == b) return 0;
  // NaN or an infinity against anything else is infinitely many ULP apart (docs/decisions.md, as compare
  // ranks it): an overflow to Inf must outrank any finite error.
  auto finite = [](bf16_bits v) { return (v & 0x7f80u) != 0x7f80u; };
  if (!finite(a) || !finite(b)) return metrics::kInfiniteUlp;
  return metrics::ulp_distance(a, b, 16);  // −0 and +0 share a point (SPEC §5: 0 ULP apart)
}

namespace {

std::string group_name(const OutSource& src, const char* fallback) {
  std::string n = src.label;
  std::replace(n.begin(), n.end(), '/', '_');
  while (!n.empty() && n.front() == '_') n.erase(n.begin());
  return n.empty() || n == "out" ? fallback : n;
}

void append_token(Inputs& dst, const Inputs& t) {
  dst.x.insert(dst.x.end(), t.x.begin(), t.x.end());
  dst.residual.insert(dst.residual.end(), t.residual.begin(), t.residual.end());
  dst.post.insert(dst.post.end(), t.post.begin(), t.post.end());
  dst.comb.insert(dst.comb.end(), t.comb.begin(), t.comb.end());
  dst.grad_out.insert(dst.grad_out.end(), t.grad_out.begin(), t.grad_out.end());
}

}  // namespace

ExtractSummary extract_worst_tokens(const OutSource& candidate, const OutSource& reference, const std::string& inputs_path,
                                    const std::string& output, const ExtractOptions& options) {
  if (options.worst < 1) throw InputError(fmt::format("--worst must be at least 1 (got {})", options.worst));
  run::require_thread_count(options.threads);
  // The output must replace none of the files read: the inputs, nor a file side (-o res.h5 with res.h5:hf-bf16).
  std::vector<io::SourceFile> sources = {{"inputs", inputs_path}};
  if (!candidate.is_policy) sources.push_back({"candidate", candidate.path});
  if (!reference.is_policy) sources.push_back({"reference", reference.path});
  for (const std::string& f : options.policy_files) sources.push_back({"policy file", f});
  io::check_output_path(output, "output", sources);
  io::InputReader reader(inputs_path, options.read);
  const Shape shape = reader.shape();
  check_out_shape(candidate, reader);
  check_out_shape(reference, reader);
  check_computed_from({&candidate, &reference}, reader, inputs_path);
  ExtractSummary summary;
  summary.source_shape = shape;

  // Score every token, a slab at a time.
  std::vector<TokenScore> scores;
  const int64_t per_token = int64_t(shape.H) * shape.D;
  const int64_t step = slab_tokens(shape);
  for (int64_t s0 = 0; s0 < shape.S; s0 += step) {
    const Inputs slab = reader.read_slab(s0, std::min(step, shape.S - s0));
    const std::vector<bf16_bits> c = read_out_slab(candidate, slab, s0, options.threads);
    const std::vector<bf16_bits> r = read_out_slab(reference, slab, s0, options.threads);
    for (int64_t s = 0; s < slab.shape.S; ++s) {
      TokenScore t{s0 + s, 0, 0};
      for (int64_t i = s * per_token; i < (s + 1) * per_token; ++i) {
        const bf16_bits a = c[size_t(i)], b = r[size_t(i)];
        if (a == b || (bf16_is_nan(a) && bf16_is_nan(b))) continue;
        ++t.mismatched;
        t.max_ulp = std::max(t.max_ulp, bf16_ulp_distance(a, b));
      }
      if (t.mismatched > 0) scores.push_back(t);
    }
  }
  std::stable_sort(scores.begin(), scores.end(), [](const TokenScore& a, const TokenScore& b) {
    if (a.max_ulp != b.max_ulp) return a.max_ulp > b.max_ulp;
    return a.mismatched > b.mismatched;
  });
  if (scores.size() > size_t(options.worst)) scores.resize(size_t(options.worst));
  summary.written = scores;
  if (scores.empty()) return summary;

  // The repro: the chosen tokens in their original order.
  std::vector<int64_t> tokens;
  for (const TokenScore& t : scores) tokens.push_back(t.token);
  std::sort(tokens.begin(), tokens.end());
  Inputs repro;
  repro.shape = {int64_t(tokens.size()), shape.H, shape.D};
  PolicyResult cand_out, ref_out;
  io::InputCensus census;
  for (int64_t s : tokens) {
    const Inputs one = reader.read_slab(s, 1, &census);
    append_token(repro, one);
    for (auto [src, result] : {std::pair{&candidate, &cand_out}, std::pair{&reference, &ref_out}}) {
      if (src->is_policy && stores_f64(src->policy.desc)) {
        // fp64/exact result groups carry their binary64 copy too, as `run` writes them.
        const PolicyResult r = run_policy_cpu(src->policy.desc, one.view(), false, {.threads = options.threads});
        result->out.insert(result->out.end(), r.out.begin(), r.out.end());
        result->out_f64.insert(result->out_f64.end(), r.out_f64.begin(), r.out_f64.end());
      } else {
        const auto o = read_out_slab(*src, one, s, options.threads);
        result->out.insert(result->out.end(), o.begin(), o.end());
      }
    }
  }

  summary.candidate_group = group_name(candidate, "candidate");
  summary.reference_group = group_name(reference, "reference");
  if (summary.candidate_group == summary.reference_group) {
    summary.candidate_group += "-candidate";
    summary.reference_group += "-reference";
  }
  io::ResultWriter writer(output, sources);
  writer.declare_inputs(repro.shape, repro.has_grad());
  writer.append_inputs(0, repro);
  io::InputChecksum checksum;  // of the repro's own inputs, which its result groups were computed from
  checksum.update(repro);
  writer.describe_inputs(inputs_path, checksum.hex(), census);
  writer.describe_comb_layout(reader.comb_layout_text());
  auto write_side = [&](const OutSource& src, const std::string& group, const PolicyResult& result) {
    Policy p = src.is_policy ? src.policy : Policy{};
    p.name = group;
    if (!src.is_policy) p.models = fmt::format("read from {}:{}", src.path, src.dataset);
    io::Provenance prov = io::make_provenance(p, "cpu", checksum.hex());
    if (!src.is_policy) prov.policy_description = fmt::format("unknown: values read from {}:{}", src.path, src.dataset);
    writer.declare_policy(p, repro.shape, false, prov);
    writer.append_result(group, 0, result);
  };
  write_side(candidate, summary.candidate_group, cand_out);
  write_side(reference, summary.reference_group, ref_out);
  std::string list;
  for (int64_t s : tokens) { list += list.empty() ? "" : ","; list += std::to_string(s); }
  writer.set_attribute("/", "source_inputs", inputs_path);
  writer.set_attribute("/", "source_tokens", list);
  writer.set_attribute("/", "candidate", candidate.text);
  writer.set_attribute("/", "reference", reference.text);
  writer.commit();
  return summary;
}

}  // namespace mhc::investigate
