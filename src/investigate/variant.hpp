#pragma once
// One point of the fingerprint lattice (SPEC §6): a forward rounding policy, which coefficients are rounded
// to bf16 first, and the orientation in which comb was read. Its arithmetic is mhc::forward_value — the
// one definition the kernels use — applied to pre-rounded coefficients; nothing here re-types a formula.
#include <string>
#include <vector>

#include "kernels/tensors.hpp"
#include "policy/policy.hpp"

namespace mhc::investigate {

// Which of post and comb are rounded to bf16 before use. PolicyDesc's `coef` rounds both (HF casts both
// parameters); real expressions also cast only one, e.g. `post * x + comb.to(x.dtype).mT @ residual`.
enum class CoefScope : uint8_t { none, both, post_only, comb_only };

// comb as the operator contracts it (src,dst), or transposed: the kernel indexed comb[s, dst, src]
// (NeMo Automodel #2154, Megatron-LM #4957).
enum class CombOrientation : uint8_t { src_dst, dst_src };

struct Variant {
  PolicyDesc desc;  // forward fields only matter; desc.coef is ignored in favour of `coef`
  CoefScope coef = CoefScope::none;
  CombOrientation comb = CombOrientation::src_dst;

  friend bool operator==(const Variant&, const Variant&) = default;
};

// The whole lattice: fp32 accumulation over coefficient scope × post term × mix product × term order ×
// mix rounding (mix rounding only where a mix sum exists), fp64 and exact references, each in both comb
// orientations. The built-in presets come first (they win ties), then the rest in a fixed order. Variants
// that compute the same function for H streams (e.g. fusing a product that is exact anyway) appear once.
std::vector<Variant> variant_lattice(int H = kMaxStreams);

// The variant a built-in or user policy describes (comb read as stored).
Variant variant_of(const PolicyDesc& desc);

// The PolicyDesc equivalent of a variant, when there is one (coef scope none/both); orientation aside.
bool as_policy_desc(const Variant& v, PolicyDesc& out);

// The name of the preset whose forward arithmetic this is ("fp32-seeded-fma"), or "".
std::string preset_name(const Variant& v);

// Human-readable: the preset name when it is one, else the fields; a transposed variant says how it read the stored
// comb. `inputs_dst_src`: the inputs' comb was read as dst,src (--comb-layout or the file's attribute), so a
// variant's orientation, relative to the inputs as read, is the other one of the stored array.
std::string describe(const Variant& v, bool inputs_dst_src = false);

// Field-by-field form, stable and machine-readable ("order=seeded coef=bf16 post_term=fused ... comb=src,dst"); comb=
// is how the variant read the stored comb array (as describe).
std::string describe_fields(const Variant& v, bool inputs_dst_src = false);

// Per-token values every variant needs, prepared once and shared by all of them.
class TokenEvaluator {
 public:
  // `in` holds token `s` (index within the view); comb in the src,dst orientation as read.
  void load(const InputsView& in, int64_t s);
  // The variant's bf16 output at (ho, d) of the loaded token.
  bf16_bits value(const Variant& v, int ho, int64_t d) const;
  // Also counts how many exact elements needed the multiprecision fallback.
  int64_t fallbacks() const { return fallbacks_; }

 private:
  int H_ = 0;
  int64_t D_ = 0;
  float post_[2][kMaxStreams];                           // [rounded?][ho]
  float comb_col_[2][2][kMaxStreams][kMaxStreams];      // [orientation][rounded?][ho][k]
  std::vector<float> x_;                                  // [D]
  std::vector<float> r_;                                  // [D][H], r_k of one d contiguous
  mutable int64_t fallbacks_ = 0;
};

}  // namespace mhc::investigate
