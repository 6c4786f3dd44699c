#include "compare/golden.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <limits>
#include <map>
#include <optional>
#include <set>

#include "kernels/cpu/operator_cpu.hpp"
#include "kernels/dispatch.hpp"
#include "metrics/comparison.hpp"
#include "run/thread_count.hpp"

namespace mhc::compare {

namespace {

struct Spread {
  std::string tensor;
  GoldenTolerance tol;
};

// The primary tensors of a result, with their element format.
std::vector<std::string> result_tensors(bool backward) {
  std::vector<std::string> v = {"out"};
  if (backward) v.insert(v.end(), {"grad_x", "grad_residual", "grad_post", "grad_comb"});
  return v;
}

void accumulate(metrics::ComparisonAccumulator& acc, const std::string& name, const PolicyResult& c,
                const PolicyResult& r, int64_t first) {
  if (name == "out") acc.add(c.out.data(), r.out.data(), int64_t(c.out.size()), first);
  else if (name == "grad_x") acc.add(c.grad_x.data(), r.grad_x.data(), int64_t(c.grad_x.size()), first);
  else if (name == "grad_residual")
    acc.add(c.grad_residual.data(), r.grad_residual.data(), int64_t(c.grad_residual.size()), first);
  else if (name == "grad_post") acc.add(c.grad_post.data(), r.grad_post.data(), int64_t(c.grad_post.size()), first);
  else acc.add(c.grad_comb.data(), r.grad_comb.data(), int64_t(c.grad_comb.size()), first);
}

int64_t elements_per_token(const std::string& name, const Shape& sh) {
  if (name == "grad_x") return sh.D;
  if (name == "grad_post") return sh.H;
  if (name == "grad_comb") return int64_t(sh.H) * sh.H;
  return int64_t(sh.H) * sh.D;
}

metrics::Format format_of_result(const std::string& name) {
  return name == "grad_post" || name == "grad_comb" ? metrics::Format::f32 : metrics::Format::bf16;
}

void widen(GoldenTolerance& t, const metrics::ComparisonStats& s, const std::string& who) {
  const double ulp = s.max_ulp == metrics::kInfiniteUlp ? INFINITY : double(s.max_ulp);
  if (ulp > t.max_ulp) {
    t.max_ulp = ulp;
    t.worst_policy = who;
  }
  t.max_mismatch_frac = std::max(t.max_mismatch_frac, s.mismatch_fraction());
  t.rel_l2 = std::max(t.rel_l2, s.rel_l2);
  t.norm_max = std::max(t.norm_max, s.normalized_max);
}

std::string attr_name(const std::string& tensor, const std::string& field) {
  return "golden_tolerance." + tensor + "." + field;
}

// Tolerances are stored as text in their shortest round-trip spelling, so the value read back is bit for bit
// the value measured (a printf-style "%g" would round it, and the policy that set it could then fail).
std::string exact_text(double v) { return std::isinf(v) ? "inf" : fmt::format("{}", v); }

// A max ULP is a whole number (or inf): written as one, never in exponent notation.
std::string ulp_text(double v) { return std::isinf(v) ? "inf" : fmt::format("{:.0f}", v); }

// The whole text as a number: std::stod read "3abc" as 3 and skipped leading blanks, so a damaged or hand-edited
// tolerance became a different limit without a word. std::from_chars is also independent of the C locale.
std::optional<double> parse_whole_text(const std::string& text) {
  double v = 0;
  const char* end = text.data() + text.size();
  const auto [next, ec] = std::from_chars(text.data(), end, v);
  if (text.empty() || ec != std::errc() || next != end) return std::nullopt;
  return v;
}

const char* const kToleranceFields[] = {"max_ulp", "max_mismatch_frac", "rel_l2", "norm_max"};

}  // namespace

GoldenRegenSummary golden_regen(const GoldenRegenOptions& opt) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::exists(opt.output, ec) && !opt.force)
    throw InputError(fmt::format("{} already exists; golden regen replaces a file only with --force (it may be the "
                                 "baseline CI checks against)",
                                 opt.output));
  if (opt.repeat < 1) throw InputError(fmt::format("--repeat must be at least 1 (got {})", opt.repeat));
  std::vector<Policy> policies;
  try {
    policies = parse_policy_list(opt.policies);
  } catch (const std::invalid_argument& e) {
    throw InputError(fmt::format("--policies: {}", e.what()));
  }
  if (policies.empty()) throw InputError("--policies names no policy");

  run::require_thread_count(opt.threads);

  io::InputReader reader(opt.input, opt.read);
  const Shape shape = reader.shape();
  const bool backward = reader.has_grad();
  const Device device = resolve_device(opt.device);
  CpuOptions cpu;
  cpu.threads = opt.threads;

  // As run: a baseline larger than the output's disk is refused before hours of work, not when the disk is full,
  // and before the checksum's pass over the inputs (a file declaring 2^26 tokens in 7.5 KB was read for 82 s
  // before this refusal).
  const std::vector<io::SourceFile> sources = {{"input", opt.input}};
  // --force (checked above for any existing file) is what lets a baseline be replaced.
  io::check_output_fits(opt.output, "output", io::results_bytes(shape, backward, policies, backward), sources,
                        io::GoldenTarget::replace);
  const std::string checksum = reader.checksum();
  io::ResultWriter writer(opt.output, sources, io::GoldenTarget::replace);
  writer.set_batch_dims(reader.batch_dims());
  writer.declare_inputs(shape, backward);
  for (const auto& p : policies)
    writer.declare_policy(p, shape, backward, io::make_provenance(p, device_name(device), checksum));

  const std::vector<std::string> tensors = result_tensors(backward);
  // spreads[policy index][tensor]: policy i (i ≥ 1) against the reference, and every repeat against its run 0.
  std::vector<std::vector<metrics::ComparisonAccumulator>> vs_reference(policies.size()), vs_first_run(policies.size());
  for (size_t i = 0; i < policies.size(); ++i)
    for (const auto& t : tensors) {
      vs_reference[i].emplace_back(format_of_result(t), 0);
      vs_first_run[i].emplace_back(format_of_result(t), 0);
    }

  io::InputCensus census;
  const int64_t step = io::slab_tokens_for(shape, backward, int64_t(64) << 20);
  for (int64_t s0 = 0; s0 < shape.S; s0 += step) {
    const int64_t n = std::min(step, shape.S - s0);
    const Inputs in = reader.read_slab(s0, n, &census);
    writer.append_inputs(s0, in);
    std::vector<PolicyResult> results(policies.size());
    for (size_t i = 0; i < policies.size(); ++i) {
      const PolicyDesc& pd = policies[i].desc;
      for (int rep = 0; rep < opt.repeat; ++rep) {
        PolicyResult r;
        allocate_result(r, in.shape, stores_f64(pd), backward);
        forward_on(device, pd, in.view(), forward_outputs(r), cpu);
        if (backward) backward_on(device, pd, in.view(), backward_outputs(r), cpu);
        if (rep == 0) {
          results[i] = std::move(r);
        } else {
          for (size_t k = 0; k < tensors.size(); ++k)
            accumulate(vs_first_run[i][k], tensors[k], r, results[i], s0 * elements_per_token(tensors[k], shape));
        }
      }
      writer.append_result(policies[i].name, s0, results[i]);
      for (size_t k = 0; k < tensors.size(); ++k)
        if (i > 0)
          accumulate(vs_reference[i][k], tensors[k], results[i], results[0], s0 * elements_per_token(tensors[k], shape));
    }
  }

  GoldenRegenSummary sum;
  sum.reference = policies[0].name;
  sum.shape = shape;
  sum.backward = backward;
  for (const auto& p : policies) sum.policies.push_back(p.name);
  for (size_t k = 0; k < tensors.size(); ++k) {
    GoldenTolerance tol;
    tol.tensor = tensors[k];
    for (size_t i = 0; i < policies.size(); ++i) {
      const metrics::ComparisonStats rs = vs_first_run[i][k].finish();
      sum.repeat_mismatches += rs.mismatched;
      widen(tol, rs, policies[i].name + " (repeat)");
      if (i > 0) widen(tol, vs_reference[i][k].finish(), policies[i].name);
    }
    sum.tolerances.push_back(tol);
  }

  writer.set_attribute("/", io::kGoldenFormatAttribute, kGoldenFormat);
  writer.set_attribute("/", "golden_reference", sum.reference);
  writer.set_attribute("/", "golden_policies", fmt::format("{}", fmt::join(sum.policies, ",")));
  writer.set_attribute("/", "golden_repeat", std::to_string(opt.repeat));
  for (const auto& t : sum.tolerances) {
    writer.set_attribute("/", attr_name(t.tensor, "max_ulp"), ulp_text(t.max_ulp));
    writer.set_attribute("/", attr_name(t.tensor, "max_mismatch_frac"), exact_text(t.max_mismatch_frac));
    writer.set_attribute("/", attr_name(t.tensor, "rel_l2"), exact_text(t.rel_l2));
    writer.set_attribute("/", attr_name(t.tensor, "norm_max"), exact_text(t.norm_max));
    writer.set_attribute("/", attr_name(t.tensor, "set_by"), t.worst_policy.empty() ? "bit-identical" : t.worst_policy);
  }
  // The inputs' provenance, as run records it (`info` shows it).
  writer.describe_inputs(opt.input, checksum, census);
  writer.describe_comb_layout(reader.comb_layout_text());
  writer.commit();
  return sum;
}

