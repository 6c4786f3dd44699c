// End to end through the mhcdiff binary: fingerprint, explain and extract on small generated files, with
// exit codes (SPEC §4: 0 found / ok, 1 not found, 2 usage or input error).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <sys/wait.h>

#include "io_test_util.hpp"

namespace {

struct Result {
  int code = -1;
  std::string out;
};

// Runs `mhcdiff ARGS` with stdout captured (stderr discarded, or with `with_stderr` captured after it).
Result mhcdiff(const std::string& args, bool with_stderr = false) {
  const std::string cmd = std::string(MHCDIFF_BINARY) + " " + args + (with_stderr ? " 2>&1" : " 2>/dev/null");
  Result r;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return r;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, n);
  const int status = pclose(p);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

// The same with stderr captured into `out` (for the message of an error).
Result mhcdiff_with_stderr(const std::string& args) { return mhcdiff(args, true); }

class CliInvestigate : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    // One directory per process: CTest runs the tests of this suite in parallel processes.
    dir_ = std::filesystem::temp_directory_path() / ("mhcdiff_cli_investigate_" + std::to_string(::getpid()));
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    // Cancelling terms (κ 1e2..1e6) make the rounding variants differ on many of these 64 × 4 × 257 elements.
    ASSERT_EQ(mhcdiff("gen --preset cancellation --shape 64,4,257 --seed 5 -o " + path("in.h5")).code, 0);
    ASSERT_EQ(mhcdiff("run " + path("in.h5") + " -o " + path("res.h5") + " --policies hf,fp32-seeded-fma,exact --device cpu").code, 0);
  }
  static void TearDownTestSuite() { std::filesystem::remove_all(dir_); }
  static std::string path(const std::string& name) { return (dir_ / name).string(); }
  static std::filesystem::path dir_;
};
std::filesystem::path CliInvestigate::dir_;

TEST_F(CliInvestigate, FingerprintNamesThePolicyThatMadeACandidate) {
  const Result hf = mhcdiff("fingerprint " + path("in.h5") + " " + path("res.h5") + ":hf-bf16");
  EXPECT_EQ(hf.code, 0) << hf.out;
  EXPECT_NE(hf.out.find("BIT-EXACT MATCH: hf-bf16\n"), std::string::npos) << hf.out;
  const Result fma = mhcdiff("fingerprint " + path("in.h5") + " " + path("res.h5") + ":fp32-seeded-fma --format json");
  EXPECT_EQ(fma.code, 0) << fma.out;
  EXPECT_NE(fma.out.find("\"exact_matches\": [{\"name\": \"fp32-seeded-fma\""), std::string::npos) << fma.out;
}

// A dump as a kernel's harness writes it: the results only, without mhcdiff's provenance (no /inputs, no
// input_checksum), so nothing says which inputs it came from. h5py makes the copy.
bool strip_provenance(const std::string& from, const std::string& to) {
  return std::system(("/usr/bin/python3 -c \"import h5py, shutil; shutil.copy('" + from + "', '" + to +
                      "'); f = h5py.File('" + to + "', 'r+'); del f['inputs']; "
                      "[f['results'][g].attrs.__delitem__('input_checksum') for g in f['results']]; f.close()\"")
                         .c_str()) == 0;
}

TEST_F(CliInvestigate, FingerprintExitsWith1WhenNothingMatches) {
  // A candidate computed from other inputs of the same shape: its provenance says so (exit 2); stripped of it,
  // no variant and no mixture can explain it (exit 1).
  ASSERT_EQ(mhcdiff("gen --preset cancellation --shape 64,4,257 --seed 6 -o " + path("other.h5")).code, 0);
  ASSERT_EQ(mhcdiff("run " + path("other.h5") + " -o " + path("other_res.h5") + " --policies hf --device cpu").code, 0);
  const Result refused = mhcdiff_with_stderr("fingerprint " + path("in.h5") + " " + path("other_res.h5"));
  EXPECT_EQ(refused.code, 2);
  EXPECT_NE(refused.out.find("computed from other inputs than"), std::string::npos) << refused.out;
  if (!mhc::testing::python_can_import("h5py")) GTEST_SKIP() << "no h5py";
  ASSERT_TRUE(strip_provenance(path("other_res.h5"), path("other_dump.h5")));
  const Result r = mhcdiff("fingerprint " + path("in.h5") + " " + path("other_dump.h5"));
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("No lattice variant matches bit-exactly, nor a two-variant mixture of them."),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("Where the best variants' mismatches fall:"), std::string::npos) << r.out;
}

