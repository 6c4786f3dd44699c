#include "investigate/variant.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "kernels/operator_math.hpp"
#include "numerics/exact_fallback.hpp"

namespace mhc::investigate {
namespace {

bool rounds_post(CoefScope s) { return s == CoefScope::both || s == CoefScope::post_only; }
bool rounds_comb(CoefScope s) { return s == CoefScope::both || s == CoefScope::comb_only; }

const char* scope_name(CoefScope s) {
  switch (s) {
    case CoefScope::none: return "fp32";
    case CoefScope::both: return "bf16";
    case CoefScope::post_only: return "post-bf16";
    case CoefScope::comb_only: return "comb-bf16";
  }
  return "?";
}

// Variants that are the same function of the inputs, signed zeros included (fingerprint counts +0 against −0
// as a mismatch, SPEC §5): a product of two bf16 values is exact in fp32, so fusing it changes nothing; with
// H = 1 the mix has no addition to fuse and comb has no orientation. The pairwise tree stays distinct from the
// sequential sum even for H <= 2, where their values agree: the sequential sum starts from +0, the tree from its
// first product, so where every term is −0 they give +0 and −0 (a two-stream kernel's `c0*r0 + c1*r1`).
Variant canonical(Variant v, int H) {
  const PolicyDesc defaults;  // the backward fields do not shape the forward value
  v.desc.grad_product = defaults.grad_product;
  v.desc.param_grad_rounding = defaults.param_grad_rounding;
  v.desc.grad_contract = defaults.grad_contract;
  if (v.desc.accumulator == Accumulator::exact) return Variant{v.desc, CoefScope::none, H == 1 ? CombOrientation::src_dst : v.comb};
  if (rounds_comb(v.coef)) v.desc.mix_product = MixProduct::fp32;
  const bool post_fuse_matters = v.desc.order == TermOrder::seeded && v.desc.mix_product == MixProduct::fused;
  if (rounds_post(v.coef) && v.desc.post_term == PostTerm::fused && !post_fuse_matters) v.desc.post_term = PostTerm::fp32;
  if (v.desc.order == TermOrder::seeded) v.desc.mix_rounding = MixRounding::none;
  if (H == 1) {
    v.comb = CombOrientation::src_dst;
    if (v.desc.order != TermOrder::seeded) v.desc.mix_product = MixProduct::fp32;
  }
  v.desc.coef = rounds_post(v.coef) && rounds_comb(v.coef) ? CoefRounding::bf16 : CoefRounding::fp32;
  return v;
}

}  // namespace

Variant variant_of(const PolicyDesc& desc) {
  Variant v;
  v.desc = desc;
  v.coef = desc.coef == CoefRounding::bf16 ? CoefScope::both : CoefScope::none;
  return v;
}

bool as_policy_desc(const Variant& v, PolicyDesc& out) {
  if (v.coef == CoefScope::post_only || v.coef == CoefScope::comb_only) return false;
  out = v.desc;
  out.coef = v.coef == CoefScope::both ? CoefRounding::bf16 : CoefRounding::fp32;
  return true;
}

std::vector<Variant> variant_lattice(int H) {
  std::vector<Variant> base;
  std::vector<Variant> seen;  // canonical forms of `base`
  auto add = [&](const Variant& v) {
    const Variant c = canonical(v, H);
    if (std::find(seen.begin(), seen.end(), c) != seen.end()) return;
    seen.push_back(c);
    base.push_back(v);
  };
  for (const Policy& p : builtin_policies()) add(variant_of(p.desc));
  for (CoefScope scope : {CoefScope::none, CoefScope::both, CoefScope::comb_only, CoefScope::post_only})
    for (TermOrder order : {TermOrder::seeded, TermOrder::mix_first, TermOrder::mix_pairwise})
      for (MixRounding mr : {MixRounding::none, MixRounding::bf16}) {
        if (order == TermOrder::seeded && mr == MixRounding::bf16) continue;  // no mix sum to round
        for (PostTerm pt : {PostTerm::fp32, PostTerm::fused, PostTerm::bf16})
          for (MixProduct mp : {MixProduct::fp32, MixProduct::fused}) {
            Variant v;
            v.coef = scope;
            v.desc.coef = rounds_post(scope) && rounds_comb(scope) ? CoefRounding::bf16 : CoefRounding::fp32;
            v.desc.order = order;
            v.desc.mix_rounding = mr;
            v.desc.post_term = pt;
            v.desc.mix_product = mp;
            add(v);
          }
      }
  // Upcast references: float64 in the orders a `.double()` expression can take, with and without bf16 coefs.
  for (CoefScope scope : {CoefScope::none, CoefScope::both})
    for (TermOrder order : {TermOrder::seeded, TermOrder::mix_first, TermOrder::mix_pairwise}) {
      Variant v;
      v.coef = scope;
      v.desc.accumulator = Accumulator::fp64;
      v.desc.coef = scope == CoefScope::both ? CoefRounding::bf16 : CoefRounding::fp32;
      v.desc.order = order;
      add(v);
    }
  std::vector<Variant> all = base;
  if (H > 1)
    for (Variant v : base) {
      v.comb = CombOrientation::dst_src;
      all.push_back(v);
    }
  return all;
}

std::string preset_name(const Variant& v) {
  PolicyDesc d;
  if (!as_policy_desc(v, d)) return "";
  const Variant c = canonical(v, kMaxStreams);
  for (const Policy& p : builtin_policies()) {
    Variant pv = variant_of(p.desc);
    pv.comb = v.comb;
    if (canonical(pv, kMaxStreams) == c) return p.name;
  }
  return "";
}

namespace {
// How a variant read the stored comb: its orientation relative to the inputs as read, composed with that reading.
const char* stored_comb_reading(const Variant& v, bool inputs_dst_src) {
  return (v.comb == CombOrientation::dst_src) != inputs_dst_src ? "dst,src" : "src,dst";
}
}  // namespace

std::string describe_fields(const Variant& v, bool inputs_dst_src) {
  std::string s;
  if (v.desc.accumulator == Accumulator::exact) {
    s = "accumulator=exact";
  } else {
    s = fmt::format("accumulator={} coef={} post_term={} mix_product={} order={}",
                    v.desc.accumulator == Accumulator::fp32 ? "fp32" : "fp64", scope_name(v.coef),
                    v.desc.post_term == PostTerm::fp32 ? "fp32" : v.desc.post_term == PostTerm::bf16 ? "bf16" : "fused",
                    v.desc.mix_product == MixProduct::fp32 ? "fp32" : "fused",
                    v.desc.order == TermOrder::seeded      ? "seeded"
                    : v.desc.order == TermOrder::mix_first ? "mix-first"
                                                           : "mix-pairwise");
    if (v.desc.order != TermOrder::seeded)
      s += fmt::format(" mix_rounding={}", v.desc.mix_rounding == MixRounding::bf16 ? "bf16" : "none");
  }
  return s + " comb=" + stored_comb_reading(v, inputs_dst_src);
}

std::string describe(const Variant& v, bool inputs_dst_src) {
  std::string preset = preset_name(v);
  if (preset.empty()) return describe_fields(v, inputs_dst_src);
  if (v.comb == CombOrientation::src_dst) return preset;
  return fmt::format("{} with comb transposed (read as {}{})", preset, stored_comb_reading(v, inputs_dst_src),
                     inputs_dst_src ? "; the inputs' comb was read as dst,src" : "");
}

void TokenEvaluator::load(const InputsView& in, int64_t s) {
  H_ = in.shape.H;
  D_ = in.shape.D;
  const float* post = in.post + s * H_;
  const float* comb = in.comb + s * H_ * H_;
  for (int ho = 0; ho < H_; ++ho) {
    post_[0][ho] = post[ho];
    post_[1][ho] = rnb(post[ho]);
    for (int k = 0; k < H_; ++k) {
      // c_k for output stream ho: comb[s, k, ho] as stored; the transposed reading takes comb[s, ho, k].
      const float straight = comb[k * H_ + ho], transposed = comb[ho * H_ + k];
      comb_col_[0][0][ho][k] = straight;
      comb_col_[0][1][ho][k] = rnb(straight);
      comb_col_[1][0][ho][k] = transposed;
      comb_col_[1][1][ho][k] = rnb(transposed);
    }
  }
  x_.resize(size_t(D_));
  r_.resize(size_t(D_) * H_);
  const bf16_bits* x = in.x + s * D_;
  const bf16_bits* res = in.residual + s * H_ * D_;
  for (int64_t d = 0; d < D_; ++d) x_[size_t(d)] = bf16_to_float(x[d]);
  for (int k = 0; k < H_; ++k)
    for (int64_t d = 0; d < D_; ++d) r_[size_t(d) * H_ + k] = bf16_to_float(res[k * D_ + d]);
}

bf16_bits TokenEvaluator::value(const Variant& v, int ho, int64_t d) const {
  const float p = post_[rounds_post(v.coef) ? 1 : 0][ho];
  const float* c = comb_col_[v.comb == CombOrientation::dst_src ? 1 : 0][rounds_comb(v.coef) ? 1 : 0][ho];
  const float* r = r_.data() + size_t(d) * H_;
  const float x = x_[size_t(d)];
  // The coefficients are already rounded as the variant asks; rounding them again is the identity.
  switch (v.desc.accumulator) {
    case Accumulator::fp32: return round_to_bf16_rne(forward_value<float>(v.desc, p, x, c, r, H_));
    case Accumulator::fp64: return round_to_bf16_rne(forward_value<double>(v.desc, p, x, c, r, H_));
    case Accumulator::exact: break;
  }
  const ExactAccumulator acc = forward_exact(p, x, c, r, H_);
  const ExactRounded er = acc.result();
  if (er.certified) return er.bf16();
  ++fallbacks_;
  double terms[kMaxStreams + 1];
  terms[0] = double(p) * x;
  for (int k = 0; k < H_; ++k) terms[k + 1] = double(c[k]) * r[k];
  return exact_sum_multiprecision({terms, size_t(H_) + 1}).bf16();
}

}  // namespace mhc::investigate
