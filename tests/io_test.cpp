// The HDF5 store (format mhcdiff/1, SPEC §3): every dtype path round-trips bits, batch dims and comb
// orientation are honoured, bad values are refused with a sentence, and writes are atomic.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>

#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <limits>

#include "io/store.hpp"
#include "io_test_util.hpp"
#include "kernels/cpu/operator_cpu.hpp"

namespace mhc {
namespace {

using namespace mhc::testing;

// Inputs a reader returns must carry exactly the bits that were stored.
void expect_same_inputs(const RawInputs& want, const Inputs& got, bool grad) {
  EXPECT_EQ(got.shape, (Shape{want.S, int(want.H), want.D}));
  EXPECT_EQ(first_bit_difference(got.x, want.x), -1) << "x: first differing index";
  EXPECT_EQ(first_bit_difference(got.residual, want.residual), -1) << "residual: first differing index";
  EXPECT_EQ(first_bit_difference(got.post, want.post), -1) << "post: first differing index";
  EXPECT_EQ(first_bit_difference(got.comb, want.comb), -1) << "comb: first differing index";
  if (grad) {
    EXPECT_EQ(first_bit_difference(got.grad_out, want.grad_out), -1) << "grad_out: first differing index";
  }
}

Inputs as_inputs(const RawInputs& r, bool grad) {
  Inputs in;
  in.shape = Shape{r.S, int(r.H), r.D};
  in.x = r.x;
  in.residual = r.residual;
  in.post = r.post;
  in.comb = r.comb;
  if (grad) in.grad_out = r.grad_out;
  return in;
}

// Special bf16 values every path must keep: ±0, ±inf, a NaN payload, subnormals, the extremes.
const std::vector<uint16_t> kSpecialBf16 = {0x0000, 0x8000, 0x7f80, 0xff80, 0x7fc1, 0x0001, 0x807f,
                                            0x7f7f, 0xff7f, 0x3f80, 0xbf81, 0x0080};

TEST(Store, ReadsBf16FloatTypeBitExactIncludingSpecialValues) {
  TempDir dir;
  RawInputs r = random_inputs(5, 3, 12, 1);
  std::copy(kSpecialBf16.begin(), kSpecialBf16.end(), r.x.begin());
  std::copy(kSpecialBf16.begin(), kSpecialBf16.end(), r.residual.begin() + 7);
  write_inputs(dir.file("in.h5"), r);
  io::InputCensus census;
  io::ReadOptions specials;
  specials.allow_nonfinite = true;
  io::InputReader reader(dir.file("in.h5"), specials);
  const Inputs got = reader.read_slab(0, 5, &census);
  expect_same_inputs(r, got, true);
  EXPECT_EQ(census.nan_count, 2);  // 0x7fc1 in x and in residual
  EXPECT_EQ(census.inf_count, 4);  // ±inf in x and in residual
  // Without --allow-nonfinite the first special value refuses the file, named by dataset and element.
  try {
    io::InputReader(dir.file("in.h5")).read_slab(0, 5);
    ADD_FAILURE() << "a NaN or infinity must be refused by default";
  } catch (const InputError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("/inputs/x"), std::string::npos) << msg;
    EXPECT_NE(msg.find("--allow-nonfinite"), std::string::npos) << msg;
  }
}

TEST(Store, ReadsUint16BitsWithDtypeAttributeBitExact) {
  TempDir dir;
  RawInputs r = random_inputs(4, 2, 9, 2);
  std::copy(kSpecialBf16.begin(), kSpecialBf16.begin() + 9, r.x.begin());
  {
    RawFile f(dir.file("in.h5"), /*root_attributes=*/false);  // a bare PyTorch-style dump
    f.u16("/inputs/x", {4, 9}, r.x);
    f.u16("/inputs/residual", {4, 2, 9}, r.residual);
    f.f32("/inputs/post", {4, 2}, r.post);
    f.f32("/inputs/comb", {4, 2, 2}, r.comb);
  }
  io::ReadOptions specials;
  specials.allow_nonfinite = true;
  expect_same_inputs(r, io::read_inputs(dir.file("in.h5"), specials), false);
}

TEST(Store, ReadsFloat32AndFloat64HoldingExactBf16Values) {
  TempDir dir;
  RawInputs r = random_inputs(3, 4, 7, 3);
  std::vector<float> x32, g32;
  std::vector<double> r64, post64, comb64;
  for (uint16_t b : r.x) x32.push_back(float_of_bf16(b));
  for (uint16_t b : r.grad_out) g32.push_back(float_of_bf16(b));
  for (uint16_t b : r.residual) r64.push_back(float_of_bf16(b));
  for (float v : r.post) post64.push_back(v);
  for (float v : r.comb) comb64.push_back(v);
  {
    RawFile f(dir.file("in.h5"));
    f.f32("/inputs/x", {3, 7}, x32);
    f.f64("/inputs/residual", {3, 4, 7}, r64);
    f.f64("/inputs/post", {3, 4}, post64);
    f.f64("/inputs/comb", {3, 4, 4}, comb64);
    f.f32("/inputs/grad_out", {3, 4, 7}, g32);
  }
  expect_same_inputs(r, io::read_inputs(dir.file("in.h5")), true);
}

// A float32 result read as bf16 (a candidate out) names a value that is not bf16 by its own index, as the input
// checks do: it said "element 3585".
TEST(Store, AFloat32ResultThatIsNotBf16IsNamedByItsIndex) {
  TempDir dir;
  std::vector<float> out(4 * 4 * 8, 1.0f);
  out[(3 * 4 + 2) * 8 + 1] = 0.1f;
  {
    RawFile f(dir.file("c.h5"));
    f.f32("/results/k/out", {4, 4, 8}, out);
  }
  std::vector<uint16_t> bits(out.size());
  try {
    io::TensorFile(dir.file("c.h5")).read_bf16("/results/k/out", 0, int64_t(out.size()), bits.data());
    FAIL() << "0.1 read as a bf16 value";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("element [3,2,1] (0.10000000149011612) is not a bfloat16 value"),
              std::string::npos)
        << e.what();
  }
}

