#pragma once
// Deterministic random operator inputs for the core tests (independent of src/gen, which has its own tests).
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "kernels/tensors.hpp"
#include "numerics/bf16.hpp"

namespace mhc::testing {

// randn-style inputs: x, residual, grad_out ~ N(0,1) as bf16; post ~ U[0,2); comb ~ U[0,1).
// With `wide`, magnitudes are spread over many binades so that cancellation and tiny terms appear.
inline Inputs random_inputs(Shape shape, uint64_t seed, bool wide = false, bool with_grad = true) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> unit(0.0f, 1.0f);
  std::uniform_int_distribution<int> spread(-30, 30);
  auto bf16_normal = [&] {
    float v = normal(rng);
    if (wide) v = std::ldexp(v, spread(rng));
    return round_to_bf16_rne(v);
  };
  Inputs in;
  in.shape = shape;
  const size_t S = size_t(shape.S), H = size_t(shape.H), D = size_t(shape.D);
  in.x.resize(S * D);
  in.residual.resize(S * H * D);
  for (auto& v : in.x) v = bf16_normal();
  for (auto& v : in.residual) v = bf16_normal();
  in.post.resize(S * H);
  in.comb.resize(S * H * H);
  for (auto& v : in.post) v = 2.0f * unit(rng);
  for (auto& v : in.comb) v = wide ? std::ldexp(unit(rng), spread(rng)) : unit(rng);
  if (with_grad) {
    in.grad_out.resize(S * H * D);
    for (auto& v : in.grad_out) v = bf16_normal();
  }
  return in;
}

// One output element's operands for a hand-written reference formula: post, x, and the comb column and residual
// values of its output stream, as floats.
struct Element {
  float p, x;
  float c[kMaxStreams], r[kMaxStreams];
};

// out[s, ho, d] = RNb(f(element, H, d)) over every element, comb read as [s, src, dst] (or transposed): a reference
// written independently of src/ for tests that check what a formula must give.
template <class Formula>
std::vector<bf16_bits> reference(const Inputs& in, bool transposed, Formula f) {
  const int H = in.shape.H;
  const int64_t D = in.shape.D;
  std::vector<bf16_bits> out;
  for (int64_t s = 0; s < in.shape.S; ++s)
    for (int ho = 0; ho < H; ++ho)
      for (int64_t d = 0; d < D; ++d) {
        Element e;
        e.p = in.post[size_t(s * H + ho)];
        e.x = bf16_to_float(in.x[size_t(s * D + d)]);
        for (int k = 0; k < H; ++k) {
          e.c[k] = transposed ? in.comb[size_t((s * H + ho) * H + k)] : in.comb[size_t((s * H + k) * H + ho)];
          e.r[k] = bf16_to_float(in.residual[size_t((s * H + k) * D + d)]);
        }
        out.push_back(round_to_bf16_rne(f(e, H, d)));
      }
  return out;
}

}  // namespace mhc::testing
