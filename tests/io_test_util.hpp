#pragma once
// Test helpers for the store tests: files written with the raw HDF5 C API, independently of src/io/, so
// the reader is checked against files it did not write (and bad files can be made on purpose).
#include <gtest/gtest.h>
#include <hdf5.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

namespace mhc::testing {

namespace fs = std::filesystem;

// A fresh empty directory under the system temp dir, removed at scope exit.
struct TempDir {
  fs::path path;
  TempDir() {
    std::string templ = (fs::temp_directory_path() / "mhcdiff-io-test-XXXXXX").string();
    path = mkdtemp(templ.data());
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  std::string file(const std::string& name) const { return (path / name).string(); }
  std::vector<std::string> entries() const {
    std::vector<std::string> out;
    for (const auto& e : fs::directory_iterator(path)) out.push_back(e.path().filename().string());
    return out;
  }
};

// The bf16 type written independently of src/io: bits 15 sign, 7..14 exponent (bias 127), 0..6 mantissa.
inline hid_t raw_bf16_type() {
  hid_t t = H5Tcopy(H5T_IEEE_F32LE);
  H5Tset_fields(t, 15, 7, 8, 0, 7);
  H5Tset_ebias(t, 127);
  H5Tset_size(t, 2);
  return t;
}

inline void raw_string_attribute(hid_t obj, const char* name, const char* value) {
  hid_t type = H5Tcopy(H5T_C_S1);
  H5Tset_size(type, H5T_VARIABLE);
  hid_t space = H5Screate(H5S_SCALAR);
  hid_t attr = H5Acreate2(obj, name, type, space, H5P_DEFAULT, H5P_DEFAULT);
  H5Awrite(attr, type, &value);
  H5Aclose(attr);
  H5Sclose(space);
  H5Tclose(type);
}

// Creates (or opens) an HDF5 file and writes one dataset per call; groups are created as needed.
class RawFile {
 public:
  explicit RawFile(const std::string& path, bool root_attributes = true) {
    id_ = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    if (root_attributes) {
      raw_string_attribute(id_, "format", "mhcdiff/1");
      raw_string_attribute(id_, "comb_layout", "src,dst");
    }
  }
  ~RawFile() { H5Fclose(id_); }
  hid_t id() const { return id_; }

  void write(const std::string& name, hid_t file_type, const std::vector<hsize_t>& dims, hid_t mem_type,
             const void* data, const char* dtype_attr = nullptr) {
    hid_t lcpl = H5Pcreate(H5P_LINK_CREATE);
    H5Pset_create_intermediate_group(lcpl, 1);
    hid_t space = H5Screate_simple(int(dims.size()), dims.data(), nullptr);
    hid_t ds = H5Dcreate2(id_, name.c_str(), file_type, space, lcpl, H5P_DEFAULT, H5P_DEFAULT);
    H5Dwrite(ds, mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data);
    if (dtype_attr) raw_string_attribute(ds, "dtype", dtype_attr);
    H5Dclose(ds);
    H5Sclose(space);
    H5Pclose(lcpl);
  }
  void bf16(const std::string& name, const std::vector<hsize_t>& dims, const std::vector<uint16_t>& bits) {
    hid_t t = raw_bf16_type();
    write(name, t, dims, t, bits.data(), "bfloat16");
    H5Tclose(t);
  }
  void u16(const std::string& name, const std::vector<hsize_t>& dims, const std::vector<uint16_t>& bits,
           const char* dtype_attr = "bfloat16") {
    write(name, H5T_STD_U16LE, dims, H5T_NATIVE_UINT16, bits.data(), dtype_attr);
  }
  void f32(const std::string& name, const std::vector<hsize_t>& dims, const std::vector<float>& v) {
    write(name, H5T_IEEE_F32LE, dims, H5T_NATIVE_FLOAT, v.data());
  }
  void f64(const std::string& name, const std::vector<hsize_t>& dims, const std::vector<double>& v) {
    write(name, H5T_IEEE_F64LE, dims, H5T_NATIVE_DOUBLE, v.data());
  }
  void i32(const std::string& name, const std::vector<hsize_t>& dims, const std::vector<int32_t>& v) {
    write(name, H5T_STD_I32LE, dims, H5T_NATIVE_INT32, v.data());
  }

