#include "investigate/sources.hpp"

#include <algorithm>
#include <charconv>
#include <filesystem>
#include <memory>
#include <optional>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "io/errors.hpp"
#include "kernels/cpu/operator_cpu.hpp"
#include "policy/policy_file.hpp"
#include "run/thread_count.hpp"

namespace mhc::investigate {

namespace {

// What mhcdiff names a dataset by its path: an input of the operator (/inputs/...), a gradient (a name grad_*), or
// a candidate output (anything else); `group` is the path of the group holding it. HDF5 resolves "//" and "." in a
// path, so the path's components are compared, not its text ("//inputs/residual" is /inputs/residual).
struct Naming {
  enum Kind { output, input, gradient } kind = output;
  std::string group;
  const char* what() const { return kind == input ? "an input of the operator" : "a gradient"; }
};
Naming named_as(const std::string& dataset) {
  std::vector<std::string> parts;
  for (size_t at = 0; at <= dataset.size();) {
    const size_t slash = std::min(dataset.find('/', at), dataset.size());
    const std::string part = dataset.substr(at, slash - at);
    if (!part.empty() && part != ".") parts.push_back(part);
    at = slash + 1;
  }
  Naming n;
  for (size_t i = 0; i + 1 < parts.size(); ++i) n.group += "/" + parts[i];
  if (parts.size() >= 2 && parts.front() == "inputs") n.kind = Naming::input;
  else if (!parts.empty() && parts.back().rfind("grad_", 0) == 0) n.kind = Naming::gradient;
  return n;
}

// A dataset named by path may be any candidate output (an engine's dump names its own), but not one that mhcdiff
// itself names as something else: residual and grad_residual always have out's shape (x has it when H = 1, comb
// when D = H), and were read as forward outputs without a word. Nor may it be such a dataset under another name (a
// hard link, or a soft link to it or to a group on its path): until session 32 a link was taken as what it is named.
void refuse_other_tensor(const io::TensorFile& file, const std::string& path, const std::string& dataset) {
  // `as`: the name mhcdiff knows the dataset by, when it is not `dataset`.
  auto refuse = [&](const Naming& n, const std::string& as) {
    throw InputError(fmt::format("{}:{} is {}{}, not a forward output: fingerprint and extract read out (e.g. {}:{})",
                                 path, dataset, as.empty() ? "" : as + " under another name, ", n.what(), path,
                                 n.kind == Naming::input ? "/results/NAME/out" : n.group + "/out"));
  };
  if (const Naming n = named_as(dataset); n.kind != Naming::output) refuse(n, "");
  std::vector<std::string> groups{"/inputs"};
  for (const std::string& g : file.policies()) groups.push_back("/results/" + g);
  for (const std::string& other : file.other_names(dataset, groups))
    if (const Naming n = named_as(other); n.kind != Naming::output) refuse(n, other);
}

}  // namespace

OutSource resolve_out_source(const std::string& text, const std::vector<Policy>& user_policies) {
  OutSource src;
  src.text = text;
  if (text.rfind("policy:", 0) == 0) {
    const std::string name = text.substr(7);
    try {
      src.policy = find_policy_or_user(name, user_policies);
    } catch (const std::invalid_argument& e) {
      throw InputError(fmt::format("{}: {}", text, e.what()));
    }
    src.is_policy = true;
    src.label = src.policy.name;
    return src;
  }
  // "file.h5:suffix" — the last ':' that is followed by something other than a Windows drive's '\' or '/'.
  std::string path = text, suffix;
  const size_t colon = text.rfind(':');
  if (colon != std::string::npos && colon > 0 && !std::filesystem::exists(text)) {
    path = text.substr(0, colon);
    suffix = text.substr(colon + 1);
  }
  // A policy's name where a file was expected: say how to write a computed side, as compare does.
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) {
    std::optional<std::string> policy_name;
    try {
      policy_name = find_policy_or_user(text, user_policies).name;
    } catch (const std::invalid_argument&) {
    }
    if (policy_name)
      throw InputError(fmt::format("{}: no such file (to compute the {} policy from the inputs, write policy:{})", text,
                                   *policy_name, text));
  }
  const io::TensorFile file(path);
  src.path = path;
  auto use = [&](const std::string& dataset) {
    src.dataset = dataset;
    return src;
  };
  if (!suffix.empty()) {
    // ":NAME" names a results group as compare resolves it: the group itself or a built-in policy's alias (":hf").
    if (suffix.front() != '/') {
      if (auto group = io::find_results_group(file, suffix); group && file.exists(*group + "/out")) {
        src.label = group->substr(group->rfind('/') + 1);
        return use(*group + "/out");
      }
      suffix = "/results/" + suffix;
    }
    if (file.exists(suffix)) {
      refuse_other_tensor(file, path, suffix);
      src.label = suffix;
      return use(suffix);
    }
    if (file.exists(suffix + "/out")) {
      src.label = suffix.substr(suffix.rfind('/') + 1);
      return use(suffix + "/out");
    }
    const std::vector<std::string> groups = file.policies();
    throw InputError(fmt::format("{} has no dataset {} and no {}/out (its results groups: {})", path, suffix, suffix,
                                 groups.empty() ? "none" : fmt::format("{}", fmt::join(groups, ", "))));
  }
  const std::vector<std::string> groups = file.policies();
  std::vector<std::string> with_out;
  for (const std::string& g : groups)
    if (file.exists("/results/" + g + "/out")) with_out.push_back(g);
  if (with_out.size() == 1) {
    src.label = with_out.front();
    return use("/results/" + with_out.front() + "/out");
  }
  if (with_out.empty() && file.exists("/out")) {
    src.label = "out";
    return use("/out");
  }
  // Worded as compare words it (compare::run_compare's group resolution).
  throw InputError(with_out.empty()
                       ? fmt::format("{} holds no /results/<name>/out dataset and no /out; expected a candidate output", path)
                       : fmt::format("{} holds {} results groups ({}); name one, e.g. {}:{}", path, with_out.size(),
                                     fmt::join(with_out, ", "), path, with_out.front()));
}

