#pragma once
// The CI gates of SPEC §5, all optional. A gate is a threshold on one metric of one tensor; a tensor's
// thresholds come from (most specific first) per-tensor values (golden files, with the options given on the command
// line applied over them), the options that apply to every tensor, and its group's normwise options (--grad-* with
// SPEC §5's defaults for the grad_* tensors, --out-* for out and out_f64). docs/metrics.md lists them.
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>

#include "compare/report_model.hpp"

namespace mhc::compare {

// SPEC §5 defaults for the gradient tensors (grad_*): normwise, because the sums over D of different
// implementations legitimately differ in the last bits of many elements.
inline constexpr double kDefaultGradRelL2 = 5e-3;
inline constexpr double kDefaultGradNormMax = 1e-2;

// Which error the relative gate compares. Default: the largest error in units of the truth's ULP, the measure
// this tool is about (SPEC §5) and scale-free, so a cancelled element counts as much as a large one. Also:
// FlashAttention's idiom max|C − truth| ≤ k · max|P − truth| (max_abs), which the final bf16 rounding of the
// largest outputs dominates (HF's bf16 rounding passes it on out), and the normwise ‖C − truth‖/‖truth‖.
enum class RelativeMetric { max_truth_ulp, max_abs, rel_l2 };
const char* relative_metric_name(RelativeMetric m);

struct Threshold {
  double value = 0.0;
  std::string origin;  // "--max-ulp", "default", "golden.h5"
  // The limit of a count gate (--max-mismatch, --max-ulp) as the integer it was given as: `value` is a double and
  // rounds integers above 2^53 (binary64 ULP distances reach 2^64 − 2).
  std::optional<uint64_t> whole;

  Threshold() = default;
  Threshold(double limit, std::string from) : value(limit), origin(std::move(from)) {}
  static Threshold whole_number(uint64_t limit, std::string from) {
    Threshold t(static_cast<double>(limit), std::move(from));
    t.whole = limit;
    return t;
  }
};

struct Thresholds {
  std::optional<Threshold> max_mismatch;
  std::optional<Threshold> max_mismatch_frac;
  std::optional<Threshold> max_ulp;
  std::optional<metrics::Tolerance> tolerance;  // --rtol/--atol
  std::string tolerance_origin;
  std::optional<Threshold> rel_l2;
  std::optional<Threshold> norm_max;
  std::optional<Threshold> min_survivor_frac;

  // Fields set in `over` replace those here.
  void overlay(const Thresholds& over);
  bool empty() const;
};

// grad_x, grad_residual, grad_post, grad_comb and their _f64 twins: the tensors grad_tensors' gates apply to.
bool is_grad_tensor(const std::string& tensor);

struct GateConfig {
  Thresholds every_tensor;                       // --max-mismatch, --max-ulp, --rtol/--atol, ...
  // The normwise gates of each group: --grad-rel-l2 / --grad-norm-max (with the defaults above) for the grad_*
  // tensors, --out-rel-l2 / --out-norm-max (no default) for out and out_f64. Every tensor is in exactly one group.
  Thresholds grad_tensors;
  Thresholds out_tensors;
  // Whether a group's limit was given on the command line rather than defaulted or absent: golden check then lets it
  // (a limit, or 'off' as an empty field) replace the golden file's limit for that group's tensors.
  bool grad_rel_l2_given = false;
  bool grad_norm_max_given = false;
  bool out_rel_l2_given = false;
  bool out_norm_max_given = false;
  std::map<std::string, Thresholds> per_tensor;  // golden tolerances
  std::string relative_to;                       // --relative-to POLICY ("" none)
  double relative_factor = 1.0;                  // --factor k
  RelativeMetric relative_metric = RelativeMetric::max_truth_ulp;

  // The thresholds that apply to `tensor`.
  Thresholds for_tensor(const std::string& tensor) const;
  bool needs_census() const;
};

// The defaults of SPEC §5: no gate on out; rel-l2 5e-3 and norm-max 1e-2 on grad_*.
GateConfig default_gates();

// InputError (naming the option, or the golden file, from each threshold's origin) for a gate value no gate can be
// checked against: NaN or negative limits, fractions outside [0, 1], a tolerance that is not finite and ≥ 0, a
// --factor that is not finite and > 0, a census threshold below 1 (κ is never below 1). run_compare calls it
// first; the gates also fail closed on a NaN, for callers that skip it.
void validate_gates(const GateConfig& gates, double census_threshold);

// Evaluates every gate that applies to the tensor (needs its stats, and for min-survivor-frac / relative-to its
// truth metrics; a gate whose metric is missing is an InputError, raised before any work by the engine).
std::vector<GateOutcome> evaluate_gates(const TensorReport& tensor, const GateConfig& config);

}  // namespace mhc::compare
