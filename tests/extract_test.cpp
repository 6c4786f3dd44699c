// `extract` ranks tokens by their largest bf16 ULP distance, with NaN and infinities as compare treats them
// (docs/decisions.md: infinitely many ULP from any number), and writes a repro that carries its inputs'
// provenance like a `run` output (SPEC §3).
#include <gtest/gtest.h>

#include <algorithm>

#include "investigate/extract.hpp"
#include "io_test_util.hpp"
#include "metrics/comparison.hpp"

namespace mhc::investigate {
namespace {

using mhc::testing::RawFile;
using mhc::testing::TempDir;

// Hand-derived: 0x3f80 is 1.0, 0x3f81 the next bf16; 0x7f7f the largest finite, 0x7f80 +inf, 0x7fc0 NaN.
TEST(ExtractRanking, UlpDistanceCountsBf16StepsAndTreatsNonFiniteAsInfinite) {
  EXPECT_EQ(bf16_ulp_distance(0x3f80, 0x3f81), 1u);
  EXPECT_EQ(bf16_ulp_distance(0x3f80, 0xbf80), 2u * 0x3f80);  // 1 and -1: through both zeros, which share a point
  EXPECT_EQ(bf16_ulp_distance(0x0000, 0x8000), 0u);
  EXPECT_EQ(bf16_ulp_distance(0x0001, 0x8001), 2u);
  EXPECT_EQ(bf16_ulp_distance(0x7fc0, 0xffc1), 0u) << "NaN vs NaN is equal (SPEC §5)";
  EXPECT_EQ(bf16_ulp_distance(0x7fc0, 0x3f80), metrics::kInfiniteUlp);
  EXPECT_EQ(bf16_ulp_distance(0x7f80, 0x7f7f), metrics::kInfiniteUlp) << "overflow to inf outranks any finite error";
  EXPECT_EQ(bf16_ulp_distance(0x7f80, 0xff80), metrics::kInfiniteUlp);
  EXPECT_EQ(bf16_ulp_distance(0x7f80, 0x7f80), 0u);
}

TEST(ExtractRanking, InfinityOutranksASignFlipAndTheReproCarriesProvenance) {
  TempDir dir;
  const mhc::testing::RawInputs r = mhc::testing::random_inputs(16, 2, 8, 7);
  mhc::testing::write_inputs(dir.file("in.h5"), r);
  std::vector<uint16_t> a(size_t(16 * 2 * 8), 0x3f80), b = a;
  b[size_t(10 * 16 + 3)] = 0xbf80;  // token 10: 1 -> -1, 32512 ULP
  b[size_t(12 * 16 + 5)] = 0x7f80;  // token 12: 1 -> inf
  b[size_t(2 * 16 + 0)] = 0x7fc0;   // token 2: 1 -> NaN
  {
    RawFile f(dir.file("cand.h5"));
    f.bf16("/results/a/out", {16, 2, 8}, a);
    f.bf16("/results/b/out", {16, 2, 8}, b);
  }
  ExtractOptions o;
  o.worst = 2;
  o.threads = 1;
  const ExtractSummary s = extract_worst_tokens(resolve_out_source(dir.file("cand.h5") + ":b"),
                                                resolve_out_source(dir.file("cand.h5") + ":a"), dir.file("in.h5"),
                                                dir.file("repro.h5"), o);
  ASSERT_EQ(s.written.size(), 2u);
  std::vector<int64_t> tokens = {s.written[0].token, s.written[1].token};
  std::sort(tokens.begin(), tokens.end());
  EXPECT_EQ(tokens, (std::vector<int64_t>{2, 12})) << "the non-finite tokens are the worst";
  EXPECT_EQ(s.written[0].max_ulp, metrics::kInfiniteUlp);

  const io::TensorFile repro(dir.file("repro.h5"));
  auto attribute = [&](const std::string& object, const std::string& name) {
    for (const auto& [key, value] : repro.attributes(object))
      if (key == name) return value;
    return std::string("(missing)");
  };
  const std::string checksum = attribute("/inputs", "input_checksum");
  EXPECT_EQ(checksum.rfind("crc64-xz:", 0), 0u) << checksum;
  EXPECT_EQ(attribute("/results/b", "input_checksum"), checksum);
  EXPECT_EQ(attribute("/results/a", "input_checksum"), checksum);
  EXPECT_EQ(attribute("/inputs", "source_file"), dir.file("in.h5"));
  EXPECT_EQ(attribute("/inputs", "nan_count"), "0");
}

}  // namespace
}  // namespace mhc::investigate