int64_t slab_tokens(const Shape& shape) {
  const int64_t per_token = std::max<int64_t>(1, int64_t(shape.H) * shape.D);
  return std::clamp<int64_t>((int64_t{1} << 22) / per_token, 1, std::max<int64_t>(1, shape.S));
}

namespace {

std::string dims_text(const std::vector<int64_t>& dims) { return fmt::format("[{}]", fmt::join(dims, ",")); }

}  // namespace

void check_out_shape(const OutSource& src, const io::InputReader& inputs) {
  if (src.is_policy) return;
  const Shape& shape = inputs.shape();
  const std::vector<int64_t>& batch = inputs.batch_dims();
  const std::vector<int64_t> dims = io::TensorFile(src.path).info(src.dataset).dims;
  // out is [..., H, D] (SPEC §3). Its leading dims are read as tokens in row-major order, so they must split S as
  // compare requires (io::same_token_layout: the inputs' batch dims, or those with adjacent axes merged, down to S
  // itself in a dump that flattened them; or batched where the inputs are flat). Counting elements alone accepted
  // [S·H, D] and [2S, H/2, D], which pair every token with another's values.
  const std::vector<int64_t> token_dims = batch.empty() ? std::vector<int64_t>{shape.S} : batch;
  const bool ok = dims.size() >= 3 && dims[dims.size() - 2] == shape.H && dims.back() == shape.D &&
                  io::same_token_layout({dims.begin(), dims.end() - 2}, token_dims);
  if (ok) return;
  std::vector<int64_t> want = batch;
  want.insert(want.end(), {int64_t(shape.H), shape.D});
  const std::string flat = dims_text({shape.S, int64_t(shape.H), shape.D});
  throw InputError(fmt::format("{} dataset {} has shape {}, but the inputs {} (S={}, H={}, D={}) need out {}{}", src.path,
                               src.dataset, dims_text(dims), inputs.path(), shape.S, shape.H, shape.D, dims_text(want),
                               batch.size() > 1 ? " or " + flat : ""));
}

