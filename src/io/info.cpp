#include "io/info.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <optional>
#include <vector>

#include "io/files.hpp"
#include "io/hdf5_util.hpp"
#include "io/store.hpp"
#include "report/text_safety.hpp"

namespace mhc::io {

using detail::Handle;

namespace {

struct Walk {
  hid_t file;
  std::string text;
  // The groups visited, as a tree of link names (node 0 is the root): a path is spelled out only where it is
  // printed, since a full path per group takes memory growing with the square of the nesting depth (1.7 GB for
  // 20 000 nested groups).
  struct Node {
    size_t parent;
    std::string name;
  };
  std::vector<Node> nodes;
  // Each group's object address and the node it was first described as: a hard link to a group above it (legal
  // HDF5: h5py's f['back'] = f['/']) made the walk recurse forever; a second name of a group is shown as a pointer
  // to the first instead.
  std::map<haddr_t, size_t> groups_seen;

  std::string path_of(size_t node) const {
    if (node == 0) return "/";
    std::vector<const std::string*> names;
    for (; node != 0; node = nodes[node].parent) names.push_back(&nodes[node].name);
    std::string path;
    for (auto it = names.rbegin(); it != names.rend(); ++it) path += "/" + **it;
    return path;
  }
};

std::string human_bytes(double b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (b >= 1024 && u < 4) {
    b /= 1024;
    ++u;
  }
  return u == 0 ? fmt::format("{:.0f} {}", b, units[u]) : fmt::format("{:.1f} {}", b, units[u]);
}

// `name` in the open group `group`, node `node` of the walk. Opened through the group (by its full path, HDF5 walks
// down from the root for each dataset, and a path counts its soft links against a limit of 16); HDF5 then knows no
// name for it, so the checks below that name it in a message get the walk's (ObjectNameHint).
void describe_dataset(Walk& w, hid_t group, size_t node, const std::string& name) {
  Handle ds(H5Dopen2(group, name.c_str(), detail::local_dataset_access()));
  if (!ds.valid()) {
    w.text += fmt::format("  {:<20} (unreadable)\n", name);
    return;
  }
  const detail::ObjectNameHint named(ds.get(), [&] { return (node == 0 ? "" : w.path_of(node)) + "/" + name; });
  const auto dims = detail::dataset_dims(ds.get());
  uint64_t elements = 1;
  for (hsize_t d : dims) elements *= d;
  Handle type(H5Dget_type(ds.get()));
  const double logical = double(elements) * double(H5Tget_size(type.get()));
  const double stored = double(H5Dget_storage_size(ds.get()));
  std::string storage = fmt::format("{} stored", human_bytes(stored));
  Handle dcpl(H5Dget_create_plist(ds.get()));
  if (H5Pget_layout(dcpl.get()) == H5D_CHUNKED) {
    std::vector<hsize_t> chunk(dims.size());
    H5Pget_chunk(dcpl.get(), int(chunk.size()), chunk.data());
    storage += fmt::format(", chunks {}", detail::dims_text(chunk));
    if (H5Pget_nfilters(dcpl.get()) > 0 && stored > 0) storage += fmt::format(", compressed {:.2f}x", logical / stored);
    // A filter this HDF5 library lacks (an h5py lzf or blosc file): the dataset cannot be read here.
    for (int i = 0; i < H5Pget_nfilters(dcpl.get()); ++i) {
      unsigned flags = 0, config = 0;
      size_t values = 0;
      char filter_name[256] = "";
      const H5Z_filter_t id = H5Pget_filter2(dcpl.get(), unsigned(i), &flags, &values, nullptr, sizeof filter_name,
                                             filter_name, &config);
      if (id >= 0 && H5Zfilter_avail(id) <= 0)
        storage += fmt::format(", needs the HDF5 filter '{}' (id {}), not available here", filter_name, id);
    }
  }
  if (auto outside = detail::stored_outside_file(ds.get())) storage += fmt::format(", {}", *outside);
  if (auto unwritten = detail::unwritten_storage(ds.get())) storage += fmt::format(", {}", *unwritten);
  w.text += fmt::format("  {:<20} {:<26} {:<18} {}\n", report::one_line(name),
                        report::one_line(detail::stored_type_name(ds.get())), detail::dims_text(dims),
                        report::one_line(storage));
}

void describe_attributes(Walk& w, const std::vector<std::pair<std::string, std::string>>& attributes,
                         const char* indent) {
  // Names and values as one line each: a newline in either would start a line that is not one of the listing's.
  for (const auto& [k, v] : attributes)
    w.text += fmt::format("{}@{} = {}\n", indent, report::one_line(k), report::one_line(v));
}


struct Children {
  std::vector<std::pair<std::string, haddr_t>> groups;  // name, object address
  std::vector<std::string> datasets;
  std::vector<std::pair<std::string, std::string>> unfollowed;  // links leading out of the file or nowhere
};

herr_t sort_child(hid_t group, const char* name, const H5L_info_t* link, void* data) {
  auto* c = static_cast<Children*>(data);
  H5O_info_t info;
  // An external link is described without a lookup through it: the refusing callback makes HDF5 ask for the name of
  // `group`, which it has none for (opened by address), and search the whole file (34 s for 3 000 links; a stack
  // overflow under 30 000 nested groups).
  if (link->type == H5L_TYPE_EXTERNAL ||
      H5Oget_info_by_name2(group, name, &info, H5O_INFO_BASIC, detail::local_links()) < 0) {
    std::string what = detail::unusable_link_description(group, name, *link);
    if (link->type == H5L_TYPE_EXTERNAL) what = what.substr(0, what.find(',')) + " (not followed)";
    c->unfollowed.emplace_back(name, what);
    return 0;
  }
  if (info.type == H5O_TYPE_GROUP) c->groups.emplace_back(name, info.addr);
  else if (info.type == H5O_TYPE_DATASET) c->datasets.emplace_back(name);
  return 0;
}

// A group described, with its subgroups still to visit.
struct OpenGroup {
  size_t node;  // in Walk::nodes
  std::vector<std::pair<std::string, haddr_t>> subgroups;  // name, object address; in listing order
  size_t next = 0;
};

// Describes the group at object address `address`, node `node` of the walk: its attributes, datasets and unfollowed
// links. Returns its subgroups for the walk, or nothing when it cannot be opened. Opened by its address, not by its
// link in the parent: HDF5 gives an object opened by name its full path, built anew for each nested group, so a walk
// down 30 000 nested groups took 44 s; by address, about 1 s (the walk prints its own paths).
std::optional<OpenGroup> describe_group(Walk& w, size_t node, haddr_t address) {
  Handle g(H5Oopen_by_addr(w.file, address));
  if (!g.valid()) return std::nullopt;
  const detail::ObjectNameHint named(g.get(), [&] { return w.path_of(node); });
  w.groups_seen.emplace(address, node);
  Children c;
  hsize_t idx = 0;
  H5Literate(g.get(), H5_INDEX_NAME, H5_ITER_INC, &idx, sort_child, &c);
  const auto attributes = node == 0 ? std::vector<std::pair<std::string, std::string>>{}  // printed by describe_file
                                     : detail::attributes_as_text(g.get());
  if (node != 0 && (!attributes.empty() || !c.datasets.empty() || !c.unfollowed.empty())) {
    w.text += fmt::format("\n{}\n", report::one_line(w.path_of(node)));
    describe_attributes(w, attributes, "  ");
  }
  for (const std::string& d : c.datasets) describe_dataset(w, g.get(), node, d);
  for (const auto& [name, what] : c.unfollowed)
    w.text += fmt::format("  {:<20} {}\n", report::one_line(name), report::one_line(what));
  // /inputs first, then /results and its policies, then anything else (name order).
  std::stable_sort(c.groups.begin(), c.groups.end(), [&](const auto& a, const auto& b) {
    auto rank = [](const std::string& n) { return n == "inputs" ? 0 : n == "results" ? 1 : 2; };
    return rank(a.first) < rank(b.first);
  });
  return OpenGroup{node, std::move(c.groups)};
}

// Every group under the root, depth first, each before its subgroups. A stack of open groups rather than recursion:
// a file of 20 000 nested groups (a few hundred KB) overflowed the call stack.
void describe_tree(Walk& w, haddr_t root_address) {
  std::vector<OpenGroup> open;
  w.nodes.push_back({0, ""});
  if (auto root = describe_group(w, 0, root_address)) open.push_back(std::move(*root));
  while (!open.empty()) {
    OpenGroup& top = open.back();
    if (top.next == top.subgroups.size()) {
      open.pop_back();
      continue;
    }
    const auto [sub, sub_address] = top.subgroups[top.next++];
    w.nodes.push_back({top.node, sub});
    const size_t sub_node = w.nodes.size() - 1;
    if (auto seen = w.groups_seen.find(sub_address); seen != w.groups_seen.end()) {
      w.text += fmt::format("\n{}\n  the group {} again (another name of it, by a hard or soft link; not described "
                            "twice)\n",
                            report::one_line(w.path_of(sub_node)), report::one_line(w.path_of(seen->second)));
    } else if (auto child = describe_group(w, sub_node, sub_address)) {
      open.push_back(std::move(*child));  // `top` is not used after this
    }
  }
}

}  // namespace

std::string describe_file(const std::string& path) {
  require_regular_file(path, "file", "an HDF5 file");  // before opening: a FIFO would block forever
  Handle file = detail::open_file_read_only(path);      // refuses what is not HDF5, or truncated
  // Any HDF5 file is described, so that a dump the other commands refuse shows what it holds and where; one that is
  // not mhcdiff/1 says so first (TensorFile's reason, without its "path: ").
  std::optional<TensorFile> tf;
  std::string not_mhcdiff;
  try {
    tf.emplace(path);
  } catch (const InputError& e) {
    not_mhcdiff = e.what();
    if (not_mhcdiff.rfind(path + ": ", 0) == 0) not_mhcdiff.erase(0, path.size() + 2);
  }
  Walk w{file.get(), {}, {}, {}};
  hsize_t size = 0;
  H5Fget_filesize(file.get(), &size);
  w.text += fmt::format("{} ({})\n", report::one_line(path), human_bytes(double(size)));
  if (!tf)
    w.text += fmt::format("  {}; mhcdiff's other commands refuse it. What it holds:\n", report::one_line(not_mhcdiff));
  describe_attributes(w, detail::attributes_as_text(file.get()), "  ");
  try {
    InputReader reader(path);
    const Shape& s = reader.shape();
    // Leading batch dims only where there are several (x [B,S,D] is S' = B·S); x [S,D] has just S.
    const std::string batch =
        reader.batch_dims().size() > 1 ? fmt::format(" (batch dims {})", detail::dims_text(reader.batch_dims())) : "";
    w.text += fmt::format("  inputs: S={}{}, H={}, D={}, grad_out {}, comb read as {}\n", s.S, batch, s.H, s.D,
                          reader.has_grad() ? "present" : "absent", reader.comb_layout_text());
  } catch (const InputError& e) {
    if (detail::link_exists(file.get(), "/inputs"))
      w.text += fmt::format("  inputs: not usable by `run` ({})\n", report::one_line(e.what()));
  }
  try {
    const auto pols = tf ? tf->policies() : std::vector<std::string>{};
    if (!pols.empty())
      w.text += fmt::format("  policies: {}\n", report::one_line(fmt::format("{}", fmt::join(pols, ", "))));
  } catch (const InputError&) {
    // A link under /results that leads nowhere: the walk below shows it.
  }
  H5O_info_t root;
  if (H5Oget_info2(file.get(), &root, H5O_INFO_BASIC) < 0)
    throw IoError(fmt::format("{}: cannot read its root group", path));
  describe_tree(w, root.addr);
  return w.text;
}

}  // namespace mhc::io