TEST_F(CliInvestigate, FingerprintFindsTheTransposedComb) {
  // The bug class of NeMo Automodel #2154 / Megatron-LM #4957: a kernel that read comb as [s, dst, src].
  // Made here by running fp32-seeded on a copy of the inputs whose comb is transposed (h5py does the copy).
  if (!mhc::testing::python_can_import("h5py")) GTEST_SKIP() << "no h5py";
  const std::string copy = path("in_t.h5");
  ASSERT_EQ(std::system(("/usr/bin/python3 -c \"import h5py, shutil; shutil.copy('" + path("in.h5") + "', '" + copy +
                         "'); f = h5py.File('" + copy + "', 'r+'); c = f['inputs/comb'][()]; "
                         "f['inputs/comb'][...] = c.transpose(0, 2, 1); f.close()\"")
                            .c_str()),
            0);
  ASSERT_EQ(mhcdiff("run " + copy + " -o " + path("res_t.h5") + " --policies fp32-seeded --device cpu").code, 0);
  ASSERT_TRUE(strip_provenance(path("res_t.h5"), path("dump_t.h5")));  // as the faulty kernel's harness dumps it
  const Result r = mhcdiff("fingerprint " + path("in.h5") + " " + path("dump_t.h5"));
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("BIT-EXACT MATCH: fp32-seeded with comb transposed (read as dst,src)\n  "), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find(" comb=dst,src\n"), std::string::npos) << r.out;

  // With the inputs read as dst,src, the labels name how each kernel read the stored comb (they named the
  // orientation relative to the inputs as read, so the kernel that honoured dst,src was labelled comb=src,dst).
  ASSERT_EQ(mhcdiff("run " + path("in.h5") + " -o " + path("res_s.h5") + " --policies fp32-seeded --device cpu").code,
            0);
  ASSERT_TRUE(strip_provenance(path("res_s.h5"), path("dump_s.h5")));
  const Result honoured = mhcdiff("fingerprint " + path("in.h5") + " " + path("dump_t.h5") + " --comb-layout dst,src");
  EXPECT_EQ(honoured.code, 0) << honoured.out;
  EXPECT_NE(honoured.out.find("BIT-EXACT MATCH: fp32-seeded\n  "), std::string::npos) << honoured.out;
  EXPECT_NE(honoured.out.find(" comb=dst,src\n"), std::string::npos) << honoured.out;
  const Result ignored = mhcdiff("fingerprint " + path("in.h5") + " " + path("dump_s.h5") + " --comb-layout dst,src");
  EXPECT_EQ(ignored.code, 0) << ignored.out;
  EXPECT_NE(ignored.out.find("BIT-EXACT MATCH: fp32-seeded with comb transposed (read as src,dst; the inputs' comb "
                             "was read as dst,src)"),
            std::string::npos)
      << ignored.out;
  EXPECT_NE(ignored.out.find(" comb=src,dst\n"), std::string::npos) << ignored.out;
}

TEST_F(CliInvestigate, FingerprintAcceptsUserPoliciesAsCandidatesAndLatticeEntries) {
  const std::string file = path("fold.policy");
  std::ofstream(file) << "name = \"fold\"\norder = mix-first\nmix_rounding = bf16\npost_term = fused\n";
  const Result r = mhcdiff("fingerprint " + path("in.h5") + " policy:fold --policy-file " + file + " --format json");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("post_term=fused mix_product=fp32 order=mix-first mix_rounding=bf16 comb=src,dst"), std::string::npos)
      << r.out;
  // `run --policy-file` stores the user policy under its name; fingerprint finds the same variant in the file.
  ASSERT_EQ(mhcdiff("run " + path("in.h5") + " -o " + path("res_u.h5") + " --policies fold --policy-file " + file +
                    " --device cpu")
                .code,
            0);
  const Result f = mhcdiff("fingerprint " + path("in.h5") + " " + path("res_u.h5") + ":fold");
  EXPECT_EQ(f.code, 0) << f.out;
  EXPECT_NE(f.out.find("BIT-EXACT MATCH: accumulator=fp32 coef=fp32 post_term=fused mix_product=fp32 order=mix-first "
                       "mix_rounding=bf16 comb=src,dst"),
            std::string::npos)
      << f.out;
}

