// How the commands that read an /inputs group treat it (review of src/io, src/investigate, src/run): an explicit
// --comb-layout wins over the file's comb_layout attribute in both directions, on every command, and the results
// record how comb was read; a candidate `out` must have the inputs' logical shape, not just their element count;
// `run` refuses results larger than the output's disk before writing; the thread-count rule is the same for the
// library and the CLI; slab sizes cannot overflow. Bad input is exit 2, one sentence, nothing written (SPEC §4).
#include <gtest/gtest.h>
#include <hdf5.h>
#include <omp.h>

#include <algorithm>
#include <fstream>
#include <iterator>
#include <limits>

#include "investigate/extract.hpp"
#include "investigate/sources.hpp"
#include "io/errors.hpp"
#include "io/store.hpp"
#include "io_test_util.hpp"
#include "kernels/cpu/operator_cpu.hpp"
#include "policy/policy.hpp"
#include "run/run.hpp"
#include "run/thread_count.hpp"

namespace mhc {
namespace {

using namespace mhc::testing;

// comb[s, i, j] → comb[s, j, i] for every token.
std::vector<float> transposed_comb(const RawInputs& r) {
  std::vector<float> t(r.comb.size());
  for (int64_t s = 0; s < r.S; ++s)
    for (int64_t i = 0; i < r.H; ++i)
      for (int64_t j = 0; j < r.H; ++j) t[size_t((s * r.H + j) * r.H + i)] = r.comb[size_t((s * r.H + i) * r.H + j)];
  return t;
}

// `r` as an input file whose root declares comb_layout = `layout` (the data stored as given).
void write_declaring(const std::string& path, const RawInputs& r, const char* layout) {
  RawFile f(path, /*root_attributes=*/false);
  raw_string_attribute(f.id(), "format", "mhcdiff/1");
  raw_string_attribute(f.id(), "comb_layout", layout);
  const hsize_t S = hsize_t(r.S), H = hsize_t(r.H), D = hsize_t(r.D);
  f.bf16("/inputs/x", {S, D}, r.x);
  f.bf16("/inputs/residual", {S, H, D}, r.residual);
  f.f32("/inputs/post", {S, H}, r.post);
  f.f32("/inputs/comb", {S, H, H}, r.comb);
  f.bf16("/inputs/grad_out", {S, H, D}, r.grad_out);
}

std::vector<float> read_comb(const std::string& path) {
  io::TensorFile f(path);
  const auto info = f.info("/inputs/comb");
  int64_t n = 1;
  for (int64_t d : info.dims) n *= d;
  std::vector<float> v(static_cast<size_t>(n));
  f.read_f32("/inputs/comb", 0, n, v.data());
  return v;
}

std::string attribute(const std::string& path, const std::string& object, const std::string& name) {
  for (const auto& [k, v] : io::TensorFile(path).attributes(object))
    if (k == name) return v;
  return "<absent>";
}

// A dataset of `dims` that is declared but never written: chunked, so it takes no space however large it claims
// to be (a file that says S = 2^24 without holding the data), and reads as zeros.
void declare_unwritten(hid_t file, const std::string& name, hid_t type, const std::vector<hsize_t>& dims,
                       const char* dtype_attr) {
  hid_t lcpl = H5Pcreate(H5P_LINK_CREATE);
  H5Pset_create_intermediate_group(lcpl, 1);
  hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
  std::vector<hsize_t> chunk(dims.size(), 1);
  chunk.back() = std::min<hsize_t>(dims.back(), 1024);
  H5Pset_chunk(dcpl, int(chunk.size()), chunk.data());
  hid_t space = H5Screate_simple(int(dims.size()), dims.data(), nullptr);
  hid_t ds = H5Dcreate2(file, name.c_str(), type, space, lcpl, dcpl, H5P_DEFAULT);
  ASSERT_GE(ds, 0) << name;
  if (dtype_attr) raw_string_attribute(ds, "dtype", dtype_attr);
  H5Dclose(ds);
  H5Sclose(space);
  H5Pclose(dcpl);
  H5Pclose(lcpl);
}

void write_unwritten_inputs(const std::string& path, hsize_t S, hsize_t H, hsize_t D) {
  RawFile f(path);
  const hid_t bf16 = raw_bf16_type();
  declare_unwritten(f.id(), "/inputs/x", bf16, {S, D}, "bfloat16");
  declare_unwritten(f.id(), "/inputs/residual", bf16, {S, H, D}, "bfloat16");
  declare_unwritten(f.id(), "/inputs/post", H5T_IEEE_F32LE, {S, H}, nullptr);
  declare_unwritten(f.id(), "/inputs/comb", H5T_IEEE_F32LE, {S, H, H}, nullptr);
  H5Tclose(bf16);
}

class InputsReview : public ::testing::Test {
 protected:
  TempDir dir;
  RawInputs r = random_inputs(6, 3, 20, 41);

