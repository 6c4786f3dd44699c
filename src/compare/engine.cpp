#include "compare/engine.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <tuple>

#include "io/files.hpp"
#include "kernels/cpu/operator_cpu.hpp"
#include "kernels/dispatch.hpp"
#include "policy/policy.hpp"
#include "policy/policy_file.hpp"
#include "report/text_safety.hpp"
#include "run/thread_count.hpp"

namespace mhc::compare {

namespace fs = std::filesystem;
using metrics::Format;

const std::vector<std::string>& primary_tensors() {
  static const std::vector<std::string> names = {"out", "grad_x", "grad_residual", "grad_post", "grad_comb"};
  return names;
}

bool is_known_tensor(const std::string& name) {
  for (const auto& p : primary_tensors())
    if (name == p || name == p + "_f64") return true;
  return false;
}

namespace {

bool is_f64_name(const std::string& name) { return name.size() > 4 && name.compare(name.size() - 4, 4, "_f64") == 0; }

// SPEC §1 fixes each tensor's dtype; a file's storage may differ (uint16 bf16, float32 holding bf16 values)
// and the store converts exactly or refuses.
Format format_of_tensor(const std::string& name) {
  if (is_f64_name(name)) return Format::f64;
  if (name == "grad_post" || name == "grad_comb") return Format::f32;
  return Format::bf16;
}

// The element dims of one token for a tensor of this shape (SPEC §1).
std::vector<int64_t> token_dims(const std::string& name, const Shape& sh) {
  const std::string base = is_f64_name(name) ? name.substr(0, name.size() - 4) : name;
  if (base == "grad_x") return {sh.D};
  if (base == "grad_post") return {int64_t(sh.H)};
  if (base == "grad_comb") return {int64_t(sh.H), int64_t(sh.H)};
  return {int64_t(sh.H), sh.D};
}

std::string join_names(const std::vector<std::string>& v) { return v.empty() ? "none" : fmt::format("{}", fmt::join(v, ", ")); }

// A side once resolved: a file group, or a policy computed from the inputs.
struct Side {
  SideSpec spec;
  std::unique_ptr<io::TensorFile> file;
  std::string group;  // "/results/NAME" or "/" for a file side
  const Policy* policy = nullptr;
  bool exact = false;
  std::vector<std::string> tensors;  // the tensors this side holds (file) or can compute (policy)
  // A file whose root declares comb_layout="dst,src" holds grad_comb as [.., dst, src] (a dump of a comb[s, dst, src]
  // implementation, docs/ci.md): it is transposed as it is read, so both sides are compared src,dst.
  bool grad_comb_dst_src = false;