TEST(Store, RefusesFloat32ThatIsNotBf16UnlessRoundingIsAllowed) {
  TempDir dir;
  RawInputs r = random_inputs(2, 1, 4, 4);
  std::vector<float> x32;
  for (uint16_t b : r.x) x32.push_back(float_of_bf16(b));
  x32[5] = 0.1f;  // not a bf16 value; RNb(0.1f) = 0x3dcd (0.10009765625)
  {
    RawFile f(dir.file("in.h5"));
    f.f32("/inputs/x", {2, 4}, x32);
    f.bf16("/inputs/residual", {2, 1, 4}, r.residual);
    f.f32("/inputs/post", {2, 1}, r.post);
    f.f32("/inputs/comb", {2, 1, 1}, r.comb);
  }
  try {
    io::read_inputs(dir.file("in.h5"));
    FAIL() << "a float32 0.1 in a bf16 slot must be refused";
  } catch (const InputError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("/inputs/x"), std::string::npos) << msg;
    EXPECT_NE(msg.find("[1,1]"), std::string::npos) << "names the element (token 1, d 1): " << msg;
    EXPECT_NE(msg.find("--round-inputs"), std::string::npos) << msg;
  }
  io::ReadOptions opt;
  opt.round_inputs = true;
  io::InputCensus census;
  io::InputReader reader(dir.file("in.h5"), opt);
  const Inputs got = reader.read_slab(0, 2, &census);
  EXPECT_EQ(got.x[5], 0x3dcd);
  EXPECT_EQ(census.rounded_count, 1);
}

