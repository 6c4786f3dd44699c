#include "io/hdf5_util.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <map>
#include <mutex>
#include <set>
#include <stdexcept>

#include "io/files.hpp"
#include "report/text_safety.hpp"

namespace mhc::io::detail {

void silence_hdf5_errors() {
  static std::once_flag once;
  std::call_once(once, [] { H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr); });
}

namespace {

herr_t refuse_external_traversal(const char*, const char*, const char*, const char*, unsigned*, hid_t, void*) {
  return -1;
}

// A property list of `cls` with the refusing callback, made once per process.
hid_t refusing_list(hid_t cls) {
  const hid_t list = H5Pcreate(cls);
  if (list < 0 || H5Pset_elink_cb(list, refuse_external_traversal, nullptr) < 0)
    throw std::runtime_error("the HDF5 library could not be set up to refuse external links");
  return list;
}

}  // namespace

hid_t local_links() {
  static const hid_t list = refusing_list(H5P_LINK_ACCESS);  // never closed: HDF5 releases it at exit
  return list;
}

hid_t local_dataset_access() {
  static const hid_t list = refusing_list(H5P_DATASET_ACCESS);  // never closed: HDF5 releases it at exit
  return list;
}

hid_t local_group_access() {
  static const hid_t list = refusing_list(H5P_GROUP_ACCESS);  // never closed: HDF5 releases it at exit
  return list;
}

namespace {

// HDF5's error stack, innermost (where the error was detected) first.
herr_t note_failure(unsigned, const H5E_error2_t* e, void* data) {
  static_cast<std::vector<std::string>*>(data)->emplace_back(e->desc ? e->desc : "");
  return 0;
}

std::vector<std::string> failure_descriptions() {
  std::vector<std::string> descriptions;
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, note_failure, &descriptions);
  return descriptions;
}

bool failure_mentions(const std::vector<std::string>& descriptions, const char* text) {
  return std::any_of(descriptions.begin(), descriptions.end(),
                     [&](const std::string& d) { return d.find(text) != std::string::npos; });
}

}  // namespace

std::string hdf5_failure_reason() {
  const std::vector<std::string> descriptions = failure_descriptions();
  for (const std::string& d : descriptions)  // the sec2 driver's read/write failures: "... errno = N, ..."
    if (const size_t at = d.find("errno = "); at != std::string::npos)
      if (const int err = std::atoi(d.c_str() + at + 8); err > 0) return system_reason(err);
  // "required filter 'lzf' is not registered": an h5py lzf or a blosc file read by an HDF5 without that plugin.
  for (const std::string& d : descriptions)
    if (const size_t at = d.find("required filter '"); at != std::string::npos) {
      const size_t name = at + 17, end = d.find('\'', name);
      return fmt::format("it needs the HDF5 filter '{}', which this HDF5 library does not have (install the "
                         "filter's plugin and point HDF5_PLUGIN_PATH at it, or rewrite the file without it)",
                         d.substr(name, end == std::string::npos ? std::string::npos : end - name));
    }
  return descriptions.empty() ? "the HDF5 library reported an error" : "HDF5: " + descriptions.front();
}

std::optional<bool> file_has_root_attribute(const std::string& path, const std::string& name, std::string& why) {
  silence_hdf5_errors();
  const htri_t hdf5 = H5Fis_hdf5(path.c_str());
  if (hdf5 == 0) return false;
  if (hdf5 < 0) {
    why = "it cannot be read";
    return std::nullopt;
  }
  const Handle file(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT));
  if (file.valid()) return attribute_exists(file.get(), name);
  why = failure_mentions(failure_descriptions(), "unable to lock")
            ? "it is an HDF5 file another process has open for writing (HDF5 file locking)"
            : "it is an HDF5 file that does not open (truncated or corrupt)";
  return std::nullopt;
}

Handle open_file_read_only(const std::string& path) {
  silence_hdf5_errors();
  if (H5Fis_hdf5(path.c_str()) <= 0)
    throw InputError(fmt::format("{} is not an HDF5 file (or it is truncated or unreadable)", path));
  Handle file(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT));
  if (file.valid()) return file;
  // HDF5 ≥ 1.10 locks a file it opens: one a writer still holds open (a training job's h5py) cannot be read.
  if (failure_mentions(failure_descriptions(), "unable to lock"))
    throw InputError(fmt::format("{} could not be opened: another process has it open for writing (HDF5 file "
                                 "locking); read it once that writer has closed it",
                                 path));
  throw InputError(fmt::format("{} could not be opened as HDF5 (the file is truncated or corrupt)", path));
}

std::optional<std::string> external_link_target(hid_t location, const std::string& path) {
  H5L_info_t link;
  if (H5Lget_info(location, path.c_str(), &link, local_links()) < 0 || link.type != H5L_TYPE_EXTERNAL)
    return std::nullopt;
  std::vector<char> value(link.u.val_size + 1, '\0');
  const char* file = nullptr;
  const char* object = nullptr;
  unsigned flags = 0;
  std::string target = "another file";
  if (H5Lget_val(location, path.c_str(), value.data(), value.size(), local_links()) >= 0 &&
      H5Lunpack_elink_val(value.data(), link.u.val_size, &flags, &file, &object) >= 0 && file && object)
    target = fmt::format("{}:{}", file, object);
  return fmt::format("an external link to {}, which mhcdiff does not follow (it reads only data stored in the file "
                     "itself; copy the data in)",
                     target);
}

