// TensorFile: read access to any dataset of an mhcdiff/1 file, by flat element ranges.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <set>

#include "io/files.hpp"
#include "io/hdf5_util.hpp"
#include "io/store.hpp"
#include "policy/policy.hpp"

namespace mhc::io {

using detail::Handle;
using detail::StoredKind;

int64_t TensorInfo::rows() const {
  std::string base = dataset.substr(dataset.rfind('/') + 1);
  if (base.size() > 4 && base.compare(base.size() - 4, 4, "_f64") == 0) base.resize(base.size() - 4);
  // Element dims per token: [D] for x-like and post-like tensors, [H,D] / [H,H] for the others.
  const bool two = base == "residual" || base == "grad_out" || base == "out" || base == "grad_residual" ||
                   base == "comb" || base == "grad_comb";
  const size_t element_dims = two ? 2 : 1;
  int64_t r = 1;
  for (size_t i = 0; i + element_dims < dims.size(); ++i) r *= dims[i];
  return r;
}

struct TensorFile::Impl {
  std::string path;
  Handle file;
  Handle bf16_type = detail::make_bf16_type();

  [[noreturn]] void fail(const std::string& what) const { throw InputError(fmt::format("{}: {}", path, what)); }

  // Opens a dataset stored in this file (docs/format.md: never through an external link or into another file) whose
  // element count fits int64_t.
  Handle open_dataset(const std::string& name) const {
    if (!detail::link_exists(file.get(), name)) {
      if (auto why = detail::unusable_component(file.get(), name)) fail(*why);  // a component that is no group
      fail(fmt::format("missing dataset {}", name));
    }
    Handle ds;
    if (auto why = detail::open_stored_dataset(file.get(), name, ds)) fail(*why);
    return ds;
  }

  void check_range(const std::string& name, hid_t ds, int64_t first, int64_t count) const {
    const int64_t n = *detail::element_count(detail::dataset_dims(ds));  // open_dataset checked it
    if (first < 0 || count < 0 || first > n - count)
      fail(fmt::format("elements [{}, {}) of {} requested, but it has {}", first, first + count, name, n));
  }

  // Datasets whose storage was found written (detail::unwritten_storage, asked at a dataset's first read).
  mutable std::set<std::string> written;

