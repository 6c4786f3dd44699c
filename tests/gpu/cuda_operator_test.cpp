// The CUDA backend computes every policy bit-identically to the CPU path (SPEC §2 device independence):
// forward and backward, H in {1,2,4,8} (and the generic kernels at H = 3 and 16), D in {31, 257, 2053, 4096},
// token counts that are no multiple of any block size, a user-defined policy, and exact elements that need
// the multiprecision fallback. Each test skips itself where no CUDA GPU is present.
#include <cuda_runtime.h>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <ostream>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "gen/presets.hpp"
#include "io/errors.hpp"
#include "kernels/cpu/operator_cpu.hpp"
#include "kernels/cuda/bench_cuda.hpp"
#include "kernels/cuda/operator_cuda.hpp"
#include "kernels/cuda/operator_kernels.hpp"
#include "kernels/dispatch.hpp"
#include "policy/policy.hpp"
#include "../test_inputs.hpp"
#include "rounding_check.hpp"

namespace mhc {
namespace {

#define SKIP_WITHOUT_GPU() \
  if (!cuda::device_available()) GTEST_SKIP() << "no CUDA GPU"

using testing::random_inputs;  // tests/test_inputs.hpp: randn-style, deterministic

// NaN equals NaN (SPEC §5: payloads and signs of NaN are not compared); otherwise the bits must match.
template <class T>
bool same_bits(T a, T b) {
  if constexpr (std::is_same_v<T, bf16_bits>) {
    if (bf16_is_nan(a) && bf16_is_nan(b)) return true;
    return a == b;
  } else {
    if (std::isnan(a) && std::isnan(b)) return true;
    return std::memcmp(&a, &b, sizeof(T)) == 0;
  }
}

template <class T>
void expect_identical(const std::vector<T>& gpu, const std::vector<T>& cpu, const std::string& what) {
  ASSERT_EQ(gpu.size(), cpu.size()) << what;
  int64_t mismatches = 0, first = -1;
  for (size_t i = 0; i < gpu.size(); ++i)
    if (!same_bits(gpu[i], cpu[i])) {
      if (first < 0) first = int64_t(i);
      ++mismatches;
    }
  if (first >= 0)
    ADD_FAILURE() << what << ": " << mismatches << " of " << gpu.size() << " elements differ; first at index " << first
                  << " (gpu " << double(gpu[first]) << ", cpu " << double(cpu[first]) << ")";
}

RunStats operator+(RunStats a, const RunStats& b) { return a += b; }

// Poison the GPU results so an element no kernel writes cannot pass by accident.
void poison(PolicyResult& r) {
  std::fill(r.out.begin(), r.out.end(), bf16_bits{0x7fc1});
  std::fill(r.grad_x.begin(), r.grad_x.end(), bf16_bits{0x1234});
  std::fill(r.grad_residual.begin(), r.grad_residual.end(), bf16_bits{0x1234});
  std::fill(r.grad_post.begin(), r.grad_post.end(), 12345.0f);
  std::fill(r.grad_comb.begin(), r.grad_comb.end(), 12345.0f);
}

void expect_policy_identical(const Policy& p, const Inputs& in, const std::string& label) {
  const bool f64 = stores_f64(p.desc);
  PolicyResult cpu, gpu;
  allocate_result(cpu, in.shape, f64, true);
  allocate_result(gpu, in.shape, f64, true);
  poison(gpu);
  const RunStats cs = forward_cpu(p.desc, in.view(), forward_outputs(cpu)) + backward_cpu(p.desc, in.view(), backward_outputs(cpu));
  const RunStats gs = cuda::forward(p.desc, in.view(), forward_outputs(gpu), ExactBackend::boost) +
                      cuda::backward(p.desc, in.view(), backward_outputs(gpu), ExactBackend::boost);
  const std::string at = fmt::format("{} {}", label, p.name);
  expect_identical(gpu.out, cpu.out, at + " out");
  expect_identical(gpu.grad_x, cpu.grad_x, at + " grad_x");
  expect_identical(gpu.grad_residual, cpu.grad_residual, at + " grad_residual");
  expect_identical(gpu.grad_post, cpu.grad_post, at + " grad_post");
  expect_identical(gpu.grad_comb, cpu.grad_comb, at + " grad_comb");
  expect_identical(gpu.out_f64, cpu.out_f64, at + " out_f64");
  expect_identical(gpu.grad_x_f64, cpu.grad_x_f64, at + " grad_x_f64");
  expect_identical(gpu.grad_residual_f64, cpu.grad_residual_f64, at + " grad_residual_f64");
  expect_identical(gpu.grad_post_f64, cpu.grad_post_f64, at + " grad_post_f64");
  expect_identical(gpu.grad_comb_f64, cpu.grad_comb_f64, at + " grad_comb_f64");
  EXPECT_EQ(gs.exact_elements, cs.exact_elements) << at;
  EXPECT_EQ(gs.fallback_elements, cs.fallback_elements) << at << ": the GPU and CPU certify the same elements";
}

struct ShapeCase {
  int H;
  int64_t D;
};

// gtest prints parameters in test listings (and so in CTest's): say what they are, not their raw bytes.
void PrintTo(const ShapeCase& c, std::ostream* os) { *os << "H=" << c.H << " D=" << c.D; }

class EveryPresetMatchesCpu : public ::testing::TestWithParam<ShapeCase> {};

// S = 37 tokens: not a multiple of the forward's block or the backward's warps per block.
TEST_P(EveryPresetMatchesCpu, ForwardAndBackwardBitIdentical) {
  SKIP_WITHOUT_GPU();
  const ShapeCase c = GetParam();
  const Inputs in = random_inputs(Shape{37, c.H, c.D}, 1000 + c.H * 7 + c.D);
  for (const Policy& p : builtin_policies())
    expect_policy_identical(p, in, fmt::format("H={} D={}", c.H, c.D));
}

INSTANTIATE_TEST_SUITE_P(
    SpecShapes, EveryPresetMatchesCpu,
    ::testing::Values(ShapeCase{1, 31}, ShapeCase{1, 257}, ShapeCase{1, 2053}, ShapeCase{1, 4096},
                      ShapeCase{2, 31}, ShapeCase{2, 257}, ShapeCase{2, 2053}, ShapeCase{2, 4096},
                      ShapeCase{4, 31}, ShapeCase{4, 257}, ShapeCase{4, 2053}, ShapeCase{4, 4096},
                      ShapeCase{8, 31}, ShapeCase{8, 257}, ShapeCase{8, 2053}, ShapeCase{8, 4096},
                      ShapeCase{3, 264}, ShapeCase{16, 520}),  // generic kernels: H outside {1,2,4,8}
    [](const ::testing::TestParamInfo<ShapeCase>& info) {
      return fmt::format("H{}_D{}", info.param.H, info.param.D);
    });

TEST(CudaOperator, SpecialisedAndGenericKernelsAreBothExercised) {
  SKIP_WITHOUT_GPU();
  const PolicyDesc seeded = find_policy("fp32-seeded").desc;
  InputsView aligned{Shape{5, 4, 4096}}, odd{Shape{5, 4, 2053}}, h3{Shape{5, 3, 4096}};
  EXPECT_STREQ(cuda::forward_kernel_family(seeded, aligned), "specialised");
  EXPECT_STREQ(cuda::backward_kernel_family(seeded, aligned), "specialised");
  EXPECT_STREQ(cuda::forward_kernel_family(seeded, odd), "generic");
  EXPECT_STREQ(cuda::backward_kernel_family(seeded, h3), "generic");
}

// A description that is no preset runs the generic kernels and still matches the CPU.
TEST(CudaOperator, UserPolicyMatchesCpu) {
  SKIP_WITHOUT_GPU();
  Policy user{"user-pairwise-fused", {}, "test"};
  user.desc.order = TermOrder::mix_pairwise;
  user.desc.post_term = PostTerm::fused;
  user.desc.mix_product = MixProduct::fused;
  user.desc.coef = CoefRounding::bf16;
  user.desc.grad_contract = true;
  user.desc.param_grad_rounding = ParamGradRounding::bf16;
  ASSERT_STREQ(cuda::forward_kernel_family(user.desc, InputsView{Shape{3, 4, 4096}}), "generic");
  for (int H : {4, 5}) expect_policy_identical(user, random_inputs(Shape{23, H, 4096}, 77 + H), fmt::format("H={}", H));
  Policy seeded_post_fused{"seeded-post-fused", {}, "test"};
  seeded_post_fused.desc.post_term = PostTerm::fused;
  seeded_post_fused.desc.mix_product = MixProduct::fused;
  expect_policy_identical(seeded_post_fused, random_inputs(Shape{23, 8, 257}, 91), "H=8");
}

// Terms 2^200 apart: the double-double window cannot certify them, so the GPU lists them and the host
// finishes them with the multiprecision fallback; the results must still equal the CPU's.
TEST(CudaOperator, UncertifiedExactElementsAreFinishedOnTheHost) {
  SKIP_WITHOUT_GPU();
  Inputs in = random_inputs(Shape{9, 4, 264}, 5);
  const bf16_bits huge = round_to_bf16_rne(0x1p100f), tiny = round_to_bf16_rne(0x1p-100f);
  for (int64_t d = 0; d < in.shape.D; d += 3) {
    in.x[2 * in.shape.D + d] = huge;
    for (int k = 0; k < 4; ++k) in.residual[(2 * 4 + k) * in.shape.D + d] = tiny;
    in.grad_out[(5 * 4 + 1) * in.shape.D + d] = (d % 2) ? huge : tiny;
  }
  const Policy exact = find_policy("exact");  // a copy: find_policy takes a temporary string
  PolicyResult gpu;
  allocate_result(gpu, in.shape, true, true);
  RunStats st = cuda::forward(exact.desc, in.view(), forward_outputs(gpu), ExactBackend::boost);
  EXPECT_GT(st.fallback_elements, 0) << "the planted elements should need the fallback";
  st = cuda::backward(exact.desc, in.view(), backward_outputs(gpu), ExactBackend::boost);
  EXPECT_GT(st.fallback_elements, 0);
  expect_policy_identical(exact, in, "planted");
}

// An fp32 policy has no binary64 twins: buffers a caller passes for them stay as they were, as on the CPU (the GPU
// used to copy uninitialised device memory into them).
TEST(CudaOperator, AnFp32PolicyLeavesBinary64BuffersUntouched) {
  SKIP_WITHOUT_GPU();
  const Inputs in = random_inputs(Shape{5, 4, 264}, 8);
  PolicyResult gpu;
  allocate_result(gpu, in.shape, true, true);
  const double sentinel = 12345.0;
  for (auto* v : {&gpu.out_f64, &gpu.grad_x_f64, &gpu.grad_residual_f64, &gpu.grad_post_f64, &gpu.grad_comb_f64})
    std::fill(v->begin(), v->end(), sentinel);
  const Policy seeded = find_policy("fp32-seeded");
  cuda::forward(seeded.desc, in.view(), forward_outputs(gpu), ExactBackend::boost);
  cuda::backward(seeded.desc, in.view(), backward_outputs(gpu), ExactBackend::boost);
  for (const auto* v : {&gpu.out_f64, &gpu.grad_x_f64, &gpu.grad_residual_f64, &gpu.grad_post_f64, &gpu.grad_comb_f64}) {
    ASSERT_FALSE(v->empty());
    EXPECT_TRUE(std::all_of(v->begin(), v->end(), [&](double d) { return d == sentinel; }));
  }
}

// More uncertified elements in one slab than the GPU's list holds: the host recomputes the whole slab on the CPU
// (operator_cuda.cu, finish_listed_elements). Every out element has terms 2^200 apart (x = 2^100, residual =
// 2^-100), which no double-double window certifies for the binary64 twin, so the forward lists all S·H·D of them.
TEST(CudaOperator, AnOverflowingFallbackListRecomputesTheSlabOnTheHost) {
  SKIP_WITHOUT_GPU();
  const int H = 4;
  const int64_t D = 1024;
  const int64_t S = int64_t(cuda::kFallbackCapacity) / (H * D) + 8;  // 2^20 / 4096 + 8 = 264 tokens
  Inputs in = random_inputs(Shape{S, H, D}, 6);
  std::fill(in.x.begin(), in.x.end(), round_to_bf16_rne(0x1p100f));
  std::fill(in.residual.begin(), in.residual.end(), round_to_bf16_rne(0x1p-100f));
  const Policy exact = find_policy("exact");
  PolicyResult gpu;
  allocate_result(gpu, in.shape, true, true);
  const RunStats st = cuda::forward(exact.desc, in.view(), forward_outputs(gpu), ExactBackend::boost);
  ASSERT_GT(st.fallback_elements, int64_t(cuda::kFallbackCapacity))
      << "the list must overflow for this test to mean anything";
  expect_policy_identical(exact, in, "overflowing list");
}

// Tokens whose exact sums land on, or next to, bf16 rounding midpoints, one whose sum cancels 41 bits, one
// whose ∂post is a binary32 tie, and one whose ∂x and ∂residual are all bf16 ties: the cases the filters
// must pass on to the exactness test or the certified path.
void plant_midpoints(Inputs& in) {
  const int H = in.shape.H;
  const int64_t D = in.shape.D;
  for (int64_t s = 0; s < std::min<int64_t>(in.shape.S, 6); ++s) {
    for (int h = 0; h < H; ++h) {
      in.post[s * H + h] = 1.0f + 0x1p-8f + (s % 3 == 1 ? 0x1p-23f : 0.0f) - (s % 3 == 2 ? 0x1p-23f : 0.0f);
      for (int k = 0; k < H; ++k) in.comb[(s * H + k) * H + h] = s >= 3 ? 0.0f : 0x1p-30f * float(k + 1);
    }
    for (int64_t d = 0; d < D; ++d) {
      in.x[s * D + d] = round_to_bf16_rne(s == 5 ? 1.0f : float(1 + d % 3));
      for (int k = 0; k < H; ++k) in.residual[(s * H + k) * D + d] = round_to_bf16_rne(s == 5 ? -1.0f : 0.0f);
    }
    if (s == 5)  // (1 + 2^-23)·1 - 1·1 - (2^-23 - 2^-40)·1 = 2^-40: 41 bits cancel (H >= 2)
      for (int h = 0; h < H; ++h) {
        in.post[s * H + h] = 1.0f + 0x1p-23f;
        for (int k = 0; k < H; ++k) in.comb[(s * H + k) * H + h] = k == 0 ? 1.0f : k == 1 ? 0x1p-23f - 0x1p-40f : 0.0f;
      }
  }
  if (in.shape.S > 6)  // ∂post[6, ho] = 1·1 + 2^-24·1: a binary32 tie, which the dot filter must decline
    for (int64_t d = 0; d < D; ++d) {
      in.x[6 * D + d] = round_to_bf16_rne(d == 0 ? 1.0f : d == 1 ? 0x1p-24f : 0.0f);
      for (int h = 0; h < H; ++h) in.grad_out[(6 * H + h) * D + d] = round_to_bf16_rne(d < 2 ? 1.0f : 0.0f);
    }
  if (in.shape.S > 7) {  // ∂x[7, d] = ∂residual[7, hi, d] = (1 + 2^-8)·1: every element a bf16 tie
    for (int h = 0; h < H; ++h) {
      in.post[7 * H + h] = h == 0 ? 1.0f + 0x1p-8f : 0.0f;
      for (int k = 0; k < H; ++k) in.comb[(7 * H + k) * H + h] = h == 0 ? 1.0f + 0x1p-8f : 0.0f;
    }
    for (int64_t d = 0; d < D; ++d) in.grad_out[7 * H * D + d] = round_to_bf16_rne(1.0f);
  }
}

// exact without the binary64 twins (what the bench and `compare` run): the GPU's filters against the CPU's
// certified path.
void expect_exact_without_twins_identical(const Inputs& in, const std::string& label) {
  const Policy exact = find_policy("exact");  // a copy: find_policy takes a temporary string
  PolicyResult cpu, gpu;
  allocate_result(cpu, in.shape, true, true);
  allocate_result(gpu, in.shape, false, true);
  poison(gpu);
  forward_cpu(exact.desc, in.view(), forward_outputs(cpu));
  backward_cpu(exact.desc, in.view(), backward_outputs(cpu));
  cuda::forward(exact.desc, in.view(), forward_outputs(gpu), ExactBackend::boost);
  cuda::backward(exact.desc, in.view(), backward_outputs(gpu), ExactBackend::boost);
  const std::string at = "exact, no twins, " + label;
  expect_identical(gpu.out, cpu.out, at + " out");
  expect_identical(gpu.grad_x, cpu.grad_x, at + " grad_x");
  expect_identical(gpu.grad_residual, cpu.grad_residual, at + " grad_residual");
  expect_identical(gpu.grad_post, cpu.grad_post, at + " grad_post");
  expect_identical(gpu.grad_comb, cpu.grad_comb, at + " grad_comb");
}

// Without the binary64 twins the exact kernels settle almost every bf16 element with the filter of
// numerics/exact_filter.hpp and pass the rest to the certified path: every bit must still equal the CPU's
// (which always takes the certified path).
TEST(CudaOperator, ExactWithoutBinary64TwinsMatchesCpu) {
  SKIP_WITHOUT_GPU();
  for (int H : {1, 2, 4, 8, 3})
    for (bool wide : {false, true}) {
      Inputs in = random_inputs(Shape{29, H, H == 3 ? 264 : 4096}, 300 + H * 2 + wide, wide);
      plant_midpoints(in);
      expect_exact_without_twins_identical(in, fmt::format("H={} wide={}", H, wide));
    }
}

// Blocks whose last threads have no chunk (D = 24 and 264: 3 and 33 chunks for 128 threads) and blocks that
// loop over tokens (S above the grid's 65535 rows) must still compute every token with its own weights. The exact backward
// at H = 4 keeps its weights in shared memory from a full wave of tokens on (1584 on an H200): S = 1700.
TEST(CudaOperator, ExactFilterKernelsHandlePartialBlocksAndLongGrids) {
  SKIP_WITHOUT_GPU();
  for (const Shape& sh :
       {Shape{70000, 2, 24}, Shape{31, 4, 264}, Shape{17, 8, 1032}, Shape{66000, 1, 8}, Shape{1700, 4, 1032}}) {
    Inputs in = random_inputs(sh, 900 + sh.H);
    plant_midpoints(in);
    expect_exact_without_twins_identical(in, fmt::format("S={} H={} D={}", sh.S, sh.H, sh.D));
  }
}

// Enough tokens for the kernels' long-S configurations (the other tests' few tokens run the few-token ones):
// the forward's ring kernels (binary64: one wave of blocks, each thread looping over tokens and wrapping its
// cp.async ring) and the backward's one warp per token (warp groups at H = 8), with planted ties in the first
// tokens. Every preset, and exact without the binary64 twins.
TEST(CudaOperator, LongTokenLoopsMatchCpu) {
  SKIP_WITHOUT_GPU();
  for (int H : {4, 8}) {
    Inputs in = random_inputs(Shape{1200, H, 1024}, 500 + H);
    plant_midpoints(in);
    for (const Policy& p : builtin_policies()) expect_policy_identical(p, in, fmt::format("long loops H={}", H));
    expect_exact_without_twins_identical(in, fmt::format("long loops, H={}", H));
  }
}

// More tokens than a grid's y dimension holds (65 535): the forward caps grid.y and its blocks loop over tokens,
// which only the exact kernels were run through (ExactFilterKernelsHandlePartialBlocksAndLongGrids). Every preset,
// with D both a multiple of 8 (specialised kernels) and not (generic ones).
TEST(CudaOperator, EveryPresetLoopsOverMoreTokensThanAGridRow) {
  SKIP_WITHOUT_GPU();
  for (const Shape& sh : {Shape{70000, 8, 8}, Shape{66000, 2, 5}}) {
    const Inputs in = random_inputs(sh, 700 + sh.H);
    for (const Policy& p : builtin_policies())
      expect_policy_identical(p, in, fmt::format("S={} H={} D={}", sh.S, sh.H, sh.D));
  }
}

// Infinities and NaN in every input (allowed under --allow-nonfinite: docs/format.md). The specialised binary64 and exact forwards
// widen by placing bits, which holds for finite values only, so such slabs run the generic kernels; the exact
// filters must decline (or give NaN for NaN) around them, including at H = 1 where the error factor is 0 and
// one step's infinite gradient once turned the bound into NaN for its finite neighbours.
TEST(CudaOperator, NonFiniteInputsMatchCpu) {
  SKIP_WITHOUT_GPU();
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  for (int H : {1, 2, 4, 8}) {
    Inputs in = random_inputs(Shape{23, H, 1024}, 700 + H);
    const int64_t D = in.shape.D;
    in.x[1 * D + 5] = round_to_bf16_rne(inf);
    in.x[2 * D + 9] = round_to_bf16_rne(nan);
    in.residual[(3 * H + H - 1) * D + 17] = round_to_bf16_rne(-inf);
    in.grad_out[(4 * H + 0) * D + 33] = round_to_bf16_rne(inf);
    in.grad_out[(5 * H + H - 1) * D + 40] = round_to_bf16_rne(nan);
    in.post[6 * H] = inf;
    in.comb[(7 * H + 0) * H + H - 1] = nan;
    in.post[8 * H] = 0.0f;  // 0·∞ below
    in.x[8 * D + 3] = round_to_bf16_rne(-inf);
    for (const Policy& p : builtin_policies()) expect_policy_identical(p, in, fmt::format("non-finite H={}", H));
    expect_exact_without_twins_identical(in, fmt::format("non-finite, H={}", H));
  }
  // The exact backward's kernels take x and residual as placed bits too (chunk_scaled): with many tokens at
  // H = 4 the compact one runs, and its bounds must decline every sum that reads a non-finite value.
  Inputs in = random_inputs(Shape{1700, 4, 1032}, 707);
  const int64_t D = in.shape.D;
  in.grad_out[(100 * 4 + 2) * D + 7] = round_to_bf16_rne(inf);
  in.grad_out[(900 * 4 + 3) * D + 1000] = round_to_bf16_rne(nan);
  in.x[1500 * D + 64] = round_to_bf16_rne(-inf);
  in.residual[(1600 * 4 + 1) * D + 9] = round_to_bf16_rne(nan);
  expect_exact_without_twins_identical(in, "non-finite, S=1700 H=4");
}

// The exact backward at H = 4 past the few-token kernel, at planted extremes. D = 1032 gives the lanes different step counts and D = 136 leaves 15 lanes without a step;
// token 7 (plant_midpoints) has every element a bf16 tie, token 9's gradients are the largest finite bf16 with
// weights ±2 (binary32 chains would overflow while the exact sums are 0), token 10's are bf16 subnormals and
// token 11's products reach the filter bound's overflow guard; and a slab with an infinity and a NaN.
void plant_backward_extremes(Inputs& in, std::mt19937_64& rng) {
  const int64_t D = in.shape.D;
  std::uniform_int_distribution<int> mantissa(0, 127), sign(0, 1);
  for (int h = 0; h < 4; ++h) {
    in.post[9 * 4 + h] = h % 2 ? -2.0f : 2.0f;
    for (int k = 0; k < 4; ++k) in.comb[(9 * 4 + k) * 4 + h] = h % 2 ? -2.0f : 2.0f;
  }
  for (int64_t i = 0; i < 4 * D; ++i) {
    in.grad_out[9 * 4 * D + i] = 0x7f7f;  // the largest finite bf16
    in.grad_out[10 * 4 * D + i] = static_cast<bf16_bits>(sign(rng) << 15 | (1 + mantissa(rng)) % 128);  // subnormal
    in.grad_out[11 * 4 * D + i] = static_cast<bf16_bits>(sign(rng) << 15 | (127 + 100) << 7 | mantissa(rng));  // ~2^100
  }
  for (int h = 0; h < 4; ++h) {
    in.post[11 * 4 + h] = 0x1p20f * float(h + 1);
    for (int k = 0; k < 4; ++k) in.comb[(11 * 4 + k) * 4 + h] = (k + h) % 2 ? 0x1p24f : -0x1p23f;
  }
}

// Weights made like torch.rand's and the bench's (k·2^-23, k·2^-24): windows set by trailing zeros
// (exact_chain_window), so that nearly every step of the exact backward's chains takes their path without intervals.
void quantise_weights_like_torch_rand(Inputs& in) {
  for (float& v : in.post) v = std::ldexp(std::floor(std::ldexp(v, 23)), -23);
  for (float& v : in.comb) v = std::ldexp(std::floor(std::ldexp(v, 24)), -24);
}

// The exact backward at H = 4 over more than a wave of its warps (1621 tokens; two blocks of four warps on each of
// 132 multiprocessors take 1056), at the filter's extremes: planted ties and cancellation, wide exponent ranges,
// gradient extremes, weights made like torch.rand's, non-finite values.
void expect_exact_backward_matches_cpu_at_extremes() {
  const int64_t S = 1621;
  std::mt19937_64 rng(1700);
  for (const int64_t D : {1032, 4096, 136})
    for (bool wide : {false, true}) {
      Inputs in = random_inputs(Shape{S, 4, D}, 1100 + D + wide, wide);
      plant_midpoints(in);
      plant_backward_extremes(in, rng);
      expect_exact_without_twins_identical(in, fmt::format("S={} D={} wide={}", S, D, wide));
    }
  for (const int64_t D : {4096, 1032}) {
    Inputs in = random_inputs(Shape{S, 4, D}, 1300 + D);
    quantise_weights_like_torch_rand(in);
    plant_midpoints(in);
    expect_exact_without_twins_identical(in, fmt::format("S={} D={} quantised weights", S, D));
  }
  Inputs in = random_inputs(Shape{S, 4, 1032}, 1709);
  in.grad_out[((S / 3) * 4 + 1) * in.shape.D + 5] = round_to_bf16_rne(std::numeric_limits<float>::infinity());
  in.residual[((2 * S / 3) * 4 + 2) * in.shape.D + 77] = round_to_bf16_rne(std::numeric_limits<float>::quiet_NaN());
  expect_exact_without_twins_identical(in, "non-finite");
}

TEST(CudaOperator, ExactBackwardAtH4MatchesCpuAtExtremes) {
  SKIP_WITHOUT_GPU();
  expect_exact_backward_matches_cpu_at_extremes();
}

// The exact backward at H streams and S tokens (past the few-token kernel: one warp per token at H = 4, three at
// H = 8, both with the chains; below it five and nine warps, without them): planted ties, weights made like
// torch.rand's (so that the chains' path runs where there are chains) and not, and non-finite values.
void expect_exact_backward_matches_cpu_with_ties(int H, int64_t S) {
  for (const bool quantised : {false, true}) {
    Inputs in = random_inputs(Shape{S, H, 1032}, 2004 + S + H + quantised);
    if (quantised) quantise_weights_like_torch_rand(in);
    plant_midpoints(in);
    expect_exact_without_twins_identical(in, fmt::format("S={} H={} quantised={}", S, H, quantised));
  }
  Inputs in = random_inputs(Shape{S, H, 1032}, 2100 + H);
  in.grad_out[(S / 4 * H + H - 1) * in.shape.D + 11] = round_to_bf16_rne(std::numeric_limits<float>::infinity());
  in.residual[(S / 2 * H + H / 2) * in.shape.D + 900] = round_to_bf16_rne(std::numeric_limits<float>::quiet_NaN());
  expect_exact_without_twins_identical(in, fmt::format("S={} H={} non-finite", S, H));
}

// The exact backward at H = 8 past the few-token kernel (two tokens per multiprocessor: 264 on 132, so 701 tokens
// on GPUs of up to 350 multiprocessors): three warps per token with the chains since session 29.
TEST(CudaOperator, ExactBackwardAtH8MatchesCpu) {
  SKIP_WITHOUT_GPU();
  expect_exact_backward_matches_cpu_with_ties(8, 701);
}

// H = 4 between the few-token kernel and a wave (1200 tokens: below 1584, where a compact kernel took over until
// session 30 and this kernel was the experiment `wide`).
TEST(CudaOperator, ExactBackwardAtH4BelowAWaveMatchesCpu) {
  SKIP_WITHOUT_GPU();
  expect_exact_backward_matches_cpu_with_ties(4, 1200);
}

// Sets an environment variable for a scope (nullptr: unsets it), restoring it afterwards (the experiment switch).
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old, had_ = true;
    if (value) ::setenv(name, value, 1);
    else ::unsetenv(name);
  }
  ~ScopedEnv() {
    if (had_) ::setenv(name_, old_.c_str(), 1);
    else ::unsetenv(name_);
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
  std::string old_;
  bool had_ = false;
};

// The exact backward's few-token kernels (S below two tokens per multiprocessor: five warps per token at H = 4, nine
// at H = 8; 100 tokens are few on GPUs of at least 51 multiprocessors), whose declined dot products are finished by
// chunks since session 32.
TEST(CudaOperator, ExactBackwardFewTokensMatchesCpu) {
  SKIP_WITHOUT_GPU();
  for (const int H : {4, 8}) expect_exact_backward_matches_cpu_with_ties(H, 100);
}

// The variants behind MHCDIFF_CUDA_BACKWARD (backward_kernels.cu, docs/decisions.md): `probe` (counters, the dot
// products finished where declined), `defer` (they are finished by a second kernel at every S) and `inline` (at none;
// the default defers below four waves of tokens past the few-token kernels), in every exact kernel at H = 4 and H = 8
// (the few-token ones included) and at the H = 4 kernel's extremes; an experiment added to the switch joins the list, so that a device session times only
// variants that already match the CPU bit for bit.
TEST(CudaOperator, BackwardExperimentsMatchCpu) {
  SKIP_WITHOUT_GPU();
  for (const char* variant : {"probe", "defer", "inline"}) {
    const ScopedEnv env("MHCDIFF_CUDA_BACKWARD", variant);
    ASSERT_NE(cuda::backward_experiment(), 0u) << variant;
    SCOPED_TRACE(variant);
    expect_exact_backward_matches_cpu_at_extremes();
    for (const int H : {4, 8})
      for (const int64_t S : {int64_t{100}, int64_t{701}}) expect_exact_backward_matches_cpu_with_ties(H, S);
  }
  const ScopedEnv env("MHCDIFF_CUDA_BACKWARD", "no-such-variant");
  EXPECT_THROW(cuda::backward_experiment(), InputError);
}

template <class T>
cuda::DeviceBuffer<T> to_device(const std::vector<T>& host) {
  cuda::DeviceBuffer<T> d(host.size());
  if (!host.empty()) {
    EXPECT_EQ(cudaMemcpy(d.get(), host.data(), d.bytes(), cudaMemcpyHostToDevice), cudaSuccess);
  }
  return d;
}

template <class T>
std::vector<T> to_host(const cuda::DeviceBuffer<T>& d) {
  std::vector<T> host(d.size());
  if (!host.empty()) {
    EXPECT_EQ(cudaMemcpy(host.data(), d.get(), d.bytes(), cudaMemcpyDeviceToHost), cudaSuccess);
  }
  return host;
}

// The exact backward's deferred finishing (launch_backward's DeferredDots) with a list of `capacity` items, launched
// twice on one scratch (the second launch finds the counters the first left), at D = 4104 (513 chunks: the second
// kernel's loads take two rounds). The filter declines every dot product of 14 tokens (280 at H = 4): 12 tokens whose
// dot products are binary32 ties (1 + 2^-24); token 5's, sums of -0 products only (x and residual -0), whose sum is
// -0; token 3's, +0 sums (∂comb) and ties plus 2^-200 (∂post), which neither the exactness test nor the certified
// accumulators settle (a spread of 200 bits), so they are listed for the host. With no room every declined dot
// product is finished by the warp that declined it, with five the rest are, with the default room none are: the
// stored values (the listed ones aside, which the host recomputes) are the CPU's, the list for the host is the same,
// whoever finished them, and the deferred list holds what it should (its slots are filled with a sentinel first).
std::vector<unsigned long long> expect_deferred_dots_match_cpu(int64_t S, unsigned capacity) {
  const int H = 4;
  const int64_t D = 4104;
  Inputs in = random_inputs(Shape{S, H, D}, 2400 + S);
  std::set<std::pair<int64_t, int>> planted;  // (token, dot) declined for certain
  auto plant = [&](int64_t s, float x0, float x1, float x2, float residual_scale, float g2) {
    for (int64_t d = 0; d < D; ++d) {
      const float v = d == 0 ? x0 : d == 1 ? x1 : d == 2 ? x2 : std::copysign(0.0f, x0);
      in.x[s * D + d] = round_to_bf16_rne(v);
      for (int h = 0; h < H; ++h) {
        in.residual[(s * H + h) * D + d] = round_to_bf16_rne(residual_scale * v);
        in.grad_out[(s * H + h) * D + d] = round_to_bf16_rne(d < 2 ? 1.0f : d == 2 ? g2 : 0.0f);
      }
    }
    for (int q = 0; q < H + H * H; ++q) planted.emplace(s, q);
  };
  for (int64_t s = 10; s < 10 + 12 * 7; s += 7) plant(s, 1.0f, 0x1p-24f, 0.0f, 1.0f, 0.0f);  // ties
  plant(3, 1.0f, 0x1p-24f, 0x1p-100f, 0.0f, 0x1p-100f);  // ∂post: ties + 2^-200; ∂comb: +0
  plant(5, -0.0f, -0.0f, -0.0f, 1.0f, 1.0f);             // every product -0 (grad_out positive)
  for (int64_t d = 0; d < D; ++d)
    for (int h = 0; h < H; ++h) in.grad_out[(5 * H + h) * D + d] = round_to_bf16_rne(1.0f);
  const Policy exact = find_policy("exact");
  PolicyResult cpu;
  allocate_result(cpu, in.shape, false, true);
  backward_cpu(exact.desc, in.view(), backward_outputs(cpu));
  EXPECT_TRUE(std::signbit(cpu.grad_post[5 * H]) && cpu.grad_post[5 * H] == 0.0f) << "token 5's sums must be -0";

  const auto x = to_device(in.x), residual = to_device(in.residual), grad_out = to_device(in.grad_out);
  const auto post = to_device(in.post), comb = to_device(in.comb);
  const InputsView view{in.shape, x.get(), residual.get(), post.get(), comb.get(), grad_out.get()};
  cuda::DeviceBuffer<bf16_bits> grad_x(in.x.size()), grad_residual(in.residual.size());
  cuda::DeviceBuffer<float> grad_post(in.post.size()), grad_comb(in.comb.size());
  cuda::DeviceBuffer<unsigned long long> fallback_count(1), fallback_items(1024);
  const cuda::FallbackList fallback{fallback_count.get(), fallback_items.get(), fallback_items.size()};
  const cuda::DeferredDotScratch deferred(capacity);
  const cuda::DeferredDots dd = deferred.view();
  std::vector<unsigned long long> listed;
  for (int launch = 0; launch < 2; ++launch) {
    const std::string at = fmt::format("S={} capacity={} launch {}", S, capacity, launch);
    // Poisoned: an element no kernel writes cannot pass; a slot of the deferred list no warp writes keeps token -1.
    for (auto [p, n] : {std::pair<void*, size_t>{grad_x.get(), grad_x.bytes()},
                        {grad_residual.get(), grad_residual.bytes()},
                        {grad_post.get(), grad_post.bytes()},
                        {grad_comb.get(), grad_comb.bytes()},
                        {dd.items, dd.capacity * sizeof(cuda::DeferredDot)}})
      if (p) {
        EXPECT_EQ(cudaMemset(p, 0xff, n), cudaSuccess);
      }
    EXPECT_EQ(cudaMemset(fallback_count.get(), 0, sizeof(unsigned long long)), cudaSuccess);
    cuda::launch_backward(exact.desc, view, {grad_x.get(), grad_residual.get(), grad_post.get(), grad_comb.get()},
                          fallback, nullptr, dd);
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess) << at;

    std::vector<cuda::DeferredDot> slots(dd.capacity);
    if (!slots.empty()) {
      EXPECT_EQ(cudaMemcpy(slots.data(), dd.items, slots.size() * sizeof(cuda::DeferredDot), cudaMemcpyDeviceToHost),
                cudaSuccess);
    }
    std::set<std::pair<int64_t, int>> deferred_dots;
    for (const cuda::DeferredDot& slot : slots) {
      if (slot.token == -1) continue;
      EXPECT_TRUE(slot.token >= 0 && slot.token < S && slot.dot >= 0 && slot.dot < H + H * H)
          << at << ": a deferred slot holds token " << slot.token << ", dot " << slot.dot;
      EXPECT_TRUE(deferred_dots.emplace(slot.token, slot.dot).second) << at << ": listed twice";
    }
    if (dd.capacity <= planted.size()) {
      EXPECT_EQ(deferred_dots.size(), dd.capacity) << at << ": the list must fill";
    } else {
      EXPECT_TRUE(std::includes(deferred_dots.begin(), deferred_dots.end(), planted.begin(), planted.end()))
          << at << ": every planted dot product must be deferred";
    }

    std::vector<unsigned long long> items = to_host(fallback_items);
    items.resize(std::min<size_t>(to_host(fallback_count)[0], items.size()));
    std::sort(items.begin(), items.end());
    std::vector<float> gpu_post = to_host(grad_post);
    for (const unsigned long long item : items)
      if (static_cast<cuda::FallbackKind>(item >> cuda::kFallbackKindShift) == cuda::FallbackKind::grad_post)
        gpu_post[item & cuda::kFallbackIndexMask] = cpu.grad_post[item & cuda::kFallbackIndexMask];
    expect_identical(to_host(grad_x), cpu.grad_x, at + " grad_x");
    expect_identical(to_host(grad_residual), cpu.grad_residual, at + " grad_residual");
    expect_identical(gpu_post, cpu.grad_post, at + " grad_post (listed elements aside)");
    expect_identical(to_host(grad_comb), cpu.grad_comb, at + " grad_comb");
    if (launch == 1) {
      EXPECT_EQ(items, listed) << at << ": the second launch listed other elements";
    }
    listed = items;
  }
  return listed;
}