namespace {

// Whether the union of the virtual dataset's mapped selections covers its whole extent: an element no mapping
// reaches reads as the fill value. Hyperslab selections are united (H5Scombine_select); an "all" selection covers
// everything; nullopt when a selection is of another kind or HDF5 cannot say.
std::optional<bool> virtual_mappings_cover(hid_t dataset, hid_t dcpl, size_t mappings) {
  Handle space(H5Dget_space(dataset));
  const hssize_t total = space.valid() ? H5Sget_simple_extent_npoints(space.get()) : -1;
  if (total < 0) return std::nullopt;
  Handle covered;
  for (size_t i = 0; i < mappings; ++i) {
    Handle mapped(H5Pget_virtual_vspace(dcpl, i));
    if (!mapped.valid()) return std::nullopt;
    const H5S_sel_type type = H5Sget_select_type(mapped.get());
    if (type == H5S_SEL_ALL) return true;
    if (type == H5S_SEL_NONE) continue;
    if (type != H5S_SEL_HYPERSLABS) return std::nullopt;
    covered = covered.valid() ? Handle(H5Scombine_select(covered.get(), H5S_SELECT_OR, mapped.get()))
                              : Handle(H5Scopy(mapped.get()));
    if (!covered.valid()) return std::nullopt;
  }
  if (!covered.valid()) return total == 0;
  const hssize_t n = H5Sget_select_npoints(covered.get());
  if (n < 0) return std::nullopt;
  return n == total;
}

// The checks of the virtual datasets over this same file ("." as their file name) that one dataset leads to. Sources
// found good are remembered: virtual datasets over virtual datasets were otherwise checked once per path to them,
// exponential in their depth; the sources on the current path tell a cycle.
class SameFileSources {
 public:
  explicit SameFileSources(hid_t dataset) : file_(H5Iget_file_id(dataset)) {
    if (std::string name = object_name(dataset); name != "?") on_path_.insert(std::move(name));
  }

  // What keeps `dataset` from being data stored in this file, if anything (stored_outside_file's answer).
  std::optional<std::string> problem(hid_t dataset) {
    uint64_t paths = 0;
    if (auto why = problem(dataset, 0, paths)) return why;
    if (paths > kMaxPaths)
      return fmt::format("a virtual dataset whose mappings reach their data through more than {} paths of nested "
                         "virtual datasets, each of which HDF5 follows while reading (copy the data in)",
                         kMaxPaths);
    return std::nullopt;
  }

 private:
  // As above, adding to `paths` how many ways HDF5 reaches stored data from `dataset` (1 for stored data; the sum over
  // its mappings for a virtual dataset, saturating past kMaxPaths): a diamond of virtual datasets 30 levels deep
  // passes every other check but makes HDF5's read follow 2^30 paths.
  std::optional<std::string> problem(hid_t dataset, int depth, uint64_t& paths) {
    Handle dcpl(H5Dget_create_plist(dataset));
    if (!dcpl.valid()) return std::nullopt;
    if (H5Pget_external_count(dcpl.get()) > 0) {
      std::vector<char> name(4096, '\0');
      off_t offset = 0;
      hsize_t size = 0;
      H5Pget_external(dcpl.get(), 0, name.size() - 1, name.data(), &offset, &size);
      return fmt::format("stored in the external file '{}', which mhcdiff does not read (it reads only data stored "
                         "in the file itself; copy the data in)",
                         name.data());
    }
    if (H5Pget_layout(dcpl.get()) != H5D_VIRTUAL) {
      // A source's storage never written reads as its fill value through the mapping too.
      if (depth > 0)
        if (auto why = unwritten_storage(dataset)) return why;
      paths = std::min(paths + 1, kMaxPaths + 1);
      return std::nullopt;
    }
    size_t mappings = 0;
    H5Pget_virtual_count(dcpl.get(), &mappings);
    for (size_t i = 0; i < mappings; ++i) {
      const ssize_t length = H5Pget_virtual_filename(dcpl.get(), i, nullptr, 0);
      std::vector<char> name(size_t(std::max<ssize_t>(length, 0)) + 1, '\0');
      H5Pget_virtual_filename(dcpl.get(), i, name.data(), name.size());
      if (std::string(name.data()) != ".")  // "." is the file itself
        return fmt::format("a virtual dataset over the file '{}', which mhcdiff does not read (it reads only data "
                           "stored in the file itself; copy the data in)",
                           name.data());
      if (auto why = mapping_problem(dataset, dcpl.get(), i, depth, paths)) return why;
    }
    const std::optional<bool> covered = virtual_mappings_cover(dataset, dcpl.get(), mappings);
    if (!covered)
      return "a virtual dataset whose mappings mhcdiff cannot check (it reads only data stored in the file)";
    if (!*covered) return "a virtual dataset that maps only part of its shape (the rest would read as its fill value)";
    return std::nullopt;
  }

  // Mapping i of `dataset`: its source must be a dataset of this file, holding the same values (HDF5 would convert
  // others silently, past the refusal of inexact ones), selected within its shape, and itself data stored in this file.
  std::optional<std::string> mapping_problem(hid_t dataset, hid_t dcpl, size_t i, int depth, uint64_t& paths) {
    const ssize_t length = H5Pget_virtual_dsetname(dcpl, i, nullptr, 0);
    std::vector<char> name(size_t(std::max<ssize_t>(length, 0)) + 1, '\0');
    H5Pget_virtual_dsetname(dcpl, i, name.data(), name.size());
    const std::string source(name.data());
    const std::string over = fmt::format("a virtual dataset over {} of this file", source);
    Handle ds(file_.valid() ? H5Dopen2(file_.get(), source.c_str(), local_dataset_access()) : H5I_INVALID_HID);
    if (!ds.valid()) {
      if (auto why = file_.valid() ? unusable_component(file_.get(), source) : std::nullopt)
        return fmt::format("{}, where {}", over, *why);
      return fmt::format("{}, which is not a dataset there (it would read as its fill value)", over);
    }
    if (!same_values(dataset, ds.get())) {
      const std::string own = stored_type_name(dataset), theirs = stored_type_name(ds.get());
      return fmt::format("{} of another type ({}; the virtual dataset is {}), which HDF5 would convert while reading "
                         "(mhcdiff reads values as they are stored)",
                         over, theirs == own ? theirs + " of another layout" : theirs, own);
    }
    if (auto why = selection_problem(dcpl, i, ds.get())) return fmt::format("{}, {}", over, *why);
    if (auto known = good_.find(source); known != good_.end()) {
      paths = std::min(paths + known->second, kMaxPaths + 1);
      return std::nullopt;
    }
    if (on_path_.count(source))
      return fmt::format("{}, which leads back to itself through virtual datasets (a cycle)", over);
    if (depth >= kMaxDepth) return fmt::format("{}, through more than {} levels of virtual datasets", over, kMaxDepth);
    on_path_.insert(source);
    uint64_t source_paths = 0;
    std::optional<std::string> why = problem(ds.get(), depth + 1, source_paths);
    on_path_.erase(source);
    if (why) return fmt::format("{}, which is {}", over, *why);
    good_.emplace(source, source_paths);
    paths = std::min(paths + source_paths, kMaxPaths + 1);
    return std::nullopt;
  }

