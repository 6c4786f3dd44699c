#include "policy/policy_file.hpp"

#include <algorithm>
#include <cctype>
#include <fstream>
#include <functional>
#include <set>
#include <sstream>
#include <stdexcept>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "io/errors.hpp"
#include "io/files.hpp"

// Hand-written rather than a TOML library: the format is a flat list of `key = value` lines over eight
// enumerations, no TOML parser is among the project's installed dependencies, and a dedicated parser can
// name the field and the allowed values in its error messages.
namespace mhc {
namespace {

template <class E>
using NameTable = std::vector<std::pair<E, const char*>>;

const NameTable<Accumulator> kAccumulators = {
    {Accumulator::fp32, "fp32"}, {Accumulator::fp64, "fp64"}, {Accumulator::exact, "exact"}};
const NameTable<CoefRounding> kCoefs = {{CoefRounding::fp32, "fp32"}, {CoefRounding::bf16, "bf16"}};
const NameTable<PostTerm> kPostTerms = {{PostTerm::fp32, "fp32"}, {PostTerm::bf16, "bf16"}, {PostTerm::fused, "fused"}};
const NameTable<MixProduct> kMixProducts = {{MixProduct::fp32, "fp32"}, {MixProduct::fused, "fused"}};
const NameTable<TermOrder> kOrders = {
    {TermOrder::seeded, "seeded"}, {TermOrder::mix_first, "mix-first"}, {TermOrder::mix_pairwise, "mix-pairwise"}};
const NameTable<MixRounding> kMixRoundings = {{MixRounding::none, "none"}, {MixRounding::bf16, "bf16"}};
const NameTable<GradProduct> kGradProducts = {{GradProduct::fp32, "fp32"}, {GradProduct::bf16, "bf16"}};
const NameTable<ParamGradRounding> kParamGradRoundings = {{ParamGradRounding::none, "none"},
                                                          {ParamGradRounding::bf16, "bf16"}};
const NameTable<bool> kBools = {{false, "false"}, {true, "true"}};

template <class E>
const char* name_of(const NameTable<E>& table, E v) {
  for (const auto& [e, n] : table)
    if (e == v) return n;
  return "?";
}

// Accepts the documented spelling and the same word with '_' for '-' (mix_first as in the C++ enum).
template <class E>
bool value_of(const NameTable<E>& table, std::string word, E& out) {
  std::replace(word.begin(), word.end(), '_', '-');
  for (const auto& [e, n] : table)
    if (word == n) {
      out = e;
      return true;
    }
  return false;
}

template <class E>
std::string allowed(const NameTable<E>& table) {
  std::string s;
  for (const auto& [e, n] : table) { s += s.empty() ? "" : ", "; s += std::string(n); }
  return s;
}

// One PolicyDesc field: its key, how to set it from a word (false: not an allowed value) and how to print it.
struct Field {
  const char* key;
  std::function<bool(PolicyDesc&, const std::string&)> set;
  std::function<std::string(const PolicyDesc&)> get;
  std::string allowed;
};

template <class E>
Field make_field(const char* key, const NameTable<E>& table, E PolicyDesc::*member) {
  return {key, [&table, member](PolicyDesc& d, const std::string& w) { return value_of(table, w, d.*member); },
          [&table, member](const PolicyDesc& d) { return std::string(name_of(table, d.*member)); }, allowed(table)};
}

const std::vector<Field>& fields() {
  static const std::vector<Field> f = {
      make_field("accumulator", kAccumulators, &PolicyDesc::accumulator),
      make_field("coef", kCoefs, &PolicyDesc::coef),
      make_field("post_term", kPostTerms, &PolicyDesc::post_term),
      make_field("mix_product", kMixProducts, &PolicyDesc::mix_product),
      make_field("order", kOrders, &PolicyDesc::order),
      make_field("mix_rounding", kMixRoundings, &PolicyDesc::mix_rounding),
      make_field("grad_product", kGradProducts, &PolicyDesc::grad_product),
      make_field("param_grad_rounding", kParamGradRoundings, &PolicyDesc::param_grad_rounding),
      make_field("grad_contract", kBools, &PolicyDesc::grad_contract),
  };
  return f;
}

std::string trim(std::string_view s) {
  size_t b = s.find_first_not_of(" \t\r");
  if (b == std::string_view::npos) return {};
  size_t e = s.find_last_not_of(" \t\r");
  return std::string(s.substr(b, e - b + 1));
}

// Strips a '#' comment that is not inside a string: a double-quoted one (where \" does not close it) or a
// single-quoted (TOML literal) one.
std::string_view strip_comment(std::string_view line) {
  char quote = 0;
  for (size_t i = 0; i < line.size(); ++i) {
    const char c = line[i];
    if (quote == '"' && c == '\\') ++i;  // the escaped character
    else if (quote && c == quote) quote = 0;
    else if (!quote && (c == '"' || c == '\'')) quote = c;
    else if (!quote && c == '#') return line.substr(0, i);
  }
  return line;
}

// "[policy]", also with blanks inside the brackets as TOML allows ("[ policy ]").
bool is_policy_header(const std::string& line) {
  if (line.size() < 2 || line.front() != '[' || line.back() != ']') return false;
  std::string inner;
  for (char c : line.substr(1, line.size() - 2))
    if (c != ' ' && c != '\t') inner += c;
  return inner == "policy";
}

bool valid_policy_name(const std::string& n) {
  // "." and ".." would name the results group itself or its parent as an HDF5 path part.
  if (n.empty() || n == "all" || n == "." || n == "..") return false;
  return std::all_of(n.begin(), n.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.' || c == '+';
  });
}

std::string quote(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

}  // namespace

Policy parse_policy_text(std::string_view text, const std::string& source) {
  Policy policy;
  std::set<std::string> seen;
  std::string seen_header;  // "[policy]" once it was read
  // The byte-order mark Windows editors write first: not part of the first key (it made "unknown key 'name'"
  // with an invisible character in it).
  if (text.substr(0, 3) == "\xEF\xBB\xBF") text.remove_prefix(3);
  int line_no = 0;
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t nl = text.find('\n', pos);
    std::string_view raw = text.substr(pos, nl == std::string_view::npos ? std::string_view::npos : nl - pos);
    pos = nl == std::string_view::npos ? text.size() + 1 : nl + 1;
    ++line_no;
    auto fail = [&](const std::string& what) {
      throw InputError(fmt::format("policy file {}, line {}: {}", source, line_no, what));
    };
    // A binary file (or a stray control byte) would otherwise be echoed to the terminal inside a message.
    for (char c : raw)
      if (static_cast<unsigned char>(c) < 0x20 && c != '\t' && c != '\r')
        fail(fmt::format("byte 0x{:02x} is not text; a policy file is UTF-8 text (docs/policy-file.md)",
                         static_cast<unsigned>(static_cast<unsigned char>(c))));
    std::string line = trim(strip_comment(raw));
    if (line.empty()) continue;
    if (is_policy_header(line)) {  // optional TOML table header, for readers who expect one: first, once
      if (!seen.empty() || !seen_header.empty()) fail("'[policy]' may only open the file (once, before every key)");
      seen_header = line;
      continue;
    }
    size_t eq = line.find('=');
    if (eq == std::string::npos) fail(fmt::format("expected 'key = value', found '{}'", line));
    std::string key = trim(std::string_view(line).substr(0, eq));
    std::string value = trim(std::string_view(line).substr(eq + 1));
    if (key.empty()) fail("a line starts with '=' (missing key)");
    if (value.empty()) fail(fmt::format("'{}' has no value", key));
    if (value.front() == '"') {
      if (value.size() < 2 || value.back() != '"')
        fail(value.find('"', 1) != std::string::npos
                 ? fmt::format("text after the closing quote of '{}' (found '{}')", key, value)
                 : fmt::format("unterminated string for '{}'", key));
      // TOML's basic string, with the two escapes a name or a description needs; anything else would be read as
      // something TOML reads otherwise ("\n" a newline there, 'n' here) or not at all ("""multi-line""").
      std::string unq;
      for (size_t i = 1; i + 1 < value.size(); ++i) {
        if (value[i] == '"')
          fail(fmt::format("a '\"' inside the string of '{}' (write \\\" for a quote; strings are one line)", key));
        if (value[i] == '\\') {
          if (i + 2 >= value.size() || (value[i + 1] != '"' && value[i + 1] != '\\'))
            fail(fmt::format("the string of '{}' has an escape other than \\\" and \\\\", key));
          ++i;
        }
        unq += value[i];
      }
      value = unq;
    } else if (value.front() == '\'') {
      // A TOML literal string: no escapes, and no quote inside.
      if (value.size() < 2 || value.back() != '\'' || value.find('\'', 1) != value.size() - 1)
        fail(fmt::format("the literal string of '{}' must be one '...' with no ' inside (found {})", key, value));
      value = value.substr(1, value.size() - 2);
    }
    if (!seen.insert(key).second) fail(fmt::format("'{}' is given twice", key));
    if (key == "name") {
      if (!valid_policy_name(value))
        fail(fmt::format("policy name '{}' must be non-empty letters, digits, '-', '_', '.', '+' (and not 'all', '.' or '..')", value));
      policy.name = value;
      continue;
    }
    if (key == "models") {
      policy.models = value;
      continue;
    }
    const auto& fs = fields();
    auto it = std::find_if(fs.begin(), fs.end(), [&](const Field& f) { return key == f.key; });
    if (it == fs.end()) {
      std::string keys = "name, models";
      for (const Field& f : fs) keys += std::string(", ") + f.key;
      fail(fmt::format("unknown key '{}' (known keys: {})", key, keys));
    }
    if (!it->set(policy.desc, value))
      fail(fmt::format("'{}' cannot be '{}' (allowed: {})", key, value, it->allowed));
  }
  if (policy.name.empty()) throw InputError(fmt::format("policy file {} has no 'name = \"...\"' line", source));
  // A setting the chosen order never reaches would be silently ignored: the user meant something else.
  if (policy.desc.order == TermOrder::seeded && policy.desc.mix_rounding == MixRounding::bf16)
    throw InputError(fmt::format("policy file {}: mix_rounding = bf16 has no effect with order = seeded (the seeded "
                                 "loop has no separate mix sum to round); use order = mix-first or mix-pairwise",
                                 source));
  // The exact result is rounded once whatever the steps would have been: every step setting is ignored by it.
  if (policy.desc.accumulator == Accumulator::exact) {
    std::vector<std::string> ignored;
    for (const Field& f : fields())
      if (std::string(f.key) != "accumulator" && seen.count(f.key)) ignored.push_back(f.key);
    if (!ignored.empty())
      throw InputError(fmt::format("policy file {}: {} {} no effect with accumulator = exact (the exact result is "
                                   "rounded once, whatever the steps); remove {}",
                                   source, fmt::join(ignored, ", "), ignored.size() == 1 ? "has" : "have",
                                   ignored.size() == 1 ? "it" : "them"));
  }
  return policy;
}