// MHCDIFF_CUDA_BACKWARD=defer defers at every S: past the few-token kernel (300 tokens) and in it (100).
TEST(CudaOperator, DeferredDotsMatchCpuWhateverTheListHolds) {
  SKIP_WITHOUT_GPU();
  const ScopedEnv env("MHCDIFF_CUDA_BACKWARD", "defer");
  for (const int64_t S : {int64_t{300}, int64_t{100}}) {
    const std::vector<unsigned long long> inline_list = expect_deferred_dots_match_cpu(S, 0);
    ASSERT_EQ(inline_list.size(), 4u) << "token 3's four ∂post dot products must be listed for the host";
    for (const unsigned capacity : {5u, cuda::kDeferredDotCapacity})
      EXPECT_EQ(expect_deferred_dots_match_cpu(S, capacity), inline_list) << "S=" << S << " capacity=" << capacity;
  }
}

// The exact forward where block rows loop over tokens (past the grid's 65535 rows) and ask L2 for their next token
// early: plant_midpoints' tokens (ties that go through the retest and the warp's staging round, cancellation) are
// copied into the second token of several block rows, the last token among them, where the prefetched chunks are
// the ones used. Short rows only (65573 tokens of D = 4096 would take 4.8 GB of host memory): one block column at
// D = 136, two at 1032 (the second with one active thread).
TEST(CudaOperator, ExactForwardTokenLoopsMatchCpu) {
  SKIP_WITHOUT_GPU();
  const Policy exact = find_policy("exact");
  for (const int H : {4, 2, 1})
    for (const int64_t D : {1032, 136}) {
      if (H != 4 && D == 1032) continue;
      // The first 38 block rows take two tokens: r and rows + r.
      const int64_t rows = cuda::exact_forward_looping_min_tokens() - 1, S = rows + 38;
      Inputs in = random_inputs(Shape{S, H, D}, 1800 + D + H, D == 136, false);
      Inputs planted = random_inputs(Shape{8, H, D}, 1900 + D + H);
      plant_midpoints(planted);
      for (const int64_t to : {rows, rows + 3, rows + 8, S - 8})
        for (int64_t t = 0; t < 8; ++t) {
          std::copy_n(planted.x.begin() + t * D, D, in.x.begin() + (to + t) * D);
          std::copy_n(planted.residual.begin() + t * H * D, H * D, in.residual.begin() + (to + t) * H * D);
          std::copy_n(planted.post.begin() + t * H, H, in.post.begin() + (to + t) * H);
          std::copy_n(planted.comb.begin() + t * H * H, H * H, in.comb.begin() + (to + t) * H * H);
        }
      PolicyResult cpu;
      allocate_result(cpu, in.shape, true, false);
      forward_cpu(exact.desc, in.view(), forward_outputs(cpu));
      PolicyResult gpu;
      allocate_result(gpu, in.shape, false, false);
      poison(gpu);
      cuda::forward(exact.desc, in.view(), forward_outputs(gpu), ExactBackend::boost);
      expect_identical(gpu.out, cpu.out, fmt::format("H={} D={} out", H, D));
    }
}