  // Whether reading `source` as `dataset`'s type gives its stored values unchanged: the same type, or the same
  // number type in the other byte order (a conversion HDF5 does exactly).
  static bool same_values(hid_t dataset, hid_t source) {
    Handle own(H5Dget_type(dataset)), theirs(H5Dget_type(source));
    if (H5Tequal(own.get(), theirs.get()) > 0) return true;
    const H5T_class_t cls = H5Tget_class(own.get());
    if ((cls != H5T_INTEGER && cls != H5T_FLOAT) || H5Tget_class(theirs.get()) != cls) return false;
    Handle swapped(H5Tcopy(theirs.get()));
    return swapped.valid() && H5Tset_order(swapped.get(), H5Tget_order(own.get())) >= 0 &&
           H5Tequal(own.get(), swapped.get()) > 0;
  }

  // Whether the source selection of mapping i lies within the source's shape. An "all" selection (h5py's
  // VirtualSource of a whole dataset; HDF5 1.10 hands it back with rank 0) is the whole source, which must hold as many
  // elements as the mapping's virtual part.
  static std::optional<std::string> selection_problem(hid_t dcpl, size_t i, hid_t source) {
    Handle selected(H5Pget_virtual_srcspace(dcpl, i)), mapped(H5Pget_virtual_vspace(dcpl, i));
    if (!selected.valid() || !mapped.valid()) return "whose mapping mhcdiff cannot check";
    const std::vector<hsize_t> dims = dataset_dims(source);
    const hssize_t wanted = H5Sget_select_npoints(mapped.get());
    switch (H5Sget_select_type(selected.get())) {
      case H5S_SEL_NONE: return std::nullopt;
      case H5S_SEL_ALL: {
        Handle space(H5Dget_space(source));
        const hssize_t has = H5Sget_simple_extent_npoints(space.get());
        if (wanted >= 0 && has == wanted) return std::nullopt;
        return fmt::format("mapped whole ({} elements) onto {} elements of the virtual dataset (the rest would read as "
                           "its fill value)",
                           has, wanted);
      }
      case H5S_SEL_HYPERSLABS: {
        const int rank = H5Sget_simple_extent_ndims(selected.get());
        std::vector<hsize_t> start(size_t(std::max(rank, 0))), end(start.size());
        if (rank != int(dims.size()) || H5Sget_select_bounds(selected.get(), start.data(), end.data()) < 0)
          return "whose mapping mhcdiff cannot check (an unlimited selection, or one of another rank)";
        if (std::equal(end.begin(), end.end(), dims.begin(), [](hsize_t e, hsize_t d) { return e < d; }))
          return std::nullopt;
        return "whose mapped part reaches past that dataset's shape (it would read as its fill value there)";
      }
      default: return "whose mapping mhcdiff cannot check";
    }
  }

  static constexpr int kMaxDepth = 64;
  static constexpr uint64_t kMaxPaths = uint64_t{1} << 18;
  Handle file_;
  std::map<std::string, uint64_t> good_;  // sources found good, with their paths to stored data
  std::set<std::string> on_path_;
};

}  // namespace

std::optional<std::string> stored_outside_file(hid_t dataset) { return SameFileSources(dataset).problem(dataset); }

std::optional<std::string> unwritten_storage(hid_t dataset) {
  const auto dims = dataset_dims(dataset);
  if (const auto n = element_count(dims); !n || *n == 0) return std::nullopt;
  Handle dcpl(H5Dget_create_plist(dataset));
  switch (H5Pget_layout(dcpl.get())) {
    case H5D_CONTIGUOUS: {
      H5D_space_status_t status = H5D_SPACE_STATUS_ERROR;
      if (H5Dget_space_status(dataset, &status) >= 0 && status == H5D_SPACE_STATUS_NOT_ALLOCATED)
        return "never written (it would read as its fill value)";
      return std::nullopt;
    }
    case H5D_CHUNKED: {
      std::vector<hsize_t> chunk(dims.size());
      hsize_t written = 0;
      Handle space(H5Dget_space(dataset));  // HDF5 1.10 takes the whole dataspace here, not H5S_ALL
      if (H5Pget_chunk(dcpl.get(), int(chunk.size()), chunk.data()) != int(dims.size()) ||
          H5Dget_num_chunks(dataset, space.get(), &written) < 0)
        return "a chunked dataset whose chunk index HDF5 cannot read (truncated or corrupt)";
      // The chunks its shape needs, saturating: a file may declare any extent.
      hsize_t needed = 1;
      for (size_t i = 0; i < dims.size(); ++i) {
        const hsize_t along = (dims[i] + chunk[i] - 1) / std::max<hsize_t>(chunk[i], 1);
        if (__builtin_mul_overflow(needed, along, &needed)) needed = std::numeric_limits<hsize_t>::max();
      }
      if (written < needed)
        return fmt::format("written in {} of the {}{} chunks its shape needs (the rest would read as its fill "
                           "value)",
                           written, needed == std::numeric_limits<hsize_t>::max() ? "more than " : "", needed);
      // An extendible dataset can hold chunks beyond its shape (a direct chunk write there), which the count
      // includes: then every chunk of the shape is looked up (at most `written` of them).
      std::vector<hsize_t> max_dims(dims.size());
      H5Sget_simple_extent_dims(space.get(), nullptr, max_dims.data());
      if (std::equal(dims.begin(), dims.end(), max_dims.begin())) return std::nullopt;
      std::vector<hsize_t> offset(dims.size(), 0);
      for (hsize_t k = 0; k < needed; ++k) {
        unsigned filter_mask = 0;
        haddr_t address = HADDR_UNDEF;
        hsize_t size = 0;
        if (H5Dget_chunk_info_by_coord(dataset, offset.data(), &filter_mask, &address, &size) < 0 ||
            address == HADDR_UNDEF)
          return fmt::format("missing its chunk at {} (it would read as its fill value; {} chunks are written, some "
                             "beyond its shape)",
                             dims_text(offset), written);
        for (size_t i = dims.size(); i-- > 0;) {  // the next chunk in row-major order
          offset[i] += chunk[i];
          if (offset[i] < dims[i]) break;
          offset[i] = 0;
        }
      }
      return std::nullopt;
    }
    default: return std::nullopt;  // compact data is stored in the header; virtual: stored_outside_file
  }
}