// A finite value beyond bf16's range rounds to an infinity under --round-inputs: refused as what it is (a finite
// value out of range; it was reported as "holds an infinity"), or let through with --allow-nonfinite.
TEST(Store, RoundingAFiniteValueToAnInfinityNeedsNonFiniteInputsAllowed) {
  TempDir dir;
  RawInputs r = random_inputs(2, 1, 4, 4);
  std::vector<float> x32;
  for (uint16_t b : r.x) x32.push_back(float_of_bf16(b));
  x32[6] = 3.4e38f;  // finite; above bf16's largest value and its midpoint to 2^128, so RNb gives +inf
  {
    RawFile f(dir.file("in.h5"));
    f.f32("/inputs/x", {2, 4}, x32);
    f.bf16("/inputs/residual", {2, 1, 4}, r.residual);
    f.f32("/inputs/post", {2, 1}, r.post);
    f.f32("/inputs/comb", {2, 1, 1}, r.comb);
  }
  io::ReadOptions opt;
  opt.round_inputs = true;
  try {
    io::InputReader(dir.file("in.h5"), opt).read_slab(0, 2);
    FAIL() << "a finite value that rounds to an infinity must be refused without --allow-nonfinite";
  } catch (const InputError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("beyond bfloat16's range"), std::string::npos) << msg;
    EXPECT_NE(msg.find("[1,2]"), std::string::npos) << msg;
    EXPECT_EQ(msg.find("holds an infinity"), std::string::npos) << msg;
  }
  opt.allow_nonfinite = true;
  io::InputCensus census;
  const Inputs got = io::InputReader(dir.file("in.h5"), opt).read_slab(0, 2, &census);
  EXPECT_EQ(got.x[6], 0x7f80);
  EXPECT_EQ(census.inf_count, 1);
}

// An input error names the element by its index in the file, batch dims included: it printed the flat token
// ("[5,3]" for x[1,2,3] of a [2,3,D] x), fewer indices than the dataset has.
TEST(Store, AnInputErrorNamesTheElementByItsStoredIndex) {
  TempDir dir;
  RawInputs r = random_inputs(6, 2, 5, 5);
  r.residual[size_t(((1 * 3 + 2) * 2 + 1) * 5 + 3)] = 0x7fc0;  // NaN at residual[1,2,1,3] of [2,3,2,5]
  write_inputs(dir.file("in.h5"), r, {2, 3});
  try {
    io::InputReader(dir.file("in.h5")).read_slab(0, 6);
    FAIL() << "a NaN input must be refused without --allow-nonfinite";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("holds a NaN (first at element [1,2,1,3])"), std::string::npos) << e.what();
  }
}

TEST(Store, FlattensBatchDimsAndKeepsThemInResults) {
  TempDir dir;
  RawInputs r = random_inputs(6, 2, 5, 5);  // stored as [2,3,...]
  write_inputs(dir.file("in.h5"), r, {2, 3});
  io::InputReader reader(dir.file("in.h5"));
  EXPECT_EQ(reader.shape(), (Shape{6, 2, 5}));
  EXPECT_EQ(reader.batch_dims(), (std::vector<int64_t>{2, 3}));
  // Reading token slabs that cross the batch boundary (tokens 2..4 span batch 0 and 1).
  const Inputs whole = reader.read_slab(0, 6);
  expect_same_inputs(r, whole, true);
  const Inputs mid = reader.read_slab(2, 3);
  EXPECT_EQ(first_bit_difference(mid.residual, std::vector<uint16_t>(r.residual.begin() + 2 * 10,
                                                                      r.residual.begin() + 5 * 10)),
            -1);

  io::ResultWriter w(dir.file("out.h5"));
  w.set_batch_dims({2, 3});
  w.declare_inputs(reader.shape(), true);
  w.append_inputs(0, whole);
  w.commit();
  io::TensorFile tf(dir.file("out.h5"));
  EXPECT_EQ(tf.info("/inputs/residual").dims, (std::vector<int64_t>{2, 3, 2, 5}));
  EXPECT_EQ(tf.info("/inputs/residual").rows(), 6);
  EXPECT_EQ(tf.info("/inputs/post").rows(), 6);
}

