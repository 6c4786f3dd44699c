// kernels/finite_scan: the host scan that sends a slab with an infinity or a NaN to the CUDA backend's
// converting kernels. Every plant below is checked by its own std::isfinite answer, not by the scan's.
#include "kernels/finite_scan.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>

#include "test_inputs.hpp"

namespace mhc {
namespace {

// Large enough for several of the scan's blocks (65 536 values) in x and residual, so that plants at block
// edges and in the last partial block are reached.
const Shape kShape{37, 3, 4099};

bool all_finite_by_isfinite(const Inputs& in) {
  auto bf16_ok = [](const std::vector<bf16_bits>& v) {
    for (bf16_bits b : v)
      if (!std::isfinite(bf16_to_float(b))) return false;
    return true;
  };
  auto fp32_ok = [](const std::vector<float>& v) {
    for (float f : v)
      if (!std::isfinite(f)) return false;
    return true;
  };
  return bf16_ok(in.x) && bf16_ok(in.residual) && fp32_ok(in.post) && fp32_ok(in.comb);
}

TEST(FiniteScan, FiniteInputsPassIncludingTheLargestAndSubnormalValues) {
  Inputs in = testing::random_inputs(kShape, 11, /*wide=*/true);
  in.x[0] = 0x7f7fu;                      // largest finite bf16
  in.x.back() = 0xff7fu;                  // its negative
  in.residual[12345] = 0x0001u;           // smallest subnormal
  in.residual.back() = 0x8000u;           // -0
  in.post[0] = std::numeric_limits<float>::max();
  in.comb.back() = std::numeric_limits<float>::denorm_min();
  ASSERT_TRUE(all_finite_by_isfinite(in));
  for (int threads : {0, 1, 3}) EXPECT_TRUE(forward_inputs_finite(in.view(), threads)) << threads << " threads";
}

TEST(FiniteScan, OneInfinityOrNaNAnywhereIsFound) {
  const Inputs base = testing::random_inputs(kShape, 12);
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const bf16_bits bf16_specials[] = {0x7f80u, 0xff80u, 0x7fc0u, 0xffffu, 0x7f81u};  // ±inf, NaNs (one signalling)
  const int64_t block = int64_t{1} << 16;
  int checked = 0;
  auto expect_found = [&](const Inputs& in, const std::string& where) {
    ASSERT_FALSE(all_finite_by_isfinite(in)) << where;
    for (int threads : {0, 1, 3})
      EXPECT_FALSE(forward_inputs_finite(in.view(), threads)) << where << ", " << threads << " threads";
    ++checked;
  };
  for (bf16_bits special : bf16_specials) {
    for (int64_t i : {int64_t{0}, block - 1, block, int64_t(base.x.size()) - 1}) {
      Inputs in = base;
      in.x[size_t(i)] = special;
      expect_found(in, "x[" + std::to_string(i) + "]");
    }
    for (int64_t i : {int64_t{0}, block - 1, block, 3 * block + 7, int64_t(base.residual.size()) - 1}) {
      Inputs in = base;
      in.residual[size_t(i)] = special;
      expect_found(in, "residual[" + std::to_string(i) + "]");
    }
  }
  for (float special : {inf, -inf, nan}) {
    for (size_t i : {size_t{0}, base.post.size() - 1}) {
      Inputs in = base;
      in.post[i] = special;
      expect_found(in, "post[" + std::to_string(i) + "]");
    }
    for (size_t i : {size_t{0}, base.comb.size() / 2, base.comb.size() - 1}) {
      Inputs in = base;
      in.comb[i] = special;
      expect_found(in, "comb[" + std::to_string(i) + "]");
    }
  }
  EXPECT_EQ(checked, 5 * 9 + 3 * 5);
}

TEST(FiniteScan, GradOutIsNotReadByTheForwardScan) {
  Inputs in = testing::random_inputs(kShape, 13);
  in.grad_out[7] = 0x7f80u;
  EXPECT_TRUE(forward_inputs_finite(in.view()));
}

}  // namespace
}  // namespace mhc