namespace {
herr_t collect_name(hid_t, const char* name, const H5L_info_t*, void* data) {
  static_cast<std::vector<std::string>*>(data)->emplace_back(name);
  return 0;
}
}  // namespace

std::string top_level_names(hid_t file) {
  std::vector<std::string> names;
  hsize_t idx = 0;
  H5Literate(file, H5_INDEX_NAME, H5_ITER_INC, &idx, collect_name, &names);
  if (names.empty()) return "nothing";
  std::string out;
  for (size_t i = 0; i < names.size() && i < 8; ++i) out += (i ? ", /" : "/") + names[i];
  if (names.size() > 8) out += fmt::format(" and {} more", names.size() - 8);
  return out;
}

namespace {

// A link path as HDF5 resolves it: "." components and repeated slashes dropped ("/inputs/./x" is "/inputs/x").
std::string normal_link_path(const std::string& path) {
  std::string out = path.starts_with('/') ? "/" : "";
  for (size_t begin = 0; begin <= path.size();) {
    const size_t end = std::min(path.find('/', begin), path.size());
    const std::string part = path.substr(begin, end - begin);
    if (!part.empty() && part != ".") out += (out.empty() || out.ends_with('/') ? "" : "/") + part;
    begin = end + 1;
  }
  return out.empty() ? "." : out;
}

}  // namespace

std::string unusable_link_description(hid_t group, const char* name, const H5L_info_t& link) {
  if (auto external = external_link_target(group, name)) return *external;
  // Follows the chain of soft links to where it fails, naming its hops (the first few and the last): a missing
  // object, an external link, a link already passed (a cycle; one to itself included), or more soft links in a
  // row than HDF5 follows.
  static constexpr int kMaxHops = 64;
  static constexpr size_t kShownHops = 6;
  std::vector<std::string> passed{normal_link_path(name)};
  std::vector<std::string> hops;  // "target" or "target (resolved)"
  H5L_info_t info = link;
  auto chain = [&](const std::string& ending) {
    std::string text;
    for (size_t i = 0; i < hops.size(); ++i) {
      if (i == kShownHops && hops.size() > kShownHops + 1) {
        text += fmt::format(", which links on through {} more to {}", hops.size() - kShownHops - 1, hops.back());
        break;
      }
      text += fmt::format("{}{}", i == 0 ? "a link to " : ", which links to ", hops[i]);
    }
    return text + ending;
  };
  auto cannot_open = [&] {
    return hops.empty() ? std::string("a link to an object that cannot be opened")
                        : chain(", which leads to an object that cannot be opened");
  };
  for (int hop = 0; hop < kMaxHops; ++hop) {
    const std::string current = passed.back();
    std::vector<char> target(info.type == H5L_TYPE_SOFT ? info.u.val_size + 1 : 1, '\0');
    if (info.type != H5L_TYPE_SOFT) {
      // The chain ends at an object after all: past HDF5's limit of soft links in a row (H5Pset_nlinks), or the
      // object itself cannot be opened.
      size_t limit = 0;
      if (!hops.empty() && H5Pget_nlinks(local_links(), &limit) >= 0 && hops.size() > limit)
        return chain(fmt::format(", which is an object, but through {} soft links in a row, more than HDF5 "
                                 "follows ({}); link to it directly",
                                 hops.size(), limit));
      return cannot_open();
    }
    if (H5Lget_val(group, current.c_str(), target.data(), target.size(), local_links()) < 0 || !target[0])
      return cannot_open();
    // A relative target is resolved from the group holding the link, not from `group`.
    const size_t slash = current.rfind('/');
    const std::string resolved = normal_link_path(
        target[0] == '/' || slash == std::string::npos ? std::string(target.data())
                                                       : current.substr(0, slash + 1) + target.data());
    hops.push_back(resolved == target.data() ? resolved : fmt::format("{} ({})", target.data(), resolved));
    // A soft link to an external link is as far out of the file as the external link.
    if (auto external = external_link_target(group, resolved)) return chain(", which is " + *external);
    if (std::find(passed.begin(), passed.end(), resolved) != passed.end()) return chain(": a cycle of soft links");
    if (H5Lget_info(group, resolved.c_str(), &info, local_links()) < 0) return chain(", which does not exist");
    passed.push_back(resolved);
  }
  return chain(fmt::format(", and on past {} soft links", kMaxHops));
}

std::optional<std::string> unusable_component(hid_t file, const std::string& path) {
  for (size_t end = path.find('/', 1); ; end = path.find('/', end + 1)) {
    const std::string partial = path.substr(0, end);
    H5L_info_t link;
    if (partial.empty() || partial == "/" || H5Lget_info(file, partial.c_str(), &link, local_links()) < 0)
      return std::nullopt;  // a component that is not there at all: plainly missing
    H5O_info_t info;
    if (H5Oget_info_by_name2(file, partial.c_str(), &info, H5O_INFO_BASIC, local_links()) < 0)
      return fmt::format("{} is {}", partial, unusable_link_description(file, partial.c_str(), link));
    if (end == std::string::npos) return std::nullopt;
    if (info.type != H5O_TYPE_GROUP)  // "/inputs" a dataset: "/inputs/x" is not missing, it cannot be there
      return fmt::format("{} is a {}, not a group", partial, info.type == H5O_TYPE_DATASET ? "dataset" : "named type");
  }
}

