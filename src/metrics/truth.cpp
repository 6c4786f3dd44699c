#include "metrics/truth.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>

namespace mhc::metrics {

namespace {

double ratio_or_inf(double num, double den) {
  if (num == 0.0) return 0.0;
  if (den == 0.0) return std::numeric_limits<double>::infinity();
  return num / den;
}

}  // namespace

TruthAccumulator::TruthAccumulator(Format format) {
  if (format == Format::f64) throw std::logic_error("truth metrics are defined for bf16 and f32 tensors only");
  s_.format = format;
}

template <class T>
void TruthAccumulator::add_run(const T* y_in, const T* truth_rounded, const double* truth64, int64_t n,
                               int64_t first) {
  if (format_of<T>() != s_.format)
    throw std::logic_error("TruthAccumulator fed a different element format than it was made for");
  const double inf = std::numeric_limits<double>::infinity();
  for (int64_t i = 0; i < n; ++i) {
    const int64_t index = first + i;
    const double y = decode(y_in, i).value;
    const double tr = decode(truth_rounded, i).value;
    const double t = truth64 ? truth64[i] : tr;
    ++s_.elements;
    // Value equality: both zeros are the correct rounding of an exact zero; NaN is correct for a NaN truth
    // (inputs holding NaN or inf make the truth non-finite).
    const bool correct = (y == tr) || (std::isnan(y) && std::isnan(tr));
    if (!correct) ++s_.not_correctly_rounded;
    double err_ulp;
    // tr too: a finite t that rounds to ±inf in the dtype makes that infinity the correct result and a finite y
    // infinitely far (ulp_of, capped at the top binade, gave it a finite error).
    if (!std::isfinite(t) || !std::isfinite(tr) || !std::isfinite(y)) {
      if (correct) continue;  // the same infinity or NaN: no error to measure
      ++s_.nonfinite_disagreements;
      err_ulp = inf;
    } else {
      const double err = std::fabs(y - t);
      err_ulp = err / ulp_of(t, s_.format);
      error_ulp_sum_.add(err_ulp);
      ++finite_errors_;
      sum_sq_error_.add(err);
      sum_sq_truth_.add(t);
      max_abs_truth_ = std::max(max_abs_truth_, std::fabs(t));
      if (s_.max_abs_error.index < 0 || err > s_.max_abs_error.value) s_.max_abs_error = {err, index};
    }
    if (s_.max_error_ulp.index < 0 || err_ulp > s_.max_error_ulp.value) s_.max_error_ulp = {err_ulp, index};
  }
}

void TruthAccumulator::add(const bf16_bits* y, const bf16_bits* tr, const double* t64, int64_t n, int64_t first) {
  add_run(y, tr, t64, n, first);
}
void TruthAccumulator::add(const float* y, const float* tr, const double* t64, int64_t n, int64_t first) {
  add_run(y, tr, t64, n, first);
}

TruthStats TruthAccumulator::finish() const {
  TruthStats s = s_;
  s.mean_error_ulp = finite_errors_ ? error_ulp_sum_.value() / static_cast<double>(finite_errors_) : 0.0;
  if (s.nonfinite_disagreements > 0) {
    s.rel_l2 = s.normalized_max = std::numeric_limits<double>::infinity();
  } else {
    s.rel_l2 = ScaledSumOfSquares::norm_ratio(sum_sq_error_, sum_sq_truth_);
    s.normalized_max = ratio_or_inf(s.max_abs_error.index >= 0 ? s.max_abs_error.value : 0.0, max_abs_truth_);
  }
  return s;
}

CensusAccumulator::CensusAccumulator(double threshold) { s_.threshold = threshold; }

void CensusAccumulator::add(const bf16_bits* y_in, const double* truth64, const double* magnitude, int64_t n,
                            int64_t first) {
  for (int64_t i = 0; i < n; ++i) {
    const int64_t index = first + i;
    const double y = static_cast<double>(bf16_to_float(y_in[i]));
    const double t = truth64[i];
    ++s_.elements;
    if (!std::isfinite(t)) continue;  // non-finite inputs: no cancellation to speak of
    if (t == 0.0) {
      ++s_.exact_zeros;
      if (y != 0.0 || std::isnan(y)) {
        if (s_.ghosts++ == 0) s_.first_ghost = index;
      }
      continue;
    }
    const double kappa = cancellation_kappa(magnitude[i], t);
    if (s_.max_kappa_index < 0 || kappa > s_.max_kappa) {
      s_.max_kappa = kappa;
      s_.max_kappa_index = index;
    }
    if (!(kappa >= s_.threshold)) continue;
    ++s_.cases;
    if (y == 0.0) {
      if (s_.flushed++ == 0) s_.first_flushed = index;
    } else if (!std::isnan(y) && std::signbit(y) != std::signbit(t)) {
      if (s_.sign_flipped++ == 0) s_.first_sign_flipped = index;
    } else if (!std::isnan(y) && std::fabs(y - t) <= std::fabs(t) / 2) {
      ++s_.survived;
    } else {
      if (s_.distorted++ == 0) s_.first_distorted = index;
    }
  }
}

void out_term_magnitudes(const InputsView& in, double* dst) {
  const int H = in.shape.H;
  const int64_t D = in.shape.D;
  for (int64_t s = 0; s < in.shape.S; ++s) {
    const float* post = in.post + s * H;
    const float* comb = in.comb + s * H * H;  // comb[s, k, ho]
    const bf16_bits* x = in.x + s * D;
    const bf16_bits* res = in.residual + s * H * D;
    for (int ho = 0; ho < H; ++ho) {
      double* row = dst + (s * H + ho) * D;
      const double p = post[ho];
      for (int64_t d = 0; d < D; ++d) row[d] = std::fabs(p * bf16_to_float(x[d]));
      for (int k = 0; k < H; ++k) {
        const double c = comb[k * H + ho];
        const bf16_bits* r = res + k * D;
        for (int64_t d = 0; d < D; ++d) row[d] += std::fabs(c * bf16_to_float(r[d]));
      }
    }
  }
}

}  // namespace mhc::metrics
