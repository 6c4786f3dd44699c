#pragma once
// Golden baselines (`mhcdiff golden regen|check`): a self-contained mhcdiff/1 file holding the inputs, the
// reference outputs of a set of accepted policies with provenance, and recommended tolerances derived from
// the measured spread between those policies and between repeated runs — the approach of Megatron-LM's
// golden-value tests, where the tolerance is what legitimate run-to-run variation actually reached.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "compare/engine.hpp"

namespace mhc::compare {

// Accepted by default: every faithful implementation of the operator. hf-bf16 (the rounding bug SPEC §2
// models) is left out on purpose, so a candidate that rounds like HF eager fails the golden check.
inline constexpr const char* kDefaultGoldenPolicies = "exact,fp32-seeded,fp32-seeded-fma,fp32-mixfirst,fp64";
inline constexpr const char* kGoldenFormat = "mhcdiff.golden/1";

struct GoldenRegenOptions {
  std::string input;
  std::string output;
  std::string policies = kDefaultGoldenPolicies;  // the first one is the reference
  int repeat = 1;                                 // runs per policy; any run-to-run difference widens the tolerances
  bool force = false;                             // replace an existing golden file
  std::string device = "auto";
  int threads = 0;
  io::ReadOptions read;
};

// Recommended tolerance of one tensor: the worst any accepted policy (or repeated run) reached against the
// reference.
struct GoldenTolerance {
  std::string tensor;
  double max_ulp = 0;
  // max_ulp as the whole number its attribute spells, where it is one (not inf): exact up to 2^64 − 1, which the
  // double rounds above 2^53.
  std::optional<uint64_t> max_ulp_whole;
  double max_mismatch_frac = 0;
  double rel_l2 = 0;
  double norm_max = 0;
  std::string worst_policy;  // which policy set max_ulp ("" when all matched bit for bit)
};

struct GoldenRegenSummary {
  std::string reference;
  std::vector<std::string> policies;
  Shape shape;
  bool backward = false;
  int64_t repeat_mismatches = 0;  // elements that differed between repeated runs (0 for a deterministic build)
  std::vector<GoldenTolerance> tolerances;
};

// Throws InputError when the output exists without force, the inputs are bad, or the output cannot be written;
// nothing is left at the output path then (atomic write).
GoldenRegenSummary golden_regen(const GoldenRegenOptions& options);

// Reads a golden file's reference group and tolerances as per-tensor gates (InputError when it is not one).
struct GoldenSpec {
  std::string reference;  // policy name of the reference group
  std::vector<GoldenTolerance> tolerances;
};
GoldenSpec read_golden(const std::string& path);

// `golden check`: compares the candidate against the golden reference under its stored tolerances (plus any
// gates already in base.gates). A policy: candidate is computed from the golden file's own inputs.
CompareReport golden_check(const std::string& candidate, const std::string& golden, CompareOptions base);

}  // namespace mhc::compare