std::optional<std::string> open_stored_dataset(hid_t file, const std::string& name, Handle& ds) {
  if (auto link = external_link_target(file, name)) return fmt::format("{} is {}", name, *link);
  ds = Handle(H5Dopen2(file, name.c_str(), local_dataset_access()));
  if (!ds.valid()) {
    if (auto why = unusable_component(file, name)) return why;
    return fmt::format("{} is not a dataset", name);
  }
  if (auto outside = stored_outside_file(ds.get())) return fmt::format("dataset {} is {}", name, *outside);
  if (const auto dims = dataset_dims(ds.get()); !element_count(dims))
    return fmt::format("dataset {} has shape {}: more than 2^63 elements, which no tensor has", name, dims_text(dims));
  return std::nullopt;
}

std::optional<int64_t> element_count(const std::vector<hsize_t>& dims) {
  constexpr hsize_t kMax = hsize_t(std::numeric_limits<int64_t>::max());
  // The product of the non-zero dims must fit too: callers multiply subsets of the dims (rows, S), so a zero
  // elsewhere does not make [2^62, 8, 0] safe.
  hsize_t n = 1;
  bool empty = false;
  for (hsize_t d : dims) {
    if (d > kMax) return std::nullopt;
    if (d == 0) {
      empty = true;
      continue;
    }
    if (n > kMax / d) return std::nullopt;
    n *= d;
  }
  return empty ? 0 : int64_t(n);
}

Handle make_bf16_type() {
  // bf16 is the top half of an IEEE binary32: start from F32LE, move the fields, then shrink the size
  // (HDF5 checks the fields against the size, so the fields must be set first).
  Handle t(H5Tcopy(H5T_IEEE_F32LE));
  if (!t.valid() || H5Tset_fields(t.get(), 15, 7, 8, 0, 7) < 0 || H5Tset_ebias(t.get(), 127) < 0 ||
      H5Tset_size(t.get(), 2) < 0)
    throw std::runtime_error("could not build the HDF5 bfloat16 type");
  return t;
}

namespace {

bool has_bf16_attribute(hid_t dataset) {
  auto v = read_string_attribute(dataset, "dtype");
  return v && (*v == "bfloat16" || *v == "bf16");
}

}  // namespace

StoredKind classify(hid_t dataset) {
  Handle type(H5Dget_type(dataset));
  if (!type.valid()) return StoredKind::other;
  const H5T_class_t cls = H5Tget_class(type.get());
  const size_t size = H5Tget_size(type.get());
  if (cls == H5T_FLOAT) {
    size_t spos = 0, epos = 0, esize = 0, mpos = 0, msize = 0;
    H5Tget_fields(type.get(), &spos, &epos, &esize, &mpos, &msize);
    const size_t bias = H5Tget_ebias(type.get());
    if (size == 2 && spos == 15 && epos == 7 && esize == 8 && mpos == 0 && msize == 7 && bias == 127)
      return StoredKind::bf16_float;
    if (size == 2) return StoredKind::float16;
    if (size == 4 && esize == 8 && msize == 23) return StoredKind::f32;
    if (size == 8 && esize == 11 && msize == 52) return StoredKind::f64;
    return StoredKind::other;
  }
  if (cls == H5T_INTEGER && size == 2 && H5Tget_sign(type.get()) == H5T_SGN_NONE)
    return has_bf16_attribute(dataset) ? StoredKind::bf16_uint16 : StoredKind::uint16_plain;
  if (cls == H5T_INTEGER && size == 2 && has_bf16_attribute(dataset)) return StoredKind::bf16_uint16;  // int16 bits
  return StoredKind::other;
}

std::string stored_kind_name(StoredKind k) {
  switch (k) {
    case StoredKind::bf16_float: return "bfloat16";
    case StoredKind::bf16_uint16: return "bfloat16 (as uint16 bits)";
    case StoredKind::f32: return "float32";
    case StoredKind::f64: return "float64";
    case StoredKind::uint16_plain: return "uint16 without dtype=\"bfloat16\" attribute";
    case StoredKind::float16: return "float16";
    case StoredKind::other: return "an unsupported type";
  }
  return "an unsupported type";
}

std::optional<DType> dtype_of(StoredKind k) {
  switch (k) {
    case StoredKind::bf16_float:
    case StoredKind::bf16_uint16: return DType::bf16;
    case StoredKind::f32: return DType::f32;
    case StoredKind::f64: return DType::f64;
    default: return std::nullopt;
  }
}

std::vector<hsize_t> dataset_dims(hid_t dataset) {
  Handle space(H5Dget_space(dataset));
  const int rank = H5Sget_simple_extent_ndims(space.get());
  if (rank < 0) throw std::runtime_error("could not read a dataset's extent");
  std::vector<hsize_t> dims(static_cast<size_t>(rank));
  H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr);
  return dims;
}

std::string dims_text(const std::vector<int64_t>& dims) { return fmt::format("[{}]", fmt::join(dims, ",")); }
std::string dims_text(const std::vector<hsize_t>& dims) { return fmt::format("[{}]", fmt::join(dims, ",")); }

std::string index_text(int64_t flat, const std::vector<hsize_t>& dims) {
  return dims_text(unravel_index(flat, std::vector<int64_t>(dims.begin(), dims.end())));
}

