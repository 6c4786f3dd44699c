#pragma once
// File-backed inputs and candidates for the investigation commands: `CAND` as the CLI writes it
// ("file.h5", "file.h5:NAME", "file.h5:/path/to/group-or-dataset", or "policy:NAME"), read in slabs of
// tokens so memory stays bounded (SPEC §3).
#include <cstdint>
#include <string>
#include <vector>

#include "investigate/explain.hpp"
#include "investigate/fingerprint.hpp"
#include "io/store.hpp"
#include "policy/policy.hpp"

namespace mhc::investigate {

// One side of an investigation: a bf16 `out` dataset in a file, or a policy computed from the inputs.
struct OutSource {
  std::string text;     // as the user wrote it
  bool is_policy = false;
  Policy policy;        // when is_policy
  std::string path;     // the file, otherwise
  std::string dataset;  // the resolved dataset, e.g. "/results/fp32-seeded/out"
  std::string label;    // a short name for reports and result groups
};

// Resolves "policy:NAME" (NAME a built-in, alias, or one of `user_policies`) or a file side. For a file:
// ":NAME" means /results/NAME/out, NAME a group or, as compare reads it, a built-in policy's alias (":hf"); ":/path" a dataset or a group holding `out`; no suffix means the file's
// only /results group, else /out. InputError when the file or dataset is missing or ambiguous.
OutSource resolve_out_source(const std::string& text, const std::vector<Policy>& user_policies = {});

// Tokens per slab: about 4 Mi output elements, at least one token.
int64_t slab_tokens(const Shape& shape);

// Reads `count` tokens of `out` starting at token s0, computing it for a policy side (CPU).
std::vector<bf16_bits> read_out_slab(const OutSource& src, const Inputs& slab, int64_t s0, int threads = 0);

// Checks that a file side is `out` for the inputs `inputs` reads: [..., H, D] whose leading dims are the inputs'
// batch dims or S (dims of size 1 aside), so its tokens are the inputs' tokens; InputError naming both shapes
// otherwise.
void check_out_shape(const OutSource& src, const io::InputReader& inputs);

// Checks that the file sides among `sides` were computed from the inputs `reader` reads (io::results_inputs_checksum
// against the reader's checksum, computed once, only when a side says); InputError naming both otherwise. Up front,
// at the cost of one more read of the inputs: fingerprint and extract do far more work per element than compare,
// which checks after its one pass instead.
void check_computed_from(const std::vector<const OutSource*>& sides, io::InputReader& reader);

// `mhcdiff fingerprint in.h5 CAND`: the inputs and the candidate streamed in slabs.
FingerprintReport fingerprint_file(const std::string& inputs_path, const OutSource& candidate,
                                   const io::ReadOptions& read, const FingerprintOptions& options);

// `mhcdiff explain in.h5 --at s,ho,d`: InputError when the index is out of range or `policies` is empty.
Explanation explain_file(const std::string& inputs_path, const ElementAt& at, const std::vector<Policy>& policies,
                         const io::ReadOptions& read);

// Parses "s,ho,d" (InputError on anything else).
ElementAt parse_element_at(const std::string& text);

}  // namespace mhc::investigate