  std::vector<std::string> sorted_entries() const {
    auto e = dir.entries();
    std::sort(e.begin(), e.end());
    return e;
  }

  // Exit 2, every word of `must_mention` on stderr, one line, no "internal error", nothing new in the directory.
  CliResult expect_refused(const std::string& args, const std::vector<std::string>& must_mention,
                           const std::string& prefix = "") {
    const auto before = sorted_entries();
    const CliResult res = run_cli(dir, args, prefix);
    EXPECT_EQ(res.exit_code, 2) << args << "\nstderr: " << res.err;
    for (const std::string& m : must_mention)
      EXPECT_NE(res.err.find(m), std::string::npos) << "'" << m << "' in: " << res.err;
    EXPECT_EQ(res.error_lines(), 1) << res.err;
    EXPECT_EQ(res.err.find("internal error"), std::string::npos) << res.err;
    EXPECT_EQ(sorted_entries(), before) << "nothing may be written for: " << args;
    return res;
  }
};

// ---- 1. --comb-layout ------------------------------------------------------------------------------------------

// ReadOptions' default was src,dst, which meant "defer to the file": an explicit src,dst could not override a file
// declaring dst,src (its writer labelled a correct comb wrongly), only dst,src overrode src,dst.
TEST_F(InputsReview, AnExplicitCombLayoutWinsOverTheFileAttributeInBothDirections) {
  write_declaring(dir.file("says-dst-src.h5"), r, "dst,src");
  write_declaring(dir.file("says-src-dst.h5"), r, "src,dst");
  const std::vector<float> transposed = transposed_comb(r);
  auto comb_read = [&](const std::string& file, std::optional<io::CombLayout> layout) {
    io::ReadOptions o;
    o.comb_layout = layout;
    io::InputReader reader(dir.file(file), o);
    return std::pair{reader.read_slab(0, r.S).comb, reader.comb_layout_origin()};
  };
  // Not given: the attribute decides.
  EXPECT_EQ(comb_read("says-dst-src.h5", std::nullopt).first, transposed);
  EXPECT_EQ(comb_read("says-dst-src.h5", std::nullopt).second, io::CombLayoutOrigin::file_attribute);
  EXPECT_EQ(comb_read("says-src-dst.h5", std::nullopt).first, r.comb);
  // Given: it wins, either way.
  EXPECT_EQ(comb_read("says-dst-src.h5", io::CombLayout::src_dst).first, r.comb);
  EXPECT_EQ(comb_read("says-dst-src.h5", io::CombLayout::src_dst).second, io::CombLayoutOrigin::option);
  EXPECT_EQ(comb_read("says-src-dst.h5", io::CombLayout::dst_src).first, transposed);
  // No attribute, no option: src,dst (SPEC §1).
  write_inputs(dir.file("plain.h5"), r);
  {
    const hid_t f = H5Fopen(dir.file("plain.h5").c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    H5Adelete(f, "comb_layout");
    H5Fclose(f);
  }
  EXPECT_EQ(comb_read("plain.h5", std::nullopt).first, r.comb);
  EXPECT_EQ(comb_read("plain.h5", std::nullopt).second, io::CombLayoutOrigin::default_layout);
}

// Every command that reads inputs reads a file declaring dst,src as src,dst when told so, exactly as it reads the
// same data declared src,dst; before, run, explain, golden regen stored or showed the transposed comb, and
// fingerprint, extract and compare --inputs refused results of that file as "computed from other inputs".
TEST_F(InputsReview, EveryCommandThatReadsInputsHonoursAnExplicitSrcDst) {
  write_declaring(dir.file("mislabelled.h5"), r, "dst,src");
  write_declaring(dir.file("labelled.h5"), r, "src,dst");
  const std::string opt = " --comb-layout src,dst";

  ASSERT_EQ(run_cli(dir, "run labelled.h5 -o ref.h5 --policies fp32-seeded").exit_code, 0);
  const CliResult run = run_cli(dir, "run mislabelled.h5 -o res.h5 --policies fp32-seeded" + opt);
  ASSERT_EQ(run.exit_code, 0) << run.err;
  // Read as told, with a warning that the option contradicts the file (a script spelling out the old default).
  EXPECT_NE(run.err.find("overrides the file's comb_layout attribute \"dst,src\""), std::string::npos) << run.err;
  EXPECT_EQ(run_cli(dir, "run labelled.h5 -o same.h5 --policies fp32-seeded" + opt).err.find("overrides"),
            std::string::npos);
  EXPECT_EQ(read_comb(dir.file("res.h5")), r.comb);
  EXPECT_EQ(attribute(dir.file("res.h5"), "/inputs", "input_checksum"),
            attribute(dir.file("ref.h5"), "/inputs", "input_checksum"));

  const std::string at = " --at 2,1,5 --policies hf,exact --format json";
  const CliResult ex = run_cli(dir, "explain mislabelled.h5" + at + opt), ex_ref = run_cli(dir, "explain labelled.h5" + at);
  ASSERT_EQ(ex.exit_code, 0) << ex.err;
  EXPECT_EQ(ex.out, ex_ref.out);

  const CliResult fp = run_cli(dir, "fingerprint mislabelled.h5 ref.h5" + opt);
  EXPECT_EQ(fp.exit_code, 0) << fp.err;
  EXPECT_NE(fp.out.find("BIT-EXACT MATCH: fp32-seeded\n"), std::string::npos) << fp.out;

  const CliResult xt = run_cli(dir, "extract ref.h5 policy:hf --inputs mislabelled.h5 --worst 2 -o repro.h5" + opt);
  EXPECT_EQ(xt.exit_code, 0) << xt.err;

  const CliResult cmp = run_cli(dir, "compare ref.h5 policy:fp32-seeded --inputs mislabelled.h5 --max-mismatch 0" + opt);
  EXPECT_EQ(cmp.exit_code, 0) << cmp.err << cmp.out;

  const CliResult gold = run_cli(dir, "golden regen mislabelled.h5 -o golden.h5 --policies fp32-seeded,exact" + opt);
  ASSERT_EQ(gold.exit_code, 0) << gold.err;
  EXPECT_EQ(read_comb(dir.file("golden.h5")), r.comb);

  // Without the option the attribute still decides: comb transposed.
  ASSERT_EQ(run_cli(dir, "run mislabelled.h5 -o t.h5 --policies fp32-seeded").exit_code, 0);
  EXPECT_EQ(read_comb(dir.file("t.h5")), transposed_comb(r));
}

// Results record how comb was read (the results' own comb is always src,dst, so nothing else says whether it was
// transposed), and `info` shows how `run` would read a file's comb and why.
TEST_F(InputsReview, ResultsRecordAndInfoShowsHowCombWasRead) {
  write_declaring(dir.file("mislabelled.h5"), r, "dst,src");
  ASSERT_EQ(run_cli(dir, "run mislabelled.h5 -o opt.h5 --policies hf --comb-layout src,dst").exit_code, 0);
  ASSERT_EQ(run_cli(dir, "run mislabelled.h5 -o attr.h5 --policies hf").exit_code, 0);
  EXPECT_EQ(attribute(dir.file("opt.h5"), "/inputs", "source_comb_layout"), "src,dst (--comb-layout)");
  EXPECT_EQ(attribute(dir.file("attr.h5"), "/inputs", "source_comb_layout"),
            "dst,src (the file's comb_layout attribute)");
  ASSERT_EQ(run_cli(dir, "extract opt.h5 policy:exact --inputs mislabelled.h5 --comb-layout src,dst -o x.h5").exit_code,
            0);
  EXPECT_EQ(attribute(dir.file("x.h5"), "/inputs", "source_comb_layout"), "src,dst (--comb-layout)");

  const CliResult info = run_cli(dir, "info mislabelled.h5");
  ASSERT_EQ(info.exit_code, 0) << info.err;
  EXPECT_NE(info.out.find("comb read as dst,src (the file's comb_layout attribute)"), std::string::npos) << info.out;
  const CliResult results = run_cli(dir, "info opt.h5");
  EXPECT_NE(results.out.find("@source_comb_layout = src,dst (--comb-layout)"), std::string::npos) << results.out;
}

// Results of a run made with --comb-layout dst,src, checked against the same file without it, were "computed from
// other inputs" and nothing more: the checksum covers comb as read. The message now says that they are these inputs
// with comb read the other way and which option reads them alike; results of really other inputs get no such hint.
TEST_F(InputsReview, ResultsReadWithTheOtherCombLayoutAreNamedAsSuch) {
  write_declaring(dir.file("in.h5"), r, "src,dst");
  ASSERT_EQ(run_cli(dir, "run in.h5 -o dst.h5 --policies hf --comb-layout dst,src").exit_code, 0);
  for (const std::string cmd : {"fingerprint in.h5 dst.h5", "compare dst.h5:hf policy:hf --inputs in.h5"})
    expect_refused(cmd, {"computed from other inputs", "they are these inputs with comb read as dst,src",
                         "pass --comb-layout dst,src"});
  EXPECT_EQ(run_cli(dir, "compare dst.h5:hf policy:hf --inputs in.h5 --comb-layout dst,src").exit_code, 0);

  RawInputs other = r;
  other.x[0] ^= 0x0001;
  write_declaring(dir.file("other.h5"), other, "src,dst");
  const CliResult res = expect_refused("fingerprint other.h5 dst.h5", {"computed from other inputs"});
  EXPECT_EQ(res.err.find("comb read as"), std::string::npos) << res.err;
}

// Two results files whose inputs' checksums differ were refused as "computed from different inputs" and nothing
// more, also when they are one source read with the two --comb-layout values (each file stores its inputs as read).
// The refusal now says so and how each side read comb; golden check, which compares against the golden file's
// results, says it too. Results of really other inputs get no such hint.
TEST_F(InputsReview, ResultsFilesFromTheTwoCombReadingsAreNamedAsSuch) {
  write_declaring(dir.file("in.h5"), r, "src,dst");
  ASSERT_EQ(run_cli(dir, "run in.h5 -o dst.h5 --policies hf --comb-layout dst,src").exit_code, 0);
  ASSERT_EQ(run_cli(dir, "run in.h5 -o src.h5 --policies hf").exit_code, 0);
  ASSERT_EQ(run_cli(dir, "golden regen in.h5 -o g.h5 --policies exact,hf").exit_code, 0);
  for (const std::string cmd : {"compare dst.h5 src.h5", "compare src.h5 dst.h5", "golden check dst.h5:hf --golden g.h5"})
    expect_refused(cmd, {"computed from different inputs", "they are the same inputs with comb read the other way round",
                         "read in.h5's comb as dst,src (--comb-layout)",
                         "read in.h5's comb as src,dst (the file's comb_layout attribute)"});

  RawInputs other = r;
  other.x[0] ^= 0x0001;
  write_declaring(dir.file("other.h5"), other, "src,dst");
  ASSERT_EQ(run_cli(dir, "run other.h5 -o other_results.h5 --policies hf").exit_code, 0);
  const CliResult res = expect_refused("compare other_results.h5 dst.h5", {"computed from different inputs"});
  EXPECT_EQ(res.err.find("comb read"), std::string::npos) << res.err;
}

// golden check reads the golden file's inputs as the file declares and takes no --comb-layout, so a golden file
// whose comb_layout attribute was edited after regen is refused without naming an option it does not have.
TEST_F(InputsReview, GoldenCheckOfAnEditedCombLayoutNamesNoOption) {
  write_declaring(dir.file("in.h5"), r, "src,dst");
  ASSERT_EQ(run_cli(dir, "golden regen in.h5 -o g.h5 --policies exact,hf").exit_code, 0);
  set_root_string_attribute(dir.file("g.h5"), "comb_layout", "dst,src");
  const CliResult res =
      expect_refused("golden check policy:hf --golden g.h5",
                     {"computed from other inputs", "they are these inputs with comb read as src,dst",
                      "g.h5:/results/exact was computed with comb read the other way round from how"});
  EXPECT_EQ(res.err.find("--comb-layout"), std::string::npos) << res.err;
}

// CLI11's IsMember printed the two values, each holding a comma, as a set of four: "--comb-layout
// TEXT:{src,dst,dst,src}" in --help and "dst-src not in {src,dst,dst,src}" for a mistyped value.
TEST_F(InputsReview, CombLayoutHelpAndRefusalNameTheTwoValues) {
  write_declaring(dir.file("in.h5"), r, "src,dst");
  const CliResult help = run_cli(dir, "run --help");
  ASSERT_EQ(help.exit_code, 0) << help.err;
  EXPECT_NE(help.out.find("--comb-layout src,dst|dst,src"), std::string::npos) << help.out;
  const CliResult typo = run_cli(dir, "run in.h5 -o out.h5 --policies hf --comb-layout dst-src");
  EXPECT_EQ(typo.exit_code, 2);
  EXPECT_NE(typo.err.find("\"dst-src\" is neither src,dst nor dst,src"), std::string::npos) << typo.err;
  EXPECT_EQ(typo.err.find("{src,dst,dst,src}"), std::string::npos) << typo.err;
  EXPECT_FALSE(std::filesystem::exists(dir.file("out.h5")));
}

// ---- 2. a candidate's shape ------------------------------------------------------------------------------------

// check_out_shape compared the element count and the last dim only: out [32,16] or [16,2,16] for S=8, H=4, D=16
// was read token by token as if it were [8,4,16], and fingerprinted or extracted wrong tokens.
TEST_F(InputsReview, CandidatesMustHaveTheInputsLogicalShape) {
  const RawInputs in = random_inputs(8, 4, 16, 5);
  write_inputs(dir.file("in.h5"), in);
  const std::vector<uint16_t> bits(8 * 4 * 16, 0x3f80);
  for (const auto& [name, dims] : std::vector<std::pair<std::string, std::vector<hsize_t>>>{
           {"flat", {32, 16}}, {"split", {16, 2, 16}}, {"swapped", {2, 16, 16}}, {"ragged", {8, 64}}}) {
    RawFile(dir.file(name + ".h5")).bf16("/results/c/out", dims, bits);
    std::string shape = "[";
    for (size_t i = 0; i < dims.size(); ++i) {
      if (i > 0) shape += ',';
      shape += std::to_string(dims[i]);
    }
    shape += "]";
    expect_refused("fingerprint in.h5 " + name + ".h5", {name + ".h5", shape, "[8,4,16]"});
    expect_refused("extract " + name + ".h5 policy:hf --inputs in.h5 -o x.h5", {name + ".h5", shape, "[8,4,16]"});
  }
  // compare said a transposed out ([S,D,H]) was "not the inputs it was computed from", blaming the inputs.
  RawFile(dir.file("transposed.h5")).bf16("/results/c/out", {8, 16, 4}, bits);
  const CliResult transposed = expect_refused("compare transposed.h5:c policy:hf --inputs in.h5",
                                              {"transposed.h5", "[8,16,4]", "[8,4,16]", "axes are in another order"});
  EXPECT_EQ(transposed.err.find("not the inputs it was computed from"), std::string::npos) << transposed.err;
  expect_refused("compare split.h5:c policy:hf --inputs in.h5", {"[16,2,16]", "not the inputs it was computed from"});
}

// Leading batch dims (SPEC §3): `run` keeps the inputs' [B,S], a PyTorch dump may flatten them, and dims of size 1
// do not move a token; other splits of S would pair tokens differently and are refused.
TEST_F(InputsReview, CandidatesMayKeepOrFlattenTheInputsBatchDims) {
  const RawInputs in = random_inputs(8, 4, 16, 6);
  write_inputs(dir.file("in.h5"), in, {2, 4});
  ASSERT_EQ(run_cli(dir, "run in.h5 -o res.h5 --policies fp32-seeded").exit_code, 0);
  std::vector<uint16_t> out(8 * 4 * 16);
  io::TensorFile(dir.file("res.h5")).read_bf16("/results/fp32-seeded/out", 0, int64_t(out.size()), out.data());
  EXPECT_EQ(io::TensorFile(dir.file("res.h5")).info("/results/fp32-seeded/out").dims,
            (std::vector<int64_t>{2, 4, 4, 16}));
  for (const auto& [name, dims] : std::vector<std::pair<std::string, std::vector<hsize_t>>>{
           {"flat", {8, 4, 16}}, {"kept", {2, 4, 4, 16}}, {"ones", {1, 2, 1, 4, 4, 16}}}) {
    RawFile(dir.file(name + ".h5")).bf16("/results/c/out", dims, out);
    const CliResult fp = run_cli(dir, "fingerprint in.h5 " + name + ".h5");
    EXPECT_EQ(fp.exit_code, 0) << name << ": " << fp.err;
    EXPECT_NE(fp.out.find("BIT-EXACT MATCH: fp32-seeded\n"), std::string::npos) << fp.out;
  }
  RawFile(dir.file("other.h5")).bf16("/results/c/out", {4, 2, 4, 16}, out);
  expect_refused("fingerprint in.h5 other.h5", {"[4,2,4,16]", "[2,4,4,16]", "[8,4,16]"});
  // The other way round, as compare accepts it: flat inputs (a dump's x [8,16]) and a candidate keeping batch dims.
  write_inputs(dir.file("flat_in.h5"), in);
  ASSERT_EQ(run_cli(dir, "run flat_in.h5 -o flat_res.h5 --policies fp32-seeded").exit_code, 0);
  io::TensorFile(dir.file("flat_res.h5")).read_bf16("/results/fp32-seeded/out", 0, int64_t(out.size()), out.data());
  RawFile(dir.file("batched.h5")).bf16("/results/c/out", {2, 4, 4, 16}, out);
  const CliResult fp = run_cli(dir, "fingerprint flat_in.h5 batched.h5");
  EXPECT_EQ(fp.exit_code, 0) << fp.err;
  EXPECT_NE(fp.out.find("BIT-EXACT MATCH: fp32-seeded\n"), std::string::npos) << fp.out;
}

// ---- 3. run's results and the free disk ------------------------------------------------------------------------

// A file claiming S = 2^24, D = 2^16 (chunked, never written: a few KiB) made `run` write for hours until the disk
// was full. Its results (about 100 TiB for every policy) are now refused before anything is written.
TEST_F(InputsReview, RunRefusesResultsLargerThanTheOutputsDisk) {
  write_unwritten_inputs(dir.file("huge.h5"), hsize_t(1) << 24, 4, hsize_t(1) << 16);
  expect_refused("run huge.h5 -o out.h5 --policies all", {"out.h5", "GB", "free"}, "timeout 60 ");
  // golden regen too, and before its checksum's pass over the declared inputs (which ran first, for hours here).
  expect_refused("golden regen huge.h5 -o golden.h5", {"golden.h5", "GB", "free"}, "timeout 60 ");
  // Through a symlink: the target's disk, and neither the link nor the target is touched.
  std::filesystem::create_directory(dir.file("sub"));
  std::filesystem::create_symlink("sub/target.h5", dir.file("link.h5"));
  expect_refused("run huge.h5 -o link.h5 --policies hf", {"link.h5", "free"}, "timeout 60 ");
  EXPECT_FALSE(std::filesystem::exists(dir.file("sub/target.h5")));
}

// The free space is that of the disk the output lands on: a symlink's target's, here a 200 KiB tmpfs, while the
// link itself lies on a large disk. Before, `run` wrote until "no space left on device".
TEST_F(InputsReview, RunChecksTheFreeSpaceOfASymlinkedOutputsTarget) {
  const std::string small = dir.file("small");
  const SmallTmpfs disk(small, "200k");
  if (!disk.mounted()) GTEST_SKIP() << "cannot mount a small tmpfs here (needs root)";
  ASSERT_EQ(run_cli(dir, "gen --preset randn --shape 512,4,256 --grad -o big.h5").exit_code, 0);
  std::ofstream(small + "/target.h5") << "the previous output";
  std::filesystem::create_symlink("small/target.h5", dir.file("link.h5"));
  expect_refused("run big.h5 -o link.h5 --policies hf --backward", {"link.h5", "GB free", small});
  EXPECT_EQ(read_file_bytes(small + "/target.h5"), "the previous output");
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(small), std::filesystem::directory_iterator()), 1);
}

// ---- 4. thread counts ------------------------------------------------------------------------------------------

// The CLI refused --threads above 1024 (libgomp cannot start tens of thousands of threads), but RunOptions only
// refused negatives, so a library caller could still ask for 100000.
TEST_F(InputsReview, TheLibraryRefusesThreadCountsTheCliRefuses) {
  write_inputs(dir.file("in.h5"), r);
  EXPECT_EQ(run::kMaxThreads, 1024);
  for (int threads : {-1, run::kMaxThreads + 1, 100000}) {
    run::RunOptions o;
    o.input = dir.file("in.h5");
    o.output = dir.file("out.h5");
    o.policies = "hf";
    o.threads = threads;
    EXPECT_THROW(run::run_policies(o), InputError) << threads;
    EXPECT_FALSE(std::filesystem::exists(o.output)) << threads;

    investigate::ExtractOptions xo;
    xo.threads = threads;
    EXPECT_THROW(investigate::extract_worst_tokens(investigate::resolve_out_source("policy:hf"),
                                                   investigate::resolve_out_source("policy:exact"), dir.file("in.h5"),
                                                   dir.file("x.h5"), xo),
                 InputError)
        << threads;
    investigate::FingerprintOptions fo;
    fo.threads = threads;
    EXPECT_THROW(investigate::fingerprint_file(dir.file("in.h5"), investigate::resolve_out_source("policy:hf"), {}, fo),
                 InputError)
        << threads;
  }
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"in.h5"});
}