// Outputs in the bf16/fp32 subnormal range and beyond the bf16 maximum: the GPU's rounding (a hardware
// conversion instruction for intermediate RNb) must give the CPU's bits there too, including infinities.
TEST(CudaOperator, SubnormalAndOverflowingOutputsRoundLikeTheCpu) {
  SKIP_WITHOUT_GPU();
  Inputs in = random_inputs(Shape{40, 4, 256}, 11);
  std::mt19937_64 rng(12);
  std::uniform_real_distribution<float> unit(0.0f, 1.0f);
  for (int64_t s = 0; s < in.shape.S; ++s)
    for (int h = 0; h < 4; ++h) {
      // Half the tokens land near 2^-133..2^-120 (bf16 and fp32 subnormals), half near 2^100..2^127.
      const int e = s % 2 ? -140 + int(s % 20) : 100 + int(s % 28);
      in.post[s * 4 + h] = std::ldexp(1.0f + unit(rng), e);
      for (int k = 0; k < 4; ++k) in.comb[(s * 4 + k) * 4 + h] = std::ldexp(unit(rng), s % 2 ? -135 : 90);
    }
  for (const Policy& p : builtin_policies()) expect_policy_identical(p, in, "tiny/huge");
  expect_exact_without_twins_identical(in, "tiny/huge");  // the exact forward's overflow guard and subnormals
}