TEST(Store, TransposesCombStoredDstSrc) {
  TempDir dir;
  RawInputs r = random_inputs(2, 3, 4, 6);
  RawInputs transposed = r;
  for (int s = 0; s < 2; ++s)
    for (int i = 0; i < 3; ++i)
      for (int j = 0; j < 3; ++j) transposed.comb[s * 9 + j * 3 + i] = r.comb[s * 9 + i * 3 + j];
  write_inputs(dir.file("t.h5"), transposed);
  io::ReadOptions opt;
  opt.comb_layout = io::CombLayout::dst_src;
  expect_same_inputs(r, io::read_inputs(dir.file("t.h5"), opt), true);
  // Without the option the file (which declares src,dst) is read as stored.
  expect_same_inputs(transposed, io::read_inputs(dir.file("t.h5")), true);
  // A file that declares dst,src is transposed without being asked.
  {
    RawFile f(dir.file("declared.h5"), /*root_attributes=*/false);
    raw_string_attribute(f.id(), "comb_layout", "dst,src");
    f.bf16("/inputs/x", {2, 4}, transposed.x);
    f.bf16("/inputs/residual", {2, 3, 4}, transposed.residual);
    f.f32("/inputs/post", {2, 3}, transposed.post);
    f.f32("/inputs/comb", {2, 3, 3}, transposed.comb);
  }
  expect_same_inputs(r, io::read_inputs(dir.file("declared.h5")), false);
}