 private:
  hid_t id_;
};

// Random but valid operator inputs (bf16 bits of finite values of moderate size; fp32 coefficients).
struct RawInputs {
  int64_t S, H, D;
  std::vector<uint16_t> x, residual, grad_out;
  std::vector<float> post, comb;
};

inline uint16_t bf16_bits_of(float f) {  // truncation of an exactly representable value
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return uint16_t(u >> 16);
}
inline float float_of_bf16(uint16_t b) {
  const uint32_t u = uint32_t(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

inline RawInputs random_inputs(int64_t S, int64_t H, int64_t D, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_int_distribution<int> mant(0, 127), expo(120, 130), sign(0, 1);
  auto bf16 = [&] { return uint16_t((sign(gen) << 15) | (expo(gen) << 7) | mant(gen)); };
  std::uniform_real_distribution<float> u01(0.0f, 1.0f);
  RawInputs r{S, H, D, {}, {}, {}, {}, {}};
  for (int64_t i = 0; i < S * D; ++i) r.x.push_back(bf16());
  for (int64_t i = 0; i < S * H * D; ++i) r.residual.push_back(bf16());
  for (int64_t i = 0; i < S * H * D; ++i) r.grad_out.push_back(bf16());
  for (int64_t i = 0; i < S * H; ++i) r.post.push_back(2 * u01(gen));
  for (int64_t i = 0; i < S * H * H; ++i) r.comb.push_back(u01(gen));
  return r;
}

// Writes RawInputs as an mhcdiff/1 input file with bf16 float-typed tensors and the given batch dims.
inline void write_inputs(const std::string& path, const RawInputs& r, std::vector<hsize_t> batch = {},
                         bool grad = true) {
  if (batch.empty()) batch = {hsize_t(r.S)};
  auto dims = [&](std::initializer_list<hsize_t> tail) {
    std::vector<hsize_t> d = batch;
    d.insert(d.end(), tail);
    return d;
  };
  RawFile f(path);
  f.bf16("/inputs/x", dims({hsize_t(r.D)}), r.x);
  f.bf16("/inputs/residual", dims({hsize_t(r.H), hsize_t(r.D)}), r.residual);
  f.f32("/inputs/post", dims({hsize_t(r.H)}), r.post);
  f.f32("/inputs/comb", dims({hsize_t(r.H), hsize_t(r.H)}), r.comb);
  if (grad) f.bf16("/inputs/grad_out", dims({hsize_t(r.H), hsize_t(r.D)}), r.grad_out);
}

// Index of the first element whose bits differ (NaN payloads and ±0 included), or -1.
template <class T>
int64_t first_bit_difference(const std::vector<T>& a, const std::vector<T>& b) {
  if (a.size() != b.size()) return 0;
  for (size_t i = 0; i < a.size(); ++i)
    if (std::memcmp(&a[i], &b[i], sizeof(T)) != 0) return int64_t(i);
  return -1;
}

inline std::string read_file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// Index of the first difference, or -1.
template <class A, class B>
int64_t first_difference(const A& a, const B& b) {
  if (a.size() != b.size()) return 0;
  for (size_t i = 0; i < a.size(); ++i)
    if (!(a[i] == b[i])) return int64_t(i);
  return -1;
}

// A small tmpfs mounted at `path` (created) for disk-full cases, unmounted at scope exit; mounted() is false where
// mounting needs root and this process is not.
class SmallTmpfs {
 public:
  SmallTmpfs(const std::string& path, const std::string& size) : path_(path) {
    std::filesystem::create_directory(path);
    mounted_ = std::system(("mount -t tmpfs -o size=" + size + " tmpfs " + path + " > /dev/null 2>&1").c_str()) == 0;
  }
  ~SmallTmpfs() {
    if (mounted_ && std::system(("umount " + path_ + " > /dev/null 2>&1").c_str()) != 0)
      ADD_FAILURE() << "umount " << path_;
  }
  SmallTmpfs(const SmallTmpfs&) = delete;
  SmallTmpfs& operator=(const SmallTmpfs&) = delete;
  bool mounted() const { return mounted_; }

 private:
  std::string path_;
  bool mounted_ = false;
};

// Sets (or replaces) a root string attribute of an existing file: a hand-edited golden file or input.
inline void set_root_string_attribute(const std::string& path, const char* name, const char* value) {
  const hid_t file = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  ASSERT_GE(file, 0) << path;
  if (H5Aexists(file, name) > 0) H5Adelete(file, name);
  raw_string_attribute(file, name, value);
  H5Fclose(file);
}

// Whether /usr/bin/python3 can import `module`: the independent reference checks that need it (json, h5py) skip,
// and say so, where it cannot (scripts/install-deps.sh installs both, so CI runs them).
inline bool python_can_import(const std::string& module) {
  return std::system(("/usr/bin/python3 -c 'import " + module + "' > /dev/null 2>&1").c_str()) == 0;
}

#ifdef MHCDIFF_BINARY
// The built CLI, run in `dir` with stdin from /dev/null; `shell_prefix` runs before the binary in the same shell
// (a resource limit, a `timeout`).
struct CliResult {
  int exit_code = -1;
  std::string out, err;
  int error_lines() const {
    int n = 0;
    size_t start = 0;
    while (start < err.size()) {
      const size_t end = std::min(err.find('\n', start), err.size());
      if (end > start) ++n;
      start = end + 1;
    }
    return n;
  }
};

// `stdout_to`: where standard output goes instead of being captured (e.g. /dev/full).
inline CliResult run_cli(const TempDir& dir, const std::string& args, const std::string& shell_prefix = "",
                         const std::string& stdout_to = "") {
  const std::string out = stdout_to.empty() ? dir.file(".stdout") : stdout_to, err = dir.file(".stderr");
  const std::string cmd = "cd " + dir.path.string() + " && " + shell_prefix + MHCDIFF_BINARY + " " + args + " > " +
                          out + " 2> " + err + " < /dev/null";
  const int status = std::system(cmd.c_str());
  CliResult r;
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.err = read_file_bytes(err);
  std::filesystem::remove(err);
  if (stdout_to.empty()) {
    r.out = read_file_bytes(out);
    std::filesystem::remove(out);
  }
  return r;
}
#endif

}  // namespace mhc::testing