Policy read_policy_file(const std::string& path) {
  io::require_regular_file(path, "policy file", "a policy file");  // a directory opens, then reads as empty
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(fmt::format("cannot read policy file {}: it does not exist or is not readable", path));
  std::ostringstream ss;
  ss << in.rdbuf();
  return parse_policy_text(ss.str(), path);
}

std::string format_policy_text(const Policy& policy) {
  std::string out = "# mhcdiff policy (docs/policy-file.md)\n";
  out += fmt::format("name = {}\n", quote(policy.name));
  if (!policy.models.empty()) out += fmt::format("models = {}\n", quote(policy.models));
  for (const Field& f : fields())
    if (policy.desc.accumulator != Accumulator::exact || std::string(f.key) == "accumulator")
      out += fmt::format("{} = {}\n", f.key, f.get(policy.desc));
  return out;
}

void write_policy_file(const Policy& policy, const std::string& path) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) throw InputError(fmt::format("cannot write policy file {}", path));
  out << format_policy_text(policy);
  if (!out.flush()) throw InputError(fmt::format("cannot write policy file {}", path));
}

const Policy& find_policy_or_user(const std::string& name, const std::vector<Policy>& user) {
  try {
    return find_policy(name);
  } catch (const std::invalid_argument& e) {
    for (const Policy& p : user)
      if (p.name == name) return p;
    if (user.empty()) throw;
    std::vector<std::string> names;
    for (const Policy& p : user) names.push_back(p.name);
    std::string what = e.what();  // "unknown policy 'x' (known: ...; aliases: ...)"
    what.insert(what.size() - 1, fmt::format("; from --policy-file: {}", fmt::join(names, ", ")));
    throw std::invalid_argument(what);
  }
}