TEST(Store, ResultWriterRoundTripsEveryResultDatasetBitExact) {
  TempDir dir;
  const Shape sh{7, 3, 11};
  RawInputs r = random_inputs(sh.S, sh.H, sh.D, 7);
  const Inputs in = as_inputs(r, true);
  PolicyResult res;
  allocate_result(res, sh, /*with_f64=*/true, /*backward=*/true);
  std::mt19937_64 gen(9);
  for (auto& v : res.out) v = uint16_t(gen());
  for (auto& v : res.grad_x) v = uint16_t(gen());
  for (auto& v : res.grad_residual) v = uint16_t(gen());
  for (auto& v : res.grad_post) v = float(int64_t(gen() % 100000) - 50000) * 1e-3f;
  for (auto& v : res.grad_comb) v = std::ldexp(float(gen() % 1000), -20);
  for (auto* vec : {&res.out_f64, &res.grad_x_f64, &res.grad_residual_f64, &res.grad_post_f64, &res.grad_comb_f64})
    for (auto& v : *vec) v = double(int64_t(gen())) * 0x1p-70;
  res.out[3] = 0x7fc5;  // a NaN payload survives

  const Policy& exact = find_policy("exact");
  {
    io::ResultWriter w(dir.file("r.h5"));
    w.declare_inputs(sh, true);
    w.declare_policy(exact, sh, true, io::make_provenance(exact, "cpu", "crc64-xz:0"));
    // Two slabs, the second starting mid-chunk.
    PolicyResult a, b;
    allocate_result(a, {3, 3, 11}, true, true);
    allocate_result(b, {4, 3, 11}, true, true);
    auto split = [](const auto& src, auto& lo, auto& hi) {
      std::copy(src.begin(), src.begin() + lo.size(), lo.begin());
      std::copy(src.begin() + lo.size(), src.end(), hi.begin());
    };
    split(res.out, a.out, b.out);
    split(res.out_f64, a.out_f64, b.out_f64);
    split(res.grad_x, a.grad_x, b.grad_x);
    split(res.grad_residual, a.grad_residual, b.grad_residual);
    split(res.grad_post, a.grad_post, b.grad_post);
    split(res.grad_comb, a.grad_comb, b.grad_comb);
    split(res.grad_x_f64, a.grad_x_f64, b.grad_x_f64);
    split(res.grad_residual_f64, a.grad_residual_f64, b.grad_residual_f64);
    split(res.grad_post_f64, a.grad_post_f64, b.grad_post_f64);
    split(res.grad_comb_f64, a.grad_comb_f64, b.grad_comb_f64);
    w.append_inputs(0, in);
    w.append_result("exact", 0, a);
    w.append_result("exact", 3, b);
    w.commit();
  }
  io::TensorFile tf(dir.file("r.h5"));
  EXPECT_EQ(tf.policies(), std::vector<std::string>{"exact"});
  const std::string g = "/results/exact/";
  auto bf16 = [&](const std::string& name, size_t n) {
    std::vector<uint16_t> v(n);
    tf.read_bf16(g + name, 0, int64_t(n), v.data());
    return v;
  };
  auto f32 = [&](const std::string& name, size_t n) {
    std::vector<float> v(n);
    tf.read_f32(g + name, 0, int64_t(n), v.data());
    return v;
  };
  auto f64 = [&](const std::string& name, size_t n) {
    std::vector<double> v(n);
    tf.read_f64(g + name, 0, int64_t(n), v.data());
    return v;
  };
  EXPECT_EQ(first_bit_difference(bf16("out", res.out.size()), res.out), -1);
  EXPECT_EQ(first_bit_difference(bf16("grad_x", res.grad_x.size()), res.grad_x), -1);
  EXPECT_EQ(first_bit_difference(bf16("grad_residual", res.grad_residual.size()), res.grad_residual), -1);
  EXPECT_EQ(first_bit_difference(f32("grad_post", res.grad_post.size()), res.grad_post), -1);
  EXPECT_EQ(first_bit_difference(f32("grad_comb", res.grad_comb.size()), res.grad_comb), -1);
  EXPECT_EQ(first_bit_difference(f64("out_f64", res.out_f64.size()), res.out_f64), -1);
  EXPECT_EQ(first_bit_difference(f64("grad_x_f64", res.grad_x_f64.size()), res.grad_x_f64), -1);
  EXPECT_EQ(first_bit_difference(f64("grad_residual_f64", res.grad_residual_f64.size()), res.grad_residual_f64), -1);
  EXPECT_EQ(first_bit_difference(f64("grad_post_f64", res.grad_post_f64.size()), res.grad_post_f64), -1);
  EXPECT_EQ(first_bit_difference(f64("grad_comb_f64", res.grad_comb_f64.size()), res.grad_comb_f64), -1);
  // A flat range that starts and ends mid-row.
  std::vector<uint16_t> part(40);
  tf.read_bf16(g + "out", 29, 40, part.data());
  EXPECT_EQ(first_bit_difference(part, std::vector<uint16_t>(res.out.begin() + 29, res.out.begin() + 69)), -1);
  // Provenance (SPEC §3) on the results group.
  std::map<std::string, std::string> attrs;
  for (auto& [k, v] : tf.attributes("/results/exact")) attrs[k] = v;
  for (const char* key : {"tool_version", "policy", "policy_description", "models", "device", "host", "utc_time",
                          "input_checksum"})
    EXPECT_TRUE(attrs.count(key)) << "missing provenance attribute " << key;
  EXPECT_EQ(attrs["policy"], "exact");
  EXPECT_EQ(attrs["device"], "cpu");
  std::map<std::string, std::string> root;
  for (auto& [k, v] : tf.attributes("/")) root[k] = v;
  EXPECT_EQ(root["format"], "mhcdiff/1");
  EXPECT_EQ(root["comb_layout"], "src,dst");
  // The inputs copied into the results file read back as the same inputs.
  expect_same_inputs(r, io::read_inputs(dir.file("r.h5")), true);
}

TEST(Store, ChecksumIsIndependentOfSlabSizeAndSeesOneBitFlip) {
  TempDir dir;
  RawInputs r = random_inputs(9, 2, 6, 8);
  write_inputs(dir.file("a.h5"), r);
  io::InputReader reader(dir.file("a.h5"));
  io::InputChecksum by_one, by_four;
  for (int64_t s = 0; s < 9; ++s) by_one.update(reader.read_slab(s, 1));
  for (int64_t s = 0; s < 9; s += 4) by_four.update(reader.read_slab(s, std::min<int64_t>(4, 9 - s)));
  EXPECT_EQ(by_one.hex(), by_four.hex());
  EXPECT_EQ(by_one.hex(), reader.checksum());
  r.residual[50] ^= 1;
  write_inputs(dir.file("b.h5"), r);
  EXPECT_NE(io::InputReader(dir.file("b.h5")).checksum(), reader.checksum());
}

