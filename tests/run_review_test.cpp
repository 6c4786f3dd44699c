// `run`, `bench`, `explain` and `gen` as a user drives them: options that used to be accepted silently (a
// stream count or index wrapped into int, an empty policy list, a thread count no system can start, preset knobs
// that make non-finite inputs) are usage errors — exit 2, one sentence, nothing written (SPEC §4) — and `run`'s
// results do not depend on the thread count or the slab split (SPEC §2).
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <algorithm>
#include <fstream>
#include <sstream>

#include "io/store.hpp"
#include "io_test_util.hpp"
#include "policy/policy.hpp"
#include "run/run.hpp"

namespace mhc {
namespace {

using namespace mhc::testing;

CliResult run_mhcdiff(const TempDir& dir, const std::string& args) { return run_cli(dir, args); }

class RunReview : public ::testing::Test {
 protected:
  TempDir dir;

  void SetUp() override {
    ASSERT_EQ(run_mhcdiff(dir, "gen --preset randn --shape 6,4,40 --seed 3 --grad -o in.h5").exit_code, 0);
  }

  std::vector<std::string> sorted_entries() const {
    auto e = dir.entries();
    std::sort(e.begin(), e.end());
    return e;
  }

  // Exit 2 with `must_mention` on stderr, no "internal error", and nothing new in the directory (no temp file).
  void expect_refused(const std::string& args, const std::string& must_mention) {
    const auto before = sorted_entries();
    const CliResult r = run_mhcdiff(dir, args);
    EXPECT_EQ(r.exit_code, 2) << args << "\nstderr: " << r.err;
    EXPECT_NE(r.err.find(must_mention), std::string::npos) << "'" << must_mention << "' in: " << r.err;
    EXPECT_EQ(r.err.find("internal error"), std::string::npos) << args << "\nstderr: " << r.err;
    EXPECT_EQ(sorted_entries(), before) << "nothing may be written for: " << args;
  }
};

// "4,4294967300,8" was read into an int64 and cast to int: H = 4, a file of another shape than the one asked for.
TEST_F(RunReview, GenRefusesAStreamCountOutsideTheIntRange) {
  expect_refused("gen --shape 4,4294967300,8 -o g.h5", "--shape");
  expect_refused("gen --shape 4,-4294967292,8 -o g.h5", "--shape");
}

// "--at 0,4294967296,0" explained element (0,0,0) and printed ho=0.
TEST_F(RunReview, ExplainRefusesAStreamIndexOutsideTheIntRange) {
  expect_refused("explain in.h5 --at 0,4294967296,0 --policies hf", "--at");
  expect_refused("explain in.h5 --at 0,4294967297,3 --policies hf", "--at");
  const CliResult ok = run_mhcdiff(dir, "explain in.h5 --at 5,3,39 --policies hf");
  EXPECT_EQ(ok.exit_code, 0) << ok.err;
  EXPECT_NE(ok.out.find("element s=5 ho=3 d=39"), std::string::npos) << ok.out;
}

// bench's sscanf parser wrapped H the same way, accepted blanks and '+' that gen refuses, and a shape whose size
// overflows int64 ended as "internal error: vector::_M_default_append".
TEST_F(RunReview, BenchParsesShapesAsStrictlyAsGen) {
  const std::string bench = "bench --device cpu --policies hf --reps 1 --no-backward --shape ";
  for (const char* shape : {"4,4294967300,8", "' 4,2,8'", "4,+2,8", "'4,2, 8'", "4,2,8,", "4,17,8", "0,2,8",
                            "9223372036854775807,1,1", "4611686018427387904,16,4611686018427387904"})
    expect_refused(bench + shape, "--shape");
  const CliResult ok = run_mhcdiff(dir, bench + "3,2,7");
  EXPECT_EQ(ok.exit_code, 0) << ok.err;
  EXPECT_NE(ok.out.find("3,2,7"), std::string::npos) << ok.out;
}

// `run --policies ''` exited 0 with a results file holding no /results group; `explain` printed no policy.
// An empty list is still how one runs only the policies of --policy-file files.
TEST_F(RunReview, AnEmptyPolicyListIsAUsageErrorUnlessPolicyFilesGiveOne) {
  expect_refused("run in.h5 -o out.h5 --policies ''", "no policy");
  expect_refused("explain in.h5 --at 0,0,0 --policies ''", "no policy");
  expect_refused("bench --device cpu --shape 2,2,2 --reps 1 --policies ''", "policy");
  std::ofstream(dir.file("mine.policy")) << "name = mine\norder = mix-first\n";
  const CliResult r = run_mhcdiff(dir, "run in.h5 -o out.h5 --policies '' --policy-file mine.policy");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(io::TensorFile(dir.file("out.h5")).policies(), std::vector<std::string>{"mine"});
}

// `bench --preset NAME` times on gen's inputs of that preset and says so; a preset the shape cannot have, or an unknown
// one, is one line and exit 2 before anything is timed.
TEST_F(RunReview, BenchTimesOnAGenPresetWhenAsked) {
  const std::string bench = "bench --device cpu --reps 1 --policies exact,hf --shape 8,4,64 ";
  const CliResult own = run_mhcdiff(dir, bench);
  ASSERT_EQ(own.exit_code, 0) << own.err;
  EXPECT_NE(own.out.find("inputs: randn-like, seed 1"), std::string::npos) << own.out;
  for (const char* preset : {"realistic", "cancellation", "randn"}) {
    const CliResult r = run_mhcdiff(dir, bench + "--seed 9 --preset " + preset);
    ASSERT_EQ(r.exit_code, 0) << preset << ": " << r.err;
    EXPECT_NE(r.out.find(std::string("inputs: preset ") + preset + ", seed 9"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("exact            bwd"), std::string::npos) << r.out;
  }
  expect_refused(bench + "--preset seed-example", "seed-example");
  // Without --shape, seed-example's shapes are the default ones with H = 2 (the default 256,4,4096 was refused, as
  // if the user had given it).
  const CliResult seed_example =
      run_mhcdiff(dir, "bench --device cpu --reps 1 --policies hf --no-backward --preset seed-example");
  ASSERT_EQ(seed_example.exit_code, 0) << seed_example.err;
  EXPECT_NE(seed_example.out.find("\n256,2,4096 "), std::string::npos) << seed_example.out;
  expect_refused(bench + "--preset gaussian", "unknown preset 'gaussian'");
  expect_refused(bench + "--preset ''", "unknown preset ''");
  const CliResult md = run_mhcdiff(dir, bench + "--preset realistic --format markdown");
  EXPECT_NE(md.out.find("inputs: preset realistic, seed 1"), std::string::npos) << md.out;
}

// bench split its list without trimming blanks, unlike run and explain ("hf, exact" was an unknown policy).
TEST_F(RunReview, BenchReadsPolicyListsAsRunDoes) {
  const CliResult r = run_mhcdiff(dir, "bench --device cpu --shape 2,2,2 --reps 1 --no-backward --policies 'hf, exact'");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("exact"), std::string::npos) << r.out;
}

// --threads accepted up to 65536: libgomp then failed to start the threads (exit 1) or crashed (SIGSEGV), leaving
// the output's temp file behind.
TEST_F(RunReview, ThreadCountsNoSystemCanStartAreUsageErrors) {
  for (const char* threads : {"65536", "32768", "1025"}) {
    expect_refused(std::string("run in.h5 -o out.h5 --policies hf --threads ") + threads, "--threads");
    expect_refused(std::string("bench --device cpu --shape 2,2,2 --reps 1 --policies hf --threads ") + threads,
                   "--threads");
  }
  const CliResult r = run_mhcdiff(dir, "run in.h5 -o out.h5 --policies hf --threads 64");
  EXPECT_EQ(r.exit_code, 0) << r.err;
}

// --sigma inf, --rho inf or a --rho large enough to overflow bf16 wrote NaN or Inf inputs (exit 0), which `run`
// then refuses as inputs.
TEST_F(RunReview, GenRefusesKnobsThatMakeNonFiniteInputs) {
  for (const char* knobs : {"--sigma inf", "--rho inf", "--rho 1e40", "--sinkhorn-eps inf", "--sigma nan"})
    expect_refused(std::string("gen --preset realistic --shape 4,4,8 -o k.h5 ") + knobs, "realistic");
  EXPECT_EQ(run_mhcdiff(dir, "gen --preset realistic --shape 4,4,8 --sigma 1e300 --rho 1e30 -o k.h5").exit_code, 0);
  EXPECT_EQ(run_mhcdiff(dir, "run k.h5 -o kr.h5 --policies hf").exit_code, 0);
}

// Every tensor of every policy, forward and backward, has the same bits whatever the thread count and the slab
// split (S = 37 is a multiple of no slab or chunk size used here; D = 257 of no lane chunk).
TEST_F(RunReview, RunGivesTheSameBitsForAnyThreadCountAndSlabSplit) {
  ASSERT_EQ(run_mhcdiff(dir, "gen --preset cancellation --shape 37,3,257 --seed 11 --grad -o c.h5").exit_code, 0);
  auto run_with = [&](int threads, int64_t slab, const std::string& out) {
    run::RunOptions o;
    o.input = dir.file("c.h5");
    o.output = dir.file(out);
    o.backward = true;
    o.threads = threads;
    o.slab_tokens = slab;
    run::run_policies(o);
  };
  run_with(1, 0, "ref.h5");
  const io::TensorFile ref(dir.file("ref.h5"));
  ASSERT_EQ(ref.policies().size(), builtin_policies().size());
  for (const auto& [threads, slab] : std::vector<std::pair<int, int64_t>>{{2, 0}, {3, 5}, {7, 1}, {64, 13}}) {
    const std::string name = std::to_string(threads) + "-threads.h5";
    run_with(threads, slab, name);
    const io::TensorFile other(dir.file(name));
    for (const std::string& policy : ref.policies()) {
      const std::string group = "/results/" + policy;
      for (const std::string& ds : ref.datasets(group)) {
        const io::TensorInfo info = ref.info(group + "/" + ds);
        int64_t n = 1;
        for (int64_t d : info.dims) n *= d;
        auto bits = [&](const io::TensorFile& f) {
          std::vector<uint64_t> v(static_cast<size_t>(n));
          if (info.dtype == io::DType::bf16) {
            std::vector<bf16_bits> b(static_cast<size_t>(n));
            f.read_bf16(info.dataset, 0, n, b.data());
            std::copy(b.begin(), b.end(), v.begin());
          } else if (info.dtype == io::DType::f32) {
            std::vector<float> x(static_cast<size_t>(n));
            f.read_f32(info.dataset, 0, n, x.data());
            for (int64_t i = 0; i < n; ++i) v[size_t(i)] = float_bits(x[size_t(i)]);
          } else {
            std::vector<double> x(static_cast<size_t>(n));
            f.read_f64(info.dataset, 0, n, x.data());
            for (int64_t i = 0; i < n; ++i) v[size_t(i)] = double_bits(x[size_t(i)]);
          }
          return v;
        };
        const std::vector<uint64_t> a = bits(ref), b = bits(other);
        const auto diff = std::mismatch(a.begin(), a.end(), b.begin());
        EXPECT_TRUE(diff.first == a.end()) << info.dataset << " with --threads " << threads << " --slab-tokens " << slab
                                           << ": first difference at element " << (diff.first - a.begin());
      }
    }
  }
}

}  // namespace
}  // namespace mhc