std::vector<bf16_bits> read_out_slab(const OutSource& src, const Inputs& slab, int64_t s0, int threads) {
  const Shape& sh = slab.shape;
  std::vector<bf16_bits> out(size_t(sh.S) * sh.H * sh.D);
  if (src.is_policy) {
    PolicyResult r;
    allocate_result(r, sh, stores_f64(src.policy.desc), false);
    CpuOptions opt;
    opt.threads = threads;
    forward_cpu(src.policy.desc, slab.view(), forward_outputs(r), opt);
    return r.out;
  }
  const io::TensorFile file(src.path);
  file.read_bf16(src.dataset, s0 * sh.H * sh.D, int64_t(out.size()), out.data());
  return out;
}

void check_computed_from(const std::vector<const OutSource*>& sides, io::InputReader& reader) {
  std::string read;  // the inputs' checksum, once a side has one to compare
  for (const OutSource* side : sides) {
    if (side->is_policy) continue;
    const size_t slash = side->dataset.rfind('/');
    const std::string group = slash == 0 || slash == std::string::npos ? "/" : side->dataset.substr(0, slash);
    const std::string computed_from = io::results_inputs_checksum(side->path, group);
    if (computed_from.empty()) continue;
    if (read.empty()) read = reader.checksum();
    io::require_computed_from(side->text, computed_from, reader, read);
  }
}

FingerprintReport fingerprint_file(const std::string& inputs_path, const OutSource& candidate, const io::ReadOptions& read,
                                   const FingerprintOptions& options) {
  run::require_thread_count(options.threads);
  io::InputReader reader(inputs_path, read);
  const Shape shape = reader.shape();
  check_out_shape(candidate, reader);
  check_computed_from({&candidate}, reader);
  const int64_t step = slab_tokens(shape);
  const SlabSource source = [&](const SlabVisitor& visit) {
    for (int64_t s0 = 0; s0 < shape.S; s0 += step) {
      const Inputs slab = reader.read_slab(s0, std::min(step, shape.S - s0));
      const std::vector<bf16_bits> cand = read_out_slab(candidate, slab, s0, options.threads);
      visit(s0, slab.view(), cand.data());
    }
  };
  FingerprintReport report = fingerprint(shape, source, options);
  report.inputs_dst_src = reader.comb_layout() == io::CombLayout::dst_src;
  return report;
}

ElementAt parse_element_at(const std::string& text) {
  int64_t v[3];
  const char* p = text.data();
  const char* end = text.data() + text.size();
  for (int i = 0; i < 3; ++i) {
    auto [next, ec] = std::from_chars(p, end, v[i]);
    if (ec != std::errc() || v[i] < 0) break;
    p = next;
    if (i < 2) {
      if (p == end || *p != ',') break;
      ++p;
    } else if (p == end) {
      return {v[0], v[1], v[2]};
    }
  }
  throw InputError(fmt::format("--at '{}' is not an element index: expected s,ho,d (three non-negative integers)", text));
}

Explanation explain_file(const std::string& inputs_path, const ElementAt& at, const std::vector<Policy>& policies,
                         const io::ReadOptions& read) {
  if (policies.empty())
    throw InputError("--policies names no policy to explain: give 'all', a comma-separated list, or a --policy-file");
  io::InputReader reader(inputs_path, read);
  const Shape sh = reader.shape();
  if (at.s >= sh.S || at.ho >= sh.H || at.d >= sh.D)
    throw InputError(fmt::format("--at {},{},{} is outside the inputs of {} (S={}, H={}, D={})", at.s, at.ho, at.d,
                                 inputs_path, sh.S, sh.H, sh.D));
  const Inputs token = reader.read_slab(at.s, 1);
  Explanation e = explain_element(element_inputs(token.view(), 0, static_cast<int>(at.ho), at.d), at, policies);
  if (reader.batch_dims().size() > 1) e.batch_dims = reader.batch_dims();
  e.comb_dst_src = reader.comb_layout() == io::CombLayout::dst_src;
  return e;
}

}  // namespace mhc::investigate