TEST(Store, ChecksumIsCrc64XzOfPerTensorCrcs) {
  // Independent check of the documented definition with a bitwise CRC-64/XZ written here.
  auto crc64 = [](const void* data, size_t n) {
    uint64_t crc = ~0ull;
    const auto* p = static_cast<const unsigned char*>(data);
    for (size_t i = 0; i < n; ++i) {
      crc ^= p[i];
      for (int k = 0; k < 8; ++k) crc = (crc >> 1) ^ (0xC96C5795D7870F42ull & (0 - (crc & 1)));
    }
    return ~crc;
  };
  ASSERT_EQ(crc64("123456789", 9), 0x995DC9BBDF1939FAull);  // the CRC-64/XZ check value
  RawInputs r = random_inputs(3, 2, 5, 10);
  io::InputChecksum sum;
  sum.update(as_inputs(r, false));
  const uint64_t parts[4] = {crc64(r.x.data(), r.x.size() * 2), crc64(r.residual.data(), r.residual.size() * 2),
                             crc64(r.post.data(), r.post.size() * 4), crc64(r.comb.data(), r.comb.size() * 4)};
  char want[40];
  std::snprintf(want, sizeof want, "crc64-xz:%016llx", static_cast<unsigned long long>(crc64(parts, sizeof parts)));
  EXPECT_EQ(sum.hex(), want);
}

// ---- atomicity ------------------------------------------------------------------------------------------

void write_small_result(const std::string& path, uint16_t fill) {
  io::ResultWriter w(path);
  const Shape sh{2, 1, 3};
  Inputs in;
  in.shape = sh;
  in.x.assign(6, fill);
  in.residual.assign(6, fill);
  in.post.assign(2, 1.0f);
  in.comb.assign(2, 1.0f);
  w.declare_inputs(sh, false);
  w.append_inputs(0, in);
  w.commit();
}

TEST(Store, WriterDestroyedWithoutCommitLeavesOldFileAndNoTempFile) {
  TempDir dir;
  const std::string path = dir.file("r.h5");
  write_small_result(path, 0x3f80);
  const std::string before = read_file_bytes(path);
  {
    io::ResultWriter w(path);
    w.declare_inputs({2, 1, 3}, false);
    // an exception would unwind here: no commit
  }
  EXPECT_EQ(read_file_bytes(path), before) << "the previous file must be untouched";
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"r.h5"}) << "no temp file may remain";
}

// A child process writes a big result over an existing file and is killed mid-write.
void kill_writer_midway(const std::string& path, int sig) {
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    io::ResultWriter w(path);
    const Shape sh{4096, 4, 256};
    w.declare_inputs(sh, false);
    Inputs in;
    in.shape = {1024, 4, 256};
    in.x.assign(1024 * 256, 0x4000);
    in.residual.assign(1024 * 4 * 256, 0x4000);
    in.post.assign(1024 * 4, 2.0f);
    in.comb.assign(1024 * 16, 2.0f);
    w.append_inputs(0, in);  // some data is on disk in the temp file
    raise(sig);
    _exit(0);  // not reached
  }
  int status = 0;
  waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFSIGNALED(status)) << "the child should have died of signal " << sig;
}

TEST(Store, RunKilledMidWriteLeavesOldFileIntact) {
  TempDir dir;
  const std::string path = dir.file("r.h5");
  write_small_result(path, 0x3f80);
  const std::string before = read_file_bytes(path);
  kill_writer_midway(path, SIGKILL);
  EXPECT_EQ(read_file_bytes(path), before) << "SIGKILL mid-write must leave the old file as it was";
  EXPECT_EQ(io::read_inputs(path).x[0], 0x3f80);
}

TEST(Store, TerminatedWriterRemovesItsTempFile) {
  TempDir dir;
  const std::string path = dir.file("r.h5");
  write_small_result(path, 0x3f80);
  const std::string before = read_file_bytes(path);
  kill_writer_midway(path, SIGTERM);
  EXPECT_EQ(read_file_bytes(path), before);
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"r.h5"}) << "SIGTERM must remove the temp file";
}

