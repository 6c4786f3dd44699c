// JSON report, schema "mhcdiff.compare/1" (docs/report-schema.md, docs/report-schema.json). Field names are
// stable: add fields, never rename or remove them without bumping the schema id.
#include "report/json_writer.hpp"
#include "report/report.hpp"

namespace mhc::report {

using compare::CompareReport;
using compare::TensorReport;

namespace {

void index_or_null(JsonWriter& j, const TensorReport& t, int64_t flat) {
  if (flat < 0) {
    j.null();
    return;
  }
  const metrics::ElementIndex idx = t.layout.at(flat);
  j.begin_array();
  for (int i = 0; i < idx.rank; ++i) j.value(idx.axes[i]);
  j.end_array();
}

void ulp_value(JsonWriter& j, uint64_t u) {
  if (u == metrics::kInfiniteUlp) j.value("inf");
  else j.value(u);
}

void truth_object(JsonWriter& j, const TensorReport& t, const std::optional<metrics::TruthStats>& s) {
  if (!s) {
    j.null();
    return;
  }
  j.begin_object();
  j.key("elements").value(s->elements);
  j.key("not_correctly_rounded").value(s->not_correctly_rounded);
  j.key("not_correctly_rounded_fraction")
      .value(s->elements ? double(s->not_correctly_rounded) / double(s->elements) : 0.0);
  j.key("max_error_truth_ulp").value(s->max_error_ulp.index >= 0 ? s->max_error_ulp.value : 0.0);
  j.key("max_error_truth_ulp_index");
  index_or_null(j, t, s->max_error_ulp.index);
  j.key("mean_error_truth_ulp").value(s->mean_error_ulp);
  j.key("max_abs_error").value(s->max_abs_error.index >= 0 ? s->max_abs_error.value : 0.0);
  j.key("max_abs_error_index");
  index_or_null(j, t, s->max_abs_error.index);
  j.key("rel_l2").value(s->rel_l2);
  j.key("normalized_max").value(s->normalized_max);
  j.key("nonfinite_disagreements").value(s->nonfinite_disagreements);
  j.end_object();
}

void census_object(JsonWriter& j, const TensorReport& t, const std::optional<metrics::CensusStats>& c) {
  if (!c) {
    j.null();
    return;
  }
  j.begin_object();
  j.key("cases").value(c->cases);
  j.key("survived").value(c->survived);
  j.key("flushed").value(c->flushed);
  j.key("sign_flipped").value(c->sign_flipped);
  j.key("distorted").value(c->distorted);
  j.key("exact_zeros").value(c->exact_zeros);
  j.key("ghosts").value(c->ghosts);
  j.key("survivor_fraction").value(c->survivor_fraction());
  j.key("max_kappa").value(c->max_kappa);
  j.key("max_kappa_index");
  index_or_null(j, t, c->max_kappa_index);
  j.key("first_flushed_index");
  index_or_null(j, t, c->first_flushed);
  j.key("first_sign_flipped_index");
  index_or_null(j, t, c->first_sign_flipped);
  j.key("first_distorted_index");
  index_or_null(j, t, c->first_distorted);
  j.key("first_ghost_index");
  index_or_null(j, t, c->first_ghost);
  j.end_object();
}

void tensor_object(JsonWriter& j, const TensorReport& t, const CompareReport& r) {
  const metrics::ComparisonStats& s = t.stats;
  j.begin_object();
  j.key("name").value(t.name);
  j.key("dtype").value(metrics::format_name(t.format));
  j.key("shape").begin_array();
  for (int64_t d : t.dims) j.value(d);
  j.end_array();
  j.key("index_axes").begin_array();
  for (const auto& a : t.layout.axis_names) j.value(a);
  j.end_array();
  j.key("verdict").value(t.passed() ? "pass" : "fail");
  j.key("failed_gates").begin_array();
  for (const auto& g : t.gates)
    if (!g.passed) j.value(g.gate);
  j.end_array();
  j.key("elements").value(s.elements);
  j.key("mismatched").value(s.mismatched);
  j.key("mismatched_fraction").value(s.mismatch_fraction());
  j.key("mismatched_percent").value(100.0 * s.mismatch_fraction());
  j.key("signed_zero_mismatches").value(s.signed_zero_mismatches);
  j.key("nonfinite_mismatches").value(s.nonfinite_mismatches);
  j.key("ulp_histogram").begin_object();
  j.key("bins").begin_array();
  for (int b = 0; b < metrics::kUlpBins; ++b) j.value(metrics::ulp_bin_label(b));
  j.end_array();
  j.key("counts").begin_array();
  for (int b = 0; b < metrics::kUlpBins; ++b) j.value(s.ulp_histogram[b]);
  j.end_array();
  j.end_object();
  j.key("max_ulp");
  ulp_value(j, s.max_ulp);
  j.key("max_ulp_index");
  index_or_null(j, t, s.max_ulp_index);
  j.key("max_abs").value(s.max_abs.index >= 0 ? s.max_abs.value : 0.0);
  j.key("max_abs_index");
  index_or_null(j, t, s.max_abs.index);
  j.key("max_rel");
  if (s.max_rel) j.value(s.max_rel->value);
  else j.null();
  j.key("max_rel_index");
  index_or_null(j, t, s.max_rel ? s.max_rel->index : -1);
  j.key("rel_l2").value(s.rel_l2);
  j.key("normalized_max").value(s.normalized_max);
  j.key("nan").begin_object();
  j.key("candidate").value(s.candidate_nonfinite.nan);
  j.key("reference").value(s.reference_nonfinite.nan);
  j.end_object();
  j.key("inf").begin_object();
  j.key("candidate").value(s.candidate_nonfinite.inf);
  j.key("reference").value(s.reference_nonfinite.inf);
  j.end_object();
  j.key("allclose");
  if (s.tolerance) {
    j.begin_object();
    j.key("rtol").value(s.tolerance->rtol);
    j.key("atol").value(s.tolerance->atol);
    j.key("violations").value(s.tolerance_violations);
    j.key("first_violation_index");
    index_or_null(j, t, s.first_violation_index);
    j.end_object();
  } else {
    j.null();
  }
  j.key("worst").begin_array();
  for (const auto& w : s.worst) {
    j.begin_object();
    j.key("index");
    index_or_null(j, t, w.index);
    j.key("candidate").value(w.candidate);
    j.key("reference").value(w.reference);
    j.key("abs_diff").value(w.abs_diff);
    j.key("ulp");
    ulp_value(j, w.ulp);
    j.end_object();
  }
  j.end_array();
  j.key("truth");
  if (t.candidate_truth || t.reference_truth) {
    j.begin_object();
    j.key("candidate");
    truth_object(j, t, t.candidate_truth);
    j.key("reference");
    truth_object(j, t, t.reference_truth);
    j.end_object();
  } else {
    j.null();
  }
  j.key("census");
  if (t.candidate_census) {
    j.begin_object();
    j.key("threshold").value(r.census_threshold);
    j.key("candidate");
    census_object(j, t, t.candidate_census);
    j.key("reference");
    census_object(j, t, t.reference_census);
    j.end_object();
  } else {
    j.null();
  }
  j.key("relative_policy");
  if (t.relative_policy_truth) {
    j.begin_object();
    j.key("name").value(t.relative_policy);
    j.key("truth");
    truth_object(j, t, t.relative_policy_truth);
    j.end_object();
  } else {
    j.null();
  }
  j.key("gates").begin_array();
  for (const auto& g : t.gates) {
    j.begin_object();
    j.key("gate").value(g.gate);
    j.key("origin").value(g.origin);
    j.key("passed").value(g.passed);
    // Count gates' numbers are JSON integers, exact to 2^64 − 1 (as doubles they would round above 2^53).
    j.key("measured");
    if (g.measured_whole) j.value(*g.measured_whole);
    else j.value(g.measured);
    j.key("limit");
    if (g.limit_whole) j.value(*g.limit_whole);
    else j.value(g.limit);
    j.key("index");
    index_or_null(j, t, g.where);
    j.key("summary").value(g.summary);
    j.end_object();
  }
  j.end_array();
  j.end_object();
}

}  // namespace

std::string render_json(const CompareReport& r) {
  JsonWriter j;
  j.begin_object();
  j.key("schema").value(kJsonSchemaId);
  j.key("tool_version").value(r.tool_version);
  j.key("mode").value(r.mode);
  j.key("candidate").value(r.candidate);
  j.key("reference").value(r.reference);
  j.key("inputs");
  if (r.inputs.empty()) j.null();
  else j.value(r.inputs);
  j.key("truth");
  if (r.truth.empty()) j.null();
  else j.value(r.truth);
  j.key("verdict").value(r.passed() ? "pass" : "fail");
  j.key("exit_code").value(r.exit_code());
  j.key("gates_total").value(r.gates_total());
  j.key("gates_failed").value(r.gates_failed());
  j.key("failed_gates").begin_array();
  for (const auto& t : r.tensors)
    for (const auto& g : t.gates)
      if (!g.passed) j.value(t.name + ":" + g.gate);
  j.end_array();
  j.key("notes").begin_array();
  for (const auto& n : r.notes) j.value(n);
  j.end_array();
  j.key("tensors").begin_array();
  for (const auto& t : r.tensors) tensor_object(j, t, r);
  j.end_array();
  j.end_object();
  return j.str();
}

}  // namespace mhc::report
