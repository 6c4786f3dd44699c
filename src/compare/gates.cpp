#include "compare/gates.hpp"

#include <fmt/format.h>

#include <cmath>
#include <optional>
#include <utility>

#include "io/errors.hpp"
#include "report/numbers.hpp"

namespace mhc::compare {

const char* relative_metric_name(RelativeMetric m) {
  switch (m) {
    case RelativeMetric::max_abs: return "max_abs";
    case RelativeMetric::rel_l2: return "rel_l2";
    case RelativeMetric::max_truth_ulp: return "max_truth_ulp";
  }
  return "?";
}

void Thresholds::overlay(const Thresholds& o) {
  if (o.max_mismatch) max_mismatch = o.max_mismatch;
  if (o.max_mismatch_frac) max_mismatch_frac = o.max_mismatch_frac;
  if (o.max_ulp) max_ulp = o.max_ulp;
  if (o.tolerance) {
    tolerance = o.tolerance;
    tolerance_origin = o.tolerance_origin;
  }
  if (o.rel_l2) rel_l2 = o.rel_l2;
  if (o.norm_max) norm_max = o.norm_max;
  if (o.min_survivor_frac) min_survivor_frac = o.min_survivor_frac;
}

bool Thresholds::empty() const {
  return !max_mismatch && !max_mismatch_frac && !max_ulp && !tolerance && !rel_l2 && !norm_max && !min_survivor_frac;
}

bool is_grad_tensor(const std::string& tensor) { return tensor.rfind("grad_", 0) == 0; }

Thresholds GateConfig::for_tensor(const std::string& tensor) const {
  Thresholds t;
  t.overlay(is_grad_tensor(tensor) ? grad_tensors : out_tensors);
  t.overlay(every_tensor);
  if (auto it = per_tensor.find(tensor); it != per_tensor.end()) t.overlay(it->second);
  return t;
}

bool GateConfig::needs_census() const {
  if (every_tensor.min_survivor_frac || grad_tensors.min_survivor_frac || out_tensors.min_survivor_frac) return true;
  for (const auto& [name, t] : per_tensor)
    if (t.min_survivor_frac) return true;
  return false;
}

void validate_gates(const GateConfig& gates, double census_threshold) {
  auto check = [](const std::optional<Threshold>& t, bool fraction) {
    if (!t) return;
    if (fraction && !(t->value >= 0 && t->value <= 1))
      throw InputError(fmt::format("{} {} is not a fraction in [0, 1]", t->origin, t->value));
    if (!(t->value >= 0)) throw InputError(fmt::format("{} {} must be a number ≥ 0", t->origin, t->value));
  };
  auto check_all = [&](const Thresholds& th) {
    check(th.max_mismatch, false);
    check(th.max_mismatch_frac, true);
    check(th.max_ulp, false);
    check(th.rel_l2, false);
    check(th.norm_max, false);
    check(th.min_survivor_frac, true);
    if (th.tolerance) {
      if (!(std::isfinite(th.tolerance->rtol) && th.tolerance->rtol >= 0))
        throw InputError(fmt::format("--rtol {} must be a finite number ≥ 0", th.tolerance->rtol));
      if (!(std::isfinite(th.tolerance->atol) && th.tolerance->atol >= 0))
        throw InputError(fmt::format("--atol {} must be a finite number ≥ 0", th.tolerance->atol));
    }
  };
  check_all(gates.every_tensor);
  check_all(gates.grad_tensors);
  check_all(gates.out_tensors);
  for (const auto& [tensor, th] : gates.per_tensor) check_all(th);
  if (!gates.relative_to.empty() && !(std::isfinite(gates.relative_factor) && gates.relative_factor > 0))
    throw InputError(fmt::format("--factor {} must be a finite number > 0", gates.relative_factor));
  if (!(std::isfinite(census_threshold) && census_threshold >= 1))
    throw InputError(
        fmt::format("--census-threshold {} must be a finite number ≥ 1 (κ is never below 1)", census_threshold));
}

GateConfig default_gates() {
  GateConfig g;
  g.grad_tensors.rel_l2 = Threshold{kDefaultGradRelL2, "default --grad-rel-l2"};
  g.grad_tensors.norm_max = Threshold{kDefaultGradNormMax, "default --grad-norm-max"};
  return g;
}

namespace {

std::string at(const TensorReport& t, int64_t flat) { return flat < 0 ? "" : " at " + t.index(flat); }

// Gates fail closed: each passes only when its comparison is true, so a NaN measurement or a NaN limit (which
// the options refuse, but a golden file or a library caller could still bring) fails.
bool within_upper(double measured, double limit) { return measured <= limit; }
bool within_lower(double measured, double limit) { return measured >= limit; }

// The texts of a measured real and its limit: 4 significant digits, or every digit where those would print two
// different numbers alike ("mismatched fraction 1 > 1 allowed").
std::pair<std::string, std::string> metric_texts(double measured, double limit) {
  std::string m = report::metric(measured), l = report::metric(limit);
  if (m == l && measured != limit && std::isfinite(measured) && std::isfinite(limit)) {
    m = fmt::format("{}", measured);
    l = fmt::format("{}", limit);
  }
  return {m, l};
}

GateOutcome outcome(const std::string& gate, const Threshold& th, bool passed, double measured, int64_t where) {
  GateOutcome g;
  g.gate = gate;
  g.origin = th.origin;
  g.passed = passed;
  g.measured = measured;
  g.limit = th.value;
  g.where = where;
  return g;
}

// `where_label` says what the index is: the element that is the measured maximum ("at"), or, for counts, the
// worst of the counted elements ("; worst at").
// `exceeded`: a failed gate's measurement is above its limit (else the limit was NaN: "not ≤").
void summarize_upper(GateOutcome& g, const std::string& what, const std::string& measured_text,
                     const std::string& limit_text, const TensorReport& t, bool exceeded,
                     const char* where_label = " at") {
  const std::string place = g.where < 0 ? "" : where_label + std::string(" ") + t.index(g.where);
  g.summary = g.passed ? fmt::format("{} {} ≤ {} allowed", what, measured_text, limit_text)
                       : fmt::format("{} {} {} {} allowed{}", what, measured_text, exceeded ? ">" : "not ≤",
                                     limit_text, place);
}

GateOutcome upper_gate(const std::string& gate, const Threshold& th, double measured, int64_t where,
                       const std::string& what, const TensorReport& t, const char* where_label = " at") {
  GateOutcome g = outcome(gate, th, within_upper(measured, th.value), measured, where);
  const auto [measured_text, limit_text] = metric_texts(measured, th.value);
  summarize_upper(g, what, measured_text, limit_text, t, measured > th.value, where_label);
  return g;
}

// A count gate's limit as an integer: the integer it was given as, or a double that is a whole number below 2^64
// (a golden file's max_ulp, a library caller's Threshold{1, ...}); nullopt for a fraction, inf, NaN or a negative.
std::optional<uint64_t> whole_limit(const Threshold& th) {
  if (th.whole) return th.whole;
  if (th.value >= 0 && th.value < 0x1p64 && th.value == std::floor(th.value)) return static_cast<uint64_t>(th.value);
  return std::nullopt;
}

// measured ≤ limit for a count or ULP distance (nullopt: infinitely many ULP, a NaN/inf mismatch), compared as
// integers: as doubles, 2^53 + 1 ULP would pass a limit of 2^53.
bool count_within(std::optional<uint64_t> measured, const Threshold& th) {
  if (const auto w = whole_limit(th)) return measured && *measured <= *w;
  if (!(th.value >= 0)) return false;                                  // NaN or negative: fails closed
  if (std::isinf(th.value)) return true;                               // inf allows even an infinite distance
  if (th.value >= 0x1p64) return measured.has_value();                 // above every finite count
  return measured && *measured <= static_cast<uint64_t>(th.value);     // a fraction L: m ≤ L ⟺ m ≤ ⌊L⌋
}

// Integer limits print as integers (never "1e+16"), with thousands separators where the measured count has them.
std::string count_limit_text(const Threshold& th, bool separators) {
  if (const auto w = whole_limit(th)) return separators ? report::unsigned_count(*w) : fmt::format("{}", *w);
  return report::metric(th.value);
}

GateOutcome count_gate(const std::string& gate, const Threshold& th, std::optional<uint64_t> measured, int64_t where) {
  GateOutcome g = outcome(gate, th, count_within(measured, th), measured ? static_cast<double>(*measured) : INFINITY,
                          where);
  g.measured_whole = measured;
  g.limit_whole = whole_limit(th);
  return g;
}

double truth_error(const metrics::TruthStats& s, RelativeMetric m, int64_t* where) {
  switch (m) {
    case RelativeMetric::max_abs:
      *where = s.max_abs_error.index;
      return s.nonfinite_disagreements ? INFINITY : (s.max_abs_error.index < 0 ? 0.0 : s.max_abs_error.value);
    case RelativeMetric::rel_l2: *where = -1; return s.rel_l2;
    case RelativeMetric::max_truth_ulp:
      *where = s.max_error_ulp.index;
      return s.max_error_ulp.index < 0 ? 0.0 : s.max_error_ulp.value;
  }
  return 0.0;
}

}  // namespace

std::vector<GateOutcome> evaluate_gates(const TensorReport& t, const GateConfig& config) {
  using report::count;
  using report::metric;
  const Thresholds th = config.for_tensor(t.name);
  const metrics::ComparisonStats& s = t.stats;
  std::vector<GateOutcome> out;
  if (th.max_mismatch) {
    GateOutcome g = count_gate("max-mismatch", *th.max_mismatch, static_cast<uint64_t>(s.mismatched), s.max_ulp_index);
    summarize_upper(g, "mismatched elements", count(s.mismatched) + " / " + count(s.elements),
                    count_limit_text(*th.max_mismatch, true), t, !std::isnan(th.max_mismatch->value), "; worst at");
    out.push_back(g);
  }
  if (th.max_mismatch_frac)
    out.push_back(upper_gate("max-mismatch-frac", *th.max_mismatch_frac, s.mismatch_fraction(), s.max_ulp_index,
                             "mismatched fraction", t, "; worst at"));
  if (th.max_ulp) {
    const bool infinite = s.max_ulp == metrics::kInfiniteUlp;
    GateOutcome g = count_gate("max-ulp", *th.max_ulp, infinite ? std::nullopt : std::optional<uint64_t>(s.max_ulp),
                               s.max_ulp_index);
    summarize_upper(g, "max ULP", report::ulp(s.max_ulp) + (infinite ? " (a NaN/inf mismatch)" : ""),
                    count_limit_text(*th.max_ulp, false), t, !std::isnan(th.max_ulp->value));
    out.push_back(g);
  }
  if (th.tolerance) {
    const Threshold zero = Threshold::whole_number(0, th.tolerance_origin);
    GateOutcome g = count_gate("allclose", zero, static_cast<uint64_t>(s.tolerance_violations), s.first_violation_index);
    const std::string rule = fmt::format("|C−R| ≤ {} + {}·|R|", metric(th.tolerance->atol), metric(th.tolerance->rtol));
    g.summary = g.passed ? fmt::format("every element within {}", rule)
                         : fmt::format("{} element{} outside {}, the first{}", count(s.tolerance_violations),
                                       s.tolerance_violations == 1 ? "" : "s", rule, at(t, s.first_violation_index));
    out.push_back(g);
  }
  if (th.rel_l2)
    out.push_back(upper_gate("rel-l2", *th.rel_l2, s.rel_l2, -1, "rel_l2 ‖C−R‖/‖R‖", t));
  if (th.norm_max)
    out.push_back(upper_gate("norm-max", *th.norm_max, s.normalized_max, s.max_abs.index, "max|C−R|/max|R|", t));
  if (th.min_survivor_frac && t.candidate_census) {
    const metrics::CensusStats& c = *t.candidate_census;
    const double frac = c.survivor_fraction();
    const int64_t where = c.first_lost();
    GateOutcome g = outcome("min-survivor-frac", *th.min_survivor_frac,
                            within_lower(frac, th.min_survivor_frac->value), frac, where);
    const auto [frac_text, limit_text] = metric_texts(frac, th.min_survivor_frac->value);
    g.summary = fmt::format("{} of {} cancellation cases (κ ≥ {}) survived = {} {} {} required{}", count(c.survived),
                            count(c.cases), metric(c.threshold), frac_text,
                            g.passed ? "≥" : frac < th.min_survivor_frac->value ? "<" : "not ≥", limit_text,
                            g.passed ? "" : "; first lost case" + at(t, where));
    out.push_back(g);
  }
  if (!config.relative_to.empty() && t.candidate_truth && t.relative_policy_truth) {
    int64_t where_c = -1, where_p = -1;
    const double ce = truth_error(*t.candidate_truth, config.relative_metric, &where_c);
    const double pe = truth_error(*t.relative_policy_truth, config.relative_metric, &where_p);
    const double limit = config.relative_factor * pe;
    GateOutcome g = outcome("relative-to", Threshold{limit, "--relative-to " + config.relative_to},
                            within_upper(ce, limit), ce, where_c);
    // Where 4 digits print the candidate's error and the limit alike, every digit of both (and of P's error).
    const bool tie_in_text = metric_texts(ce, limit).first != metric(ce);
    auto digits = [&](double v) { return tie_in_text ? fmt::format("{}", v) : metric(v); };
    g.summary = fmt::format("candidate's {} vs exact {} {} {} × {}'s {}{}", relative_metric_name(config.relative_metric),
                            digits(ce), g.passed ? "≤" : ce > limit ? ">" : "not ≤", digits(config.relative_factor),
                            config.relative_to, digits(pe), g.passed ? "" : at(t, where_c));
    out.push_back(g);
  }
  return out;
}

}  // namespace mhc::compare