// "All cores" (0) was OpenMP's default team, OMP_NUM_THREADS=50000 included, which libgomp cannot start: at most
// the processors now, a lower OMP_NUM_THREADS still honoured, an explicit count as given.
TEST_F(InputsReview, AllCoresIsAtMostTheProcessors) {
  const int previous = omp_get_max_threads();
  omp_set_num_threads(50000);
  EXPECT_EQ(cpu_thread_count(0), omp_get_num_procs());
  omp_set_num_threads(1);
  EXPECT_EQ(cpu_thread_count(0), 1);
  omp_set_num_threads(previous);
  EXPECT_EQ(cpu_thread_count(3), 3);
}

// ---- 5. slab sizes ---------------------------------------------------------------------------------------------

// The bytes of one token were computed in int64: at H=1, D=(2^64+2)/6 with grad_out, 6·D wrapped to 2, and two
// tokens of 2^64 bytes each were taken for a slab of 64 MiB.
TEST(InputsReviewSlabs, SlabTokensDoNotOverflow) {
  const int64_t D = 3074457345618258603;  // (2^64 + 2) / 6
  EXPECT_EQ(io::slab_tokens_for(Shape{2, 1, D}, true, int64_t(64) << 20), 1);
  EXPECT_EQ(io::slab_tokens_for(Shape{2, 16, int64_t(1) << 58}, true, int64_t(64) << 20), 1);
  EXPECT_EQ(io::slab_tokens_for(Shape{3, 16, std::numeric_limits<int64_t>::max() / 16}, false,
                                std::numeric_limits<int64_t>::max()),
            1);
  // Ordinary shapes are unchanged: 64 MiB / (2·4096 + 2·4·4096·2 + 4·4 + 4·16) bytes.
  EXPECT_EQ(io::slab_tokens_for(Shape{100000, 4, 4096}, true, int64_t(64) << 20), (int64_t(64) << 20) / 73808);
}