TEST_F(CliInvestigate, ExplainPrintsEveryPolicyAndJsonParses) {
  const Result t = mhcdiff("explain " + path("in.h5") + " --at 3,1,17");
  EXPECT_EQ(t.code, 0);
  for (const char* name : {"hf-bf16", "fp32-seeded", "fp32-seeded-fma", "fp32-mixfirst", "fp64", "exact"})
    EXPECT_NE(t.out.find(std::string("policy ") + name), std::string::npos) << name << "\n" << t.out;
  const Result j = mhcdiff("explain " + path("in.h5") + " --at 3,1,17 --policies hf,exact --format json");
  ASSERT_EQ(j.code, 0);
  const std::string json = path("explain.json");
  std::ofstream(json) << j.out;
  EXPECT_EQ(std::system(("/usr/bin/python3 -c \"import json; d = json.load(open('" + json +
                         "')); assert [p['name'] for p in d['policies']] == ['hf-bf16', 'exact']\"")
                            .c_str()),
            0)
      << j.out;
}

// explain names each input by its index in the file: read with comb as dst,src, c_k of output stream ho is the
// stored comb[s, ho, k] (it printed the logical comb[s, k, ho], which in that file holds another value). The same
// stored element read either way prints with the same index and value.
TEST_F(CliInvestigate, ExplainNamesCombByItsIndexInTheFile) {
  const Result src_dst = mhcdiff("explain " + path("in.h5") + " --at 3,0,17 --policies exact");
  const Result dst_src = mhcdiff("explain " + path("in.h5") + " --at 3,1,17 --policies exact --comb-layout dst,src");
  ASSERT_EQ(src_dst.code, 0);
  ASSERT_EQ(dst_src.code, 0);
  EXPECT_NE(dst_src.out.find("(H=4; comb stored dst,src)"), std::string::npos) << dst_src.out;
  const auto line_of = [](const std::string& text, const std::string& start) {
    const size_t at = text.find(start);
    return at == std::string::npos ? std::string() : text.substr(at, text.find('\n', at) - at);
  };
  // Default: c1 of stream 0 is comb[3,1,0]; dst,src: c0 of stream 1 is the same stored element.
  const std::string stored = line_of(src_dst.out, "c1   = comb[3,1,0]");
  const std::string read_transposed = line_of(dst_src.out, "c0   = comb[3,1,0]");
  ASSERT_FALSE(stored.empty()) << src_dst.out;
  ASSERT_FALSE(read_transposed.empty()) << dst_src.out;
  EXPECT_EQ(read_transposed.substr(4), stored.substr(4)) << dst_src.out;
}

TEST_F(CliInvestigate, ExplainRefusesBadIndicesWithExitCode2) {
  EXPECT_EQ(mhcdiff("explain " + path("in.h5") + " --at 64,0,0").code, 2);
  EXPECT_EQ(mhcdiff("explain " + path("in.h5") + " --at 0,4,0").code, 2);
  EXPECT_EQ(mhcdiff("explain " + path("in.h5") + " --at 1,2").code, 2);
  EXPECT_EQ(mhcdiff("explain " + path("missing.h5") + " --at 0,0,0").code, 2);
}

