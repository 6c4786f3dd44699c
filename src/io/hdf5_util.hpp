#pragma once
// Small helpers over the HDF5 C API shared by the reader, the writer and TensorFile: handle ownership,
// the bf16 file type, dtype classification, and row-major "flat range" selections (how every slab read
// and write is expressed). Internal to src/io/.
#include <hdf5.h>

#include <cstdint>
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

// Why the HDF5 call that just failed failed, from HDF5's error stack (call it before any other HDF5 call): the
// system's reason when a read or write failed ("no space left on device", "file too large"), else HDF5's own
// innermost description.
std::string hdf5_failure_reason();

// The bf16 file/memory type: IEEE-like float, sign bit 15, exponent bits 7..14 (bias 127), mantissa 0..6.
// A new copy each call (the caller owns it).
Handle make_bf16_type();

// What a dataset holds, as far as mhcdiff cares.
enum class StoredKind { bf16_float, bf16_uint16, f32, f64, uint16_plain, float16, other };
StoredKind classify(hid_t dataset);
std::string stored_kind_name(StoredKind k);
std::optional<DType> dtype_of(StoredKind k);

std::vector<hsize_t> dataset_dims(hid_t dataset);
std::string dims_text(const std::vector<int64_t>& dims);
std::string dims_text(const std::vector<hsize_t>& dims);

// Reads/writes elements [first, first + count) in row-major order of `dims` (the dataset's extent) with one
// H5Dread/H5Dwrite per block (at most ~2·rank blocks; one for whole rows). Throws std::runtime_error on failure;
// write_flat's message is hdf5_failure_reason().
void read_flat(hid_t dataset, hid_t mem_type, uint64_t first, uint64_t count, void* dst);
void write_flat(hid_t dataset, hid_t mem_type, uint64_t first, uint64_t count, const void* src);

bool link_exists(hid_t file, const std::string& path);

// String attributes (variable-length UTF-8, what h5py writes and reads as str).
void write_string_attribute(hid_t object, const std::string& name, const std::string& value);
void write_double_attribute(hid_t object, const std::string& name, double value);
void write_int_attribute(hid_t object, const std::string& name, int64_t value);
std::optional<std::string> read_string_attribute(hid_t object, const std::string& name);
// Every attribute of an object as text (strings as-is, numbers and small arrays printed).
std::vector<std::pair<std::string, std::string>> attributes_as_text(hid_t object);

}  // namespace mhc::io::detail
