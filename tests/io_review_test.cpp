// Adversarial HDF5 files against every command that reads them (a review of src/io/): each must end in one sentence
// and exit code 2 (or, for `info`, a description), within seconds, with nothing written — never a hang, a crash or a
// silently wrong answer. Files are made with the raw HDF5 C API (io_test_util.hpp), independently of src/io/.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <sstream>

#include "io/hdf5_util.hpp"
#include "io/store.hpp"
#include "io_test_util.hpp"

namespace mhc {
namespace {

using namespace mhc::testing;

// Every run is bounded: a regression that blocks on a FIFO exits 124 instead of hanging the test suite.
CliResult run_bounded(const TempDir& dir, const std::string& args, const std::string& shell_prefix = "") {
  return run_cli(dir, args, shell_prefix + "timeout 20 ");
}

// Opens `path` read-write, removes the link `name` and lets `make` create something else under that name.
void replace_link(const std::string& path, const std::string& name, const std::function<void(hid_t file)>& make) {
  const hid_t file = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  ASSERT_GE(file, 0) << path;
  if (H5Lexists(file, name.c_str(), H5P_DEFAULT) > 0) H5Ldelete(file, name.c_str(), H5P_DEFAULT);
  make(file);
  H5Fclose(file);
}

// A float32 dataset [dims] created with `dcpl` and, when `data` is given, written.
void create_f32(hid_t file, const std::string& name, const std::vector<hsize_t>& dims, hid_t dcpl,
                const float* data = nullptr) {
  const hid_t space = H5Screate_simple(int(dims.size()), dims.data(), nullptr);
  const hid_t ds = H5Dcreate2(file, name.c_str(), H5T_IEEE_F32LE, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
  ASSERT_GE(ds, 0) << name;
  if (data) {
    EXPECT_GE(H5Dwrite(ds, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, data), 0) << name;
  }
  H5Dclose(ds);
  H5Sclose(space);
}

// A chunked float32 dataset [dims..., tail...] in chunks [chunk..., tail...], created with its groups and never
// written: it costs no space, whatever the shape it declares.
void declare_unwritten(hid_t file, const char* name, std::vector<hsize_t> dims, std::vector<hsize_t> chunk,
                       const std::vector<hsize_t>& tail) {
  dims.insert(dims.end(), tail.begin(), tail.end());
  chunk.insert(chunk.end(), tail.begin(), tail.end());
  const hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
  H5Pset_chunk(dcpl, int(chunk.size()), chunk.data());
  const hid_t lcpl = H5Pcreate(H5P_LINK_CREATE);
  H5Pset_create_intermediate_group(lcpl, 1);
  const hid_t space = H5Screate_simple(int(dims.size()), dims.data(), nullptr);
  const hid_t ds = H5Dcreate2(file, name, H5T_IEEE_F32LE, space, lcpl, dcpl, H5P_DEFAULT);
  EXPECT_GE(ds, 0) << name;
  H5Dclose(ds);
  H5Sclose(space);
  H5Pclose(lcpl);
  H5Pclose(dcpl);
}

// A virtual /inputs/post [S,H] whose whole extent maps dataset /p of `source_file`.
void virtual_post(hid_t file, const std::string& source_file, hsize_t S, hsize_t H) {
  const hsize_t dims[2] = {S, H};
  const hid_t space = H5Screate_simple(2, dims, nullptr);
  const hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
  ASSERT_GE(H5Pset_virtual(dcpl, space, source_file.c_str(), "/p", space), 0);
  create_f32(file, "/inputs/post", {S, H}, dcpl);
  H5Pclose(dcpl);
  H5Sclose(space);
}

void set_int_attribute(hid_t object, const char* name, int64_t value) {
  if (H5Aexists(object, name) > 0) H5Adelete(object, name);
  const hid_t space = H5Screate(H5S_SCALAR);
  const hid_t attr = H5Acreate2(object, name, H5T_STD_I64LE, space, H5P_DEFAULT, H5P_DEFAULT);
  H5Awrite(attr, H5T_NATIVE_INT64, &value);
  H5Aclose(attr);
  H5Sclose(space);
}

class IoReview : public ::testing::Test {
 protected:
  TempDir dir;
  RawInputs inputs = random_inputs(4, 2, 8, 91);

  void SetUp() override { write_inputs(dir.file("good.h5"), inputs); }

  std::vector<std::string> sorted_entries() const {
    auto e = dir.entries();
    std::sort(e.begin(), e.end());
    return e;
  }

  // The bad-input contract: exit 2, one line naming what is wrong, nothing new in the directory.
  void expect_refused(const std::string& args, std::initializer_list<const char*> must_mention,
                      std::initializer_list<const char*> must_not_mention = {}, const std::string& shell_prefix = "") {
    const auto before = sorted_entries();
    const CliResult r = run_bounded(dir, args, shell_prefix);
    EXPECT_EQ(r.exit_code, 2) << args << "\nstderr: " << r.err << (r.exit_code == 124 ? "(timed out: it blocked)" : "");
    EXPECT_EQ(r.error_lines(), 1) << args << ": exactly one message expected, got:\n" << r.err;
    for (const char* text : must_mention)
      EXPECT_NE(r.err.find(text), std::string::npos) << args << ": '" << text << "' in: " << r.err;
    for (const char* text : must_not_mention)
      EXPECT_EQ(r.err.find(text), std::string::npos) << args << ": no '" << text << "' in: " << r.err;
    EXPECT_EQ(sorted_entries(), before) << "nothing may be written for: " << args;
  }
};

// Data that lives outside the file is refused before anything reads it. An external link (to another file), external
// raw storage (H5Pset_external) and a virtual dataset over another file each made every command block forever when
// the file they name is a FIFO (the same FIFO as the input itself is refused, docs/format.md), and a virtual dataset
// whose source file is missing read as zeros: `run` computed and wrote results from inputs that are not there.
TEST_F(IoReview, DataStoredOutsideTheFileIsRefusedWithoutBlocking) {
  ASSERT_EQ(mkfifo(dir.file("ff").c_str(), 0666), 0);
  write_inputs(dir.file("link.h5"), inputs);
  replace_link(dir.file("link.h5"), "/inputs/x", [](hid_t f) {
    ASSERT_GE(H5Lcreate_external("ff", "/x", f, "/inputs/x", H5P_DEFAULT, H5P_DEFAULT), 0);
  });
  write_inputs(dir.file("raw.h5"), inputs);
  replace_link(dir.file("raw.h5"), "/inputs/post", [](hid_t f) {
    const hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    H5Pset_external(dcpl, "ff", 0, H5F_UNLIMITED);  // relative: HDF5 1.10 resolves it from the working directory
    create_f32(f, "/inputs/post", {4, 2}, dcpl);
    H5Pclose(dcpl);
  });
  write_inputs(dir.file("vds.h5"), inputs);
  replace_link(dir.file("vds.h5"), "/inputs/post", [](hid_t f) { virtual_post(f, "ff", 4, 2); });
  write_inputs(dir.file("vds-gone.h5"), inputs);
  replace_link(dir.file("vds-gone.h5"), "/inputs/post", [](hid_t f) { virtual_post(f, "gone.h5", 4, 2); });

  expect_refused("run link.h5 -o out.h5 --policies hf", {"link.h5", "/inputs/x", "external link", "ff"});
  expect_refused("explain link.h5 --at 0,0,0", {"link.h5", "/inputs/x", "external link"});
  expect_refused("compare policy:hf policy:exact --inputs link.h5", {"/inputs/x", "external link"});
  expect_refused("run raw.h5 -o out.h5 --policies hf", {"raw.h5", "/inputs/post", "external file", "ff"});
  expect_refused("golden regen raw.h5 -o golden.h5", {"raw.h5", "/inputs/post", "external file"});
  expect_refused("run vds.h5 -o out.h5 --policies hf", {"vds.h5", "/inputs/post", "virtual dataset", "ff"});
  expect_refused("run vds-gone.h5 -o out.h5 --policies hf", {"vds-gone.h5", "/inputs/post", "gone.h5"});
  for (const char* file : {"link.h5", "raw.h5", "vds.h5"}) {
    const CliResult r = run_bounded(dir, std::string("info ") + file);
    EXPECT_EQ(r.exit_code, 0) << file << ": " << r.err;
    EXPECT_NE(r.out.find("not usable by `run`"), std::string::npos) << file << ":\n" << r.out;
  }
  EXPECT_NE(run_bounded(dir, "info link.h5").out.find("external link to ff:/x"), std::string::npos);

  // A results tensor that is an external link: compare used to block listing the group; it must not be skipped
  // either (a policy side adapts to the tensors a file side holds: `out` would silently not be compared).
  ASSERT_EQ(run_bounded(dir, "run good.h5 -o res.h5 --policies hf --backward").exit_code, 0);
  std::filesystem::copy_file(dir.file("res.h5"), dir.file("res-link.h5"));
  replace_link(dir.file("res-link.h5"), "/results/hf-bf16/out", [](hid_t f) {
    ASSERT_GE(H5Lcreate_external("ff", "/out", f, "/results/hf-bf16/out", H5P_DEFAULT, H5P_DEFAULT), 0);
  });
  expect_refused("compare res-link.h5:hf res.h5:hf", {"res-link.h5", "/results/hf-bf16/out", "external link"});
  expect_refused("compare res-link.h5:hf policy:hf --inputs good.h5", {"/results/hf-bf16/out", "external link"});
  expect_refused("fingerprint good.h5 res-link.h5:hf", {"/results/hf-bf16/out", "external link"});
  ASSERT_EQ(run_bounded(dir, "golden regen good.h5 -o golden.h5").exit_code, 0);
  expect_refused("golden check res-link.h5:hf --golden golden.h5", {"/results/hf-bf16/out", "external link"});
}

// A virtual dataset over this same file ("." as its source file) was accepted without looking at its source: a
// missing source read as zeros (`run` exited 0 with results of inputs that were not there), and a source stored in
// an external file or a FIFO was read or blocked. Each such mapping is followed now; one whose source is the data
// itself, whole, is still read.
TEST_F(IoReview, AVirtualDatasetOverThisFileIsReadOnlyWhereItReachesDataStoredInIt) {
  ASSERT_EQ(mkfifo(dir.file("ff").c_str(), 0666), 0);
  const hsize_t S = hsize_t(inputs.S), H = hsize_t(inputs.H);
  // /inputs/post as a virtual dataset whose rows [0, rows) map the same rows of `source` in this file (`source_dims`:
  // the source selection's dataspace).
  auto virtual_over = [&](const std::string& path, const char* source, hsize_t rows, std::vector<hsize_t> source_dims) {
    replace_link(path, "/inputs/post", [&](hid_t f) {
      const hsize_t dims[2] = {S, H}, start[2] = {0, 0}, count[2] = {rows, H};
      const hid_t space = H5Screate_simple(2, dims, nullptr);
      const hid_t src = H5Screate_simple(2, source_dims.data(), nullptr);
      H5Sselect_hyperslab(space, H5S_SELECT_SET, start, nullptr, count, nullptr);
      H5Sselect_hyperslab(src, H5S_SELECT_SET, start, nullptr, count, nullptr);
      const hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
      ASSERT_GE(H5Pset_virtual(dcpl, space, ".", source, src), 0);
      create_f32(f, "/inputs/post", {S, H}, dcpl);
      H5Pclose(dcpl);
      H5Sclose(src);
      H5Sclose(space);
    });
  };
  auto add_source = [&](const std::string& path, hsize_t rows, hid_t dcpl) {
    const hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    create_f32(f, "/p", {rows, H}, dcpl, dcpl == H5P_DEFAULT ? inputs.post.data() : nullptr);
    H5Fclose(f);
  };
  for (const char* name : {"missing.h5", "raw.h5", "part.h5", "past.h5", "cycle.h5", "whole.h5"})
    write_inputs(dir.file(name), inputs);
  virtual_over(dir.file("missing.h5"), "/p", S, {S, H});
  const hid_t raw = H5Pcreate(H5P_DATASET_CREATE);
  H5Pset_external(raw, "ff", 0, H5F_UNLIMITED);
  add_source(dir.file("raw.h5"), S, raw);
  H5Pclose(raw);
  virtual_over(dir.file("raw.h5"), "/p", S, {S, H});
  add_source(dir.file("part.h5"), S, H5P_DEFAULT);
  virtual_over(dir.file("part.h5"), "/p", S - 1, {S, H});  // the last token's weights unmapped
  add_source(dir.file("past.h5"), S - 1, H5P_DEFAULT);
  virtual_over(dir.file("past.h5"), "/p", S, {S, H});  // maps one row more than /p has
  virtual_over(dir.file("cycle.h5"), "/inputs/post", S, {S, H});
  add_source(dir.file("whole.h5"), S, H5P_DEFAULT);
  virtual_over(dir.file("whole.h5"), "/p", S, {S, H});

  expect_refused("run missing.h5 -o out.h5 --policies hf", {"missing.h5", "/inputs/post", "/p", "not a dataset"});
  expect_refused("run raw.h5 -o out.h5 --policies hf", {"/inputs/post", "/p", "external file 'ff'"});
  expect_refused("compare policy:hf policy:exact --inputs raw.h5", {"/inputs/post", "external file"});
  expect_refused("run part.h5 -o out.h5 --policies hf", {"/inputs/post", "only part of its shape"});
  expect_refused("run past.h5 -o out.h5 --policies hf", {"/inputs/post", "/p", "past that dataset's shape"});
  expect_refused("run cycle.h5 -o out.h5 --policies hf", {"/inputs/post", "leads back to itself", "a cycle"});
  const CliResult info = run_bounded(dir, "info raw.h5");
  EXPECT_EQ(info.exit_code, 0) << info.err;
  EXPECT_NE(info.out.find("not usable by `run`"), std::string::npos) << info.out;

  // A source of another type: HDF5 would convert float64 values to the virtual dataset's float32 while reading.
  write_inputs(dir.file("typed.h5"), inputs);
  {
    const hid_t f = H5Fopen(dir.file("typed.h5").c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    const hsize_t dims[2] = {S, H};
    const hid_t space = H5Screate_simple(2, dims, nullptr);
    std::vector<double> wide(inputs.post.begin(), inputs.post.end());
    const hid_t ds = H5Dcreate2(f, "/p", H5T_IEEE_F64LE, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    H5Dwrite(ds, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, wide.data());
    H5Dclose(ds);
    H5Sclose(space);
    H5Fclose(f);
  }
  virtual_over(dir.file("typed.h5"), "/p", S, {S, H});
  expect_refused("run typed.h5 -o out.h5 --policies hf", {"/inputs/post", "/p", "another type", "float64"});

  // What h5py writes for VirtualSource(whole dataset): "all" selections (HDF5 1.10 hands the source's back with rank
  // 0), here two of them stacked, each over half the tokens, and the second half through a virtual dataset of its own.
  write_inputs(dir.file("stacked.h5"), inputs);
  {
    const hid_t f = H5Fopen(dir.file("stacked.h5").c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    const hsize_t half[2] = {S / 2, H};
    create_f32(f, "/p0", {S / 2, H}, H5P_DEFAULT, inputs.post.data());
    create_f32(f, "/p1", {S / 2, H}, H5P_DEFAULT, inputs.post.data() + S / 2 * H);
    const hid_t half_space = H5Screate_simple(2, half, nullptr);
    const hid_t inner = H5Pcreate(H5P_DATASET_CREATE);  // /q: a virtual dataset that is all of /p1
    H5Pset_virtual(inner, half_space, ".", "/p1", half_space);
    create_f32(f, "/q", {S / 2, H}, inner);
    H5Pclose(inner);
    H5Ldelete(f, "/inputs/post", H5P_DEFAULT);
    const hsize_t dims[2] = {S, H}, start0[2] = {0, 0}, start1[2] = {S / 2, 0};
    const hid_t space = H5Screate_simple(2, dims, nullptr);
    const hid_t outer = H5Pcreate(H5P_DATASET_CREATE);
    for (const auto& [start, source] : {std::pair{start0, "/p0"}, std::pair{start1, "/q"}}) {
      H5Sselect_hyperslab(space, H5S_SELECT_SET, start, nullptr, half, nullptr);
      ASSERT_GE(H5Pset_virtual(outer, space, ".", source, half_space), 0);
    }
    create_f32(f, "/inputs/post", {S, H}, outer);
    H5Pclose(outer);
    H5Sclose(space);
    H5Sclose(half_space);
    H5Fclose(f);
  }

  // The same values in the other byte order (HDF5 swaps them exactly) are read; a diamond of virtual datasets 20
  // levels deep, each level two halves of the one below, passes every check but would make HDF5 follow 2^20 paths.
  write_inputs(dir.file("swapped.h5"), inputs);
  write_inputs(dir.file("diamond.h5"), inputs);
  {
    const hid_t f = H5Fopen(dir.file("swapped.h5").c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    const hsize_t dims[2] = {S, H};
    const hid_t space = H5Screate_simple(2, dims, nullptr);
    const hid_t ds = H5Dcreate2(f, "/p", H5T_IEEE_F32BE, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    H5Dwrite(ds, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, inputs.post.data());
    H5Dclose(ds);
    H5Sclose(space);
    H5Fclose(f);
  }
  virtual_over(dir.file("swapped.h5"), "/p", S, {S, H});
  {
    const hid_t f = H5Fopen(dir.file("diamond.h5").c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    create_f32(f, "/level0", {S, H}, H5P_DEFAULT, inputs.post.data());
    const hsize_t dims[2] = {S, H}, half[2] = {S / 2, H}, start0[2] = {0, 0}, start1[2] = {S / 2, 0};
    const hid_t space = H5Screate_simple(2, dims, nullptr);
    for (int level = 1; level <= 20; ++level) {
      const std::string below = "/level" + std::to_string(level - 1);
      const hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
      for (const hsize_t* start : {start0, start1}) {
        H5Sselect_hyperslab(space, H5S_SELECT_SET, start, nullptr, half, nullptr);
        H5Pset_virtual(dcpl, space, ".", below.c_str(), space);
      }
      create_f32(f, level == 20 ? "/inputs/post-new" : "/level" + std::to_string(level), {S, H}, dcpl);
      H5Pclose(dcpl);
    }
    H5Sclose(space);
    H5Ldelete(f, "/inputs/post", H5P_DEFAULT);
    H5Lmove(f, "/inputs/post-new", f, "/inputs/post", H5P_DEFAULT, H5P_DEFAULT);
    H5Fclose(f);
  }
  expect_refused("run diamond.h5 -o out.h5 --policies hf", {"/inputs/post", "more than 262144 paths"});

  // Whole present sources: the same results as the plain file.
  ASSERT_EQ(run_bounded(dir, "run good.h5 -o good-res.h5 --policies hf,exact").exit_code, 0);
  for (const char* name : {"whole", "stacked", "swapped"}) {
    const CliResult r = run_bounded(dir, std::string("run ") + name + ".h5 -o " + name + "-res.h5 --policies hf,exact");
    ASSERT_EQ(r.exit_code, 0) << name << ": " << r.err;
    for (const char* policy : {"hf", "exact"}) {
      const std::string args = std::string("compare ") + name + "-res.h5:" + policy + " good-res.h5:" + policy +
                               " --max-mismatch 0";
      EXPECT_EQ(run_bounded(dir, args).exit_code, 0) << args;
    }
  }
}

// A dataset of a type mhcdiff does not read is named by its type: "an unsupported type" told nothing of int32 or a
// compound, and a dtype attribute that is there with another value ("BFloat16", space-padded) was reported missing.
TEST_F(IoReview, ATypeThatIsNotReadIsNamed) {
  const hsize_t S = hsize_t(inputs.S), D = hsize_t(inputs.D);
  // /inputs/x of `type` (not written: the type is refused before any read), with a dtype attribute when given.
  auto x_of_type = [&](const std::string& file, hid_t type, const char* dtype) {
    write_inputs(dir.file(file), inputs);
    replace_link(dir.file(file), "/inputs/x", [&](hid_t f) {
      const hsize_t dims[2] = {S, D};
      const hid_t space = H5Screate_simple(2, dims, nullptr);
      const hid_t ds = H5Dcreate2(f, "/inputs/x", type, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
      ASSERT_GE(ds, 0) << file;
      if (dtype) {
        const hid_t str = H5Tcopy(H5T_C_S1);
        H5Tset_size(str, std::strlen(dtype));
        const hid_t scalar = H5Screate(H5S_SCALAR);
        const hid_t attr = H5Acreate2(ds, "dtype", str, scalar, H5P_DEFAULT, H5P_DEFAULT);
        H5Awrite(attr, str, dtype);
        H5Aclose(attr);
        H5Sclose(scalar);
        H5Tclose(str);
      }
      H5Dclose(ds);
      H5Sclose(space);
    });
  };
  x_of_type("i32.h5", H5T_STD_I32LE, nullptr);
  x_of_type("i16.h5", H5T_STD_I16LE, nullptr);
  x_of_type("named.h5", H5T_STD_U16LE, "BFloat16");
  x_of_type("padded.h5", H5T_STD_U16LE, "bfloat16  ");
  const hid_t compound = H5Tcreate(H5T_COMPOUND, 4);
  H5Tinsert(compound, "re", 0, H5T_STD_U16LE);
  H5Tinsert(compound, "im", 2, H5T_STD_U16LE);
  x_of_type("compound.h5", compound, nullptr);
  H5Tclose(compound);
  const hid_t biased = H5Tcopy(H5T_IEEE_F32LE);  // bf16's fields with exponent bias 126
  H5Tset_fields(biased, 15, 7, 8, 0, 7);
  H5Tset_ebias(biased, 126);
  H5Tset_size(biased, 2);
  x_of_type("bias.h5", biased, nullptr);
  H5Tclose(biased);

  expect_refused("run i32.h5 -o out.h5", {"/inputs/x is int32; expected bfloat16"});
  x_of_type("i32-named.h5", H5T_STD_I32LE, "bfloat16");  // the width is wrong, not the attribute
  expect_refused("run i32-named.h5 -o out.h5", {"/inputs/x is int32; expected bfloat16"});
  expect_refused("run i16.h5 -o out.h5", {"/inputs/x is int16 without dtype=\"bfloat16\" attribute"});
  expect_refused("run named.h5 -o out.h5", {"/inputs/x is uint16 with dtype attribute \"BFloat16\""});
  expect_refused("run padded.h5 -o out.h5", {"uint16 with dtype attribute \"bfloat16  \""});
  expect_refused("run compound.h5 -o out.h5", {"/inputs/x is a compound type"});
  expect_refused("run bias.h5 -o out.h5", {"/inputs/x is a 16-bit float of neither float16's nor bfloat16's layout"});
  const CliResult info = run_bounded(dir, "info i32.h5");
  EXPECT_NE(info.out.find("int32"), std::string::npos) << info.out;
}

// A path that cannot lead to a dataset says why: "/inputs" a dataset was "missing dataset /inputs/x", and a soft link
// to itself (or to a link to a missing object) was "a link to /inputs/x, which does not exist". A chain of soft links
// is named hop by hop to where it fails (it had said only "a link to /a, which is a link that leads to no object").
TEST_F(IoReview, APathThroughADatasetOrALinkCycleSaysSo) {
  write_inputs(dir.file("flat.h5"), inputs);
  replace_link(dir.file("flat.h5"), "/inputs", [](hid_t f) {
    const hsize_t one = 1;
    const hid_t space = H5Screate_simple(1, &one, nullptr);
    H5Dclose(H5Dcreate2(f, "/inputs", H5T_STD_I32LE, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
    H5Sclose(space);
  });
  write_inputs(dir.file("self.h5"), inputs);
  replace_link(dir.file("self.h5"), "/inputs/x", [](hid_t f) {
    ASSERT_GE(H5Lcreate_soft("/inputs/x", f, "/inputs/x", H5P_DEFAULT, H5P_DEFAULT), 0);
  });
  write_inputs(dir.file("chain.h5"), inputs);
  replace_link(dir.file("chain.h5"), "/inputs/x", [](hid_t f) {
    ASSERT_GE(H5Lcreate_soft("/a", f, "/inputs/x", H5P_DEFAULT, H5P_DEFAULT), 0);
    ASSERT_GE(H5Lcreate_soft("/gone", f, "/a", H5P_DEFAULT, H5P_DEFAULT), 0);
  });
  expect_refused("run flat.h5 -o out.h5", {"flat.h5", "/inputs is a dataset, not a group"}, {"missing"});
  expect_refused("run self.h5 -o out.h5", {"/inputs/x is a link to /inputs/x", "cycle of soft links"});
  expect_refused("run chain.h5 -o out.h5", {"/inputs/x is a link to /a, which links to /gone, which does not exist"});
  write_inputs(dir.file("loop.h5"), inputs);
  replace_link(dir.file("loop.h5"), "/inputs/x", [](hid_t f) {
    ASSERT_GE(H5Lcreate_soft("/a", f, "/inputs/x", H5P_DEFAULT, H5P_DEFAULT), 0);
    ASSERT_GE(H5Lcreate_soft("/b", f, "/a", H5P_DEFAULT, H5P_DEFAULT), 0);
    ASSERT_GE(H5Lcreate_soft("/a", f, "/b", H5P_DEFAULT, H5P_DEFAULT), 0);
  });
  expect_refused("run loop.h5 -o out.h5", {"/inputs/x is a link to /a, which links to /b, which links to /a: a cycle"});
  // Relative targets are resolved from the link's own group: x -> y -> x inside /inputs is a cycle, not "missing".
  write_inputs(dir.file("relative.h5"), inputs);
  replace_link(dir.file("relative.h5"), "/inputs/x", [](hid_t f) {
    ASSERT_GE(H5Lcreate_soft("y", f, "/inputs/x", H5P_DEFAULT, H5P_DEFAULT), 0);
    ASSERT_GE(H5Lcreate_soft("x", f, "/inputs/y", H5P_DEFAULT, H5P_DEFAULT), 0);
  });
  expect_refused("run relative.h5 -o out.h5",
                 {"/inputs/x is a link to y (/inputs/y), which links to x (/inputs/x): a cycle of soft links"},
                 {"does not exist"});
  // "." parts are resolved as HDF5 does: ./x inside /inputs is /inputs/x itself (the cycle had been followed as
  // /inputs/./x, /inputs/././x, ... for 64 hops, a 6 KB message).
  write_inputs(dir.file("dot.h5"), inputs);
  replace_link(dir.file("dot.h5"), "/inputs/x", [](hid_t f) {
    ASSERT_GE(H5Lcreate_soft("./x", f, "/inputs/x", H5P_DEFAULT, H5P_DEFAULT), 0);
  });
  expect_refused("run dot.h5 -o out.h5", {"/inputs/x is a link to ./x (/inputs/x): a cycle of soft links"});
  // A chain that does reach a dataset, but through more soft links than HDF5 follows (16 by default), says so (it
  // said "an object that cannot be opened"), and names its first hops and its last, not all 21.
  write_inputs(dir.file("long.h5"), inputs);
  {
    const hid_t f = H5Fopen(dir.file("long.h5").c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    ASSERT_GE(f, 0);
    ASSERT_GE(H5Lmove(f, "/inputs/x", f, "/realx", H5P_DEFAULT, H5P_DEFAULT), 0);
    ASSERT_GE(H5Lcreate_soft("/l0", f, "/inputs/x", H5P_DEFAULT, H5P_DEFAULT), 0);
    for (int i = 0; i < 20; ++i)
      ASSERT_GE(H5Lcreate_soft(i < 19 ? ("/l" + std::to_string(i + 1)).c_str() : "/realx", f,
                               ("/l" + std::to_string(i)).c_str(), H5P_DEFAULT, H5P_DEFAULT), 0);
    H5Fclose(f);
  }
  expect_refused("run long.h5 -o out.h5",
                 {"/inputs/x is a link to /l0, which links to /l1", "/l5, which links on through 14 more to /realx, "
                  "which is an object, but through 21 soft links in a row, more than HDF5 follows (16)"},
                 {"/l6", "/l18"});
  ASSERT_EQ(run_bounded(dir, "run good.h5 -o res.h5 --policies hf").exit_code, 0);
  expect_refused("compare flat.h5:/inputs/x/out policy:hf --inputs good.h5", {"/inputs is a dataset, not a group"});
}

// A stale link beside the results groups (a removed policy's soft link, an external link to an archive) made every
// command that lists /results refuse the whole file; it is left out now, and refused only where it is asked for.
TEST_F(IoReview, AStaleLinkBesideTheResultsGroupsIsRefusedOnlyWhereNamed) {
  ASSERT_EQ(run_bounded(dir, "run good.h5 -o res.h5 --policies hf,fp32-seeded").exit_code, 0);
  std::filesystem::copy_file(dir.file("res.h5"), dir.file("stale.h5"));
  {
    const hid_t f = H5Fopen(dir.file("stale.h5").c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    ASSERT_GE(f, 0);
    ASSERT_GE(H5Lcreate_soft("/results/removed", f, "/results/zz-old", H5P_DEFAULT, H5P_DEFAULT), 0);
    ASSERT_GE(H5Lcreate_external("archive.h5", "/results/x", f, "/results/zz-archived", H5P_DEFAULT, H5P_DEFAULT), 0);
    H5Fclose(f);
  }
  for (const char* args : {"compare stale.h5:hf stale.h5:fp32-seeded", "compare stale.h5:/results/hf-bf16 res.h5:hf",
                           "fingerprint good.h5 stale.h5:hf", "info stale.h5"}) {
    const CliResult r = run_bounded(dir, args);
    EXPECT_EQ(r.exit_code, 0) << args << "\n" << r.err;
  }
  expect_refused("compare stale.h5:zz-old res.h5:hf", {"stale.h5", "/results/zz-old", "/results/removed"});
  expect_refused("compare stale.h5:/results/zz-archived res.h5:hf", {"/results/zz-archived", "external link"});
  // A path through such a link says what the link is, not "missing"; a soft link to an external link is as far out.
  expect_refused("fingerprint good.h5 stale.h5:/results/zz-archived/out", {"/results/zz-archived", "external link"});
  expect_refused("compare stale.h5:/results/zz-archived/out res.h5:hf", {"/results/zz-archived", "external link"});
  {
    const hid_t f = H5Fopen(dir.file("stale.h5").c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    ASSERT_GE(H5Lcreate_soft("/results/zz-archived", f, "/results/zz-via", H5P_DEFAULT, H5P_DEFAULT), 0);
    // "hf" is an alias of hf-bf16, which exists: the broken group the user named must not resolve to it.
    ASSERT_GE(H5Lcreate_soft("/results/gone", f, "/results/hf", H5P_DEFAULT, H5P_DEFAULT), 0);
    H5Fclose(f);
  }
  expect_refused("compare stale.h5:zz-via res.h5:hf", {"/results/zz-via", "/results/zz-archived", "external link"});
  expect_refused("compare stale.h5:hf res.h5:hf", {"/results/hf", "/results/gone"});
}

// A hard link to a group above it is legal HDF5 (h5py: f['back'] = f['/']): info walked it forever. Each group is
// described once now, and a second name of it points at the first; the other commands never walked the tree.
TEST_F(IoReview, InfoShowsAHardLinkCycleOnce) {
  ASSERT_EQ(run_bounded(dir, "run good.h5 -o res.h5 --policies hf").exit_code, 0);
  std::filesystem::copy_file(dir.file("res.h5"), dir.file("cycle.h5"));
  {
    const hid_t f = H5Fopen(dir.file("cycle.h5").c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    ASSERT_GE(f, 0);
    ASSERT_GE(H5Lcreate_hard(f, "/", f, "back", H5P_DEFAULT, H5P_DEFAULT), 0);
    ASSERT_GE(H5Lcreate_hard(f, "/results/hf-bf16", f, "/results/hf-bf16/loop", H5P_DEFAULT, H5P_DEFAULT), 0);
    H5Fclose(f);
  }
  const CliResult info = run_bounded(dir, "info cycle.h5");
  ASSERT_EQ(info.exit_code, 0) << info.err;
  EXPECT_NE(info.out.find("\n/back\n  the group / again"), std::string::npos) << info.out;
  EXPECT_NE(info.out.find("\n/results/hf-bf16/loop\n  the group /results/hf-bf16 again"), std::string::npos) << info.out;
  EXPECT_EQ(run_bounded(dir, "compare cycle.h5:hf res.h5:hf --max-mismatch 0").exit_code, 0);
}

// info opened every group by its full path, recursively: 1 000 nested groups took 9.5 s (the time grew with the
// cube of the depth), 20 000 overflowed the call stack. Groups are opened by object address now (through their
// parents' handles, HDF5 still built each one's full path: 44 s at 30 000 levels), with a stack of open groups
// instead of recursion, and a path is spelled out only where it is printed. Run with a 256 KiB stack, where the
// recursion overflowed at 3 000 levels (exit 2, "crashed"), as did HDF5's search for the name of an attribute's
// object opened by address, so the test does not rest on the time the old walks took.
TEST_F(IoReview, InfoDescribesDeeplyNestedGroups) {
  ASSERT_EQ(run_bounded(dir, "run good.h5 -o res.h5 --policies hf").exit_code, 0);
  std::filesystem::copy_file(dir.file("res.h5"), dir.file("deep.h5"));
  constexpr int kDepth = 3000;
  {
    const hid_t f = H5Fopen(dir.file("deep.h5").c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    ASSERT_GE(f, 0);
    std::vector<hid_t> groups{H5Gopen2(f, "/results", H5P_DEFAULT)};
    for (int i = 0; i < kDepth; ++i) groups.push_back(H5Gcreate2(groups.back(), "g", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
    ASSERT_GE(groups.back(), 0);
    raw_string_attribute(groups.back(), "note", "the bottom");
    // A dataset stored as uint16 bits with a dtype attribute: reading the attribute names its dataset, which HDF5
    // finds by searching the whole file (recursively) for one it opened without a name.
    const hsize_t n = 4;
    const uint16_t bits[n] = {0x3f80, 0x4000, 0x4040, 0x4080};
    const hid_t space = H5Screate_simple(1, &n, nullptr);
    const hid_t ds = H5Dcreate2(groups.back(), "x", H5T_STD_U16LE, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    ASSERT_GE(ds, 0);
    H5Dwrite(ds, H5T_NATIVE_UINT16, H5S_ALL, H5S_ALL, H5P_DEFAULT, bits);
    raw_string_attribute(ds, "dtype", "bfloat16");
    H5Dclose(ds);
    H5Sclose(space);
    for (auto it = groups.rbegin(); it != groups.rend(); ++it) H5Gclose(*it);
    H5Fclose(f);
  }
  std::string bottom = "/results";
  for (int i = 0; i < kDepth; ++i) bottom += "/g";
  const CliResult info = run_bounded(dir, "info deep.h5", "ulimit -s 256; ");
  ASSERT_EQ(info.exit_code, 0) << info.err.substr(0, 500);
  EXPECT_NE(info.out.find("\n" + bottom + "\n  @note = the bottom\n  x                    bfloat16 (as uint16 bits)  [4]"),
            std::string::npos)
      << info.out.substr(info.out.size() - std::min<size_t>(info.out.size(), 2000));
  EXPECT_NE(info.out.find("/results/hf-bf16"), std::string::npos);
}

// Groups first reached through soft links nested in each other: the walk names them /a/n/n/..., a path through one
// soft link per level. HDF5 follows at most 16 soft links on one path, so opening each dataset by that full path made
// the datasets below the 16th level "(unreadable)" (and described nowhere else); they are opened through their
// group's handle.
TEST_F(IoReview, InfoDescribesDatasetsReachedThroughManySoftLinks) {
  constexpr int kLevels = 20;
  {
    RawFile f(dir.file("soft.h5"));
    for (int i = 0; i < kLevels; ++i) f.f32("/g" + std::to_string(i) + "/x", {2}, {1.0f, float(i)});
  }
  {
    const hid_t f = H5Fopen(dir.file("soft.h5").c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    ASSERT_GE(f, 0);
    ASSERT_GE(H5Lcreate_soft("/g0", f, "/a", H5P_DEFAULT, H5P_DEFAULT), 0);
    for (int i = 0; i + 1 < kLevels; ++i)
      ASSERT_GE(H5Lcreate_soft(("/g" + std::to_string(i + 1)).c_str(), f, ("/g" + std::to_string(i) + "/n").c_str(),
                               H5P_DEFAULT, H5P_DEFAULT),
                0);
    H5Fclose(f);
  }
  const CliResult info = run_bounded(dir, "info soft.h5");
  ASSERT_EQ(info.exit_code, 0) << info.err;
  EXPECT_EQ(info.out.find("unreadable"), std::string::npos) << info.out;
  std::string deepest = "/a";
  for (int i = 0; i + 1 < kLevels; ++i) deepest += "/n";
  EXPECT_NE(info.out.find("\n" + deepest + "\n  x                    float32                    [2]"), std::string::npos)
      << info.out;
}

// Refusing external links is a property of mhcdiff's own lookups, not of the process: a program linking the library
// still follows them with HDF5's defaults after mhcdiff has read a file.
TEST_F(IoReview, ExternalLinksStayFollowedForTheProcesssOwnHdf5Use) {
  write_inputs(dir.file("target.h5"), inputs);
  {
    const hid_t f = H5Fcreate(dir.file("linker.h5").c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    ASSERT_GE(H5Lcreate_external(dir.file("target.h5").c_str(), "/inputs/x", f, "x", H5P_DEFAULT, H5P_DEFAULT), 0);
    H5Fclose(f);
  }
  const io::InputReader reader(dir.file("good.h5"), {});  // mhcdiff's lookups, with external links refused
  EXPECT_EQ(reader.shape().S, 4);
  const hid_t f = H5Fopen(dir.file("linker.h5").c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  ASSERT_GE(f, 0);
  const hid_t ds = H5Dopen2(f, "x", H5P_DEFAULT);
  EXPECT_GE(ds, 0) << "HDF5's default traversal of external links was changed for the whole process";
  if (ds >= 0) H5Dclose(ds);
  H5Fclose(f);
}

// A zero dim made any other dims pass, though callers multiply subsets of them (the rows before the last dims).
TEST(IoReviewCounts, ElementCountsCheckTheNonZeroDimsToo) {
  EXPECT_EQ(io::detail::element_count({hsize_t(1) << 62, 8, 0}), std::nullopt);
  EXPECT_EQ(io::detail::element_count({hsize_t(1) << 40, 0, 16}), std::optional<int64_t>(0));
  EXPECT_EQ(io::detail::element_count({3, 4, 5}), std::optional<int64_t>(60));
}

// compare's, extract's and fingerprint's one rule for leading (token) dims, its edges included.
TEST(IoReviewCounts, TokenLayoutsAgreeUpToMergedAxes) {
  using V = std::vector<int64_t>;
  EXPECT_TRUE(io::same_token_layout(V{8}, V{2, 4}));
  EXPECT_TRUE(io::same_token_layout(V{2, 2, 2}, V{2, 4}));
  EXPECT_TRUE(io::same_token_layout(V{1, 3, 1}, V{3}));
  EXPECT_TRUE(io::same_token_layout(V{}, V{1, 1}));
  EXPECT_FALSE(io::same_token_layout(V{4, 2}, V{2, 4}));
  EXPECT_FALSE(io::same_token_layout(V{4, 4}, V{2, 8}));
  EXPECT_FALSE(io::same_token_layout(V{8}, V{9}));
  EXPECT_TRUE(io::same_token_layout(V{int64_t{1} << 62, 8, 0}, V{0}));  // no tokens either way, no overflow
  EXPECT_FALSE(io::same_token_layout(V{int64_t{1} << 62, 8}, V{int64_t{1} << 62, 8}));  // more tokens than int64
}

// Dimensions whose product exceeds 2^63 wrapped around: batch dims [2^62+1, 4] made S = 4, and `run` "succeeded"
// on 4 tokens of a tensor claiming 2^64+4, writing results with the claimed dims; compare read 4 rows of it.
TEST_F(IoReview, ElementCountsBeyondInt64AreRefused) {
  const hsize_t huge = (hsize_t{1} << 62) + 1;
  {
    RawFile f(dir.file("wrap.h5"));
    auto declare = [&](const char* name, std::vector<hsize_t> tail) {
      declare_unwritten(f.id(), name, {huge, 4}, {1, 1}, tail);
    };
    declare("/inputs/x", {8});
    declare("/inputs/residual", {2, 8});
    declare("/inputs/post", {2});
    declare("/inputs/comb", {2, 2});
  }
  expect_refused("run wrap.h5 -o out.h5 --policies hf", {"wrap.h5", "/inputs/x", "4611686018427387905"});

  ASSERT_EQ(run_bounded(dir, "run good.h5 -o res.h5 --policies hf").exit_code, 0);
  std::filesystem::copy_file(dir.file("res.h5"), dir.file("res-wrap.h5"));
  replace_link(dir.file("res-wrap.h5"), "/results/hf-bf16/out", [&](hid_t f) {
    const hsize_t chunk[4] = {1, 1, 2, 8};
    const hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    H5Pset_chunk(dcpl, 4, chunk);
    create_f32(f, "/results/hf-bf16/out", {huge, 4, 2, 8}, dcpl);
    H5Pclose(dcpl);
  });
  expect_refused("compare res-wrap.h5:hf res.h5:hf", {"res-wrap.h5", "/results/hf-bf16/out", "4611686018427387905"});
}

// Storage a file declares but never wrote reads as the fill value (zeros): a dump of 2^40 tokens with nothing written
// kept fingerprint, extract and `compare policy:` busy for days (`run` refused it only for want of disk), and one
// chunk left unwritten by a crashed writer passed as zeros. Both are refused by every reader at its first read of
// the dataset, quickly and with nothing written; early-allocated storage (fill values written) and ordinary files
// still read.
TEST_F(IoReview, StorageNeverWrittenIsRefused) {
  const hsize_t tokens = hsize_t{1} << 40;
  {
    RawFile f(dir.file("huge.h5"));
    auto declare = [&](const char* name, std::vector<hsize_t> tail) {  // chunks of one token
      declare_unwritten(f.id(), name, {tokens}, {1}, tail);
    };
    declare("/inputs/x", {8});
    declare("/inputs/residual", {2, 8});
    declare("/inputs/post", {2});
    declare("/inputs/comb", {2, 2});
    declare("/inputs/grad_out", {2, 8});
  }
  expect_refused("compare policy:hf policy:exact --inputs huge.h5",
                 {"huge.h5", "/inputs/x", "0 of the 1099511627776 chunks", "fill value"});
  expect_refused("explain huge.h5 --at 0,0,0", {"huge.h5", "/inputs/x", "fill value"});
  // `run` (results larger than the disk) says that first: the check is made at a dataset's first read.
  expect_refused("run huge.h5 -o out.h5 --policies hf", {"out.h5", "free"});
  const CliResult info = run_bounded(dir, "info huge.h5");
  EXPECT_EQ(info.exit_code, 0) << info.err;
  EXPECT_NE(info.out.find("written in 0 of the 1099511627776 chunks"), std::string::npos) << info.out;

  // One chunk of four left unwritten (post's last token), and contiguous storage never allocated. post_but_last
  // creates `name` like /inputs/post [S,H] in chunks of one token (extendible along S when `extendible`) and writes
  // every token but the last; it returns the open dataset.
  const hsize_t S = hsize_t(inputs.S), H = hsize_t(inputs.H);
  auto post_but_last = [&](hid_t f, const char* name, bool extendible) {
    const hsize_t chunk[2] = {1, H}, dims[2] = {S, H}, max_dims[2] = {H5S_UNLIMITED, H}, start[2] = {0, 0},
                  count[2] = {S - 1, H};
    const hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    H5Pset_chunk(dcpl, 2, chunk);
    const hid_t space = H5Screate_simple(2, dims, extendible ? max_dims : nullptr);
    const hid_t memory = H5Screate_simple(2, count, nullptr);
    const hid_t ds = H5Dcreate2(f, name, H5T_IEEE_F32LE, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    H5Sselect_hyperslab(space, H5S_SELECT_SET, start, nullptr, count, nullptr);
    EXPECT_GE(H5Dwrite(ds, H5T_NATIVE_FLOAT, memory, space, H5P_DEFAULT, inputs.post.data()), 0);
    H5Sclose(memory);
    H5Sclose(space);
    H5Pclose(dcpl);
    return ds;
  };
  write_inputs(dir.file("part.h5"), inputs);
  replace_link(dir.file("part.h5"), "/inputs/post",
               [&](hid_t f) { H5Dclose(post_but_last(f, "/inputs/post", false)); });
  expect_refused("run part.h5 -o out.h5 --policies hf", {"part.h5", "/inputs/post", "3 of the 4 chunks"});
  write_inputs(dir.file("never.h5"), inputs);
  replace_link(dir.file("never.h5"), "/inputs/comb",
               [&](hid_t f) { create_f32(f, "/inputs/comb", {S, H, H}, H5P_DEFAULT); });
  expect_refused("run never.h5 -o out.h5 --policies hf", {"never.h5", "/inputs/comb", "never written"});

  // An extendible dataset whose chunk count is made up by a chunk written beyond its shape (H5Dwrite_chunk), with the
  // last one inside missing; and a virtual dataset over a source of this file with a chunk missing.
  write_inputs(dir.file("beyond.h5"), inputs);
  replace_link(dir.file("beyond.h5"), "/inputs/post", [&](hid_t f) {
    const hid_t ds = post_but_last(f, "/inputs/post", true);
    const hsize_t beyond[2] = {S, 0};
    EXPECT_GE(H5Dwrite_chunk(ds, H5P_DEFAULT, 0, beyond, H * sizeof(float), inputs.post.data()), 0);
    H5Dclose(ds);
  });
  expect_refused("run beyond.h5 -o out.h5 --policies hf", {"beyond.h5", "/inputs/post", "missing its chunk at [3,0]"});
  write_inputs(dir.file("vds-part.h5"), inputs);
  replace_link(dir.file("vds-part.h5"), "/inputs/post", [&](hid_t f) {
    H5Dclose(post_but_last(f, "/p", false));
    const hsize_t dims[2] = {S, H};
    const hid_t space = H5Screate_simple(2, dims, nullptr), vcpl = H5Pcreate(H5P_DATASET_CREATE);
    EXPECT_GE(H5Pset_virtual(vcpl, space, ".", "/p", space), 0);
    create_f32(f, "/inputs/post", {S, H}, vcpl);
    H5Pclose(vcpl);
    H5Sclose(space);
  });
  expect_refused("run vds-part.h5 -o out.h5 --policies hf", {"vds-part.h5", "/inputs/post", "/p", "3 of the 4 chunks"});

  // A results tensor with no chunk written: compare refuses it rather than comparing zeros.
  ASSERT_EQ(run_bounded(dir, "run good.h5 -o res.h5 --policies hf").exit_code, 0);
  std::filesystem::copy_file(dir.file("res.h5"), dir.file("res-empty.h5"));
  replace_link(dir.file("res-empty.h5"), "/results/hf-bf16/out", [&](hid_t f) {
    const hsize_t chunk[3] = {1, H, 8};
    const hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    H5Pset_chunk(dcpl, 3, chunk);
    create_f32(f, "/results/hf-bf16/out", {S, H, 8}, dcpl);
    H5Pclose(dcpl);
  });
  expect_refused("compare res-empty.h5:hf res.h5:hf", {"res-empty.h5", "/results/hf-bf16/out", "0 of the 4 chunks"});

  // Early allocation writes the fill value into every chunk: that is data the file holds, and it is read.
  write_inputs(dir.file("early.h5"), inputs);
  replace_link(dir.file("early.h5"), "/inputs/post", [&](hid_t f) {
    const hsize_t chunk[2] = {1, H};
    const hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    H5Pset_chunk(dcpl, 2, chunk);
    H5Pset_alloc_time(dcpl, H5D_ALLOC_TIME_EARLY);
    create_f32(f, "/inputs/post", {S, H}, dcpl);
    H5Pclose(dcpl);
  });
  const CliResult early = run_bounded(dir, "run early.h5 -o early-out.h5 --policies hf");
  EXPECT_EQ(early.exit_code, 0) << early.err;
}

// Root attributes that are there but are not one string were ignored: comb_layout = 1 read comb as src,dst, a
// comb_layout array used its first element, format = 2 passed as mhcdiff/1.
TEST_F(IoReview, RootAttributesOfTheWrongTypeAreRefused) {
  write_inputs(dir.file("layout-int.h5"), inputs);
  replace_link(dir.file("layout-int.h5"), "/none", [](hid_t f) { set_int_attribute(f, "comb_layout", 1); });
  expect_refused("run layout-int.h5 -o out.h5 --policies hf", {"layout-int.h5", "comb_layout", "not a string"});

  write_inputs(dir.file("format-int.h5"), inputs);
  replace_link(dir.file("format-int.h5"), "/none", [](hid_t f) { set_int_attribute(f, "format", 2); });
  expect_refused("run format-int.h5 -o out.h5 --policies hf", {"format-int.h5", "format", "not a string"});
  // info describes any HDF5 file, and says first what keeps the other commands from reading it.
  const CliResult info = run_bounded(dir, "info format-int.h5");
  EXPECT_EQ(info.exit_code, 0) << info.err;
  EXPECT_NE(info.out.find("root attribute format is not a string; expected \"mhcdiff/1\"; mhcdiff's other commands "
                          "refuse it"),
            std::string::npos)
      << info.out;

  write_inputs(dir.file("layout-two.h5"), inputs);
  replace_link(dir.file("layout-two.h5"), "/none", [](hid_t f) {
    H5Adelete(f, "comb_layout");
    const hid_t type = H5Tcopy(H5T_C_S1);
    H5Tset_size(type, H5T_VARIABLE);
    const hsize_t two = 2;
    const hid_t space = H5Screate_simple(1, &two, nullptr);
    const hid_t attr = H5Acreate2(f, "comb_layout", type, space, H5P_DEFAULT, H5P_DEFAULT);
    const char* values[2] = {"dst,src", "src,dst"};
    H5Awrite(attr, type, values);
    H5Aclose(attr);
    H5Sclose(space);
    H5Tclose(type);
  });
  expect_refused("run layout-two.h5 -o out.h5 --policies hf", {"layout-two.h5", "comb_layout", "not a string"});
}

// comb_layout written on /inputs or on /inputs/comb (h5py makes either as easy as the root) was ignored: comb was
// read as src,dst whatever the attribute said, and `info` listed it while saying the file declared none. Refused,
// with or without --comb-layout (a misplaced attribute is a malformed file, like a malformed root one).
TEST_F(IoReview, CombLayoutOffTheRootIsRefused) {
  for (const std::string object : {"/inputs", "/inputs/comb"}) {
    const std::string name = object == "/inputs" ? "layout-group.h5" : "layout-dataset.h5";
    write_inputs(dir.file(name), inputs);
    replace_link(dir.file(name), "/none", [&](hid_t f) {
      const hid_t target = H5Oopen(f, object.c_str(), H5P_DEFAULT);
      const hid_t type = H5Tcopy(H5T_C_S1);
      H5Tset_size(type, H5T_VARIABLE);
      H5Tset_cset(type, H5T_CSET_UTF8);
      const hid_t space = H5Screate(H5S_SCALAR);
      const hid_t attr = H5Acreate2(target, "comb_layout", type, space, H5P_DEFAULT, H5P_DEFAULT);
      const char* value = "dst,src";
      H5Awrite(attr, type, &value);
      H5Aclose(attr);
      H5Sclose(space);
      H5Tclose(type);
      H5Oclose(target);
    });
    const char* where = object == "/inputs" ? "the group /inputs" : "the dataset /inputs/comb";
    expect_refused("run " + name + " -o out.h5 --policies hf", {name.c_str(), where, "comb_layout", "file root"});
    expect_refused("run " + name + " -o out.h5 --policies hf --comb-layout dst,src", {where, "comb_layout"});
  }
}

// A string attribute `name` = `value` on `object` of `path`, written as HDF5 fixed-length text padded with `pad`.
void fixed_string_attribute(const std::string& path, const char* object, const char* name, const std::string& value,
                            H5T_str_t pad, size_t size) {
  const hid_t file = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  ASSERT_GE(file, 0) << path;
  const hid_t target = H5Oopen(file, object, H5P_DEFAULT);
  if (H5Aexists(target, name) > 0) H5Adelete(target, name);
  const hid_t type = H5Tcopy(H5T_C_S1);
  H5Tset_size(type, size);
  H5Tset_strpad(type, pad);
  const hid_t space = H5Screate(H5S_SCALAR);
  const hid_t attr = H5Acreate2(target, name, type, space, H5P_DEFAULT, H5P_DEFAULT);
  std::string padded = value;
  padded.resize(size, pad == H5T_STR_SPACEPAD ? ' ' : '\0');
  H5Awrite(attr, type, padded.data());
  H5Aclose(attr);
  H5Sclose(space);
  H5Tclose(type);
  H5Oclose(target);
  H5Fclose(file);
}

// An attribute meant to declare comb's orientation under another name was ignored, and comb read as src,dst with
// exit 0: a near miss of comb_layout on the root ("comb-layout", the spelling of the option), or an attribute whose
// value is an orientation on /inputs/comb. So was comb_layout on a results group or its grad_comb, which compare read
// src,dst. Each is refused, naming the attribute and where mhcdiff reads it from. Fortran-style blank-padded text is
// read without its padding (HDF5's meaning of H5T_STR_SPACEPAD); it was refused as "dst,src     ".
TEST_F(IoReview, CombOrientationAttributesMhcdiffWouldNotReadAreRefused) {
  for (const char* name : {"comb-layout", "COMB_LAYOUT", "combLayout", "comb_order"}) {
    write_inputs(dir.file("near.h5"), inputs);
    set_root_string_attribute(dir.file("near.h5"), name, "dst,src");
    expect_refused("run near.h5 -o out.h5 --policies hf",
                   {"root attribute '", name, "' is not comb_layout", "name it comb_layout"});
  }
  write_inputs(dir.file("value.h5"), inputs);
  replace_link(dir.file("value.h5"), "/none", [](hid_t f) {
    const hid_t comb = H5Oopen(f, "/inputs/comb", H5P_DEFAULT);
    raw_string_attribute(comb, "layout", "DST, SRC");
    H5Oclose(comb);
  });
  expect_refused("run value.h5 -o out.h5 --policies hf",
                 {"the dataset /inputs/comb has an attribute 'layout'", "move it there as comb_layout"});

  ASSERT_EQ(run_bounded(dir, "run good.h5 -o res.h5 --policies hf --backward").exit_code, 0);
  for (const char* object : {"/results/hf-bf16", "/results/hf-bf16/grad_comb", "/results"}) {
    std::filesystem::copy_file(dir.file("res.h5"), dir.file("marked.h5"),
                               std::filesystem::copy_options::overwrite_existing);
    replace_link(dir.file("marked.h5"), "/none", [&](hid_t f) {
      const hid_t target = H5Oopen(f, object, H5P_DEFAULT);
      raw_string_attribute(target, "comb_layout", "dst,src");
      H5Oclose(target);
    });
    expect_refused("compare marked.h5:hf res.h5:hf", {object, "has an attribute 'comb_layout'", "file root"});
  }
  std::filesystem::remove(dir.file("marked.h5"));
  // A bare dump (tensors at the root, docs/ci.md) has no results group, but its grad_comb is checked too.
  {
    RawFile dump(dir.file("dump.h5"));
    const hid_t src = H5Fopen(dir.file("res.h5").c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
    for (const char* name : {"out", "grad_comb"})
      ASSERT_GE(H5Ocopy(src, (std::string("/results/hf-bf16/") + name).c_str(), dump.id(), name, H5P_DEFAULT,
                        H5P_DEFAULT),
                0);
    H5Fclose(src);
    const hid_t grad_comb = H5Oopen(dump.id(), "/grad_comb", H5P_DEFAULT);
    raw_string_attribute(grad_comb, "layout", "dst,src");
    H5Oclose(grad_comb);
  }
  expect_refused("compare dump.h5 res.h5:hf --tensors grad_comb", {"/grad_comb has an attribute 'layout'"});
  std::filesystem::remove(dir.file("dump.h5"));

  write_inputs(dir.file("padded.h5"), inputs);
  fixed_string_attribute(dir.file("padded.h5"), "/", "comb_layout", "dst,src", H5T_STR_SPACEPAD, 12);
  ASSERT_EQ(run_bounded(dir, "run padded.h5 -o padded_res.h5 --policies hf").exit_code, 0);
  EXPECT_NE(run_bounded(dir, "info padded_res.h5").out.find("@source_comb_layout = dst,src (the file's comb_layout"),
            std::string::npos);
  // Padded with NULs, trailing blanks are part of the text, and refused as before.
  fixed_string_attribute(dir.file("padded.h5"), "/", "comb_layout", "dst,src  ", H5T_STR_NULLPAD, 12);
  expect_refused("run padded.h5 -o out.h5 --policies hf", {"root attribute comb_layout is \"dst,src  \""});
}

// A results tensor of float32 (grad_post, grad_comb) stored as float64 holding float32 values was refused ("is
// float64; expected float32") although a bf16 one stored as float32/float64 holding bf16 values is read; it is read
// exactly now, and a value that is not a float32 one is refused, naming it.
TEST_F(IoReview, Float32ResultsStoredAsFloat64AreReadExactly) {
  ASSERT_EQ(run_bounded(dir, "run good.h5 -o res.h5 --policies hf --backward").exit_code, 0);
  std::vector<float> grad_post(size_t(inputs.S * inputs.H));
  {
    io::TensorFile f(dir.file("res.h5"));
    f.read_f32("/results/hf-bf16/grad_post", 0, int64_t(grad_post.size()), grad_post.data());
  }
  std::vector<double> wide(grad_post.begin(), grad_post.end());
  auto write_wide = [&](const std::string& name) {
    std::filesystem::copy_file(dir.file("res.h5"), dir.file(name), std::filesystem::copy_options::overwrite_existing);
    replace_link(dir.file(name), "/results/hf-bf16/grad_post", [&](hid_t f) {
      const hsize_t dims[2] = {hsize_t(inputs.S), hsize_t(inputs.H)};
      const hid_t space = H5Screate_simple(2, dims, nullptr);
      const hid_t ds = H5Dcreate2(f, "/results/hf-bf16/grad_post", H5T_IEEE_F64LE, space, H5P_DEFAULT, H5P_DEFAULT,
                                  H5P_DEFAULT);
      H5Dwrite(ds, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, wide.data());
      H5Dclose(ds);
      H5Sclose(space);
    });
  };
  write_wide("wide.h5");
  const CliResult same = run_bounded(dir, "compare wide.h5:hf res.h5:hf --tensors grad_post --max-mismatch 0");
  EXPECT_EQ(same.exit_code, 0) << same.err << same.out;
  EXPECT_NE(same.out.find("Bitwise identical: 0 / 8 elements differ"), std::string::npos) << same.out;
  wide[3] += 0x1p-40;  // between two float32 values
  write_wide("inexact.h5");
  expect_refused("compare inexact.h5:hf res.h5:hf --tensors grad_post",
                 {"dataset /results/hf-bf16/grad_post is float64 and element [1,1]", "is not a float32 value"});
}

// A pass-through HDF5 filter registered in this process only: files written with it need a filter the CLI's
// HDF5 library does not have (like an h5py file compressed with lzf or a blosc plugin).
constexpr H5Z_filter_t kTestFilter = 65000;
size_t pass_through(unsigned, size_t, const unsigned[], size_t nbytes, size_t*, void**) { return nbytes; }

// A dataset whose filter is not available used to be reported as "the file is truncated or corrupt"; the message
// names the missing filter, and `info` flags it. Real damage (a Fletcher-32 checksum error) still says corrupt.
TEST_F(IoReview, AMissingFilterIsNamedNotCalledCorruption) {
  const H5Z_class2_t filter = {H5Z_CLASS_T_VERS, kTestFilter, 1, 1, "mhcdiff-test-filter", nullptr, nullptr,
                               pass_through};
  ASSERT_GE(H5Zregister(&filter), 0);
  write_inputs(dir.file("filtered.h5"), inputs);
  replace_link(dir.file("filtered.h5"), "/inputs/post", [&](hid_t f) {
    const hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    const hsize_t chunk[2] = {4, 2};
    H5Pset_chunk(dcpl, 2, chunk);
    H5Pset_filter(dcpl, kTestFilter, H5Z_FLAG_MANDATORY, 0, nullptr);
    create_f32(f, "/inputs/post", {4, 2}, dcpl, inputs.post.data());
    H5Pclose(dcpl);
  });
  H5Zunregister(kTestFilter);
  expect_refused("run filtered.h5 -o out.h5 --policies hf", {"filtered.h5", "/inputs/post", "mhcdiff-test-filter"},
                 {"corrupt"});
  const CliResult info = run_bounded(dir, "info filtered.h5");
  EXPECT_EQ(info.exit_code, 0) << info.err;
  EXPECT_NE(info.out.find("mhcdiff-test-filter"), std::string::npos) << info.out;

  write_inputs(dir.file("damaged.h5"), inputs);
  haddr_t offset = HADDR_UNDEF;
  replace_link(dir.file("damaged.h5"), "/inputs/post", [&](hid_t f) {
    const hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    const hsize_t chunk[2] = {4, 2};
    H5Pset_chunk(dcpl, 2, chunk);
    H5Pset_fletcher32(dcpl);
    create_f32(f, "/inputs/post", {4, 2}, dcpl, inputs.post.data());
    H5Pclose(dcpl);
    const hid_t ds = H5Dopen2(f, "/inputs/post", H5P_DEFAULT);
    const hsize_t origin[2] = {0, 0};
    hsize_t size = 0;
    H5Dget_chunk_info_by_coord(ds, origin, nullptr, &offset, &size);
    H5Dclose(ds);
  });
  ASSERT_NE(offset, HADDR_UNDEF);
  {
    std::fstream f(dir.file("damaged.h5"), std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(std::streamoff(offset + 1));
    f.put(char(0x5a));
  }
  expect_refused("run damaged.h5 -o out.h5 --policies hf", {"damaged.h5", "/inputs/post", "Fletcher32", "corrupt"});
}

// Files mhcdiff writes carry a Fletcher-32 checksum per chunk: one byte changed in a stored chunk of an input file
// (gen), of a results file (run) or of a golden baseline (golden regen) is refused by every reader instead of read
// as other values (before, such a file passed, and a compare or golden check judged the changed values).
TEST_F(IoReview, OneChangedByteInAFileMhcdiffWroteIsRefused) {
  ASSERT_EQ(run_bounded(dir, "gen --preset randn --shape 8,2,16 --grad -o in.h5").exit_code, 0);
  ASSERT_EQ(run_bounded(dir, "run in.h5 -o res.h5 --policies hf,fp32-seeded --backward").exit_code, 0);
  ASSERT_EQ(run_bounded(dir, "golden regen in.h5 -o golden.h5 --policies fp32-seeded").exit_code, 0);
  // Flips one byte in the middle of the first chunk of `dataset`, found through HDF5's chunk index.
  auto damage = [&](const std::string& from, const std::string& to, const char* dataset) {
    std::filesystem::copy_file(dir.file(from), dir.file(to));
    const hid_t f = H5Fopen(dir.file(to).c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
    ASSERT_GE(f, 0) << to;
    const hid_t ds = H5Dopen2(f, dataset, H5P_DEFAULT);
    ASSERT_GE(ds, 0) << dataset;
    const hid_t dcpl = H5Dget_create_plist(ds);
    EXPECT_GE(H5Pget_nfilters(dcpl), 1) << dataset << " has no filter: no checksum";
    H5Pclose(dcpl);
    const hsize_t origin[4] = {0, 0, 0, 0};
    haddr_t offset = HADDR_UNDEF;
    hsize_t size = 0;
    H5Dget_chunk_info_by_coord(ds, origin, nullptr, &offset, &size);
    H5Dclose(ds);
    H5Fclose(f);
    ASSERT_NE(offset, HADDR_UNDEF) << dataset;
    std::fstream bytes(dir.file(to), std::ios::in | std::ios::out | std::ios::binary);
    bytes.seekg(std::streamoff(offset + size / 2));
    const char old = char(bytes.get());
    bytes.seekp(std::streamoff(offset + size / 2));
    bytes.put(char(old ^ 0x10));
  };
  damage("in.h5", "in-damaged.h5", "/inputs/x");
  damage("res.h5", "res-damaged.h5", "/results/hf-bf16/out");
  damage("golden.h5", "golden-damaged.h5", "/results/fp32-seeded/grad_x");
  expect_refused("run in-damaged.h5 -o out.h5 --policies hf", {"in-damaged.h5", "/inputs/x", "Fletcher32"});
  expect_refused("compare res-damaged.h5:hf-bf16 res.h5:fp32-seeded", {"res-damaged.h5", "out", "Fletcher32"});
  expect_refused("golden check res.h5:fp32-seeded --golden golden-damaged.h5", {"golden-damaged.h5", "grad_x", "Fletcher32"});
  // The intact files still read.
  EXPECT_EQ(run_bounded(dir, "compare res.h5:hf-bf16 res.h5:fp32-seeded --inputs in.h5").exit_code, 0);
  EXPECT_EQ(run_bounded(dir, "golden check res.h5:fp32-seeded --golden golden.h5").exit_code, 0);
}

// A file another process holds open for writing (a training job's h5py writer) is locked by HDF5; that was
// reported as "truncated or corrupt".
TEST_F(IoReview, AFileOpenForWritingElsewhereIsNamedAsLocked) {
  if (const char* locking = std::getenv("HDF5_USE_FILE_LOCKING"); locking && std::string(locking) != "TRUE")
    GTEST_SKIP() << "HDF5 file locking is turned off in this environment";
  const hid_t writer = H5Fopen(dir.file("good.h5").c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  ASSERT_GE(writer, 0);
  expect_refused("run good.h5 -o out.h5 --policies hf", {"good.h5", "open for writing"}, {"corrupt"});
  expect_refused("info good.h5", {"good.h5", "open for writing"}, {"corrupt"});
  H5Fclose(writer);
  EXPECT_EQ(run_bounded(dir, "info good.h5").exit_code, 0);
}

}  // namespace
}  // namespace mhc