GoldenSpec read_golden(const std::string& path) {
  io::TensorFile f(path);
  std::map<std::string, std::string> attrs;
  for (const auto& [k, v] : f.attributes("/")) attrs[k] = v;
  if (attrs[io::kGoldenFormatAttribute] != kGoldenFormat)
    throw InputError(fmt::format("{} is not a golden file (no golden_format = \"{}\" attribute); make one with "
                                 "`mhcdiff golden regen`", path, kGoldenFormat));
  // Every golden_tolerance.* attribute must be one mhcdiff reads: a misspelt one would otherwise leave its limit
  // unchecked.
  const std::string prefix = "golden_tolerance.";
  std::set<std::string> tensors_with_limits;
  for (const auto& [key, value] : attrs) {
    if (key.rfind(prefix, 0) != 0) continue;
    const std::string rest = key.substr(prefix.size());
    const size_t dot = rest.find('.');
    const std::string tensor = rest.substr(0, dot), field = dot == std::string::npos ? "" : rest.substr(dot + 1);
    const auto& primaries = primary_tensors();
    const bool known_tensor = std::find(primaries.begin(), primaries.end(), tensor) != primaries.end();
    const bool known_field = field == "set_by" || std::find(std::begin(kToleranceFields), std::end(kToleranceFields),
                                                            field) != std::end(kToleranceFields);
    if (!known_tensor || !known_field)
      throw InputError(fmt::format("{}: attribute {} is not one mhcdiff reads (golden_tolerance.<tensor>.<field> with "
                                   "tensor one of {} and field one of max_ulp, max_mismatch_frac, rel_l2, norm_max, "
                                   "set_by)", path, key, fmt::join(primaries, ", ")));
    if (field != "set_by") tensors_with_limits.insert(tensor);
  }
  GoldenSpec spec;
  spec.reference = attrs["golden_reference"];
  for (const auto& tensor : primary_tensors()) {
    if (!tensors_with_limits.count(tensor)) continue;
    GoldenTolerance t;
    t.tensor = tensor;
    // A limit is a measured worst case: a number ≥ 0, or inf, written out completely. NaN is refused: no gate can
    // be checked against it.
    auto num = [&](const std::string& field) {
      const std::string key = attr_name(tensor, field);
      const auto it = attrs.find(key);
      if (it == attrs.end())
        throw InputError(fmt::format("{}: attribute {} is missing (the file has other golden_tolerance.{}.* limits)",
                                     path, key, tensor));
      const std::optional<double> v = parse_whole_text(it->second);
      if (!v || !(*v >= 0))
        throw InputError(fmt::format("{}: attribute {} is '{}', not a number ≥ 0", path, key, it->second));
      if (field == "max_ulp" && std::isfinite(*v) && *v != std::floor(*v))
        throw InputError(fmt::format("{}: attribute {} is '{}', not a whole number of ULP (or inf)", path, key,
                                     it->second));
      if (field == "max_mismatch_frac" && *v > 1)
        throw InputError(fmt::format("{}: attribute {} is '{}', not a fraction in [0, 1]", path, key, it->second));
      return *v;
    };
    t.max_ulp = num("max_ulp");
    if (std::isfinite(t.max_ulp)) {
      // Digits are read as the integer they spell; another spelling ("2e3") through the double, which holds every
      // whole number it can spell exactly only up to 2^53, so only below 2^64.
      const std::string& text = attrs[attr_name(tensor, "max_ulp")];
      uint64_t whole = 0;
      const auto [next, ec] = std::from_chars(text.data(), text.data() + text.size(), whole);
      const bool digits = std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; });
      const bool exact = digits ? ec == std::errc() && next == text.data() + text.size() : t.max_ulp < 0x1p64;
      if (!exact)
        throw InputError(fmt::format("{}: attribute {} is '{}', not a whole number of ULP from 0 to {} (or inf)", path,
                                     attr_name(tensor, "max_ulp"), text, std::numeric_limits<uint64_t>::max()));
      t.max_ulp_whole = digits ? whole : static_cast<uint64_t>(t.max_ulp);
    }
    t.max_mismatch_frac = num("max_mismatch_frac");
    t.rel_l2 = num("rel_l2");
    t.norm_max = num("norm_max");
    t.worst_policy = attrs[attr_name(tensor, "set_by")];
    spec.tolerances.push_back(t);
  }
  if (spec.reference.empty() || spec.tolerances.empty())
    throw InputError(fmt::format("{} has no golden_reference or no golden_tolerance.* attributes", path));
  // regen writes limits for every tensor it stores, so a stored tensor without any was edited out of the gate: it
  // would be compared with nothing to fail.
  for (const auto& tensor : primary_tensors())
    if (!tensors_with_limits.count(tensor) && f.exists("/results/" + spec.reference + "/" + tensor))
      throw InputError(fmt::format("{}: the golden reference stores {}, but the file has no golden_tolerance.{}.* "
                                   "limits for it (regen writes them for every tensor it stores; regenerate the file)",
                                   path, tensor, tensor));
  return spec;
}

