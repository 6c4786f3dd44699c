// ResultWriter: builds an mhcdiff/1 file in a temp file beside the destination and renames it over the
// destination on commit(), so a reader never sees a partial file and a failed run leaves the old one intact.
#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <ctime>
#include <map>
#include <optional>

#include "io/files.hpp"
#include "io/hdf5_util.hpp"
#include "io/store.hpp"

namespace mhc::io {

double inputs_bytes(const Shape& shape, bool grad, int deflate_level) {
  const double bytes = double(shape.S) * double(token_input_bytes(shape, grad));
  return deflate_level > 0 ? bytes / 2 : bytes;
}

double results_bytes(const Shape& shape, bool grad_inputs, const std::vector<Policy>& policies, bool backward,
                     int deflate_level) {
  const double S = double(shape.S), H = shape.H, D = double(shape.D);
  double total = inputs_bytes(shape, grad_inputs);
  for (const Policy& p : policies) {
    const double twin = stores_f64(p.desc) ? 8 : 0;
    total += S * H * D * (2 + twin);
    if (backward) total += S * (D * (2 + twin) + H * D * (2 + twin) + (H + H * H) * (4 + twin));
  }
  return deflate_level > 0 ? total / 2 : total;
}


using detail::Handle;

namespace {

std::string utc_now() {
  const std::time_t t = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

std::string host_name() {
  char buf[256] = {};
  if (gethostname(buf, sizeof buf - 1) != 0) return "unknown";
  return buf;
}

// Target chunk size: big enough that HDF5's per-chunk overhead vanishes, small enough that a partially
// written chunk fits the 2 MiB per-dataset chunk cache (see docs/format.md, "Memory").
constexpr int64_t kChunkBytes = 512 << 10;
constexpr size_t kChunkCacheBytes = 2 << 20;
// A token row larger than the chunk cache is split over chunks: as one chunk (up to HDF5's limit of 4 GiB) every
// write would bypass the cache and, compressed, need a deflate buffer of the row's size.
constexpr int64_t kMaxRowChunkBytes = int64_t(kChunkCacheBytes);

}  // namespace

Provenance make_provenance(const Policy& policy, const std::string& device, const std::string& input_checksum) {
  Provenance p;
  p.policy = policy.name;
  p.models = policy.models;
  p.tool_version = MHCDIFF_VERSION;
  p.policy_description = describe(policy.desc);
  p.device = device;
  p.host = host_name();
  p.utc_time = utc_now();
  p.input_checksum = input_checksum;
  return p;
}

namespace {

struct DatasetEntry {
  Handle dataset;
  DType dtype = DType::bf16;
  int64_t row_elems = 0;
};

}  // namespace

struct ResultWriter::Impl {
  // Declared first so it is destroyed last: its destructor removes the temp file once every HDF5 handle below
  // is closed.
  std::optional<AtomicOutput> output;
  std::string path, temp_path;
  Handle file;
  bool committed = false;
  std::vector<int64_t> batch_dims;  // empty: {S} of the first declare
  int deflate_level = 0;
  Handle bf16_type = detail::make_bf16_type();
  std::map<std::string, DatasetEntry> datasets;  // by full path
  std::map<std::string, Handle> groups;

  ~Impl() { discard(); }

  // The error path (a writer destroyed without commit()): close every HDF5 handle, datasets first, then groups,
  // then the file, so HDF5's atexit handler (H5_term_library) finds none. Closing writes whatever HDF5 still caches,
  // and when the disk is full (or the file size limit is reached) that write fails too: HDF5 then keeps the
  // half-closed object in its ID table and the atexit handler crashes on it (SIGSEGV after the error message).
  // The temp file is being thrown away, so its descriptor is first pointed at /dev/null, where every write
  // succeeds, and flushed once there: HDF5 1.10 leaves its metadata cache's skip list enabled after a failed
  // flush ("slist already enabled?"), refusing every later close, and a flush that runs to its end (it reports
  // the stale failure but goes on) disables it again. Then every handle closes cleanly and the AtomicOutput
  // unlinks the temp file.
  void discard() {
    if (committed) return;
    if (file.valid()) {
      divert_writes_to_null();
      H5Fflush(file.get(), H5F_SCOPE_GLOBAL);
    }
    datasets.clear();
    groups.clear();
    file.reset();
    output.reset();
  }

