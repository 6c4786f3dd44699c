#pragma once
// A rounding policy is data (SPEC §2 "User policies"): which values are rounded where, in which order
// the terms are added, and which steps are contracted into a fused multiply-add. The built-in policies
// are presets of this description (presets.cpp); the kernels interpret it, for CPU and GPU alike.
#include <cstdint>
#include <string>
#include <vector>

namespace mhc {

// Where the arithmetic happens. `exact` ignores every rounding field below: it is the truth.
enum class Accumulator : uint8_t { fp32, fp64, exact };

// post and comb used as stored (fp32) or first rounded to bf16 (HF's `.to(bfloat16)`).
enum class CoefRounding : uint8_t { fp32, bf16 };

// How the post term p·x enters the sum: rounded to fp32; rounded to fp32 then to bf16 (a bf16 multiply);
// or fused, never rounded, into the addition that consumes it (a contracted multiply-add).
enum class PostTerm : uint8_t { fp32, bf16, fused };

// How each mix term c_k·r_k enters: rounded to fp32 and added, or fused into the add (fma).
enum class MixProduct : uint8_t { fp32, fused };

// seeded: acc = p·x, then + c_k·r_k for k ascending (TileKernels, LMDeploy, xtuner after #2260).
// mix_first: m = Σ_k c_k·r_k sequentially, then out = p·x + m (DeepSeek's reference, HF eager).
// mix_pairwise: as mix_first but m is an adjacent-pairs tree over k (vectorised/blocked reductions).
// With a fused post term the seeded order starts from RN32(c_0·r_0) and fuses p·x into it.
enum class TermOrder : uint8_t { seeded, mix_first, mix_pairwise };

// Whether the mix sum m is rounded to bf16 before p·x is added (HF's bf16 matmul output).
enum class MixRounding : uint8_t { none, bf16 };

// Backward: whether the elementwise post-path products p·g (for ∂x) and g·x (for ∂post) are rounded to
// bf16 (HF autograd multiplies bf16 tensors) or kept in fp32.
enum class GradProduct : uint8_t { fp32, bf16 };

// Backward: whether ∂post and ∂comb are rounded to bf16 before being widened to fp32 (HF's bf16 params).
enum class ParamGradRounding : uint8_t { none, bf16 };

// Trivially copyable so a kernel can take it by value.
struct PolicyDesc {
  Accumulator accumulator = Accumulator::fp32;
  CoefRounding coef = CoefRounding::fp32;
  PostTerm post_term = PostTerm::fp32;
  MixProduct mix_product = MixProduct::fp32;
  TermOrder order = TermOrder::seeded;
  MixRounding mix_rounding = MixRounding::none;
  GradProduct grad_product = GradProduct::fp32;
  ParamGradRounding param_grad_rounding = ParamGradRounding::none;
  bool grad_contract = false;  // every backward a + b·c step is an fma (where the product is not rounded)

  friend bool operator==(const PolicyDesc&, const PolicyDesc&) = default;
};

// The built-in descriptions (SPEC §2), constexpr so that CUDA can compile each as a specialised kernel.
inline constexpr PolicyDesc kHfBf16Desc = [] {
  PolicyDesc d;
  d.coef = CoefRounding::bf16;
  d.post_term = PostTerm::bf16;
  d.order = TermOrder::mix_first;
  d.mix_rounding = MixRounding::bf16;
  d.grad_product = GradProduct::bf16;
  d.param_grad_rounding = ParamGradRounding::bf16;
  return d;
}();
inline constexpr PolicyDesc kFp32SeededDesc{};
inline constexpr PolicyDesc kFp32SeededFmaDesc = [] {
  PolicyDesc d;
  d.mix_product = MixProduct::fused;
  d.grad_contract = true;
  return d;
}();
inline constexpr PolicyDesc kFp32MixFirstDesc = [] {
  PolicyDesc d;
  d.order = TermOrder::mix_first;
  return d;
}();
inline constexpr PolicyDesc kFp64Desc = [] {
  PolicyDesc d;
  d.accumulator = Accumulator::fp64;
  return d;
}();
inline constexpr PolicyDesc kExactDesc = [] {
  PolicyDesc d;
  d.accumulator = Accumulator::exact;
  return d;
}();

struct Policy {
  std::string name;
  PolicyDesc desc;
  std::string models;  // which real implementation this reproduces (for reports and provenance)
};

// The six built-ins of SPEC §2, in a stable order.
const std::vector<Policy>& builtin_policies();

// Resolves a preset name or alias (hf, lmdeploy, deepseek, mpfr, truth). Throws std::invalid_argument
// naming the known policies.
const Policy& find_policy(const std::string& name_or_alias);

// Parses "all" or a comma-separated list of names/aliases, without duplicates, in the order given.
std::vector<Policy> parse_policy_list(const std::string& list);

// One line describing every field, e.g. "accumulator=fp32 coef=bf16 ...": provenance and reports.
std::string describe(const PolicyDesc& desc);

// True for policies whose stored results include binary64 copies (out_f64 and grad_*_f64).
inline bool stores_f64(const PolicyDesc& d) { return d.accumulator != Accumulator::fp32; }

}  // namespace mhc
