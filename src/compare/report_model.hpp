#pragma once
// What a comparison found, tensor by tensor, and what each gate concluded: the one structure every report
// writer (src/report/) renders, so text, JSON, Markdown and JUnit can never disagree with the exit code.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "metrics/comparison.hpp"
#include "metrics/element_index.hpp"
#include "metrics/truth.hpp"

namespace mhc::compare {

// One gate applied to one tensor (SPEC §5). measured/limit are numbers in the gate's own unit; `passed` is
// measured ≤ limit, except min-survivor-frac (measured ≥ limit).
struct GateOutcome {
  std::string gate;    // max-mismatch, max-mismatch-frac, max-ulp, allclose, rel-l2, norm-max, min-survivor-frac, relative-to
  std::string origin;  // what set it: "--max-ulp", "default --grad-rel-l2", "golden golden.h5"
  bool passed = true;
  double measured = 0.0;
  double limit = 0.0;
  int64_t where = -1;   // flat index of the element that decided it (-1: not tied to one element)
  std::string summary;  // one human line, e.g. "max ULP 4 > 1 allowed at (12, 3, 1007)"
  // Count gates (max-mismatch, max-ulp, allclose) also carry both numbers exactly, as integers (a double rounds them
  // above 2^53); nullopt where one is not a whole number (an infinite ULP distance, a limit of inf).
  std::optional<uint64_t> measured_whole, limit_whole;
};

struct TensorReport {
  std::string name;  // out, grad_x, ...
  metrics::Format format = metrics::Format::bf16;
  std::vector<int64_t> dims;  // as stored (or computed)
  metrics::IndexLayout layout;
  metrics::ComparisonStats stats;
  // Against the exact truth, when it is known (SPEC §5); census for `out` only (its κ is defined there).
  std::optional<metrics::TruthStats> candidate_truth, reference_truth;
  std::optional<metrics::CensusStats> candidate_census, reference_census;
  // The --relative-to policy's own error against the truth, for the relative gate.
  std::string relative_policy;
  std::optional<metrics::TruthStats> relative_policy_truth;
  std::vector<GateOutcome> gates;

  bool passed() const {
    for (const auto& g : gates)
      if (!g.passed) return false;
    return true;
  }
  std::string index(int64_t flat) const { return flat < 0 ? "" : layout.at(flat).to_string(); }
};

struct CompareReport {
  std::string tool_version;
  std::string candidate;  // as resolved: "run.h5:/results/hf-bf16", "policy:fp32-seeded"
  std::string reference;
  std::string inputs;       // the inputs file used, "" when none
  std::string truth;        // where the exact truth came from, "" when unknown
  std::string mode;         // "compare" or "golden check"
  double census_threshold = metrics::kDefaultCensusThreshold;
  std::vector<TensorReport> tensors;
  std::vector<std::string> notes;  // what could not be measured and why

  int gates_total() const {
    int n = 0;
    for (const auto& t : tensors) n += static_cast<int>(t.gates.size());
    return n;
  }
  int gates_failed() const {
    int n = 0;
    for (const auto& t : tensors)
      for (const auto& g : t.gates) n += !g.passed;
    return n;
  }
  bool passed() const { return gates_failed() == 0; }
  // SPEC §4: 0 every gate passed (or none was set), 1 a gate failed. Input errors (2) never produce a report.
  int exit_code() const { return passed() ? 0 : 1; }
};

}  // namespace mhc::compare
