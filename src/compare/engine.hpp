#pragma once
// `mhcdiff compare` as a library function (SPEC §4, §5): resolve both sides, stream slabs of tokens through
// the metric accumulators, evaluate the gates. Memory is bounded by the slab size, never by S.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "compare/gates.hpp"
#include "compare/report_model.hpp"
#include "io/store.hpp"

namespace mhc::compare {

// One side of a comparison as the user wrote it: "file.h5", "file.h5:/results/NAME" (or ":NAME"), or
// "policy:NAME" (computed from the inputs). Throws InputError for a file that does not exist. A policy name that
// is not a built-in is kept as written (it may name a --policy-file policy; run_compare checks it).
struct SideSpec {
  bool is_policy = false;
  std::string policy;  // canonical name, for policy sides
  std::string path;    // for file sides
  std::string group;   // as written after ':', "" when absent
  std::string text;    // as given
};
SideSpec parse_side(const std::string& text);

// The tensors mhcdiff compares by default (their *_f64 twins are compared only when named in --tensors).
const std::vector<std::string>& primary_tensors();
// A primary tensor or its binary64 twin (`out`, `out_f64`, ...): the names --tensors takes.
bool is_known_tensor(const std::string& name);

struct CompareOptions {
  std::string candidate;
  std::string reference;
  std::string inputs;                 // --inputs (required by policy: sides, census and --relative-to)
  std::vector<std::string> tensors;   // --tensors; empty: every primary tensor (both sides must hold the same set)
  std::string tensors_gated_by;       // golden check without --tensors: the golden file whose limits chose them
  GateConfig gates = default_gates();
  int top_k = 10;
  double census_threshold = metrics::kDefaultCensusThreshold;
  std::vector<std::string> policy_files;  // --policy-file: user policies usable as policy:NAME and --relative-to
  std::string device = "auto";        // for policy: sides and the exact truth
  int threads = 0;
  int64_t slab_elements = int64_t{1} << 22;  // elements of the widest tensor per slab
  io::ReadOptions read;
  std::string mode = "compare";
  bool comb_layout_option = true;     // the command takes --comb-layout (golden check reads its inputs as declared)
};

// Throws InputError (exit 2) for anything wrong with the request or the files; otherwise the report, whose
// exit_code() is 0 or 1.
CompareReport run_compare(const CompareOptions& options);

}  // namespace mhc::compare