TEST_F(CliInvestigate, ExtractWritesAReproThatRunAndCompareAccept) {
  const std::string repro = path("repro.h5");
  const Result x = mhcdiff("extract " + path("res.h5") + ":hf-bf16 policy:exact --inputs " + path("in.h5") +
                           " --worst 3 -o " + repro);
  ASSERT_EQ(x.code, 0) << x.out;
  EXPECT_NE(x.out.find("wrote 3 token(s)"), std::string::npos) << x.out;
  // The repro's inputs reproduce its stored hf-bf16 result bit for bit…
  ASSERT_EQ(mhcdiff("run " + repro + " -o " + path("rerun.h5") + " --policies hf --device cpu").code, 0);
  EXPECT_EQ(mhcdiff("compare " + repro + ":hf-bf16 " + path("rerun.h5") + ":hf-bf16 --max-mismatch 0").code, 0);
  // …and still shows the disagreement it was extracted for.
  EXPECT_EQ(mhcdiff("compare " + repro + ":hf-bf16 " + repro + ":exact --max-mismatch 0").code, 1);
  // The same sides never disagree: nothing is written.
  const Result same = mhcdiff("extract policy:hf " + path("res.h5") + ":hf-bf16 --inputs " + path("in.h5") + " -o " +
                              path("none.h5"));
  EXPECT_EQ(same.code, 0);
  EXPECT_FALSE(std::filesystem::exists(path("none.h5")));
}

// A results group's out_f64 that is not out's binary64 twin (here three numbers) is left out of the repro, as
// before, but no longer without a word (a note after the summary): the repro's comparison then lacks it.
TEST_F(CliInvestigate, ExtractSaysWhenAnOutF64IsNotATwin) {
  std::filesystem::copy_file(path("res.h5"), path("odd_twin.h5"), std::filesystem::copy_options::overwrite_existing);
  {
    const hid_t file = H5Fopen(path("odd_twin.h5").c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    ASSERT_GE(file, 0);
    ASSERT_GE(H5Ldelete(file, "/results/exact/out_f64", H5P_DEFAULT), 0);
    const hsize_t three = 3;
    const double values[3] = {1.0, 2.0, 3.0};
    const hid_t space = H5Screate_simple(1, &three, nullptr);
    const hid_t ds = H5Dcreate2(file, "/results/exact/out_f64", H5T_IEEE_F64LE, space, H5P_DEFAULT, H5P_DEFAULT,
                                H5P_DEFAULT);
    ASSERT_GE(ds, 0);
    H5Dwrite(ds, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, values);
    H5Dclose(ds);
    H5Sclose(space);
    H5Fclose(file);
  }
  const std::string repro = path("odd_repro.h5");
  const Result x = mhcdiff_with_stderr("extract " + path("odd_twin.h5") + ":hf-bf16 " + path("odd_twin.h5") +
                                       ":exact --inputs " + path("in.h5") + " --worst 2 -o " + repro);
  ASSERT_EQ(x.code, 0) << x.out;
  EXPECT_NE(x.out.find("  note: " + path("odd_twin.h5") + ":/results/exact/out_f64 is not the binary64 twin"),
            std::string::npos)
      << x.out;
  EXPECT_EQ(mhcdiff("info " + repro).out.find("out_f64"), std::string::npos);
}

// extract's -o must replace none of the files it reads: the inputs, nor the file of either side (only the inputs
// used to be checked, and `extract res.h5:hf-bf16 … -o res.h5` overwrote the candidate). Same file by any name.
TEST_F(CliInvestigate, ExtractRefusesAnOutputThatIsOneOfItsSources) {
  auto bytes = [](const std::string& p) {
    std::ifstream in(p, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  const std::string res = path("res.h5"), in = path("in.h5");
  const std::string before = bytes(res), inputs_before = bytes(in);
  std::filesystem::create_symlink(res, path("res-link.h5"));
  const std::string policy = path("mine.policy"), policy_text = "name = \"mine\"\nmix_product = fused\n";
  std::ofstream(policy) << policy_text;
  for (const std::string& args : {
           "extract " + res + ":hf-bf16 policy:exact --inputs " + in + " -o " + res,
           "extract policy:exact " + res + ":hf-bf16 --inputs " + in + " -o " + path("./res.h5"),
           "extract " + res + ":hf-bf16 policy:exact --inputs " + in + " -o " + path("res-link.h5"),
           "extract " + res + ":hf-bf16 policy:exact --inputs " + in + " -o " + in,
           "extract policy:mine policy:exact --inputs " + in + " --policy-file " + policy + " -o " + policy,
       }) {
    const std::string cmd = std::string(MHCDIFF_BINARY) + " " + args + " 2>&1 >/dev/null";
    std::string err;
    FILE* p = popen(cmd.c_str(), "r");
    ASSERT_NE(p, nullptr);
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, p)) > 0) err.append(buf, n);
    const int status = pclose(p);
    EXPECT_EQ(WIFEXITED(status) ? WEXITSTATUS(status) : -1, 2) << args << "\n" << err;
    EXPECT_NE(err.find("which it would replace"), std::string::npos) << err;
  }
  EXPECT_EQ(bytes(res), before) << "res.h5 was overwritten";
  EXPECT_EQ(bytes(in), inputs_before) << "in.h5 was overwritten";
  EXPECT_EQ(bytes(policy), policy_text) << "the policy file was overwritten";
  EXPECT_TRUE(std::filesystem::is_symlink(path("res-link.h5")));
  std::filesystem::remove(path("res-link.h5"));
}