  std::string label() const { return spec.is_policy ? "policy:" + spec.policy : spec.path + ":" + group; }
  std::string dataset(const std::string& name) const { return (group == "/" ? "" : group) + "/" + name; }
};

std::string resolve_group(const io::TensorFile& f, const SideSpec& spec) {
  const std::vector<std::string> groups = f.policies();
  auto has_group = [&](const std::string& g) { return std::find(groups.begin(), groups.end(), g) != groups.end(); };
  if (spec.group.empty()) {
    if (groups.size() == 1) return "/results/" + groups[0];
    if (groups.empty()) {
      if (f.exists("/out")) return "/";
      throw InputError(fmt::format("{} holds no /results group and no /out dataset: there is nothing to compare "
                                   "(write results with `mhcdiff run`)", spec.path));
    }
    // Worded as fingerprint and extract word it (investigate::resolve_out_source).
    throw InputError(fmt::format("{} holds {} results groups ({}); name one, e.g. {}:{}", spec.path,
                                 groups.size(), join_names(groups), spec.path, groups[0]));
  }
  std::string g = spec.group;
  while (g.size() > 1 && g.back() == '/') g.pop_back();
  if (g == "/") {
    if (f.exists("/out")) return "/";
  } else if (g.rfind("/results/", 0) == 0 && has_group(g.substr(9))) {
    return g;
  } else if (g.rfind("/results/", 0) == 0) {
    io::find_results_group(f, g.substr(9));  // InputError when the group is a link that leads nowhere
  } else if (g.front() != '/') {
    if (auto found = io::find_results_group(f, g)) return *found;
  }
  // InputError when the path runs through a link that leads out or nowhere.
  const bool exists = g.front() == '/' && f.exists(g);
  // A dataset inside a results group (res.h5:/results/hf-bf16/out, as fingerprint and extract take it): compare
  // takes the group and chooses tensors with --tensors.
  if (const size_t slash = g.rfind('/');
      exists && slash > 9 && g.rfind("/results/", 0) == 0 && has_group(g.substr(9, slash - 9)))
    throw InputError(fmt::format("{}:{} is a dataset; compare takes a results group and chooses tensors with "
                                 "--tensors: {}:{} --tensors {}",
                                 spec.path, spec.group, spec.path, g.substr(0, slash), g.substr(slash + 1)));
  throw InputError(fmt::format("{} has no results group '{}'; it holds: {}", spec.path, spec.group, join_names(groups)));
}

// The checksum of the inputs a file side was computed from (io::results_inputs_checksum); "" for a policy side.
std::string input_checksum_of(const Side& s) {
  return s.file ? io::results_inputs_checksum(s.spec.path, s.group) : "";
}

bool group_is_exact(const io::TensorFile& f, const std::string& group) {
  if (group == "/") return false;
  for (const auto& [k, v] : f.attributes(group))
    if (k == "policy_description") return v.find("accumulator=exact") != std::string::npos;
  try {
    return find_policy(group.substr(group.rfind('/') + 1)).desc.accumulator == Accumulator::exact;
  } catch (const std::invalid_argument&) {
    return false;
  }
}

// Built-ins (and their aliases) first, then the --policy-file policies.
const Policy& lookup_policy(const std::string& name, const std::vector<Policy>& user, const std::string& context) {
  try {
    return find_policy_or_user(name, user);
  } catch (const std::invalid_argument& e) {
    throw InputError(fmt::format("{}: {}", context, e.what()));
  }
}

Side open_side(const std::string& text, const io::InputReader* inputs, const std::vector<Policy>& user) {
  Side side;
  side.spec = parse_side(text);
  if (side.spec.is_policy) {
    side.policy = &lookup_policy(side.spec.policy, user, text);
    side.exact = side.policy->desc.accumulator == Accumulator::exact;
    if (!inputs)
      throw InputError(fmt::format("{} is computed from inputs: pass --inputs in.h5 (a results file written by "
                                   "`mhcdiff run` holds its inputs too)", text));
    for (const auto& t : primary_tensors())
      if (t == "out" || inputs->has_grad()) side.tensors.push_back(t);
    if (stores_f64(side.policy->desc)) {
      const size_t n = side.tensors.size();
      for (size_t i = 0; i < n; ++i) side.tensors.push_back(side.tensors[i] + "_f64");
    }
    return side;
  }
  side.file = std::make_unique<io::TensorFile>(side.spec.path);
  side.group = resolve_group(*side.file, side.spec);
  side.exact = group_is_exact(*side.file, side.group);
  side.grad_comb_dst_src = side.file->declared_comb_layout() == io::CombLayout::dst_src;
  // The root's comb_layout decides how grad_comb is read; one on the results (or their grad_comb) would be ignored.
  std::vector<std::string> marked = {side.dataset("grad_comb"), side.dataset("grad_comb_f64")};
  if (side.group != "/") marked.insert(marked.end(), {"/results", side.group});  // a bare dump has only its tensors
  for (const std::string& object : marked)
    if (const auto name = side.file->comb_orientation_lookalike(object))
      throw InputError(fmt::format("{}: {} has an attribute '{}', but mhcdiff reads the orientation of comb and "
                                   "grad_comb only from the file root's attribute comb_layout; move it there{}",
                                   side.spec.path, object, report::one_line(*name),
                                   *name == "comb_layout" ? "" : " as comb_layout"));
  for (const auto& name : side.file->datasets(side.group))
    if (is_known_tensor(name)) side.tensors.push_back(name);
  return side;
}

bool holds(const Side& s, const std::string& name) {
  return std::find(s.tensors.begin(), s.tensors.end(), name) != s.tensors.end();
}

// The names of `wanted` that `side` holds, in wanted's order.
std::vector<std::string> held_of(const std::vector<std::string>& wanted, const Side& side) {
  std::vector<std::string> v;
  for (const auto& t : wanted)
    if (holds(side, t)) v.push_back(t);
  return v;
}

// Which tensors to compare (SPEC §5: matched by name; one side only is an input error, never a silent pass).
std::vector<std::string> select_tensors(const CompareOptions& opt, const Side& cand, const Side& ref) {
  std::vector<std::string> chosen;
  if (!opt.tensors.empty()) {
    for (const auto& name : opt.tensors) {
      if (!is_known_tensor(name))
        throw InputError(fmt::format("--tensors names '{}', which is not a tensor mhcdiff compares ({} and their "
                                     "_f64 twins)", name, join_names(primary_tensors())));
      for (const Side* s : {&cand, &ref}) {
        if (holds(*s, name)) continue;
        // golden check chose the tensors: worded as compare words a tensor on one side only, with the subset both
        // hold (a candidate lacking a gated tensor fails the check for it; it does not pass on the rest).
        if (!opt.tensors_gated_by.empty() && s == &cand) {
          const std::vector<std::string> both = held_of(held_of(opt.tensors, cand), ref);
          throw InputError(fmt::format("{} gates {}, which is not in {} (it holds: {}): a gated tensor the candidate "
                                       "lacks is an input error, not a pass{}",
                                       opt.tensors_gated_by, name, s->label(), join_names(s->tensors),
                                       both.empty() ? "" : fmt::format(" (check a subset with --tensors {})",
                                                                       join_names(both))));
        }
        throw InputError(fmt::format("{} is not in {} (it holds: {})", name, s->label(), join_names(s->tensors)));
      }
      if (std::find(chosen.begin(), chosen.end(), name) == chosen.end()) chosen.push_back(name);
    }
    return chosen;
  }
  const std::vector<std::string> c = held_of(primary_tensors(), cand), r = held_of(primary_tensors(), ref);
  // A computed side adapts to a file side: it can produce whatever its inputs allow.
  const Side* fixed = !cand.spec.is_policy ? &cand : !ref.spec.is_policy ? &ref : nullptr;
  if (fixed == nullptr) return c;
  const Side* other = fixed == &cand ? &ref : &cand;
  const std::vector<std::string>& fixed_set = fixed == &cand ? c : r;
  const std::vector<std::string>& other_set = fixed == &cand ? r : c;
  const auto one_side_only = [&](const std::string& name, const Side& in, const Side& not_in) {
    const std::vector<std::string> both = held_of(c, ref);
    return InputError(fmt::format("{} is in {} but not in {}: a tensor present on one side only is an input error, "
                                  "not a pass{}",
                                  name, in.label(), not_in.label(),
                                  both.empty() ? "" : fmt::format(" (compare a subset with --tensors {})",
                                                                  join_names(both))));
  };
  for (const auto& name : fixed_set)
    if (std::find(other_set.begin(), other_set.end(), name) == other_set.end())
      throw one_side_only(name, *fixed, *other);
  if (!other->spec.is_policy)
    for (const auto& name : other_set)
      if (std::find(fixed_set.begin(), fixed_set.end(), name) == fixed_set.end())
        throw one_side_only(name, *other, *fixed);
  if (fixed_set.empty())
    throw InputError(fmt::format("{} holds none of the tensors mhcdiff compares ({})", fixed->label(),
                                 join_names(primary_tensors())));
  return fixed_set;
}

// Per-tensor geometry: the dims as stored (or computed), split into the leading token dims (batch dims and S)
// and the trailing element dims of one token (SPEC §1: [H, D] for out, [D] for grad_x, ...).
struct Geometry {
  std::vector<int64_t> dims;
  std::vector<int64_t> trailing;
  int64_t rows = 0;
  int64_t row_elems = 1;
};

Geometry geometry_of(const Side& s, const std::string& name, const std::optional<Shape>& shape,
                     const std::vector<int64_t>& batch_dims) {
  Geometry g;
  if (s.file) {
    g.dims = s.file->info(s.dataset(name)).dims;
  } else {
    // As `mhcdiff run` would store it: the inputs' leading dims, then one token's dims.
    g.dims = batch_dims.empty() ? std::vector<int64_t>{shape->S} : batch_dims;
    for (int64_t d : token_dims(name, *shape)) g.dims.push_back(d);
  }
  metrics::IndexLayout layout;
  try {
    layout = metrics::layout_for(name, g.dims);
  } catch (const std::invalid_argument& e) {
    throw InputError(fmt::format("{}: {}", s.label(), e.what()));
  }
  g.trailing = layout.trailing;
  for (int64_t d : layout.trailing) g.row_elems *= d;
  g.rows = 1;
  for (size_t i = 0; i + layout.trailing.size() < g.dims.size(); ++i) g.rows *= g.dims[i];
  return g;
}

// The leading (token) dims.
std::vector<int64_t> token_dims_of(const Geometry& g) {
  return std::vector<int64_t>(g.dims.begin(), g.dims.end() - long(g.trailing.size()));
}

// Two stores of one tensor hold the same logical tensor when one token's dims are equal and the tokens are the
// same sequence (io::same_token_layout: [B,S,H,D] and [B·S,H,D] are the same tensor). Equal element counts are not
// enough: [8,2,32] is not [8,4,16], and [4,2,H,D] is not [2,4,H,D].
bool same_logical_shape(const Geometry& a, const Geometry& b) {
  return a.trailing == b.trailing && a.rows == b.rows && io::same_token_layout(token_dims_of(a), token_dims_of(b));
}

// The H and D a tensor's element dims imply (-1 where it says nothing about one of them).
std::pair<int64_t, int64_t> streams_and_hidden(const std::string& name, const std::vector<int64_t>& trailing) {
  const std::string base = is_f64_name(name) ? name.substr(0, name.size() - 4) : name;
  if (base == "grad_x") return {-1, trailing[0]};
  if (base == "grad_post") return {trailing[0], -1};
  if (base == "grad_comb") return {trailing[0], -1};
  return {trailing[0], trailing[1]};
}

std::string dims_text(const std::vector<int64_t>& d) { return fmt::format("[{}]", fmt::join(d, ",")); }

// Typed storage for one slab of one tensor.
struct SlabBuffer {
  std::vector<bf16_bits> b;
  std::vector<float> f;
  std::vector<double> d;
};

const void* computed_ptr(const PolicyResult& r, const std::string& name) {
  auto p = [](const auto& v) -> const void* { return v.empty() ? nullptr : v.data(); };
  if (name == "out") return p(r.out);
  if (name == "grad_x") return p(r.grad_x);
  if (name == "grad_residual") return p(r.grad_residual);
  if (name == "grad_post") return p(r.grad_post);
  if (name == "grad_comb") return p(r.grad_comb);
  if (name == "out_f64") return p(r.out_f64);
  if (name == "grad_x_f64") return p(r.grad_x_f64);
  if (name == "grad_residual_f64") return p(r.grad_residual_f64);
  if (name == "grad_post_f64") return p(r.grad_post_f64);
  if (name == "grad_comb_f64") return p(r.grad_comb_f64);
  return nullptr;
}

// Each [H, H] matrix of `count` values (whole tokens) transposed in place: [dst, src] to [src, dst].
template <class T>
void transpose_per_token(T* v, int64_t count, int64_t H) {
  for (int64_t m = 0; m < count; m += H * H)
    for (int64_t i = 0; i < H; ++i)
      for (int64_t j = i + 1; j < H; ++j) std::swap(v[m + i * H + j], v[m + j * H + i]);
}

// Elements [first, first + count) of tensor `name` of a file side (whole tokens: `streams` is H), grad_comb in
// src,dst order whatever the file declares.
const void* read_file_slab(const Side& s, const std::string& name, Format fmt, int64_t first, int64_t count,
                           int64_t streams, SlabBuffer& buf) {
  const std::string ds = s.dataset(name);
  const bool transpose = s.grad_comb_dst_src && name.rfind("grad_comb", 0) == 0;
  switch (fmt) {
    case Format::bf16: buf.b.resize(count); s.file->read_bf16(ds, first, count, buf.b.data()); return buf.b.data();
    case Format::f32:
      buf.f.resize(count);
      s.file->read_f32(ds, first, count, buf.f.data());
      if (transpose) transpose_per_token(buf.f.data(), count, streams);
      return buf.f.data();
    case Format::f64:
      buf.d.resize(count);
      s.file->read_f64(ds, first, count, buf.d.data());
      if (transpose) transpose_per_token(buf.d.data(), count, streams);
      return buf.d.data();
  }
  return nullptr;
}

// Everything measured for one tensor while streaming.
struct TensorWork {
  std::string name;
  Format format;
  Geometry geometry;
  metrics::ComparisonAccumulator comparison;
  std::optional<metrics::TruthAccumulator> cand_truth, ref_truth, rel_truth;
  std::optional<metrics::CensusAccumulator> cand_census, ref_census;
};

void add_pair(metrics::ComparisonAccumulator& acc, Format f, const void* c, const void* r, int64_t n, int64_t first) {
  switch (f) {
    case Format::bf16: acc.add(static_cast<const bf16_bits*>(c), static_cast<const bf16_bits*>(r), n, first); break;
    case Format::f32: acc.add(static_cast<const float*>(c), static_cast<const float*>(r), n, first); break;
    case Format::f64: acc.add(static_cast<const double*>(c), static_cast<const double*>(r), n, first); break;
  }
}

void add_truth(metrics::TruthAccumulator& acc, Format f, const void* y, const void* tr, const double* t64, int64_t n,
               int64_t first) {
  if (f == Format::bf16)
    acc.add(static_cast<const bf16_bits*>(y), static_cast<const bf16_bits*>(tr), t64, n, first);
  else
    acc.add(static_cast<const float*>(y), static_cast<const float*>(tr), t64, n, first);
}

}  // namespace

SideSpec parse_side(const std::string& text) {
  SideSpec s;
  s.text = text;
  if (text.rfind("policy:", 0) == 0) {
    s.is_policy = true;
    const std::string name = text.substr(7);
    try {
      s.policy = find_policy(name).name;
    } catch (const std::invalid_argument&) {
      s.policy = name;  // perhaps a --policy-file policy
    }
    if (s.policy.empty()) throw InputError(fmt::format("{}: name a policy after 'policy:'", text));
    return s;
  }
  std::error_code ec;
  if (fs::is_regular_file(text, ec)) {
    s.path = text;
    return s;
  }
  if (text.empty() || text.front() == ':')
    throw InputError(fmt::format("'{}' names no file; a side is FILE.h5, FILE.h5:GROUP or policy:NAME", text));
  const size_t colon = text.rfind(':');
  if (colon != std::string::npos && colon > 0 && fs::is_regular_file(text.substr(0, colon), ec)) {
    s.path = text.substr(0, colon);
    s.group = text.substr(colon + 1);
    return s;
  }
  // Not a regular file: say what the path is when it exists (a directory, a FIFO), else that there is none.
  const std::string file = colon != std::string::npos && !fs::exists(text, ec) ? text.substr(0, colon) : text;
  if (fs::exists(file, ec)) io::require_regular_file(file, "file", "an HDF5 file");
  std::string hint;
  try {
    hint = fmt::format(" (to compute the {} policy from --inputs, write policy:{})", find_policy(text).name, text);
  } catch (const std::invalid_argument&) {
  }
  throw InputError(fmt::format("{}: no such file{}", colon != std::string::npos ? text.substr(0, colon) : text, hint));
}

CompareReport run_compare(const CompareOptions& opt) {
  // ---- resolve everything before any work, so a bad request fails fast with exit 2 ----
  validate_gates(opt.gates, opt.census_threshold);
  std::unique_ptr<io::InputReader> reader;
  if (!opt.inputs.empty()) reader = std::make_unique<io::InputReader>(opt.inputs, opt.read);
  const std::vector<Policy> user_policies = opt.policy_files.empty() ? std::vector<Policy>{}
                                                                     : resolve_policies("", opt.policy_files);
  Side cand = open_side(opt.candidate, reader.get(), user_policies);
  Side ref = open_side(opt.reference, reader.get(), user_policies);
  // Results of other inputs of the same shape would compare without complaint and report nonsense: where both
  // groups carry their inputs' checksum, the checksums must agree (and those of --inputs, checked after the
  // pass that reads them). Checked before the tensors are chosen, so that a side from other inputs which also
  // lacks a tensor is refused for the cause, not for the missing tensor.
  const std::string cand_inputs = input_checksum_of(cand), ref_inputs = input_checksum_of(ref);
  if (!cand_inputs.empty() && !ref_inputs.empty() && cand_inputs != ref_inputs)
    throw InputError(fmt::format("{} and {} were computed from different inputs (input_checksum {} and {}){}",
                                 cand.label(), ref.label(), cand_inputs, ref_inputs,
                                 io::transposed_comb_hint(cand.spec.path, cand.label(), cand_inputs, ref.spec.path,
                                                          ref.label(), ref_inputs)));
  const std::vector<std::string> names = select_tensors(opt, cand, ref);

  std::optional<Shape> shape;
  if (reader) shape = reader->shape();

  const Policy* exact_policy = nullptr;
  const Side* truth_side = nullptr;  // a file side that is the exact truth (when no inputs)
  std::string truth_text;
  if (reader) {
    exact_policy = &find_policy("exact");
    truth_text = "computed from " + opt.inputs + " (certified exact sums)";
  } else if (ref.exact) {
    truth_side = &ref;
    truth_text = "the reference " + ref.label();
  } else if (cand.exact) {
    truth_side = &cand;
    truth_text = "the candidate " + cand.label();
  }
  const bool census = reader != nullptr;
  if (opt.gates.needs_census() && !census)
    throw InputError("--min-survivor-frac needs the cancellation census, which needs the inputs and the exact truth: "
                     "pass --inputs in.h5");
  const Policy* relative = nullptr;
  if (!opt.gates.relative_to.empty()) {
    relative = &lookup_policy(opt.gates.relative_to, user_policies, "--relative-to");
    if (!reader)
      throw InputError(fmt::format("--relative-to {} computes that policy and the exact truth from the inputs: pass "
                                   "--inputs in.h5", opt.gates.relative_to));
  }
  bool need_backward = false;
  for (const auto& n : names) need_backward = need_backward || is_grad_tensor(n);
  if (need_backward && reader && !reader->has_grad() && (cand.spec.is_policy || ref.spec.is_policy || relative ||
                                                          exact_policy))
    throw InputError(fmt::format("the gradients need /inputs/grad_out, which {} does not hold", opt.inputs));

  // Geometry and shape checks (docs/metrics.md "Shapes"): both sides, and the inputs when given, must hold the same
  // logical tensor; every tensor covers the same tokens and agrees on H and D.
  std::vector<std::unique_ptr<TensorWork>> work;
  const std::vector<int64_t> batch_dims = reader ? reader->batch_dims() : std::vector<int64_t>{};
  int64_t rows = -1;
  int64_t widest = 1;
  int64_t streams = -1, hidden = -1;
  std::string streams_from, hidden_from;
  for (const auto& name : names) {
    const Geometry gc = geometry_of(cand, name, shape, batch_dims), gr = geometry_of(ref, name, shape, batch_dims);
    if (shape) {
      Geometry expected;
      expected.dims = batch_dims.empty() ? std::vector<int64_t>{shape->S} : batch_dims;
      expected.trailing = token_dims(name, *shape);
      expected.dims.insert(expected.dims.end(), expected.trailing.begin(), expected.trailing.end());
      expected.rows = shape->S;
      for (const Side* s : {&cand, &ref}) {
        const Geometry& g = s == &cand ? gc : gr;
        // The same extents in another order ([S,D,H] for [S,H,D]) is a layout mistake, not other inputs.
        if (s->file && !same_logical_shape(g, expected))
          throw InputError(fmt::format(
              "{} has shape {} in {}, but the inputs {} (S={}, H={}, D={}) make it {}: {}", name, dims_text(g.dims),
              s->label(), opt.inputs, shape->S, shape->H, shape->D, dims_text(expected.dims),
              std::is_permutation(g.dims.begin(), g.dims.end(), expected.dims.begin(), expected.dims.end())
                  ? "its axes are in another order (was it stored transposed?)"
                  : "they are not the inputs it was computed from"));
      }
    }
    if (!same_logical_shape(gc, gr))
      throw InputError(fmt::format("{} has shape {} in {} but {} in {} (shapes must agree; leading batch dims may only "
                                   "be stored with adjacent axes merged, as a dump flattens them)",
                                   name, dims_text(gc.dims), cand.label(), dims_text(gr.dims), ref.label()));
    if (rows >= 0 && gc.rows != rows)
      throw InputError(fmt::format("{} has {} tokens but {} has {}; every tensor of a comparison covers the same "
                                   "tokens", name, gc.rows, names.front(), rows));
    rows = gc.rows;
    // The sides agree with each other here, so one side's element dims speak for both.
    const Side& shown = cand.file ? cand : ref;
    const Geometry& gs = cand.file ? gc : gr;
    if (gs.trailing.size() == 2 && name.rfind("grad_comb", 0) == 0 && gs.trailing[0] != gs.trailing[1])
      throw InputError(fmt::format("{} has shape {} in {}: its last two dims are [H, H] (src, dst) and must be equal",
                                   name, dims_text(gs.dims), shown.label()));
    const auto [h, d] = streams_and_hidden(name, gs.trailing);
    if (h >= 0 && streams >= 0 && h != streams)
      throw InputError(fmt::format("{} has shape {} in {}, so H = {}, but {} has H = {}; every tensor of a comparison "
                                   "has the same H and D", name, dims_text(gs.dims), shown.label(), h, streams_from,
                                   streams));
    if (d >= 0 && hidden >= 0 && d != hidden)
      throw InputError(fmt::format("{} has shape {} in {}, so D = {}, but {} has D = {}; every tensor of a comparison "
                                   "has the same H and D", name, dims_text(gs.dims), shown.label(), d, hidden_from,
                                   hidden));
    if (h >= 0 && streams < 0) {
      streams = h;
      streams_from = name;
    }
    if (d >= 0 && hidden < 0) {
      hidden = d;
      hidden_from = name;
    }
    widest = std::max(widest, gc.row_elems);
    const Format f = format_of_tensor(name);
    std::optional<metrics::Tolerance> tol = opt.gates.for_tensor(name).tolerance;
    auto w = std::unique_ptr<TensorWork>(new TensorWork{name, f, cand.file ? gc : gr,
                                                        metrics::ComparisonAccumulator(f, opt.top_k, tol), {}, {},
                                                        {}, {}, {}});
    const bool truth_here = (exact_policy || truth_side) && f != Format::f64;
    if (truth_here && !(truth_side == &cand)) w->cand_truth.emplace(f);
    if (truth_here && !(truth_side == &ref) && !(exact_policy && ref.exact && ref.spec.is_policy))
      w->ref_truth.emplace(f);
    if (truth_here && relative) w->rel_truth.emplace(f);
    if (census && name == "out") {
      w->cand_census.emplace(opt.census_threshold);
      // Like the truth block above: only the computed exact policy is the truth; a file's exact group is measured
      // (a census of it shows whether it keeps every case, as the truth does).
      if (!(ref.exact && ref.spec.is_policy)) w->ref_census.emplace(opt.census_threshold);
    }
    work.push_back(std::move(w));
  }

  // The policies to compute per slab, once each.
  std::map<std::string, const Policy*> computed;
  if (cand.spec.is_policy) computed[cand.policy->name] = cand.policy;
  if (ref.spec.is_policy) computed[ref.policy->name] = ref.policy;
  if (exact_policy) computed[exact_policy->name] = exact_policy;
  if (relative) computed[relative->name] = relative;
  Device device = Device::cpu;
  if (!computed.empty()) device = resolve_device(opt.device);
  run::require_thread_count(opt.threads);
  CpuOptions cpu;
  cpu.threads = opt.threads;

  int64_t slab_rows = std::max<int64_t>(1, opt.slab_elements / widest);
  if (reader) slab_rows = std::min(slab_rows, io::slab_tokens_for(*shape, need_backward, int64_t(64) << 20));
  spdlog::debug("compare: {} tensors, {} tokens, {} per slab, {} computed policies", names.size(), rows, slab_rows,
                computed.size());

  // ---- one streaming pass ----
  SlabBuffer cbuf, rbuf, tbuf, t64buf;
  std::vector<double> magnitudes;
  io::InputChecksum inputs_checksum;
  for (int64_t s0 = 0; s0 < rows; s0 += slab_rows) {
    const int64_t n = std::min(slab_rows, rows - s0);
    Inputs in;
    std::map<std::string, PolicyResult> results;
    if (reader) {
      in = reader->read_slab(s0, n);
      inputs_checksum.update(in);
      for (const auto& [pname, pol] : computed) {
        PolicyResult& r = results[pname];
        const bool backward = need_backward && in.has_grad();
        allocate_result(r, in.shape, stores_f64(pol->desc), backward);
        forward_on(device, pol->desc, in.view(), forward_outputs(r), cpu);
        if (backward) backward_on(device, pol->desc, in.view(), backward_outputs(r), cpu);
      }
      if (census) {
        magnitudes.resize(static_cast<size_t>(n * shape->H * shape->D));
        metrics::out_term_magnitudes(in.view(), magnitudes.data());
      }
    }
    for (auto& wp : work) {
      TensorWork& w = *wp;
      const int64_t first = s0 * w.geometry.row_elems, count = n * w.geometry.row_elems;
      auto fetch = [&](const Side& s, SlabBuffer& buf) -> const void* {
        if (s.spec.is_policy) return computed_ptr(results.at(s.policy->name), w.name);
        return read_file_slab(s, w.name, w.format, first, count, w.geometry.trailing.front(), buf);
      };
      const void* c = fetch(cand, cbuf);
      const void* r = fetch(ref, rbuf);
      add_pair(w.comparison, w.format, c, r, count, first);
      if (!w.cand_truth && !w.ref_truth && !w.cand_census) continue;
      const void* tr = nullptr;
      const double* t64 = nullptr;
      if (exact_policy) {
        const PolicyResult& er = results.at(exact_policy->name);
        tr = computed_ptr(er, w.name);
        t64 = static_cast<const double*>(computed_ptr(er, w.name + "_f64"));
      } else {
        tr = truth_side == &cand ? c : r;
        if (holds(*truth_side, w.name + "_f64"))
          t64 = static_cast<const double*>(read_file_slab(*truth_side, w.name + "_f64", Format::f64, first, count,
                                                          w.geometry.trailing.front(), t64buf));
      }
      if (w.cand_truth) add_truth(*w.cand_truth, w.format, c, tr, t64, count, first);
      if (w.ref_truth) add_truth(*w.ref_truth, w.format, r, tr, t64, count, first);
      if (w.rel_truth) add_truth(*w.rel_truth, w.format, computed_ptr(results.at(relative->name), w.name), tr, t64,
                                 count, first);
      if (w.cand_census && t64) {
        w.cand_census->add(static_cast<const bf16_bits*>(c), t64, magnitudes.data(), count, first);
        if (w.ref_census) w.ref_census->add(static_cast<const bf16_bits*>(r), t64, magnitudes.data(), count, first);
      }
    }
  }

  // After the pass that read the inputs (up front, it would read them twice).
  if (reader) {
    const std::string read = inputs_checksum.hex();
    io::require_computed_from(cand.label(), cand_inputs, *reader, read, opt.comb_layout_option);
    io::require_computed_from(ref.label(), ref_inputs, *reader, read, opt.comb_layout_option);
  }

  // ---- the report ----
  CompareReport rep;
  rep.tool_version = MHCDIFF_VERSION;
  rep.mode = opt.mode;
  rep.candidate = cand.label();
  rep.reference = ref.label();
  rep.inputs = opt.inputs;
  rep.truth = truth_text;
  rep.census_threshold = opt.census_threshold;
  // A file side with no input_checksum and no /inputs mhcdiff can read (a dump) cannot be matched to the inputs it
  // is compared under: the report says so, since results of other inputs would then fail the gates with nothing
  // pointing at the cause.
  for (const auto& [side, checksum, other] :
       {std::tuple{&cand, &cand_inputs, &ref_inputs}, std::tuple{&ref, &ref_inputs, &cand_inputs}})
    if (side->file && checksum->empty() && (reader || !other->empty()))
      rep.notes.push_back(fmt::format("{} has no input_checksum and no readable /inputs: that it was computed from {} "
                                      "is not checked",
                                      side->label(), reader ? opt.inputs : "the same inputs as the other side"));
  for (const Side* side : {&cand, &ref})
    if (side->grad_comb_dst_src &&
        std::any_of(work.begin(), work.end(), [](const auto& w) { return w->name.rfind("grad_comb", 0) == 0; }))
      rep.notes.push_back(fmt::format("{}'s file declares comb_layout \"dst,src\": its grad_comb was read as [.., dst, "
                                      "src] and transposed, so indices name [s, src, dst]", side->label()));
  // golden check has no --inputs: it reads the golden file's own when a gate needs them.
  const bool golden = opt.mode == "golden check";
  if (truth_text.empty())
    rep.notes.push_back(golden ? "no exact truth: the golden file's reference is not exact"
                               : "no exact truth: pass --inputs in.h5 (or compare against an exact group) for the "
                                 "error in truth ULPs, correct rounding and the cancellation census");
  else if (!census)
    rep.notes.push_back(golden ? "no cancellation census: --min-survivor-frac computes it from the golden file's inputs"
                               : "no cancellation census: it needs the inputs (pass --inputs in.h5)");
  for (auto& wp : work) {
    TensorWork& w = *wp;
    TensorReport t;
    t.name = w.name;
    t.format = w.format;
    t.dims = w.geometry.dims;
    t.layout = metrics::layout_for(w.name, w.geometry.dims);
    t.stats = w.comparison.finish();
    if (w.cand_truth) t.candidate_truth = w.cand_truth->finish();
    if (w.ref_truth) t.reference_truth = w.ref_truth->finish();
    if (w.cand_census) t.candidate_census = w.cand_census->finish();
    if (w.ref_census) t.reference_census = w.ref_census->finish();
    if (w.rel_truth) {
      t.relative_policy = relative->name;
      t.relative_policy_truth = w.rel_truth->finish();
    }
    t.gates = evaluate_gates(t, opt.gates);
    rep.tensors.push_back(std::move(t));
  }
  return rep;
}

}  // namespace mhc::compare
