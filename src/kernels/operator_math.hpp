#pragma once
// The mHC post operator's arithmetic, one element at a time, for every policy description (SPEC §2).
// CPU loops (kernels/cpu) and CUDA kernels (kernels/cuda) both call these functions; no formula is
// written twice. T is the accumulator type: float for the fp32/bf16 policies, double for fp64.
#include <cmath>
#include <cstdint>

#include "numerics/bf16.hpp"
#include "numerics/exact_filter.hpp"
#include "numerics/exact_sum.hpp"
#include "numerics/fp_ops.hpp"
#include "policy/policy.hpp"

namespace mhc {

// ---- Arithmetic in the accumulator's format ---------------------------------------------------------

MHC_HD float op_mul(float a, float b) { return mul_rn32(a, b); }
MHC_HD double op_mul(double a, double b) { return mul_rn64(a, b); }
MHC_HD float op_add(float a, float b) { return add_rn32(a, b); }
MHC_HD double op_add(double a, double b) { return add_rn64(a, b); }
MHC_HD float op_fma(float a, float b, float c) { return fma_rn32(a, b, c); }
MHC_HD double op_fma(double a, double b, double c) { return fma_rn64(a, b, c); }
// acc + RN(a·b) in the accumulator's format. In binary64 every product the operator forms
// is exact (fp32 or bf16 times bf16: at most 32 significant bits, never below 2^-282), so the fused and the
// plain forms give the same value: the GPU uses the single fused instruction, the CPU the plain pair (a
// software fma would be slow there). In binary32 products are rounded, so the policy's own form is kept.
MHC_HD double add_product(double acc, double a, double b) {
#if defined(__CUDA_ARCH__)
  return fma_rn64(a, b, acc);
#else
  return acc + a * b;
#endif
}
template <class T>
MHC_HD T add_product(T acc, T a, T b) {
  return op_add(acc, op_mul(a, b));
}

MHC_HD float op_round_bf16(float v) { return rnb(v); }
MHC_HD double op_round_bf16(double v) { return static_cast<double>(bf16_to_float(round_to_bf16_rne(v))); }

// The coefficient as the policy uses it: as stored, or rounded to bf16 first (HF's .to(bfloat16)).
MHC_HD float coefficient(const PolicyDesc& pd, float v) { return pd.coef == CoefRounding::bf16 ? rnb(v) : v; }
// A weight its caller already rounded by coefficient() and widened to binary64, possibly scaled (scaled_weight,
// with values by scaled_value: each product is then unscaled, and every operation of forward_value takes
// products, so binary64 policies get the same numbers).
MHC_HD double coefficient(const PolicyDesc&, double v) { return v; }

// Every sum that real implementations start from a zeroed accumulator (torch.sum, bmm, autograd's
// broadcast reductions, Triton/CUDA `acc = 0` loops) starts from +0 here too. It changes nothing but the
// sign of an all-(−0) sum, which is then +0, as in PyTorch (docs/references.md). Seeded sums start from p·x.
template <class T>
MHC_HD T zero_accumulator() {
  return T(0.0);
}

// ---- Forward -----------------------------------------------------------------------------------------
// out[s,ho,d] before its final bf16 rounding. p = post[s,ho], x = x[s,d], c[k] = comb[s,k,ho],
// r[k] = residual[s,k,d] for k < H.

template <class T>
MHC_HD T post_term_value(const PolicyDesc& pd, T p, T x) {
  T q = op_mul(p, x);
  return pd.post_term == PostTerm::bf16 ? op_round_bf16(q) : q;
}

// acc + c·r with the policy's mix-product rounding.
template <class T>
MHC_HD T add_mix_term(const PolicyDesc& pd, T acc, T c, T r) {
  return pd.mix_product == MixProduct::fused ? op_fma(c, r, acc) : add_product(acc, c, r);
}

template <class T, class V, class W = float>
MHC_HD T mix_sum(const PolicyDesc& pd, const W* c, const V* r, int H) {
  if (pd.order != TermOrder::mix_pairwise) {
    T m = zero_accumulator<T>();
    for (int k = 0; k < H; ++k) m = add_mix_term(pd, m, T(coefficient(pd, c[k])), T(r[k]));
    return m;
  }
  // Adjacent pairs first (the second product of a pair fused when the policy contracts), then a tree.
  T v[16];  // H <= kMaxStreams (16)
  int n = 0;
  for (int k = 0; k < H; k += 2) {
    T a = op_mul(T(coefficient(pd, c[k])), T(r[k]));
    if (k + 1 < H) a = add_mix_term(pd, a, T(coefficient(pd, c[k + 1])), T(r[k + 1]));
    v[n++] = a;
  }
  while (n > 1) {
    int h = 0;
    for (int i = 0; i + 1 < n; i += 2) v[h++] = op_add(v[i], v[i + 1]);
    if (n % 2) v[h++] = v[n - 1];
    n = h;
  }
  return v[0];
}

// V is the type x and r arrive in: float, or already widened to double by a caller that reuses them (the
// widening is exact, so the result does not depend on V). W is the weights' type: float, or for T = double
// double weights prepared as coefficient() says.
template <class T, class V = float, class W = float>
MHC_HD T forward_value(const PolicyDesc& pd, W p_in, V x_in, const W* c, const V* r, int H) {
  const T p = T(coefficient(pd, p_in));
  const T x = T(x_in);
  if (pd.order == TermOrder::seeded) {
    T acc;
    int k0 = 0;
    if (pd.post_term == PostTerm::fused) {
      // The compiler fused p·x into the first addition: fma(p, x, RN(c0·r0)).
      acc = op_fma(p, x, op_mul(T(coefficient(pd, c[0])), T(r[0])));
      k0 = 1;
    } else {
      acc = post_term_value(pd, p, x);
    }
    for (int k = k0; k < H; ++k) acc = add_mix_term(pd, acc, T(coefficient(pd, c[k])), T(r[k]));
    return acc;
  }
  T m = mix_sum<T>(pd, c, r, H);
  if (pd.mix_rounding == MixRounding::bf16) m = op_round_bf16(m);
  if (pd.post_term == PostTerm::fused) return op_fma(p, x, m);
  return op_add(post_term_value(pd, p, x), m);
}

// The exact forward value: p·x + Σ c_k·r_k, each product exact in binary64.
MHC_HD ExactAccumulator forward_exact(float p, float x, const float* c, const float* r, int H) {
  ExactAccumulator acc;
  acc.add(mul_rn64(p, x));
  for (int k = 0; k < H; ++k) acc.add(mul_rn64(c[k], r[k]));
  return acc;
}

// The largest of m and |v[0..n)|.
template <class V>
MHC_HD float max_magnitude(const V* v, int n, float m = 0.0f) {
  for (int i = 0; i < n; ++i) m = std::fmax(m, std::fabs(float(v[i])));
  return m;
}

// RNb of the exact forward value when the cheap filter (numerics/exact_filter.hpp) proves it; false when
// the caller must take forward_exact. Only for callers that store the bf16 result alone. The factors come
// widened to binary64 by the caller: plain, or weights times 2^896 (once per token) and values by
// scaled_value (without a conversion instruction). `error` is exact_error of forward_error_weight (per token
// and output) and a bound on the values' magnitudes (per element, or per block of them).
MHC_HD double forward_error_weight(float p, const float* c, int H, bool scaled_values) {
  return exact_error_weight(max_magnitude(c, H, std::fabs(p)), H + 1, scaled_values);
}
// The filter's chain for one output (bounds() gives the interval's roundings, bf16() the answer).
MHC_HD ExactBf16Filter forward_exact_chain(double p, double x, const double* c, const double* r, int H) {
  ExactBf16Filter f;
  f.first(p, x);
  for (int k = 0; k < H; ++k) f.add(c[k], r[k]);
  return f;
}
MHC_HD bool forward_exact_bf16(double p, double x, const double* c, const double* r, int H, double error,
                               bf16_bits& out) {
  return forward_exact_chain(p, x, c, r, H).bf16(error, out);
}
// From binary32 values (the generic kernels): widens them (plain) and computes the bound itself.
MHC_HD bool forward_exact_bf16(float p, float x, const float* c, const float* r, int H, bf16_bits& out) {
  double cw[16], rw[16];  // H <= kMaxStreams (16)
  for (int k = 0; k < H; ++k) cw[k] = double(c[k]), rw[k] = double(r[k]);
  return forward_exact_bf16(double(p), double(x), cw, rw, H,
                            exact_error(forward_error_weight(p, c, H, false), max_magnitude(r, H, std::fabs(x))),
                            out);
}

// ---- Backward: sums over the H streams ----------------------------------------------------------------
// ∂x[d] = Σ_ho post[ho]·g[ho,d] (post path) and ∂residual[hi,d] = Σ_ho comb[hi,ho]·g[ho,d]; w[ho] is the
// weight row, g[ho] the gradient values at d. Sequential over ho.

template <class T, class V = float>
MHC_HD T stream_grad_value(const PolicyDesc& pd, const float* w, const V* g, int H, bool post_path) {
  const bool round_products = post_path && pd.grad_product == GradProduct::bf16;
  T acc = zero_accumulator<T>();
  for (int ho = 0; ho < H; ++ho) {
    T wv = T(coefficient(pd, w[ho]));
    T gv = T(g[ho]);
    if (round_products) acc = op_add(acc, op_round_bf16(op_mul(wv, gv)));
    else if (pd.grad_contract) acc = op_fma(wv, gv, acc);
    else acc = add_product(acc, wv, gv);
  }
  return acc;
}

MHC_HD ExactAccumulator stream_grad_exact(const float* w, const float* g, int H) {
  ExactAccumulator acc;
  for (int ho = 0; ho < H; ++ho) acc.add(mul_rn64(w[ho], g[ho]));
  return acc;
}

// The same filter for Σ_ho w[ho]·g[ho] (∂x, ∂residual), from plain binary64 factors (the backward's gradient
// values are widened for its dot products too); `error` from stream_error_weight (per token and row) and a
// bound on the gradient values' magnitudes (per element, or per block of them).
MHC_HD double stream_error_weight(const float* w, int H) { return exact_error_weight(max_magnitude(w, H), H, false); }
// w: binary32 weights, or the same widened to binary64 by the caller.
template <class W>
MHC_HD ExactBf16Filter stream_grad_exact_chain(const W* w, const double* g, int H) {
  ExactBf16Filter f;
  f.first(double(w[0]), g[0]);
  for (int ho = 1; ho < H; ++ho) f.add(double(w[ho]), g[ho]);
  return f;
}
template <class W>
MHC_HD bool stream_grad_exact_bf16(const W* w, const double* g, int H, double error, bf16_bits& out) {
  return stream_grad_exact_chain(w, g, H).bf16(error, out);
}
// From binary32 values (the generic kernels): widens them and computes the bound itself.
MHC_HD bool stream_grad_exact_bf16(const float* w, const float* g, int H, bf16_bits& out) {
  double gw[16];  // H <= kMaxStreams (16)
  for (int ho = 0; ho < H; ++ho) gw[ho] = double(g[ho]);
  return stream_grad_exact_bf16(w, gw, H, exact_error(stream_error_weight(w, H), max_magnitude(g, H)), out);
}

// ---- Backward: sums over D, in the canonical order (docs/policies.md) ------------------------------------
// ∂post[ho] = Σ_d g[ho,d]·x[d] (post path) and ∂comb[hi,ho] = Σ_d g[ho,d]·r[hi,d].
// Element d belongs to chunk d/8; chunk j is owned by lane j mod 32 (one 16-byte bf16 load per lane on
// the GPU). Each lane sums its elements in ascending d starting from +0 (zero_accumulator);
// the 32 lane partials are combined by a fixed halving tree: lane l += lane l+16, then +8, +4, +2, +1.

inline constexpr int kReduceLanes = 32;
inline constexpr int kReduceChunk = 8;

MHC_HD int reduce_lane_of(int64_t d) { return static_cast<int>((d / kReduceChunk) % kReduceLanes); }

// One step of a lane's partial sum: acc + a·b under the policy.
template <class T, class V = float>
MHC_HD T dot_step(const PolicyDesc& pd, T acc, V a, V b, bool post_path) {
  if (post_path && pd.grad_product == GradProduct::bf16) return op_add(acc, op_round_bf16(op_mul(T(a), T(b))));
  if (pd.grad_contract) return op_fma(T(a), T(b), acc);
  return add_product(acc, T(a), T(b));
}

// The halving tree over 32 lane partials (what a warp's shuffle-down reduction computes in lane 0).
template <class T>
MHC_HD T combine_lane_partials(T* partial) {
  for (int offset = kReduceLanes / 2; offset > 0; offset /= 2)
    for (int lane = 0; lane < offset; ++lane) partial[lane] = op_add(partial[lane], partial[lane + offset]);
  return partial[0];
}

// HF's parameters are bf16: their gradients are rounded to bf16 before being widened back.
template <class T>
MHC_HD T finish_param_grad(const PolicyDesc& pd, T sum) {
  return pd.param_grad_rounding == ParamGradRounding::bf16 ? op_round_bf16(sum) : sum;
}

}  // namespace mhc
