#pragma once
// User-defined policies (SPEC §2 "User policies", `--policy-file`): a small TOML-like text format with one
// policy per file, `name = "..."` plus any PolicyDesc field (docs/policy-file.md). Fields left out keep the
// PolicyDesc defaults (the fp32-seeded policy). Every preset can be written out and read back unchanged.
#include <string>
#include <string_view>
#include <vector>

#include "policy/policy.hpp"

namespace mhc {

// Parses the text of a policy file. `source` names it in error messages. Throws InputError naming the source
// and the line (unknown key, unknown value, repeated key, malformed line, missing name).
Policy parse_policy_text(std::string_view text, const std::string& source);

// Reads and parses a policy file; InputError when it cannot be read.
Policy read_policy_file(const std::string& path);

// The policy in the file format, every field written out (so the file does not depend on our defaults).
std::string format_policy_text(const Policy& policy);

// Writes format_policy_text(policy) to `path`; InputError when it cannot be written.
void write_policy_file(const Policy& policy, const std::string& path);

// The policies a command should run: the built-ins named in `list` ("all", or names/aliases separated by
// commas; empty for none), then the policies read from `policy_files`. A list item may also name a
// file's policy, which then keeps the list's position. File policies may not reuse a built-in name or
// alias, nor each other's names (InputError).
std::vector<Policy> resolve_policies(const std::string& list, const std::vector<std::string>& policy_files);

// A built-in policy (or alias) by name, else the --policy-file policy of that name; std::invalid_argument naming
// both kinds of known names otherwise.
const Policy& find_policy_or_user(const std::string& name, const std::vector<Policy>& user);

}  // namespace mhc