namespace {

struct Block {
  std::vector<hsize_t> start, count;
  uint64_t elements = 0;
};

// Splits elements [first, first+count) of a row-major extent into blocks: at each step the largest aligned
// run of sub-arrays starting at `first` (at most ~2·rank blocks in all; one for whole token rows).
std::vector<Block> flat_blocks(const std::vector<hsize_t>& dims, uint64_t first, uint64_t count) {
  const size_t n = dims.size();
  std::vector<Block> blocks;
  if (n == 0) {
    blocks.push_back({{}, {}, 1});
    return blocks;
  }
  std::vector<uint64_t> stride(n, 1);
  for (size_t i = n - 1; i > 0; --i) stride[i - 1] = stride[i] * dims[i];
  uint64_t a = first;
  const uint64_t b = first + count;
  while (a < b) {
    size_t level = 0;
    while (!(a % stride[level] == 0 && a + stride[level] <= b)) ++level;
    Block blk;
    blk.start.resize(n);
    blk.count.resize(n);
    uint64_t rest = a;
    for (size_t i = 0; i < n; ++i) {
      blk.start[i] = rest / stride[i];
      rest %= stride[i];
    }
    const uint64_t runs = std::min<uint64_t>((b - a) / stride[level], dims[level] - blk.start[level]);
    for (size_t i = 0; i < n; ++i) blk.count[i] = i < level ? 1 : i == level ? runs : dims[i];
    blk.elements = runs * stride[level];
    blocks.push_back(std::move(blk));
    a += runs * stride[level];
  }
  return blocks;
}

// One H5Dread/H5Dwrite per block, with a memory space of the block's own shape: HDF5 1.10 maps chunks
// element by element when memory and file selections differ in shape (measured: 90 % of a run's time), and
// block by block when they are the same.
template <class Transfer>
void transfer_flat(hid_t dataset, hid_t mem_type, uint64_t first, uint64_t count, char* buffer, Transfer io) {
  const auto dims = dataset_dims(dataset);
  const size_t elem = H5Tget_size(mem_type);
  Handle file_space(H5Dget_space(dataset));
  for (const Block& blk : flat_blocks(dims, first, count)) {
    Handle mem_space;
    if (dims.empty()) {
      H5Sselect_all(file_space.get());
      mem_space = Handle(H5Screate(H5S_SCALAR));
    } else {
      if (H5Sselect_hyperslab(file_space.get(), H5S_SELECT_SET, blk.start.data(), nullptr, blk.count.data(),
                              nullptr) < 0)
        throw std::runtime_error("HDF5 hyperslab selection failed");
      mem_space = Handle(H5Screate_simple(int(blk.count.size()), blk.count.data(), nullptr));
    }
    if (io(dataset, mem_type, mem_space.get(), file_space.get(), buffer) < 0)
      throw std::runtime_error(hdf5_failure_reason());  // before any other HDF5 call clears the error stack
    buffer += blk.elements * elem;
  }
}

}  // namespace

void read_flat(hid_t dataset, hid_t mem_type, uint64_t first, uint64_t count, void* dst) {
  if (count == 0) return;
  try {
    transfer_flat(dataset, mem_type, first, count, static_cast<char*>(dst),
                  [](hid_t ds, hid_t mt, hid_t ms, hid_t fs, char* p) { return H5Dread(ds, mt, ms, fs, H5P_DEFAULT, p); });
  } catch (const std::runtime_error& e) {
    // A reason only in HDF5's terms (a Fletcher-32 error, a chunk that does not inflate) is damage to the file.
    const std::string reason = e.what();
    throw std::runtime_error(reason.rfind("HDF5: ", 0) == 0 ? reason + " (the file is truncated or corrupt)" : reason);
  }
}

void write_flat(hid_t dataset, hid_t mem_type, uint64_t first, uint64_t count, const void* src) {
  if (count == 0) return;
  // H5Dwrite takes a const buffer; the cast only lets one helper serve both directions.
  transfer_flat(dataset, mem_type, first, count, static_cast<char*>(const_cast<void*>(src)),
                [](hid_t ds, hid_t mt, hid_t ms, hid_t fs, char* p) { return H5Dwrite(ds, mt, ms, fs, H5P_DEFAULT, p); });
}

bool attribute_exists(hid_t object, const std::string& name) { return H5Aexists(object, name.c_str()) > 0; }

bool link_exists(hid_t file, const std::string& path) {
  // H5Lexists needs every intermediate group to exist: walk the path one component at a time.
  std::string partial;
  size_t pos = 0;
  while (pos < path.size()) {
    size_t next = path.find('/', pos + 1);
    partial = path.substr(0, next);
    if (partial != "/" && !partial.empty() && H5Lexists(file, partial.c_str(), local_links()) <= 0) return false;
    if (next == std::string::npos) break;
    pos = next;
  }
  return true;
}

void write_string_attribute(hid_t object, const std::string& name, const std::string& value) {
  Handle type(H5Tcopy(H5T_C_S1));
  H5Tset_size(type.get(), H5T_VARIABLE);
  H5Tset_cset(type.get(), H5T_CSET_UTF8);
  Handle space(H5Screate(H5S_SCALAR));
  if (H5Aexists(object, name.c_str()) > 0) H5Adelete(object, name.c_str());
  Handle attr(H5Acreate2(object, name.c_str(), type.get(), space.get(), H5P_DEFAULT, H5P_DEFAULT));
  const char* data = value.c_str();
  if (!attr.valid() || H5Awrite(attr.get(), type.get(), &data) < 0)
    throw std::runtime_error("could not write attribute " + name);
}

namespace {
template <class T>
void write_scalar_attribute(hid_t object, const std::string& name, hid_t file_type, hid_t mem_type, T value) {
  Handle space(H5Screate(H5S_SCALAR));
  if (H5Aexists(object, name.c_str()) > 0) H5Adelete(object, name.c_str());
  Handle attr(H5Acreate2(object, name.c_str(), file_type, space.get(), H5P_DEFAULT, H5P_DEFAULT));
  if (!attr.valid() || H5Awrite(attr.get(), mem_type, &value) < 0)
    throw std::runtime_error("could not write attribute " + name);
}
}  // namespace

void write_double_attribute(hid_t object, const std::string& name, double value) {
  write_scalar_attribute(object, name, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, value);
}

void write_int_attribute(hid_t object, const std::string& name, int64_t value) {
  write_scalar_attribute(object, name, H5T_STD_I64LE, H5T_NATIVE_INT64, value);
}

