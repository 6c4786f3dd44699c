#pragma once
// Small helpers over the HDF5 C API shared by the reader, the writer and TensorFile: handle ownership,
// the bf16 file type, dtype classification, and row-major "flat range" selections (how every slab read
// and write is expressed). Internal to src/io/.
#include <hdf5.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "io/store.hpp"

namespace mhc::io::detail {

// Owns one HDF5 identifier; closes it with the matching H5?close (H5Idec_ref works for every kind).
class Handle {
 public:
  Handle() = default;
  explicit Handle(hid_t id) : id_(id) {}
  ~Handle() { reset(); }
  Handle(Handle&& o) noexcept : id_(std::exchange(o.id_, H5I_INVALID_HID)) {}
  Handle& operator=(Handle&& o) noexcept {
    if (this != &o) {
      reset();
      id_ = std::exchange(o.id_, H5I_INVALID_HID);
    }
    return *this;
  }
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;

  hid_t get() const { return id_; }
  bool valid() const { return id_ >= 0; }
  void reset() {
    if (id_ >= 0 && H5Iis_valid(id_) > 0) H5Idec_ref(id_);
    id_ = H5I_INVALID_HID;
  }

 private:
  hid_t id_ = H5I_INVALID_HID;
};

// HDF5 prints its own error stack to stderr by default; we report one sentence instead (SPEC §4).
void silence_hdf5_errors();

// Access property lists under which HDF5 refuses to traverse an external link (an H5Pset_elink_cb callback that
// fails): every lookup mhcdiff makes in a file it reads passes one, so no lookup, open or listing can open the file
// a link names (see external_link_target), while the process's other HDF5 use keeps HDF5's defaults. Made once per
// process and never closed: a caller that shuts HDF5 down (H5close) and reuses the library gets stale lists.
hid_t local_links();           // link access: H5Lexists, H5Lget_info/val, H5Oget_info_by_name, H5Oopen
hid_t local_dataset_access();  // H5Dopen2
hid_t local_group_access();    // H5Gopen2

// Why the HDF5 call that just failed failed, from HDF5's error stack (call it before any other HDF5 call): the
// system's reason when a read or write failed ("no space left on device", "file too large"), a filter this HDF5
// library lacks ("it needs the HDF5 filter 'lzf', …"), else HDF5's own innermost description ("HDF5: …").
std::string hdf5_failure_reason();

// Opens an existing HDF5 file read-only (InputReader, TensorFile, info). InputError, one sentence naming the file,
// when it is not HDF5, is truncated or corrupt, or is locked by a process that has it open for writing.
Handle open_file_read_only(const std::string& path);

// mhcdiff reads only data stored in the file itself. An external link or data outside the file could name a FIFO
// (opening it blocks forever), a device, or, resolved against the working directory, another file than the user
// meant; a virtual dataset over a missing file reads as its fill value. The next two say, as the end of a
// sentence, why the object at `path` (or `dataset`) is refused; std::nullopt when it is not.
//
// An external link: "an external link to other.h5:/x, which mhcdiff does not follow …". mhcdiff's lookups pass
// local_links() and its siblings, whose callback refuses to traverse, so none of them (a path lookup, an iteration)
// can open the file such a link names; H5Lget_val still reads the link's target.
std::optional<std::string> external_link_target(hid_t location, const std::string& path);
// External raw storage (H5Pset_external), or a virtual dataset with a source in another file; for a virtual dataset
// over this same file, a source that is missing, of another type (HDF5 converts), mapped past its shape or only in
// part, or itself stored outside (followed through nested virtual datasets; a cycle is refused): each would read as
// fill values, converted values or data from elsewhere.
std::optional<std::string> stored_outside_file(hid_t dataset);
// Storage never written, which reads as the fill value too: a chunked dataset missing a chunk of its shape (HDF5
// allocates a chunk when it is first written; counted, and looked up one by one where chunks may lie beyond the
// shape) or contiguous storage never allocated. A file declaring a huge chunked shape it never filled (2^40 tokens)
// is refused by this instead of being read for days. Storage allocated all at once and written in part cannot be
// told from written zeros (docs/format.md). The end of a sentence ("written in 1 of the 4 chunks …"); readers ask
// it at a dataset's first read, and stored_outside_file of a virtual dataset's sources.
std::optional<std::string> unwritten_storage(hid_t dataset);

// What a link of `group` that HDF5 cannot open is (the end of a sentence): "an external link to …" or "a link to
// /gone, which does not exist".
std::string unusable_link_description(hid_t group, const char* name, const H5L_info_t& link);

// "/a, /b, /c" for the root's links (the first 8, then how many more), or "nothing": what a file that is not an
// mhcdiff/1 file holds instead, so that a user's dump under other names says where its tensors are.
std::string top_level_names(hid_t file);

// The first component of `path` (from the root) that is a link HDF5 cannot open, as a sentence ("/results/yy is an
// external link to …"); std::nullopt when every component opens or one is simply absent. Tells a path through an
// external or dangling link from a missing one.
std::optional<std::string> unusable_component(hid_t file, const std::string& path);

// Opens dataset `name` (an existing link in `file`) into `ds` when it is a dataset stored in the file itself whose
// element count fits int64_t; otherwise returns why not, as a sentence about `name` ("/inputs/x is an external link
// to …", "dataset /inputs/x is stored in the external file …"), for the caller to prefix with the file.
std::optional<std::string> open_stored_dataset(hid_t file, const std::string& name, Handle& ds);

// The number of elements of `dims`, or std::nullopt when it (or a dimension) exceeds INT64_MAX: a file may claim
// any extent, and a wrapped product would silently stand for a small tensor.
std::optional<int64_t> element_count(const std::vector<hsize_t>& dims);

// The bf16 file/memory type: IEEE-like float, sign bit 15, exponent bits 7..14 (bias 127), mantissa 0..6.
// A new copy each call (the caller owns it).
Handle make_bf16_type();

// What a dataset holds, as far as mhcdiff cares.
enum class StoredKind { bf16_float, bf16_uint16, f32, f64, uint16_plain, float16, other };
StoredKind classify(hid_t dataset);
std::string stored_kind_name(StoredKind k);
// stored_kind_name of the dataset, more precisely where mhcdiff does not read it: the type named ("int32", "a
// compound type"), a dtype attribute of another value quoted, a 16-bit float of another layout told from float16.
std::string stored_type_name(hid_t dataset);
std::optional<DType> dtype_of(StoredKind k);

std::vector<hsize_t> dataset_dims(hid_t dataset);
std::string dims_text(const std::vector<int64_t>& dims);
std::string dims_text(const std::vector<hsize_t>& dims);
// Element `flat` (row-major) of a dataset of extent `dims`, as its index there: "[15,3,15]". Errors name an element
// this way, so that it reads as an index into the file whatever its batch dims.
std::string index_text(int64_t flat, const std::vector<hsize_t>& dims);

// Reads/writes elements [first, first + count) in row-major order of `dims` (the dataset's extent) with one
// H5Dread/H5Dwrite per block (at most ~2·rank blocks; one for whole rows). Throws std::runtime_error on failure
// whose message is hdf5_failure_reason(), to end a sentence; read_flat adds "the file is truncated or corrupt"
// where HDF5 names no cause outside the file (a checksum error, a chunk that does not decompress).
void read_flat(hid_t dataset, hid_t mem_type, uint64_t first, uint64_t count, void* dst);
void write_flat(hid_t dataset, hid_t mem_type, uint64_t first, uint64_t count, const void* src);

bool link_exists(hid_t file, const std::string& path);
// Whether the file at `path` has the root attribute `name`: false for a file that is not HDF5; std::nullopt, with
// the reason in `why` ("it ..."), for one that is HDF5 (or cannot be read to tell) but does not open (a writer holds it, it is
// truncated or corrupt), so that a caller guarding it fails closed. Never throws: it probes a file that an output
// would replace.
std::optional<bool> file_has_root_attribute(const std::string& path, const std::string& name, std::string& why);
bool attribute_exists(hid_t object, const std::string& name);

// String attributes (variable-length UTF-8, what h5py writes and reads as str).
void write_string_attribute(hid_t object, const std::string& name, const std::string& value);
void write_double_attribute(hid_t object, const std::string& name, double value);
void write_int_attribute(hid_t object, const std::string& name, int64_t value);
// std::nullopt unless the attribute exists and holds exactly one string (attribute_exists tells a missing one from
// one of another type).
std::optional<std::string> read_string_attribute(hid_t object, const std::string& name);
// The orientation a file's root attribute comb_layout declares (docs/format.md, "comb orientation"), std::nullopt
// when it has none. InputError ("<path>: ...") when it is not one string naming src,dst or dst,src: ignoring it
// would read comb-shaped tensors in the other orientation.
std::optional<CombLayout> declared_comb_layout(hid_t file, const std::string& path);
// An attribute of `object` that looks meant to declare comb's orientation, where mhcdiff would not read it: its name,
// compared in lower case without '-', '_', blanks and other punctuation, is comb_layout, comb_order or
// comb_orientation ("comb-layout", "COMB_LAYOUT", "combLayout", "comb_layout " ...), or a name that speaks of a
// layout, an order or an orientation holds one of the two orientations as text (layout = "dst,src", ['dst', 'src']).
// `include_comb_layout`: whether comb_layout itself counts (not on the root, where it is the real one). Ignoring such
// an attribute would read comb, or grad_comb, in the other orientation without a word.
std::optional<std::string> comb_orientation_lookalike(hid_t object, bool include_comb_layout);

// Every attribute of an object as text (strings as-is, numbers and small arrays printed).
std::vector<std::pair<std::string, std::string>> attributes_as_text(hid_t object);

// A name for one object that HDF5 knows none for: one opened by object address (info's walk), or through a group so
// opened. Asked for such an object's name (H5Iget_name), HDF5 searches the whole file for it, recursively: time
// growing with the file, and a stack overflow under 3 000 nested groups. While a hint is alive, what names that object
// or one of its attributes in a message (object_name) calls `path` instead, only when it needs the name. Hints nest.
class ObjectNameHint {
 public:
  ObjectNameHint(hid_t object, std::function<std::string()> path);
  ~ObjectNameHint();
  ObjectNameHint(const ObjectNameHint&) = delete;
  ObjectNameHint& operator=(const ObjectNameHint&) = delete;

 private:
  friend std::string object_name(hid_t);
  unsigned long fileno_ = 0;
  haddr_t address_ = HADDR_UNDEF;
  std::function<std::string()> path_;
  const ObjectNameHint* outer_;
};

// The path of an object, or of the object an attribute belongs to: a live ObjectNameHint's for it, else HDF5's
// (H5Iget_name); "?" when there is none.
std::string object_name(hid_t object_or_attribute);

}  // namespace mhc::io::detail
