#pragma once
// The operator's tensors (SPEC §1) for a slab of S tokens, contiguous and row-major.
#include <cstdint>
#include <vector>

#include "numerics/bf16.hpp"

namespace mhc {

struct Shape {
  int64_t S = 0;  // tokens (leading batch dims flattened)
  int H = 0;      // residual streams, 1..16
  int64_t D = 0;  // hidden size

  friend bool operator==(const Shape&, const Shape&) = default;
};

inline constexpr int kMaxStreams = 16;

// Read-only view of the inputs; comb is in the canonical src,dst orientation (comb[s, src, dst]).
struct InputsView {
  Shape shape;
  const bf16_bits* x = nullptr;         // [S, D]
  const bf16_bits* residual = nullptr;  // [S, H, D]
  const float* post = nullptr;          // [S, H]
  const float* comb = nullptr;          // [S, H, H]
  const bf16_bits* grad_out = nullptr;  // [S, H, D]; null when no backward is asked for
};

// Owning inputs.
struct Inputs {
  Shape shape;
  std::vector<bf16_bits> x, residual, grad_out;
  std::vector<float> post, comb;

  bool has_grad() const { return !grad_out.empty(); }
  InputsView view() const {
    return {shape, x.data(), residual.data(), post.data(), comb.data(), has_grad() ? grad_out.data() : nullptr};
  }
};

// Where a policy's results go; *_f64 pointers are optional (null: not stored).
struct ForwardOutputs {
  bf16_bits* out = nullptr;  // [S, H, D]
  double* out_f64 = nullptr;
};

struct BackwardOutputs {
  bf16_bits* grad_x = nullptr;         // [S, D]
  bf16_bits* grad_residual = nullptr;  // [S, H, D]
  float* grad_post = nullptr;          // [S, H]
  float* grad_comb = nullptr;          // [S, H, H] (src, dst)
  double* grad_x_f64 = nullptr;
  double* grad_residual_f64 = nullptr;
  double* grad_post_f64 = nullptr;
  double* grad_comb_f64 = nullptr;
};

// Owning results of one policy.
struct PolicyResult {
  std::vector<bf16_bits> out, grad_x, grad_residual;
  std::vector<float> grad_post, grad_comb;
  std::vector<double> out_f64, grad_x_f64, grad_residual_f64, grad_post_f64, grad_comb_f64;
};

// Counters a run reports (SPEC §2: how many exact elements needed the multiprecision fallback).
struct RunStats {
  int64_t exact_elements = 0;
  int64_t fallback_elements = 0;

  RunStats& operator+=(const RunStats& o) {
    exact_elements += o.exact_elements;
    fallback_elements += o.fallback_elements;
    return *this;
  }
};

}  // namespace mhc