// file.h5:NAME accepts a built-in policy's alias as compare does (res.h5 holds /results/hf-bf16; ":hf" names it):
// fingerprint and extract used to say "no dataset /results/hf".
TEST_F(CliInvestigate, FingerprintAndExtractResolvePolicyAliasesAsCompareDoes) {
  const Result f = mhcdiff("fingerprint " + path("in.h5") + " " + path("res.h5") + ":hf");
  EXPECT_EQ(f.code, 0) << f.out;
  EXPECT_NE(f.out.find("BIT-EXACT MATCH: hf-bf16\n"), std::string::npos) << f.out;
  const Result x = mhcdiff("extract " + path("res.h5") + ":hf policy:exact --inputs " + path("in.h5") +
                           " --worst 2 -o " + path("alias.h5"));
  EXPECT_EQ(x.code, 0) << x.out;
  EXPECT_NE(x.out.find("(/results/hf-bf16 vs /results/exact)"), std::string::npos) << x.out;
  EXPECT_EQ(mhcdiff("fingerprint " + path("in.h5") + " " + path("res.h5") + ":nosuch").code, 2);
  // A file of several results is refused in compare's words, with the short form that both accept.
  const Result several = mhcdiff_with_stderr("fingerprint " + path("in.h5") + " " + path("res.h5"));
  EXPECT_EQ(several.code, 2);
  EXPECT_NE(several.out.find("res.h5 holds 3 results groups (exact, fp32-seeded-fma, hf-bf16); name one, e.g. " +
                             path("res.h5") + ":exact"),
            std::string::npos)
      << several.out;
}