  template <class T>
  void read(const std::string& name, hid_t ds, hid_t mem, int64_t first, int64_t count, T* dst) const {
    if (!written.count(name)) {
      if (auto why = detail::unwritten_storage(ds)) fail(fmt::format("dataset {} is {}", name, *why));
      written.insert(name);
    }
    try {
      detail::read_flat(ds, mem, uint64_t(first), uint64_t(count), dst);
    } catch (const std::runtime_error& e) {
      fail(fmt::format("reading dataset {} failed: {}", name, e.what()));
    }
  }
};

TensorFile::TensorFile(const std::string& path) : impl_(std::make_unique<Impl>()) {
  impl_->path = path;
  require_regular_file(path, "file", "an HDF5 file");  // before opening: a FIFO would block forever
  impl_->file = detail::open_file_read_only(path);
  const auto format = detail::read_string_attribute(impl_->file.get(), "format");
  if (!format && detail::attribute_exists(impl_->file.get(), "format"))
    impl_->fail("root attribute format is not a string; expected \"mhcdiff/1\"");
  if (format && *format != "mhcdiff/1")
    impl_->fail(fmt::format("root attribute format is \"{}\"; expected \"mhcdiff/1\"", *format));
  // A PyTorch user's dump may lack the root attributes; its groups say what it is.
  if (!format && H5Lexists(impl_->file.get(), "/inputs", detail::local_links()) <= 0 &&
      H5Lexists(impl_->file.get(), "/results", detail::local_links()) <= 0)
    impl_->fail(fmt::format("not an mhcdiff/1 file (no format attribute, no /inputs or /results group); its top "
                            "level holds {} (docs/format.md says where the tensors go)",
                            detail::top_level_names(impl_->file.get())));
}

TensorFile::~TensorFile() = default;
TensorFile::TensorFile(TensorFile&&) noexcept = default;
TensorFile& TensorFile::operator=(TensorFile&&) noexcept = default;

const std::string& TensorFile::path() const { return impl_->path; }

namespace {

struct ChildList {
  std::vector<std::string> names;
  H5O_type_t want;
  std::vector<std::pair<std::string, std::string>> unusable;  // ("out", "a link to /gone, which does not exist")
};

herr_t collect_child(hid_t group, const char* name, const H5L_info_t* link, void* data) {
  auto* list = static_cast<ChildList*>(data);
  H5O_info_t info;
  if (H5Oget_info_by_name2(group, name, &info, H5O_INFO_BASIC, detail::local_links()) >= 0) {
    if (info.type == list->want) list->names.emplace_back(name);
    return 0;
  }
  list->unusable.emplace_back(name, detail::unusable_link_description(group, name, *link));
  return 0;
}

}  // namespace

std::vector<std::string> TensorFile::children(const std::string& group, int type,
                                              std::vector<std::pair<std::string, std::string>>* unusable) const {
  ChildList list{{}, H5O_type_t(type), {}};
  if (!detail::link_exists(impl_->file.get(), group)) return {};
  if (auto link = detail::external_link_target(impl_->file.get(), group)) impl_->fail(fmt::format("{} is {}", group, *link));
  Handle g(H5Gopen2(impl_->file.get(), group.c_str(), detail::local_group_access()));
  if (!g.valid()) return {};
  hsize_t idx = 0;
  // Creation order is not tracked by default; name order is stable and readable.
  H5Literate(g.get(), H5_INDEX_NAME, H5_ITER_INC, &idx, collect_child, &list);
  if (unusable) {
    *unusable = std::move(list.unusable);
  } else if (!list.unusable.empty()) {
    const auto& [name, what] = list.unusable.front();
    impl_->fail(fmt::format("{}/{} is {}", group == "/" ? "" : group, name, what));
  }
  return list.names;
}

std::vector<std::string> TensorFile::policies() const {
  std::vector<std::pair<std::string, std::string>> unusable;
  return children("/results", H5O_TYPE_GROUP, &unusable);
}

std::vector<std::pair<std::string, std::string>> TensorFile::unusable_policies() const {
  std::vector<std::pair<std::string, std::string>> unusable;
  children("/results", H5O_TYPE_GROUP, &unusable);
  return unusable;
}

std::vector<std::string> TensorFile::datasets(const std::string& group) const {
  return children(group, H5O_TYPE_DATASET);
}

std::vector<std::string> TensorFile::other_names(const std::string& dataset,
                                                 const std::vector<std::string>& groups) const {
  // An object is its file's number and its address there (HDF5 1.10's object identity; H5Oget_info2's, as above).
  auto identity = [&](const std::string& name) -> std::optional<std::pair<unsigned long, haddr_t>> {
    H5O_info_t info;
    if (H5Oget_info_by_name2(impl_->file.get(), name.c_str(), &info, H5O_INFO_BASIC, detail::local_links()) < 0)
      return std::nullopt;
    return std::pair{info.fileno, info.addr};
  };
  const auto target = identity(dataset);
  std::vector<std::string> names;
  if (!target) return names;
  for (const std::string& group : groups) {
    std::vector<std::pair<std::string, std::string>> unusable;
    std::vector<std::string> datasets;
    try {
      datasets = children(group, H5O_TYPE_DATASET, &unusable);
    } catch (const InputError&) {  // the group itself is an external link
      continue;
    }
    for (const std::string& child : datasets) {
      const std::string name = (group == "/" ? "" : group) + "/" + child;
      if (name != dataset && identity(name) == target) names.push_back(name);
    }
  }
  return names;
}

bool TensorFile::exists(const std::string& dataset) const {
  if (!detail::link_exists(impl_->file.get(), dataset)) {
    // Not there, or behind a link that leads out of the file or nowhere: the latter is said, not "missing".
    if (auto why = detail::unusable_component(impl_->file.get(), dataset)) impl_->fail(*why);
    return false;
  }
  if (auto link = detail::external_link_target(impl_->file.get(), dataset))
    impl_->fail(fmt::format("{} is {}", dataset, *link));
  H5O_info_t info;
  return H5Oget_info_by_name2(impl_->file.get(), dataset.c_str(), &info, H5O_INFO_BASIC, detail::local_links()) >= 0 &&
         info.type == H5O_TYPE_DATASET;
}

TensorInfo TensorFile::info(const std::string& dataset) const {
  Handle ds = impl_->open_dataset(dataset);
  const StoredKind kind = detail::classify(ds.get());
  const auto dtype = detail::dtype_of(kind);
  if (!dtype)
    impl_->fail(fmt::format("dataset {} is {}; expected bfloat16, float32 or float64", dataset,
                            detail::stored_type_name(ds.get())));
  TensorInfo t;
  t.dataset = dataset;
  t.dtype = *dtype;
  for (hsize_t d : detail::dataset_dims(ds.get())) t.dims.push_back(int64_t(d));
  return t;
}

std::vector<std::pair<std::string, std::string>> TensorFile::attributes(const std::string& object) const {
  if (object != "/" && !detail::link_exists(impl_->file.get(), object))
    impl_->fail(fmt::format("no object {}", object));
  Handle o(H5Oopen(impl_->file.get(), object.c_str(), detail::local_links()));
  if (!o.valid()) impl_->fail(fmt::format("cannot open {}", object));
  return detail::attributes_as_text(o.get());
}

std::optional<std::string> TensorFile::comb_orientation_lookalike(const std::string& object) const {
  if (object != "/" && !detail::link_exists(impl_->file.get(), object)) return std::nullopt;
  Handle o(H5Oopen(impl_->file.get(), object.c_str(), detail::local_links()));
  if (!o.valid()) return std::nullopt;
  return detail::comb_orientation_lookalike(o.get(), /*include_comb_layout=*/true);
}

std::optional<CombLayout> TensorFile::declared_comb_layout() const {
  return detail::declared_comb_layout(impl_->file.get(), impl_->path);
}

void TensorFile::read_bf16(const std::string& dataset, int64_t first, int64_t count, bf16_bits* dst) const {
  Handle ds = impl_->open_dataset(dataset);
  impl_->check_range(dataset, ds.get(), first, count);
  switch (detail::classify(ds.get())) {
    case StoredKind::bf16_float: impl_->read(dataset, ds.get(), impl_->bf16_type.get(), first, count, dst); return;
    case StoredKind::bf16_uint16: {
      Handle type(H5Dget_type(ds.get()));
      const hid_t mem = H5Tget_sign(type.get()) == H5T_SGN_NONE ? H5T_NATIVE_UINT16 : H5T_NATIVE_INT16;
      impl_->read(dataset, ds.get(), mem, first, count, dst);
      return;
    }
    case StoredKind::f32:
    case StoredKind::f64: {
      std::vector<double> wide(static_cast<size_t>(count));
      impl_->read(dataset, ds.get(), H5T_NATIVE_DOUBLE, first, count, wide.data());
      for (int64_t i = 0; i < count; ++i) {
        dst[i] = round_to_bf16_rne(wide[size_t(i)]);
        if (!std::isnan(wide[size_t(i)]) && double(bf16_to_float(dst[i])) != wide[size_t(i)])
          impl_->fail(fmt::format("dataset {} is not bfloat16 and element {} ({}) is not a bfloat16 value", dataset,
                                  detail::index_text(first + i, detail::dataset_dims(ds.get())), wide[size_t(i)]));
      }
      return;
    }
    default:
      impl_->fail(fmt::format("dataset {} is {}; expected bfloat16", dataset,
                              detail::stored_type_name(ds.get())));
  }
}

void TensorFile::read_f32(const std::string& dataset, int64_t first, int64_t count, float* dst) const {
  Handle ds = impl_->open_dataset(dataset);
  impl_->check_range(dataset, ds.get(), first, count);
  const StoredKind kind = detail::classify(ds.get());
  if (kind == StoredKind::f32) return impl_->read(dataset, ds.get(), H5T_NATIVE_FLOAT, first, count, dst);
  if (kind == StoredKind::bf16_float || kind == StoredKind::bf16_uint16) {
    std::vector<bf16_bits> bits(static_cast<size_t>(count));
    read_bf16(dataset, first, count, bits.data());
    for (int64_t i = 0; i < count; ++i) dst[i] = bf16_to_float(bits[size_t(i)]);
    return;
  }
  if (kind == StoredKind::f64) {
    // float64 whose values are all float32 values, as read_bf16 takes float32/float64 holding bf16 values (a dump of
    // a float32 gradient through a float64 array); any that would round is refused.
    std::vector<double> wide(static_cast<size_t>(count));
    impl_->read(dataset, ds.get(), H5T_NATIVE_DOUBLE, first, count, wide.data());
    // As InputReader narrows an fp32 slot: IEEE conversion (a value past float32's range becomes an infinity), then
    // the value must come back unchanged.
    for (int64_t i = 0; i < count; ++i) {
      const double w = wide[size_t(i)];
      dst[i] = static_cast<float>(w);
      if (!std::isnan(w) && double(dst[i]) != w)
        impl_->fail(fmt::format("dataset {} is float64 and element {} ({}) is not a float32 value", dataset,
                                detail::index_text(first + i, detail::dataset_dims(ds.get())), w));
    }
    return;
  }
  impl_->fail(fmt::format("dataset {} is {}; expected float32", dataset, detail::stored_type_name(ds.get())));
}

void TensorFile::read_f64(const std::string& dataset, int64_t first, int64_t count, double* dst) const {
  Handle ds = impl_->open_dataset(dataset);
  impl_->check_range(dataset, ds.get(), first, count);
  const StoredKind kind = detail::classify(ds.get());
  if (kind == StoredKind::f64 || kind == StoredKind::f32)  // f32 → f64 is exact; HDF5 converts
    return impl_->read(dataset, ds.get(), H5T_NATIVE_DOUBLE, first, count, dst);
  if (kind == StoredKind::bf16_float || kind == StoredKind::bf16_uint16) {
    std::vector<bf16_bits> bits(static_cast<size_t>(count));
    read_bf16(dataset, first, count, bits.data());
    for (int64_t i = 0; i < count; ++i) dst[i] = bf16_to_float(bits[size_t(i)]);
    return;
  }
  impl_->fail(fmt::format("dataset {} is {}; expected float64", dataset, detail::stored_type_name(ds.get())));
}

std::vector<int64_t> unravel_index(int64_t flat, const std::vector<int64_t>& dims) {
  std::vector<int64_t> index(dims.size());
  for (size_t i = dims.size(); i-- > 0;) {
    const int64_t extent = std::max<int64_t>(dims[i], 1);
    index[i] = flat % extent;
    flat /= extent;
  }
  return index;
}

bool same_token_layout(const std::vector<int64_t>& a, const std::vector<int64_t>& b) {
  auto running_products = [](const std::vector<int64_t>& dims) {
    std::set<int64_t> products;
    int64_t p = 1;
    if (std::find(dims.begin(), dims.end(), int64_t{0}) != dims.end()) return std::set<int64_t>{0};
    for (int64_t d : dims) {
      if (d == 1) continue;  // an axis of length 1 does not split the tokens
      if (d < 0 || __builtin_mul_overflow(p, d, &p)) return std::set<int64_t>{-1};  // no tensor has these dims
      products.insert(p);
    }
    if (products.empty()) products.insert(1);
    return products;
  };
  const std::set<int64_t> pa = running_products(a), pb = running_products(b);
  if (pa.count(-1) || pb.count(-1) || *pa.rbegin() != *pb.rbegin()) return false;
  return std::includes(pa.begin(), pa.end(), pb.begin(), pb.end()) ||
         std::includes(pb.begin(), pb.end(), pa.begin(), pa.end());
}

std::optional<std::string> find_results_group(const TensorFile& file, const std::string& name) {
  const std::vector<std::string> groups = file.policies();
  auto has_group = [&](const std::string& g) { return std::find(groups.begin(), groups.end(), g) != groups.end(); };
  std::string alias;  // the group of the built-in policy NAME names (":hf" → hf-bf16)
  try {
    alias = find_policy(name).name;
  } catch (const std::invalid_argument&) {
  }
  if (has_group(name)) return "/results/" + name;
  const std::vector<std::pair<std::string, std::string>> unusable = file.unusable_policies();
  auto refuse_if_unusable = [&](const std::string& group) {
    for (const auto& [g, what] : unusable)
      if (g == group) throw InputError(fmt::format("{}: /results/{} is {}", file.path(), g, what));
  };
  refuse_if_unusable(name);  // the group named, broken: never silently its alias's group instead
  if (!alias.empty() && has_group(alias)) return "/results/" + alias;
  if (!alias.empty()) refuse_if_unusable(alias);
  return std::nullopt;
}

}  // namespace mhc::io
