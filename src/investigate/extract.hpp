#pragma once
// `mhcdiff extract CAND REF --inputs in.h5 --worst K -o repro.h5` (SPEC §6): the K tokens where the two sides
// disagree most, as a small standalone mhcdiff/1 file that `run` and `compare` accept: /inputs holds those
// tokens (grad_out too when present), /results/<cand>/out and /results/<ref>/out their outputs, and root
// attributes record where they came from (source_inputs, source_tokens, candidate, reference).
//
// Tokens are ranked by their largest bf16 ULP distance between the sides (SPEC §5 ULP: NaN vs NaN is 0,
// NaN vs a number is the largest), then by their count of mismatched elements, then by index.
#include <cstdint>
#include <string>
#include <vector>

#include "investigate/sources.hpp"

namespace mhc::investigate {

struct TokenScore {
  int64_t token = 0;
  uint64_t max_ulp = 0;  // metrics::kInfiniteUlp: NaN or an infinity against anything else
  int64_t mismatched = 0;
};

struct ExtractOptions {
  int64_t worst = 8;
  int threads = 0;
  io::ReadOptions read;
  std::vector<std::string> policy_files;  // read by the command (--policy-file): never replaced by the output
};

struct ExtractSummary {
  Shape source_shape;
  std::vector<TokenScore> written;  // the tokens written, worst first (empty: the sides agree everywhere)
  std::string candidate_group, reference_group;
  std::vector<std::string> notes;  // what the repro leaves out of a side, and why (printed after the summary)
};

// Distance in bf16 ULPs between two bf16 values (the count of representable values between them; NaN vs NaN 0,
// NaN or an infinity against anything else metrics::kInfiniteUlp, as compare counts it).
uint64_t bf16_ulp_distance(bf16_bits a, bf16_bits b);

// Writes `output` atomically unless the sides agree on every element (then nothing is written).
ExtractSummary extract_worst_tokens(const OutSource& candidate, const OutSource& reference, const std::string& inputs_path,
                                    const std::string& output, const ExtractOptions& options);

}  // namespace mhc::investigate