CompareReport golden_check(const std::string& candidate, const std::string& golden, CompareOptions opt) {
  const GoldenSpec spec = read_golden(golden);
  opt.candidate = candidate;
  opt.reference = golden + ":/results/" + spec.reference;
  opt.mode = "golden check";
  opt.comb_layout_option = false;
  // The golden file carries its own inputs: a policy: candidate, the census and --relative-to use them.
  if (opt.inputs.empty() && (candidate.rfind("policy:", 0) == 0 || !opt.gates.relative_to.empty() ||
                             opt.gates.needs_census())) {
    opt.inputs = golden;
    // As regen stored them: comb as the file declares it, values bf16/fp32 already, and any NaN or infinity
    // accepted when the golden file was made (regen refuses them without --allow-nonfinite).
    opt.read = io::ReadOptions{};
    opt.read.allow_nonfinite = true;
  }
  const std::string origin = "golden " + golden;
  std::vector<std::string> checked;
  for (const auto& t : spec.tolerances) {
    Thresholds th;
    th.max_ulp = t.max_ulp_whole ? Threshold::whole_number(*t.max_ulp_whole, origin) : Threshold{t.max_ulp, origin};
    th.max_mismatch_frac = Threshold{t.max_mismatch_frac, origin};
    th.rel_l2 = Threshold{t.rel_l2, origin};
    th.norm_max = Threshold{t.norm_max, origin};
    // Options given on the command line still win over the stored values: those for every tensor, and the normwise
    // limits of the tensor's group when given (--grad-rel-l2 / --grad-norm-max for the grad_* tensors, --out-rel-l2 /
    // --out-norm-max for out; the gradients' defaults do not replace a stored limit; 'off' removes it).
    const GateConfig& g = opt.gates;
    const bool grad = is_grad_tensor(t.tensor);
    if (grad ? g.grad_rel_l2_given : g.out_rel_l2_given) th.rel_l2 = (grad ? g.grad_tensors : g.out_tensors).rel_l2;
    if (grad ? g.grad_norm_max_given : g.out_norm_max_given)
      th.norm_max = (grad ? g.grad_tensors : g.out_tensors).norm_max;
    th.overlay(opt.gates.every_tensor);
    opt.gates.per_tensor[t.tensor] = th;
    checked.push_back(t.tensor);
  }
  if (opt.tensors.empty()) {
    // Compare exactly the tensors the golden file holds tolerances for; a candidate lacking one is an error.
    opt.tensors = checked;
    opt.tensors_gated_by = golden;
  } else {
    // A tensor chosen with --tensors that neither the golden file nor an option gates could not fail the check. (A
    // name that is no tensor at all is left to the comparison, which says so.)
    for (const auto& tensor : opt.tensors)
      if (is_known_tensor(tensor) && std::find(checked.begin(), checked.end(), tensor) == checked.end() &&
          opt.gates.for_tensor(tensor).empty())
        throw InputError(fmt::format("{} holds no limits for {} (it gates {}); give a gate such as --max-ulp for it, "
                                     "or leave it out of --tensors",
                                     golden, tensor, fmt::join(checked, ", ")));
  }
  return run_compare(opt);
}

}  // namespace mhc::compare