// A policy's name where a file was expected was "file exact does not exist" in fingerprint and extract; compare said
// how to write a computed side. All three say it now. An unknown policy's message lists the --policy-file policies
// among the known ones (it listed only the built-ins).
TEST_F(CliInvestigate, APolicyNameGivenAsAFileIsNamedAsSuch) {
  const Result f = mhcdiff_with_stderr("fingerprint " + path("in.h5") + " hf");
  EXPECT_EQ(f.code, 2);
  EXPECT_NE(f.out.find("hf: no such file (to compute the hf-bf16 policy from the inputs, write policy:hf)"),
            std::string::npos)
      << f.out;
  const Result x = mhcdiff_with_stderr("extract " + path("res.h5") + ":hf exact --inputs " + path("in.h5") +
                                       " -o " + path("never.h5"));
  EXPECT_EQ(x.code, 2);
  EXPECT_NE(x.out.find("exact: no such file (to compute the exact policy from the inputs, write policy:exact)"),
            std::string::npos)
      << x.out;
  EXPECT_FALSE(std::filesystem::exists(path("never.h5")));

  std::ofstream(path("mine.policy")) << "name = \"mine\"\naccumulator = fp64\n";
  for (const std::string& cmd :
       {"run " + path("in.h5") + " -o " + path("never.h5") + " --policies nope --policy-file " + path("mine.policy"),
        "compare policy:nope policy:hf --inputs " + path("in.h5") + " --policy-file " + path("mine.policy"),
        "fingerprint " + path("in.h5") + " policy:nope --policy-file " + path("mine.policy")}) {
    const Result r = mhcdiff_with_stderr(cmd);
    EXPECT_EQ(r.code, 2) << cmd;
    EXPECT_NE(r.out.find("unknown policy 'nope' (known: hf-bf16,"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("; from --policy-file: mine)"), std::string::npos) << r.out;
  }
  EXPECT_FALSE(std::filesystem::exists(path("never.h5")));
}

// A dataset named by path that mhcdiff names as something else (an input, a gradient) is refused, although
// residual and grad_residual have out's shape: both commands read them as forward outputs and reported on them.
TEST_F(CliInvestigate, FingerprintAndExtractRefuseAnInputOrAGradientAsOut) {
  ASSERT_EQ(mhcdiff("gen --preset cancellation --shape 8,4,16 --seed 3 --grad -o " + path("g_in.h5")).code, 0);
  ASSERT_EQ(mhcdiff("run " + path("g_in.h5") + " -o " + path("g_res.h5") + " --policies hf --backward --device cpu").code,
            0);
  const std::string res = path("g_res.h5");
  Result r = mhcdiff_with_stderr("fingerprint " + path("g_in.h5") + " " + res + ":/inputs/residual");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find(":/inputs/residual is an input of the operator, not a forward output"), std::string::npos)
      << r.out;
  // HDF5 resolves a doubled slash: the same dataset, refused alike.
  r = mhcdiff_with_stderr("fingerprint " + path("g_in.h5") + " " + res + "://inputs//residual");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("is an input of the operator"), std::string::npos) << r.out;
  r = mhcdiff_with_stderr("fingerprint " + path("g_in.h5") + " " + res + ":/results/hf-bf16/grad_residual");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("is a gradient, not a forward output: fingerprint and extract read out (e.g. " + res +
                       ":/results/hf-bf16/out)"),
            std::string::npos)
      << r.out;
  r = mhcdiff_with_stderr("extract " + res + ":/results/hf-bf16/grad_residual policy:exact --inputs " + path("g_in.h5") +
                          " --worst 2 -o " + path("g_repro.h5"));
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("is a gradient, not a forward output"), std::string::npos) << r.out;
  EXPECT_FALSE(std::filesystem::exists(path("g_repro.h5")));
  // The forward output of the same group, named by path, is still taken.
  EXPECT_EQ(mhcdiff("fingerprint " + path("g_in.h5") + " " + res + ":/results/hf-bf16/out").code, 0);

  // The same datasets under other names (links made here with HDF5's C API) are refused alike, naming what they are;
  // another name for out is still out.
  const hid_t f = H5Fopen(res.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  ASSERT_GE(f, 0);
  EXPECT_GE(H5Lcreate_soft("/inputs/residual", f, "/soft_residual", H5P_DEFAULT, H5P_DEFAULT), 0);
  EXPECT_GE(H5Lcreate_soft("/inputs", f, "/in", H5P_DEFAULT, H5P_DEFAULT), 0);  // a group on the path
  EXPECT_GE(H5Lcreate_hard(f, "/results/hf-bf16/grad_residual", f, "/results/hf-bf16/renamed", H5P_DEFAULT,
                           H5P_DEFAULT),
            0);
  EXPECT_GE(H5Lcreate_hard(f, "/results/hf-bf16/out", f, "/candidate", H5P_DEFAULT, H5P_DEFAULT), 0);
  H5Fclose(f);
  for (const char* alias : {":/soft_residual", ":/in/residual"}) {
    r = mhcdiff_with_stderr("fingerprint " + path("g_in.h5") + " " + res + alias);
    EXPECT_EQ(r.code, 2) << r.out;
    EXPECT_NE(r.out.find(alias + std::string(" is /inputs/residual under another name, an input of the operator, not a "
                                             "forward output")),
              std::string::npos)
        << r.out;
  }
  r = mhcdiff_with_stderr("extract " + res + ":/results/hf-bf16/renamed policy:exact --inputs " + path("g_in.h5") +
                          " --worst 2 -o " + path("g_repro.h5"));
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find(":/results/hf-bf16/renamed is /results/hf-bf16/grad_residual under another name, a gradient, "
                       "not a forward output: fingerprint and extract read out (e.g. " +
                       res + ":/results/hf-bf16/out)"),
            std::string::npos)
      << r.out;
  EXPECT_FALSE(std::filesystem::exists(path("g_repro.h5")));
  r = mhcdiff_with_stderr("fingerprint " + path("g_in.h5") + " " + res + ":/candidate");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("BIT-EXACT MATCH: hf-bf16"), std::string::npos) << r.out;
}

