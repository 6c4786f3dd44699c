// gen presets (SPEC §7): deterministic for any thread count and slab split, built from IEEE basic operations
// only, and each preset has the statistical shape it promises.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <limits>

#include "gen/det_math.hpp"
#include "gen/presets.hpp"
#include "io/errors.hpp"
#include "io_test_util.hpp"

namespace mhc {
namespace {

using namespace mhc::testing;

gen::GenOptions options(gen::Preset p, Shape sh, uint64_t seed, bool grad = true) {
  gen::GenOptions o;
  o.preset = p;
  o.shape = sh;
  o.seed = seed;
  o.grad = grad;
  return o;
}

void expect_bit_identical(const Inputs& a, const Inputs& b) {
  EXPECT_EQ(first_bit_difference(a.x, b.x), -1) << "x";
  EXPECT_EQ(first_bit_difference(a.residual, b.residual), -1) << "residual";
  EXPECT_EQ(first_bit_difference(a.post, b.post), -1) << "post";
  EXPECT_EQ(first_bit_difference(a.comb, b.comb), -1) << "comb";
  EXPECT_EQ(first_bit_difference(a.grad_out, b.grad_out), -1) << "grad_out";
}

// The elementary functions agree with glibc's to within 2 ulp (glibc is an independent implementation;
// ours exists only to be the same on every machine).
TEST(Gen, DeterministicLogAndExpAreAccurate) {
  auto ulps = [](double a, double b) {
    return std::fabs(a - b) / std::ldexp(1.0, std::ilogb(b) - 52);
  };
  for (int i = -2000; i <= 2000; ++i) {
    const double x = std::ldexp(1.0 + (i + 2000) * 0.000237, i / 40);
    EXPECT_LE(ulps(gen::det_log(x), std::log(x)), 2.0) << "log(" << x << ")";
    const double y = i * 0.0173;
    EXPECT_LE(ulps(gen::det_exp(y), std::exp(y)), 2.0) << "exp(" << y << ")";
  }
  EXPECT_EQ(gen::det_exp(0.0), 1.0);
  EXPECT_EQ(gen::det_log(1.0), 0.0);
}

TEST(Gen, NormalsHaveUnitMomentsAndUniformsCoverTheInterval) {
  const gen::CounterRng rng(42, 9);
  const int n = 200000;
  double sum = 0, sum_sq = 0, u_min = 1, u_max = 0;
  for (int i = 0; i < n; ++i) {
    const double z = gen::det_normal(rng, uint64_t(i));
    sum += z;
    sum_sq += z * z;
    u_min = std::min(u_min, rng.uniform(uint64_t(i)));
    u_max = std::max(u_max, rng.uniform(uint64_t(i)));
  }
  EXPECT_NEAR(sum / n, 0.0, 0.01);           // 4.5 standard errors
  EXPECT_NEAR(sum_sq / n, 1.0, 0.015);       // ~4.7 standard errors
  EXPECT_LT(u_min, 1e-4);
  EXPECT_GT(u_max, 1 - 1e-4);
}

TEST(Gen, SameBitsForAnyThreadCountAndSlabSplit) {
  for (gen::Preset p : {gen::Preset::randn, gen::Preset::realistic, gen::Preset::cancellation}) {
    SCOPED_TRACE(gen::preset_name(p));
    const gen::GenOptions o = options(p, {13, 3, 37}, 5);
    const int saved = omp_get_max_threads();
    omp_set_num_threads(1);
    const Inputs one = gen::generate(o);
    omp_set_num_threads(3);
    const Inputs three = gen::generate(o);
    omp_set_num_threads(saved);
    expect_bit_identical(one, three);
    // Tokens 5..12 made as their own slab equal the same tokens of the whole.
    const Inputs tail = gen::generate_slab(o, 5, 8);
    EXPECT_EQ(first_bit_difference(tail.residual, std::vector<uint16_t>(one.residual.begin() + 5 * 3 * 37,
                                                                         one.residual.end())),
              -1);
    EXPECT_EQ(first_bit_difference(tail.comb, std::vector<float>(one.comb.begin() + 5 * 9, one.comb.end())), -1);
  }
}

TEST(Gen, SeedsAndGradFlagChangeOnlyWhatTheyShould) {
  const Inputs a = gen::generate(options(gen::Preset::randn, {4, 2, 16}, 1, true));
  const Inputs b = gen::generate(options(gen::Preset::randn, {4, 2, 16}, 2, true));
  const Inputs c = gen::generate(options(gen::Preset::randn, {4, 2, 16}, 1, false));
  EXPECT_NE(first_bit_difference(a.x, b.x), -1) << "another seed must give other data";
  EXPECT_EQ(first_bit_difference(a.x, c.x), -1) << "--grad must not change x";
  EXPECT_TRUE(c.grad_out.empty());
}

TEST(Gen, SeedExampleIsSpecSection7) {
  const Inputs in = gen::generate(options(gen::Preset::seed_example, {3, 2, 5}, 0));
  for (uint16_t v : in.x) ASSERT_EQ(v, 0x3f80);         // 1.0
  for (uint16_t v : in.residual) ASSERT_EQ(v, 0xbf80);  // -1.0
  for (float v : in.comb) ASSERT_EQ(v, 0.5f);
  for (int s = 0; s < 3; ++s) {
    EXPECT_EQ(in.post[s * 2 + 0], 1.003f);  // RN32(1.003)
    EXPECT_EQ(in.post[s * 2 + 1], 1.0f);
  }
  EXPECT_THROW(gen::generate(options(gen::Preset::seed_example, {3, 4, 5}, 0)), InputError);
}

TEST(Gen, RandnRangesAndMoments) {
  const Inputs in = gen::generate(options(gen::Preset::randn, {64, 4, 256}, 3));
  for (float p : in.post) ASSERT_TRUE(p >= 0.0f && p < 2.0f) << p;
  for (float c : in.comb) ASSERT_TRUE(c >= 0.0f && c < 1.0f) << c;
  double sum_sq = 0;
  for (uint16_t b : in.residual) sum_sq += double(float_of_bf16(b)) * float_of_bf16(b);
  EXPECT_NEAR(sum_sq / double(in.residual.size()), 1.0, 0.03);
}

TEST(Gen, RealisticCombIsDoublyStochasticAndResidualScaled) {
  gen::GenOptions o = options(gen::Preset::realistic, {32, 4, 1024}, 11);
  o.rho = 8.0;
  const Inputs in = gen::generate(o);
  const int H = 4;
  for (int s = 0; s < 32; ++s) {
    const float* c = in.comb.data() + s * H * H;
    for (int j = 0; j < H; ++j) {
      double col = 0, row = 0;
      for (int i = 0; i < H; ++i) {
        ASSERT_GT(c[i * H + j], 0.0f);
        col += c[i * H + j];
        row += c[j * H + i];
      }
      EXPECT_NEAR(col, 1.0, 1e-5) << "token " << s << " column (dst) " << j << " sums over src to 1";
      EXPECT_NEAR(row, 1.0, 1e-3) << "token " << s << " row (src) " << j;
    }
    for (int h = 0; h < H; ++h) ASSERT_TRUE(in.post[s * H + h] > 0 && in.post[s * H + h] < 2);
    double xs = 0, rs = 0;
    for (int d = 0; d < 1024; ++d) xs += std::pow(float_of_bf16(in.x[s * 1024 + d]), 2);
    for (int i = 0; i < H * 1024; ++i) rs += std::pow(float_of_bf16(in.residual[s * H * 1024 + i]), 2);
    const double ratio = std::sqrt(rs / (H * 1024)) / std::sqrt(xs / 1024);
    EXPECT_NEAR(ratio, 8.0, 0.5) << "token " << s;
  }
}

// κ computed here independently (long double, straight from the definition in SPEC §5).
TEST(Gen, CancellationHitsTheRequestedKappaRange) {
  const Shape sh{16, 4, 257};
  const Inputs in = gen::generate(options(gen::Preset::cancellation, sh, 21, false));
  int64_t total = 0, in_range = 0;
  int decade_count[8] = {};
  for (int64_t s = 0; s < sh.S; ++s)
    for (int64_t d = 0; d < sh.D; ++d) {
      const int ho = gen::cancellation_target_stream(s, d, sh.H);
      const long double px = (long double)in.post[s * sh.H + ho] * float_of_bf16(in.x[s * sh.D + d]);
      long double t = px, mag = fabsl(px);
      for (int k = 0; k < sh.H; ++k) {
        const long double term =
            (long double)in.comb[(s * sh.H + k) * sh.H + ho] * float_of_bf16(in.residual[(s * sh.H + k) * sh.D + d]);
        t += term;
        mag += fabsl(term);
      }
      const double kappa = double(mag / fabsl(t));
      ++total;
      if (kappa >= 0.5e2 && kappa <= 2e6) ++in_range;
      const int decade = std::clamp(int(std::floor(std::log10(kappa))), 0, 7);
      ++decade_count[decade];
    }
  EXPECT_GE(double(in_range) / double(total), 0.99) << in_range << " of " << total << " in [50, 2e6]";
  for (int decade = 2; decade <= 5; ++decade)
    EXPECT_GT(decade_count[decade], total / 8) << "too few elements with kappa in 1e" << decade;
}

}  // namespace
}  // namespace mhc