  void divert_writes_to_null() {
    void* vfd_handle = nullptr;
    if (H5Fget_vfd_handle(file.get(), H5P_DEFAULT, &vfd_handle) < 0 || vfd_handle == nullptr) return;
    const int fd = *static_cast<int*>(vfd_handle);  // the sec2 (default) driver's handle is its descriptor
    const int sink = open("/dev/null", O_RDWR | O_CLOEXEC);
    if (sink < 0) return;
    dup2(sink, fd);
    close(sink);
  }

  // An HDF5 write that failed: the system's reason (disk full, file too large) as one sentence.
  [[noreturn]] void write_failed(const std::string& reason, const std::string& where) const {
    throw IoError(output->failure(where.empty() ? reason : fmt::format("{} ({})", reason, where)));
  }

  hid_t group(const std::string& name) {
    auto it = groups.find(name);
    if (it != groups.end()) return it->second.get();
    Handle g;
    if (H5Lexists(file.get(), name.c_str(), H5P_DEFAULT) > 0) {
      g = Handle(H5Gopen2(file.get(), name.c_str(), H5P_DEFAULT));
    } else {
      Handle lcpl(H5Pcreate(H5P_LINK_CREATE));
      H5Pset_create_intermediate_group(lcpl.get(), 1);
      Handle gcpl(H5Pcreate(H5P_GROUP_CREATE));
      H5Pset_obj_track_times(gcpl.get(), false);
      g = Handle(H5Gcreate2(file.get(), name.c_str(), lcpl.get(), gcpl.get(), H5P_DEFAULT));
    }
    if (!g.valid()) throw std::runtime_error(fmt::format("could not create group {} in {}", name, temp_path));
    return groups.emplace(name, std::move(g)).first->second.get();
  }

  std::vector<int64_t> batch_for(const Shape& shape) {
    if (batch_dims.empty()) batch_dims = {shape.S};
    int64_t product = 1;
    for (int64_t b : batch_dims) product *= b;
    if (product != shape.S)
      throw std::invalid_argument(fmt::format("batch dims {} do not multiply to S={}", detail::dims_text(batch_dims),
                                              shape.S));
    return batch_dims;
  }