TEST(Store, WriterRefusesItsInputAsOutputAndMissingDirectories) {
  TempDir dir;
  write_small_result(dir.file("in.h5"), 0x3f80);
  EXPECT_THROW(io::ResultWriter(dir.file("in.h5"), {{"input", dir.file("in.h5")}}), InputError);
  EXPECT_THROW(io::ResultWriter(dir.file("./in.h5"), {{"input", dir.file("in.h5")}}), InputError);
  // Any of several sources: the inputs and both sides of an extract, say.
  EXPECT_THROW(io::ResultWriter(dir.file("in.h5"), {{"inputs", dir.file("other.h5")}, {"candidate", dir.file("in.h5")}}),
               InputError);
  EXPECT_THROW(io::ResultWriter(dir.file("nope/out.h5")), InputError);
  EXPECT_THROW(io::ResultWriter(dir.path.string()), InputError);
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"in.h5"});
}

// A child process whose files may not grow past 128 KiB (RLIMIT_FSIZE, SIGXFSZ ignored: writes fail with EFBIG,
// as they fail with ENOSPC on a full disk) writes a result of `sh` over an existing file. Returns the child's exit
// status: 0 when the writer threw an IoError naming the output and the reason; a signal when the process crashed
// on its way out (HDF5's atexit handler used to die of SIGSEGV on the dataset handles a failed close left behind).
int write_past_the_file_size_limit(const std::string& path, const Shape& sh) {
  std::fflush(nullptr);  // the child must not write the parent's buffered output again
  const pid_t pid = fork();
  if (pid < 0) return -1;
  if (pid == 0) {
    std::signal(SIGXFSZ, SIG_IGN);
    const rlimit limit{128 << 10, 128 << 10};
    setrlimit(RLIMIT_FSIZE, &limit);
    int code = 5;  // nothing failed
    try {
      io::ResultWriter w(path);
      w.declare_inputs(sh, false);
      Inputs in;
      in.shape = sh;
      in.x.assign(size_t(sh.S * sh.D), 0x4000);
      in.residual.assign(size_t(sh.S * sh.H * sh.D), 0x4000);
      in.post.assign(size_t(sh.S * sh.H), 2.0f);
      in.comb.assign(size_t(sh.S * sh.H * sh.H), 2.0f);
      w.append_inputs(0, in);
      w.commit();
    } catch (const IoError& e) {
      const std::string m = e.what();
      code = m.find("writing the output " + path + " failed: file too large") != std::string::npos &&
                     m.find("untouched") != std::string::npos
                 ? 0
                 : 3;
      if (code != 0) std::fprintf(stderr, "unexpected message: %s\n", e.what());
    } catch (const std::exception& e) {
      std::fprintf(stderr, "not an IoError: %s\n", e.what());
      code = 4;
    }
    std::exit(code);  // runs the atexit handlers, HDF5's included
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return status;
}

TEST(Store, AWriteTheSystemRefusesIsAnIoErrorAndEveryHandleCloses) {
  TempDir dir;
  const std::string path = dir.file("r.h5");
  write_small_result(path, 0x3f80);
  const std::string before = read_file_bytes(path);
  // 4096 tokens overflow the chunk caches (H5Dwrite fails); 256 tokens fit them (the flush in commit() fails).
  for (const Shape& sh : {Shape{4096, 4, 256}, Shape{256, 4, 256}}) {
    const int status = write_past_the_file_size_limit(path, sh);
    EXPECT_TRUE(WIFEXITED(status)) << "S=" << sh.S << ": the child died of signal " << WTERMSIG(status);
    EXPECT_EQ(WIFEXITED(status) ? WEXITSTATUS(status) : -1, 0) << "S=" << sh.S;
    EXPECT_EQ(read_file_bytes(path), before);
    EXPECT_EQ(dir.entries(), std::vector<std::string>{"r.h5"}) << "the temp file must be removed";
  }
}

TEST(Store, SetCompressionRefusesLevelsOutside0To9) {
  TempDir dir;
  io::ResultWriter w(dir.file("r.h5"));
  EXPECT_THROW(w.set_compression(10), std::invalid_argument);
  EXPECT_THROW(w.set_compression(-1), std::invalid_argument);
  EXPECT_NO_THROW(w.set_compression(9));
}

// ---- other tools read what we write ---------------------------------------------------------------------

bool have_tool(const char* cmd) { return std::system((std::string(cmd) + " > /dev/null 2>&1").c_str()) == 0; }

std::string run_capture(const std::string& cmd) {
  std::string out;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  pclose(p);
  return out;
}

TEST(Store, H5dumpPrintsBf16Values) {
  if (!have_tool("h5dump --version")) GTEST_SKIP() << "h5dump not installed";
  TempDir dir;
  Inputs in;
  in.shape = {1, 1, 4};
  in.x = {0x3fc0, 0xbf80, 0x4049, 0x0000};  // 1.5, -1, 3.140625, 0
  in.residual = in.x;
  in.post = {1.0f};
  in.comb = {1.0f};
  io::ResultWriter w(dir.file("r.h5"));
  w.declare_inputs(in.shape, false);
  w.append_inputs(0, in);
  w.commit();
  const std::string out = run_capture("h5dump -d /inputs/x " + dir.file("r.h5"));
  EXPECT_NE(out.find("1.5, -1, 3.14062, 0"), std::string::npos) << out;
}

TEST(Store, H5pyReadsOurBf16AndWritesFilesWeRead) {
  const char* py = "/usr/bin/python3";
  if (!have_tool("/usr/bin/python3 -c 'import h5py, numpy'")) GTEST_SKIP() << "h5py not available";
  TempDir dir;
  Inputs in;
  in.shape = {1, 1, 4};
  in.x = {0x3fc0, 0xbf80, 0x4049, 0x0001};  // 1.5, -1, 3.140625, smallest subnormal 2^-133
  in.residual = in.x;
  in.post = {0.75f};
  in.comb = {0.5f};
  {
    io::ResultWriter w(dir.file("ours.h5"));
    w.declare_inputs(in.shape, false);
    w.append_inputs(0, in);
    w.commit();
  }
  // h5py → float32 values (HDF5 converts the bf16 float type), printed with repr.
  const std::string read = run_capture(std::string(py) + " -c \"import h5py; f=h5py.File('" + dir.file("ours.h5") +
                                       "','r'); print([float(v) for v in f['/inputs/x'].astype('f4')[0]])\"");
  EXPECT_NE(read.find("[1.5, -1.0, 3.140625, 9.183549615799121e-41]"), std::string::npos) << read;
  // h5py writes uint16 bits + dtype attribute and float32 coefficients, as a PyTorch user would.
  const std::string script =
      "import h5py, numpy as np\n"
      "f = h5py.File('" + dir.file("theirs.h5") + "', 'w')\n"
      "x = f.create_dataset('inputs/x', data=np.array([[0x3fc0, 0xbf80, 0x4049, 0x0001]], dtype=np.uint16))\n"
      "x.attrs['dtype'] = 'bfloat16'\n"
      "r = f.create_dataset('inputs/residual', data=np.array([[[0x3fc0, 0xbf80, 0x4049, 0x0001]]], dtype=np.uint16))\n"
      "r.attrs['dtype'] = 'bfloat16'\n"
      "f.create_dataset('inputs/post', data=np.array([[0.75]], dtype=np.float32))\n"
      "f.create_dataset('inputs/comb', data=np.array([[[0.5]]], dtype=np.float32))\n";
  const std::string script_path = dir.file("w.py");
  std::ofstream(script_path) << script;
  ASSERT_EQ(std::system((std::string(py) + " " + script_path).c_str()), 0);
  const Inputs got = io::read_inputs(dir.file("theirs.h5"));
  EXPECT_EQ(first_bit_difference(got.x, in.x), -1);
  EXPECT_EQ(first_bit_difference(got.residual, in.residual), -1);
  EXPECT_EQ(got.post[0], 0.75f);
  EXPECT_EQ(got.comb[0], 0.5f);
}

}  // namespace
}  // namespace mhc