// A side computed from other inputs (its input_checksum provenance) makes no repro: exit 2, nothing written.
TEST_F(CliInvestigate, ExtractRefusesResultsOfOtherInputs) {
  ASSERT_EQ(mhcdiff("gen --preset cancellation --shape 64,4,257 --seed 8 -o " + path("other8.h5")).code, 0);
  ASSERT_EQ(mhcdiff("run " + path("other8.h5") + " -o " + path("other8_res.h5") + " --policies hf --device cpu").code, 0);
  const Result r = mhcdiff_with_stderr("extract " + path("other8_res.h5") + ":hf policy:exact --inputs " + path("in.h5") +
                                       " -o " + path("repro8.h5"));
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.out.find("computed from other inputs than"), std::string::npos) << r.out;
  EXPECT_FALSE(std::filesystem::exists(path("repro8.h5")));
}

// Candidates made by real PyTorch expressions (CPU, PyTorch 1.13 via /usr/bin/python3), written as a PyTorch
// user would dump them (uint16 bits with dtype="bfloat16"). Skipped where torch or h5py is missing.
TEST_F(CliInvestigate, FingerprintsCandidatesMadeByPyTorchExpressions) {
  if (std::system("/usr/bin/python3 -c 'import torch, h5py' >/dev/null 2>&1") != 0) GTEST_SKIP() << "no torch/h5py";
  const std::string script = path("torch_candidates.py");
  std::ofstream(script) << R"PY(
import sys, h5py, numpy as np, torch
bf = torch.bfloat16
with h5py.File(sys.argv[1], "r") as f:
    x = torch.from_numpy(f["inputs/x"].astype("float32")[()]).to(bf)          # exact: bf16 values
    residual = torch.from_numpy(f["inputs/residual"].astype("float32")[()]).to(bf)
    post = torch.from_numpy(f["inputs/post"][()])
    comb = torch.from_numpy(f["inputs/comb"][()])                             # comb[s, src, dst]
cands = {
    # Casts only comb: fp32 post*x (type promotion), bf16 matmul over streams, fp32 add, bf16 output.
    "comb_cast": (post.unsqueeze(-1) * x.unsqueeze(-2) + comb.to(bf).transpose(-1, -2) @ residual).to(bf),
    # The HF expression with the transpose forgotten: contracts comb's dst axis.
    "hf_no_transpose": post.to(bf).unsqueeze(-1) * x.unsqueeze(-2) + comb.to(bf) @ residual,
}
with h5py.File(sys.argv[2], "w") as f:
    f.attrs["format"] = "mhcdiff/1"
    for name, out in cands.items():
        bits = (out.float().numpy().view(np.uint32) >> 16).astype("<u2")
        f.create_dataset(f"results/{name}/out", data=bits).attrs["dtype"] = "bfloat16"
)PY";
  ASSERT_EQ(std::system(("/usr/bin/python3 " + script + " " + path("in.h5") + " " + path("torch.h5")).c_str()), 0);
  const Result cast = mhcdiff("fingerprint " + path("in.h5") + " " + path("torch.h5") + ":comb_cast");
  EXPECT_EQ(cast.code, 0) << cast.out;
  EXPECT_NE(cast.out.find("BIT-EXACT MATCH: accumulator=fp32 coef=comb-bf16 post_term=fp32"), std::string::npos) << cast.out;
  EXPECT_NE(cast.out.find("order=mix-first mix_rounding=bf16 comb=src,dst"), std::string::npos) << cast.out;
  const Result hf = mhcdiff("fingerprint " + path("in.h5") + " " + path("torch.h5") + ":hf_no_transpose");
  EXPECT_EQ(hf.code, 0) << hf.out;
  EXPECT_NE(hf.out.find("BIT-EXACT MATCH: hf-bf16 with comb transposed"), std::string::npos) << hf.out;
}

}  // namespace