  void create(const std::string& group_name, const std::string& name, DType dtype, const Shape& shape,
              const std::vector<int64_t>& elem_dims) {
    const std::vector<int64_t> batch = batch_for(shape);
    std::vector<hsize_t> dims(batch.begin(), batch.end());
    int64_t row_elems = 1;
    for (int64_t e : elem_dims) {
      dims.push_back(hsize_t(e));
      row_elems *= e;
    }
    const int64_t elem_size = dtype == DType::bf16 ? 2 : dtype == DType::f32 ? 4 : 8;
    // Chunks are whole token rows where a row fits the chunk cache (larger rows are split below): a slab read or
    // write touches whole chunks (except at slab edges).
    std::vector<hsize_t> chunk(dims.size(), 1);
    const size_t token_axis = batch.size() - 1;
    int64_t row_bytes = 0;
    if (!__builtin_mul_overflow(row_elems, elem_size, &row_bytes) && row_bytes <= kMaxRowChunkBytes) {
      const int64_t rows = std::clamp<int64_t>(kChunkBytes / std::max<int64_t>(1, row_bytes), 1,
                                               std::max<int64_t>(1, batch.back()));
      chunk[token_axis] = hsize_t(rows);
      for (size_t i = 0; i < elem_dims.size(); ++i) chunk[batch.size() + i] = hsize_t(elem_dims[i]);
    } else {
      // One token row is larger than the chunk cache (or than HDF5 allows a chunk to be: D = 2^31 bf16 values made
      // H5Dcreate fail, and `run` end in "internal error"). Such a row is split over chunks of about kChunkBytes,
      // innermost dim first.
      int64_t budget = std::max<int64_t>(1, kChunkBytes / elem_size);
      for (size_t i = elem_dims.size(); i-- > 0;) {
        const int64_t c = std::clamp<int64_t>(budget, 1, std::max<int64_t>(1, elem_dims[i]));
        chunk[batch.size() + i] = hsize_t(c);
        budget = std::max<int64_t>(1, budget / c);
      }
    }

    Handle dcpl(H5Pcreate(H5P_DATASET_CREATE));
    H5Pset_chunk(dcpl.get(), int(chunk.size()), chunk.data());
    H5Pset_fill_time(dcpl.get(), H5D_FILL_TIME_NEVER);
    H5Pset_obj_track_times(dcpl.get(), false);  // no timestamps: the same data gives the same file bytes
    if (deflate_level > 0) {
      H5Pset_shuffle(dcpl.get());
      H5Pset_deflate(dcpl.get(), unsigned(deflate_level));
    }
    // A Fletcher-32 checksum per chunk (after compression), which HDF5 verifies at every read: a changed byte of a
    // kept file (a golden baseline, a shipped dataset) is then "truncated or corrupt", exit 2, instead of other values
    // read silently.
    H5Pset_fletcher32(dcpl.get());
    Handle dapl(H5Pcreate(H5P_DATASET_ACCESS));
    H5Pset_chunk_cache(dapl.get(), 521, kChunkCacheBytes, 1.0);
    Handle space(H5Screate_simple(int(dims.size()), dims.data(), nullptr));
    const hid_t file_type = dtype == DType::bf16  ? bf16_type.get()
                            : dtype == DType::f32 ? H5T_IEEE_F32LE
                                                  : H5T_IEEE_F64LE;
    const hid_t g = group(group_name);
    Handle ds(H5Dcreate2(g, name.c_str(), file_type, space.get(), H5P_DEFAULT, dcpl.get(), dapl.get()));
    if (!ds.valid())
      throw std::runtime_error(fmt::format("could not create dataset {}/{} in {}", group_name, name, temp_path));
    if (dtype == DType::bf16) detail::write_string_attribute(ds.get(), "dtype", "bfloat16");
    datasets[group_name + "/" + name] = DatasetEntry{std::move(ds), dtype, row_elems};
  }

  template <class T>
  void write_rows(const std::string& key, int64_t s0, const std::vector<T>& data) {
    auto it = datasets.find(key);
    if (it == datasets.end()) throw std::logic_error("ResultWriter: dataset " + key + " was not declared");
    DatasetEntry& e = it->second;
    if (data.size() % size_t(e.row_elems) != 0)
      throw std::logic_error(fmt::format("ResultWriter: {} got {} values, not whole rows of {}", key, data.size(),
                                         e.row_elems));
    const hid_t mem = e.dtype == DType::bf16 ? bf16_type.get()
                      : e.dtype == DType::f32 ? H5T_NATIVE_FLOAT
                                              : H5T_NATIVE_DOUBLE;
    if (sizeof(T) != (e.dtype == DType::bf16 ? 2u : e.dtype == DType::f32 ? 4u : 8u))
      throw std::logic_error("ResultWriter: wrong element type for " + key);
    try {
      detail::write_flat(e.dataset.get(), mem, uint64_t(s0 * e.row_elems), data.size(), data.data());
    } catch (const std::runtime_error& failure) {  // its message is the system's reason
      write_failed(failure.what(), "dataset " + key);
    }
  }