// The rounding routes as compiled for the GPU: RNb of binary32 by the hardware conversions (numerics/bf16.hpp,
// one value and packed pairs) equals the integer route on all 2^32 inputs, RNb of binary64 (also a hardware
// conversion) equals round-to-odd, and the directed binary32 operations equal their host emulation.
TEST(CudaOperator, RoundingRoutesAgreeOnTheGpu) {
  SKIP_WITHOUT_GPU();
  const testing::RoundingCheck f = testing::check_float_rounding_on_gpu();
  EXPECT_EQ(f.checked, uint64_t{1} << 32);
  EXPECT_EQ(f.mismatches, 0u) << "first mismatch at bits 0x" << std::hex << f.first;
  const testing::RoundingCheck d = testing::check_double_rounding_on_gpu();
  EXPECT_EQ(d.mismatches, 0u) << "first mismatch at bits 0x" << std::hex << d.first;
  const testing::RoundingCheck r = testing::check_directed_binary32_on_gpu();
  EXPECT_EQ(r.mismatches, 0u) << "first mismatching operand pair: " << r.first;
}

// `bench --preset`: the timed input sets are the generator's values, copied to the GPU unchanged. The bench's dump
// (the inputs of its last timed launch: set 0 with one rep) is compared with gen::generate at the same seed.
TEST(CudaBench, PresetInputsAreTheGeneratorsValues) {
  SKIP_WITHOUT_GPU();
  const Shape sh{40, 4, 64};
  gen::GenOptions g;
  g.preset = gen::Preset::realistic;
  g.shape = sh;
  g.grad = true;
  const std::filesystem::path dir =
      std::filesystem::path(::testing::TempDir()) / ("bench_preset_dump_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  cuda::DeviceBenchOptions opt;
  opt.reps = 1;
  opt.seed = 5;
  opt.dump_dir = dir.string();
  opt.host_inputs = [&g](const Shape& shape, uint64_t seed) {
    gen::GenOptions o = g;
    o.shape = shape;
    o.seed = seed;
    return gen::generate(o);
  };
  cuda::bench_shape(sh, {find_policy("exact")}, opt, true);
  g.seed = 5;
  const Inputs want = gen::generate(g);
  auto read = [&](const char* name, size_t bytes) {
    std::ifstream is(dir / name, std::ios::binary);
    std::vector<char> v(bytes);
    is.read(v.data(), std::streamsize(bytes));
    EXPECT_EQ(size_t(is.gcount()), bytes) << name;
    return v;
  };
  auto same = [&](const char* name, const auto& values) {
    const size_t bytes = values.size() * sizeof(values[0]);
    const std::vector<char> got = read(name, bytes);
    EXPECT_EQ(std::memcmp(got.data(), values.data(), bytes), 0) << name << " is not the generator's";
  };
  same("x.bin", want.x);
  same("residual.bin", want.residual);
  same("grad_out.bin", want.grad_out);
  same("post.bin", want.post);
  same("comb.bin", want.comb);
  std::filesystem::remove_all(dir);
}

// `run --device auto` picks the GPU where one is present.
TEST(CudaOperator, AutoDeviceIsTheGpu) {
  SKIP_WITHOUT_GPU();
  EXPECT_EQ(resolve_device("auto"), Device::cuda);
  EXPECT_NE(device_name(Device::cuda), "cpu");
}

}  // namespace
}  // namespace mhc