namespace {

// How long reading one variable-length string attribute may take before the file is called damaged: the time of
// one small read from HDF5's global heap, many times over (MHCDIFF_HEAP_READ_SECONDS sets it; the tests use 1).
double heap_read_limit_seconds() {
  if (const char* v = std::getenv("MHCDIFF_HEAP_READ_SECONDS")) {
    char* end = nullptr;
    const double seconds = std::strtod(v, &end);
    if (end != v && *end == '\0' && seconds > 0) return seconds;
  }
  return 30.0;
}

// "attribute @name of /path in file.h5", for the stall message.
std::string attribute_place(hid_t attr) {
  auto name_of = [&](auto get) {
    const ssize_t size = get(nullptr, 0);
    if (size <= 0) return std::string("?");
    std::string text(static_cast<size_t>(size) + 1, '\0');
    get(text.data(), text.size());
    text.resize(static_cast<size_t>(size));
    return text;
  };
  return fmt::format("attribute @{} of {} in {}",
                     name_of([&](char* buf, size_t size) { return H5Aget_name(attr, size, buf); }),
                     object_name(attr),
                     name_of([&](char* buf, size_t size) { return H5Fget_name(attr, buf, size); }));
}

std::vector<std::string> read_strings(hid_t attr, hid_t type, hssize_t n) {
  std::vector<std::string> out;
  if (H5Tis_variable_str(type) > 0) {
    Handle mem(H5Tcopy(H5T_C_S1));
    H5Tset_size(mem.get(), H5T_VARIABLE);
    H5Tset_cset(mem.get(), H5Tget_cset(type));
    std::vector<char*> buf(static_cast<size_t>(n), nullptr);
    // The strings live in HDF5's global heap, whose reader in HDF5 1.10 loops forever on a collection damaged in a
    // particular way (a free-space object of size 0); h5dump hangs on such a file too. Hence the guard.
    const double limit = heap_read_limit_seconds();
    const StallGuard guard(fmt::format("reading the {} took more than {:g} s: HDF5 1.10 loops forever on some "
                                       "damaged files (a damaged global heap, where string attributes live); check the "
                                       "file with h5dump, and if it is intact, raise MHCDIFF_HEAP_READ_SECONDS. "
                                       "Nothing was written.",
                                       attribute_place(attr), limit),
                           limit);
    if (H5Aread(attr, mem.get(), buf.data()) < 0) return out;
    for (char* s : buf) out.emplace_back(s ? s : "");
    Handle space(H5Aget_space(attr));
    H5Dvlen_reclaim(mem.get(), space.get(), H5P_DEFAULT, buf.data());
    return out;
  }
  const size_t size = H5Tget_size(type);
  Handle mem(H5Tcopy(type));
  std::vector<char> buf(size * static_cast<size_t>(n) + 1, '\0');
  if (H5Aread(attr, mem.get(), buf.data()) < 0) return out;
  // A fixed-length string padded with blanks (H5T_STR_SPACEPAD, Fortran's way) holds its text without them.
  const bool space_padded = H5Tget_strpad(type) == H5T_STR_SPACEPAD;
  for (hssize_t i = 0; i < n; ++i) {
    const char* s = buf.data() + static_cast<size_t>(i) * size;
    std::string text(s, strnlen(s, size));
    if (space_padded) text.erase(text.find_last_not_of(' ') + 1);
    out.push_back(std::move(text));
  }
  return out;
}

std::string attribute_text(hid_t attr) {
  Handle type(H5Aget_type(attr));
  Handle space(H5Aget_space(attr));
  const hssize_t n = H5Sget_simple_extent_npoints(space.get());
  const H5T_class_t cls = H5Tget_class(type.get());
  std::vector<std::string> items;
  if (cls == H5T_STRING) {
    items = read_strings(attr, type.get(), n);
  } else if (cls == H5T_INTEGER && H5Tget_sign(type.get()) == H5T_SGN_NONE) {
    // Read as unsigned: as long long, HDF5 clips 2^63 .. 2^64 − 1 to 2^63 − 1 (a uint64 limit became another
    // number).
    std::vector<unsigned long long> v(static_cast<size_t>(n));
    if (H5Aread(attr, H5T_NATIVE_ULLONG, v.data()) >= 0)
      for (unsigned long long x : v) items.push_back(fmt::format("{}", x));
  } else if (cls == H5T_INTEGER) {
    std::vector<long long> v(static_cast<size_t>(n));
    if (H5Aread(attr, H5T_NATIVE_LLONG, v.data()) >= 0)
      for (long long x : v) items.push_back(fmt::format("{}", x));
  } else if (cls == H5T_FLOAT) {
    std::vector<double> v(static_cast<size_t>(n));
    if (H5Aread(attr, H5T_NATIVE_DOUBLE, v.data()) >= 0)
      for (double x : v) items.push_back(fmt::format("{}", x));
  } else {
    return "(unsupported attribute type)";
  }
  if (items.size() == 1 && H5Sget_simple_extent_ndims(space.get()) == 0) return items[0];
  return fmt::format("[{}]", fmt::join(items, ", "));
}

herr_t collect_attribute_name(hid_t, const char* name, const H5A_info_t*, void* data) {
  static_cast<std::vector<std::string>*>(data)->push_back(name);
  return 0;
}

}  // namespace

std::optional<std::string> read_string_attribute(hid_t object, const std::string& name) {
  if (H5Aexists(object, name.c_str()) <= 0) return std::nullopt;
  Handle attr(H5Aopen(object, name.c_str(), H5P_DEFAULT));
  Handle type(H5Aget_type(attr.get()));
  if (H5Tget_class(type.get()) != H5T_STRING) return std::nullopt;
  Handle space(H5Aget_space(attr.get()));
  if (H5Sget_simple_extent_npoints(space.get()) != 1) return std::nullopt;  // an array: which one would it mean?
  auto v = read_strings(attr.get(), type.get(), 1);
  if (v.empty()) return std::nullopt;
  return v[0];
}

std::optional<std::string> comb_orientation_lookalike(hid_t object, bool include_comb_layout) {
  std::vector<std::string> names;
  hsize_t idx = 0;
  H5Aiterate2(object, H5_INDEX_NAME, H5_ITER_INC, &idx, collect_attribute_name, &names);
  auto squeezed = [](const std::string& text, bool keep_comma) {  // lower case, letters and digits (and commas)
    std::string key;
    for (char c : text)
      if (std::isalnum(static_cast<unsigned char>(c)) || (keep_comma && c == ','))
        key += char(std::tolower(static_cast<unsigned char>(c)));
    return key;
  };
  for (const std::string& name : names) {
    if (name == "comb_layout" && !include_comb_layout) continue;
    const std::string key = squeezed(name, false);
    if (key == "comblayout" || key == "comborder" || key == "comborientation") return name;
    // The value is read only where the name speaks of a layout or an order (a file may hold thousands of
    // attributes, or long ones), and only as a short text: "dst,src", "DST, SRC" or h5py's ['dst', 'src'].
    if (key.find("layout") == std::string::npos && key.find("order") == std::string::npos &&
        key.find("orient") == std::string::npos)
      continue;
    Handle attr(H5Aopen(object, name.c_str(), H5P_DEFAULT));
    Handle type(attr.valid() ? H5Aget_type(attr.get()) : H5I_INVALID_HID);
    if (!type.valid() || H5Tget_class(type.get()) != H5T_STRING) continue;
    const std::string v = squeezed(attribute_text(attr.get()), true);
    if (v == "src,dst" || v == "dst,src") return name;
  }
  return std::nullopt;
}

