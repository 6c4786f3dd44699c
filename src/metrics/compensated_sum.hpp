#pragma once
// Neumaier's compensated sum (improved Kahan–Babuška): the norms of SPEC §5 must be accumulated "in fp64 or
// better"; a plain binary64 sum of 16.8 M squares loses up to ~24 bits, this one keeps the error near one
// rounding of the final result. Hand-written because it is eight lines and the order must stay the
// streaming order (a library reduction could reorder and change the last bits run to run).
// ScaledSumOfSquares builds the norms of SPEC §5 on it.
#include <cmath>
#include <limits>

namespace mhc::metrics {

struct CompensatedSum {
  double sum = 0.0;
  double compensation = 0.0;

  void add(double v) {
    const double t = sum + v;
    if (std::fabs(sum) >= std::fabs(v)) compensation += (sum - t) + v;
    else compensation += (v - t) + sum;
    sum = t;
  }
  double value() const { return sum + compensation; }
};

// Σv² kept as (Σ(v·2^−scale)²)·2^(2·scale), scale being the binade of the largest |v| so far, so that no square
// overflows or underflows: binary64 tensors (*_f64 twins, user dumps) can hold values whose squares leave
// binary64's range (|v| above 2^511 or below 2^−537), and ‖C−R‖₂/‖R‖₂ must still be an ordinary ratio (the
// dnrm2 idea, with a power-of-two scale). Every step only moves powers of two, so for bf16/fp32 values, whose
// squares fit easily, the result is bit for bit that of the plain compensated sum of squares.
class ScaledSumOfSquares {
 public:
  // Adds (v·2^extra_exponent)² for a finite v (extra_exponent carries a factor a caller took out of v to keep
  // it finite, e.g. a difference computed halved).
  void add(double v, int extra_exponent = 0) {
    if (v == 0.0) return;
    const int e = std::ilogb(v) + extra_exponent;
    if (empty_ || e > scale_) {
      if (!empty_) {  // move the sum to the new scale: a power of two, exact unless a tiny term goes subnormal
        const int shift = 2 * (scale_ - e);
        sum_.sum = std::ldexp(sum_.sum, shift);
        sum_.compensation = std::ldexp(sum_.compensation, shift);
      }
      scale_ = e;
      empty_ = false;
    }
    const double s = std::ldexp(v, extra_exponent - scale_);  // |s| < 2
    sum_.add(s * s);
  }

  // √(Σv²) / √(Σw²) of two sums, with 0/0 = 0 and x/0 = inf (the conventions of the normwise metrics).
  static double norm_ratio(const ScaledSumOfSquares& num, const ScaledSumOfSquares& den) {
    if (num.empty_) return 0.0;
    if (den.empty_) return std::numeric_limits<double>::infinity();
    return std::ldexp(std::sqrt(num.sum_.value()) / std::sqrt(den.sum_.value()), num.scale_ - den.scale_);
  }

  // Σv² itself (inf when it exceeds binary64).
  double value() const { return empty_ ? 0.0 : std::ldexp(sum_.value(), 2 * scale_); }

 private:
  CompensatedSum sum_;
  int scale_ = 0;
  bool empty_ = true;
};

}  // namespace mhc::metrics