  // Every declared dataset of `group_name` must get its rows; absent vectors are a caller bug.
  template <class T>
  void write_if_declared(const std::string& group_name, const char* name, int64_t s0, const std::vector<T>& data) {
    const std::string key = group_name + "/" + name;
    if (!datasets.count(key)) return;
    if (data.empty()) throw std::logic_error("ResultWriter: no data for declared dataset " + key);
    write_rows(key, s0, data);
  }
};

ResultWriter::ResultWriter(const std::string& path, const std::vector<SourceFile>& sources, GoldenTarget golden)
    : impl_(std::make_unique<Impl>()) {
  detail::silence_hdf5_errors();
  Impl& m = *impl_;
  m.path = path;
  m.output.emplace(path, "output", sources, golden);  // every check on the path (docs/format.md, "Validation")
  m.temp_path = m.output->temp_path();
  m.file = Handle(H5Fcreate(m.temp_path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT));
  if (!m.file.valid())
    throw IoError(fmt::format("cannot write the output {}: HDF5 could not create {} ({})", path, m.temp_path,
                              detail::hdf5_failure_reason()));
  detail::write_string_attribute(m.file.get(), "format", "mhcdiff/1");
  detail::write_string_attribute(m.file.get(), "comb_layout", "src,dst");
}

ResultWriter::~ResultWriter() = default;

void ResultWriter::set_batch_dims(const std::vector<int64_t>& batch_dims) {
  if (!impl_->datasets.empty()) throw std::logic_error("ResultWriter::set_batch_dims after a dataset was declared");
  if (batch_dims.empty()) throw std::invalid_argument("batch dims must not be empty");
  impl_->batch_dims = batch_dims;
}

void ResultWriter::set_compression(int deflate_level) {
  if (deflate_level < 0 || deflate_level > 9)
    throw std::invalid_argument(fmt::format("the compression level must be 0..9 (got {})", deflate_level));
  impl_->deflate_level = deflate_level;
}

void ResultWriter::declare_inputs(const Shape& shape, bool with_grad) {
  Impl& m = *impl_;
  m.create("/inputs", "x", DType::bf16, shape, {shape.D});
  m.create("/inputs", "residual", DType::bf16, shape, {shape.H, shape.D});
  m.create("/inputs", "post", DType::f32, shape, {shape.H});
  m.create("/inputs", "comb", DType::f32, shape, {shape.H, shape.H});
  if (with_grad) m.create("/inputs", "grad_out", DType::bf16, shape, {shape.H, shape.D});
}

void ResultWriter::append_inputs(int64_t s0, const Inputs& slab) {
  Impl& m = *impl_;
  m.write_rows("/inputs/x", s0, slab.x);
  m.write_rows("/inputs/residual", s0, slab.residual);
  m.write_rows("/inputs/post", s0, slab.post);
  m.write_rows("/inputs/comb", s0, slab.comb);
  m.write_if_declared("/inputs", "grad_out", s0, slab.grad_out);
}

void ResultWriter::declare_policy(const Policy& policy, const Shape& shape, bool backward,
                                  const Provenance& provenance) {
  Impl& m = *impl_;
  const std::string g = "/results/" + policy.name;
  if (m.groups.count(g)) throw std::logic_error("ResultWriter: policy " + policy.name + " declared twice");
  const bool f64 = stores_f64(policy.desc);
  m.create(g, "out", DType::bf16, shape, {shape.H, shape.D});
  if (f64) m.create(g, "out_f64", DType::f64, shape, {shape.H, shape.D});
  if (backward) {
    m.create(g, "grad_x", DType::bf16, shape, {shape.D});
    m.create(g, "grad_residual", DType::bf16, shape, {shape.H, shape.D});
    m.create(g, "grad_post", DType::f32, shape, {shape.H});
    m.create(g, "grad_comb", DType::f32, shape, {shape.H, shape.H});
    if (f64) {
      m.create(g, "grad_x_f64", DType::f64, shape, {shape.D});
      m.create(g, "grad_residual_f64", DType::f64, shape, {shape.H, shape.D});
      m.create(g, "grad_post_f64", DType::f64, shape, {shape.H});
      m.create(g, "grad_comb_f64", DType::f64, shape, {shape.H, shape.H});
    }
  }
  const hid_t grp = m.group(g);
  detail::write_string_attribute(grp, "policy", provenance.policy.empty() ? policy.name : provenance.policy);
  detail::write_string_attribute(grp, "models", provenance.models.empty() ? policy.models : provenance.models);
  detail::write_string_attribute(grp, "tool_version", provenance.tool_version);
  detail::write_string_attribute(grp, "policy_description", provenance.policy_description);
  detail::write_string_attribute(grp, "device", provenance.device);
  detail::write_string_attribute(grp, "host", provenance.host);
  detail::write_string_attribute(grp, "utc_time", provenance.utc_time);
  detail::write_string_attribute(grp, "input_checksum", provenance.input_checksum);
}

void ResultWriter::append_result(const std::string& policy_name, int64_t s0, const PolicyResult& r) {
  Impl& m = *impl_;
  const std::string g = "/results/" + policy_name;
  if (!m.groups.count(g)) throw std::logic_error("ResultWriter: policy " + policy_name + " was not declared");
  m.write_if_declared(g, "out", s0, r.out);
  m.write_if_declared(g, "out_f64", s0, r.out_f64);
  m.write_if_declared(g, "grad_x", s0, r.grad_x);
  m.write_if_declared(g, "grad_residual", s0, r.grad_residual);
  m.write_if_declared(g, "grad_post", s0, r.grad_post);
  m.write_if_declared(g, "grad_comb", s0, r.grad_comb);
  m.write_if_declared(g, "grad_x_f64", s0, r.grad_x_f64);
  m.write_if_declared(g, "grad_residual_f64", s0, r.grad_residual_f64);
  m.write_if_declared(g, "grad_post_f64", s0, r.grad_post_f64);
  m.write_if_declared(g, "grad_comb_f64", s0, r.grad_comb_f64);
}

void ResultWriter::set_attribute(const std::string& group, const std::string& name, const std::string& value) {
  detail::write_string_attribute(group == "/" ? impl_->file.get() : impl_->group(group), name, value);
}

void ResultWriter::set_attribute(const std::string& group, const std::string& name, double value) {
  detail::write_double_attribute(group == "/" ? impl_->file.get() : impl_->group(group), name, value);
}

void ResultWriter::set_integer_attribute(const std::string& group, const std::string& name, int64_t value) {
  detail::write_int_attribute(group == "/" ? impl_->file.get() : impl_->group(group), name, value);
}

void ResultWriter::describe_inputs(const std::string& source_file, const std::string& checksum,
                                   const InputCensus& census) {
  set_attribute("/inputs", "source_file", source_file);
  set_attribute("/inputs", "input_checksum", checksum);
  set_integer_attribute("/inputs", "nan_count", census.nan_count);
  set_integer_attribute("/inputs", "inf_count", census.inf_count);
  set_integer_attribute("/inputs", "rounded_count", census.rounded_count);
}

void ResultWriter::describe_comb_layout(const std::string& how_read) {
  set_attribute("/inputs", "source_comb_layout", how_read);
}

void ResultWriter::commit() {
  Impl& m = *impl_;
  if (m.committed) throw std::logic_error("ResultWriter::commit called twice");
  // Flush with every dataset still open, so a full disk is reported here (and the error path closes the handles)
  // rather than by a dataset close that fails half-way.
  if (H5Fflush(m.file.get(), H5F_SCOPE_GLOBAL) < 0) m.write_failed(detail::hdf5_failure_reason(), "");
  m.datasets.clear();
  m.groups.clear();
  if (H5Fclose(m.file.get()) < 0) m.write_failed(detail::hdf5_failure_reason(), "");
  m.file = Handle();  // already closed by H5Fclose
  m.output->commit();
  m.committed = true;
}

}  // namespace mhc::io