std::optional<CombLayout> declared_comb_layout(hid_t file, const std::string& path) {
  if (const auto lookalike = comb_orientation_lookalike(file, /*include_comb_layout=*/false))
    throw InputError(fmt::format("{}: root attribute '{}' is not comb_layout, the one attribute mhcdiff reads comb's "
                                 "orientation from; name it comb_layout",
                                 path, report::one_line(*lookalike)));
  const auto value = read_string_attribute(file, "comb_layout");
  if (!value && attribute_exists(file, "comb_layout"))
    throw InputError(fmt::format("{}: root attribute comb_layout is not a string; expected \"src,dst\" or \"dst,src\"",
                                 path));
  if (!value) return std::nullopt;
  if (*value == "src,dst") return CombLayout::src_dst;
  if (*value == "dst,src") return CombLayout::dst_src;
  throw InputError(
      fmt::format("{}: root attribute comb_layout is \"{}\"; expected \"src,dst\" or \"dst,src\"", path, *value));
}

std::vector<std::pair<std::string, std::string>> attributes_as_text(hid_t object) {
  std::vector<std::string> names;
  hsize_t idx = 0;
  H5Aiterate2(object, H5_INDEX_NAME, H5_ITER_INC, &idx, collect_attribute_name, &names);
  std::vector<std::pair<std::string, std::string>> out;
  for (const std::string& name : names) {
    Handle attr(H5Aopen(object, name.c_str(), H5P_DEFAULT));
    out.emplace_back(name, attr.valid() ? attribute_text(attr.get()) : "(unreadable)");
  }
  return out;
}

namespace {
thread_local const ObjectNameHint* g_innermost_hint = nullptr;
}  // namespace

ObjectNameHint::ObjectNameHint(hid_t object, std::function<std::string()> path)
    : path_(std::move(path)), outer_(g_innermost_hint) {
  H5O_info_t info;
  if (H5Oget_info2(object, &info, H5O_INFO_BASIC) >= 0) {
    fileno_ = info.fileno;
    address_ = info.addr;
  }
  g_innermost_hint = this;
}

ObjectNameHint::~ObjectNameHint() { g_innermost_hint = outer_; }

std::string object_name(hid_t object_or_attribute) {
  if (g_innermost_hint) {
    // For an attribute, H5Oget_info describes the object it belongs to.
    H5O_info_t info;
    if (H5Oget_info2(object_or_attribute, &info, H5O_INFO_BASIC) >= 0)
      for (const ObjectNameHint* h = g_innermost_hint; h; h = h->outer_)
        if (h->address_ == info.addr && h->fileno_ == info.fileno) return h->path_();
  }
  const ssize_t size = H5Iget_name(object_or_attribute, nullptr, 0);
  if (size <= 0) return "?";
  std::string text(static_cast<size_t>(size) + 1, '\0');
  H5Iget_name(object_or_attribute, text.data(), text.size());
  text.resize(static_cast<size_t>(size));
  return text;
}

std::string stored_type_name(hid_t dataset) {
  const StoredKind kind = classify(dataset);
  Handle type(H5Dget_type(dataset));
  if (kind == StoredKind::uint16_plain || kind == StoredKind::other) {
    // A dtype attribute that is there with another value: say so, where "without dtype=..." would mislead.
    std::string attr;
    if (attribute_exists(dataset, "dtype")) {
      Handle a(H5Aopen(dataset, "dtype", H5P_DEFAULT));
      Handle a_type(a.valid() ? H5Aget_type(a.get()) : H5I_INVALID_HID);
      const bool text = a_type.valid() && H5Tget_class(a_type.get()) == H5T_STRING;
      const std::string value = a.valid() ? attribute_text(a.get()) : "(unreadable)";
      attr = fmt::format(" with dtype attribute {} (mhcdiff reads \"bfloat16\" or \"bf16\")",
                         text ? fmt::format("\"{}\"", value) : value);
    }
    if (kind == StoredKind::uint16_plain) return attr.empty() ? stored_kind_name(kind) : "uint16" + attr;
    if (!type.valid()) return stored_kind_name(kind);
    const size_t bits = 8 * H5Tget_size(type.get());
    switch (H5Tget_class(type.get())) {
      case H5T_INTEGER: {
        // A 16-bit integer lacks the attribute or has another value; a wider one has the wrong width whatever it says.
        const std::string name = fmt::format("{}int{}", H5Tget_sign(type.get()) == H5T_SGN_NONE ? "u" : "", bits);
        if (bits != 16) return name;
        return name + (attr.empty() ? " without dtype=\"bfloat16\" attribute" : attr);
      }
      case H5T_FLOAT: return fmt::format("a {}-bit float of neither binary32's nor binary64's layout", bits);
      case H5T_STRING: return "a string type";
      case H5T_COMPOUND: return "a compound type";
      case H5T_OPAQUE: return "an opaque type";
      case H5T_ARRAY: return "an array type";
      case H5T_ENUM: return "an enum type";
      case H5T_BITFIELD: return "a bitfield type";
      case H5T_REFERENCE: return "a reference type";
      case H5T_VLEN: return "a variable-length type";
      default: return stored_kind_name(kind);
    }
  }
  if (kind == StoredKind::float16 && type.valid()) {
    size_t spos = 0, epos = 0, esize = 0, mpos = 0, msize = 0;
    H5Tget_fields(type.get(), &spos, &epos, &esize, &mpos, &msize);
    if (!(spos == 15 && epos == 10 && esize == 5 && mpos == 0 && msize == 10 && H5Tget_ebias(type.get()) == 15))
      return "a 16-bit float of neither float16's nor bfloat16's layout";
  }
  return stored_kind_name(kind);
}

}  // namespace mhc::io::detail