std::vector<Policy> resolve_policies(const std::string& list, const std::vector<std::string>& policy_files) {
  std::vector<Policy> from_files;
  for (size_t i = 0; i < policy_files.size(); ++i) {
    const std::string& path = policy_files[i];
    // The same file twice (by any name) is a repeated option, not two policies that clash.
    for (size_t j = 0; j < i; ++j)
      if (io::same_file(path, policy_files[j]))
        throw InputError(path == policy_files[j]
                             ? fmt::format("--policy-file {} is given twice", path)
                             : fmt::format("--policy-file {} is given twice (also as {})", path, policy_files[j]));
    Policy p = read_policy_file(path);
    bool builtin_clash = true;
    try {
      find_policy(p.name);
    } catch (const std::invalid_argument&) {
      builtin_clash = false;
    }
    if (builtin_clash)
      throw InputError(fmt::format("policy file {} names its policy '{}', which is a built-in policy or alias; "
                                   "choose another name",
                                   path, p.name));
    for (const Policy& q : from_files)
      if (q.name == p.name)
        throw InputError(fmt::format("policy file {} reuses the name '{}' of another policy file", path, p.name));
    from_files.push_back(std::move(p));
  }
  std::vector<Policy> out;
  auto add = [&](const Policy& p) {
    if (std::none_of(out.begin(), out.end(), [&](const Policy& q) { return q.name == p.name; })) out.push_back(p);
  };
  if (!list.empty()) {
    size_t start = 0;
    while (true) {
      size_t comma = list.find(',', start);
      std::string item = trim(list.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
      if (item.empty()) throw std::invalid_argument(fmt::format("empty policy name in '{}'", list));
      if (item == "all") {  // every built-in, also within a list ("all,mine")
        for (const Policy& p : builtin_policies()) add(p);
      } else {
        add(find_policy_or_user(item, from_files));
      }
      if (comma == std::string::npos) break;
      start = comma + 1;
    }
  }
  for (const Policy& p : from_files) add(p);
  return out;
}

}  // namespace mhc