// Datasets were chunked by whole token rows, and HDF5 refuses a chunk of 4 GiB or more: `run` on inputs of
// D = 2^31 ended in "internal error: could not create dataset /inputs/x". Such rows are split over chunks.
TEST(InputsReviewSlabs, ResultWriterChunksTokenRowsLargerThanAnHdf5Chunk) {
  TempDir dir;
  const Shape sh{2, 2, int64_t(1) << 31};
  {
    io::ResultWriter writer(dir.file("wide.h5"));
    ASSERT_NO_THROW(writer.declare_inputs(sh, true));
    ASSERT_NO_THROW(writer.declare_policy(find_policy("exact"), sh, true, io::make_provenance(find_policy("exact"), "cpu", "")));
    writer.commit();
  }
  io::InputReader reader(dir.file("wide.h5"));
  EXPECT_EQ(reader.shape().D, sh.D);
  EXPECT_EQ(io::TensorFile(dir.file("wide.h5")).info("/results/exact/grad_residual_f64").dims,
            (std::vector<int64_t>{2, 2, int64_t(1) << 31}));
  EXPECT_LT(std::filesystem::file_size(dir.file("wide.h5")), 1u << 20);  // declared, never written
}

// A token too large for memory ended in "not enough memory for this request", naming neither the file nor its shape.
TEST_F(InputsReview, ATokenTooLargeForMemoryIsNamedWithItsFileAndShape) {
  write_unwritten_inputs(dir.file("wide.h5"), 1, 1, hsize_t(1) << 61);
  for (const std::string& cmd : {std::string("explain wide.h5 --at 0,0,0 --policies hf"),
                                 std::string("fingerprint wide.h5 policy:hf")}) {
    const CliResult res = expect_refused(cmd, {"wide.h5", "S=1, H=1, D=2305843009213693952", "memory"});
    (void)res;
  }
}

}  // namespace
}  // namespace mhc
