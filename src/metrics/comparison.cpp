#include "metrics/comparison.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace mhc::metrics {

const char* format_name(Format f) {
  switch (f) {
    case Format::bf16: return "bf16";
    case Format::f32: return "f32";
    case Format::f64: return "f64";
  }
  return "?";
}

int ulp_bin(uint64_t ulp) {
  if (ulp <= 2) return static_cast<int>(ulp);
  if (ulp <= 4) return 3;
  if (ulp <= 8) return 4;
  if (ulp <= 16) return 5;
  if (ulp <= 256) return 6;
  return 7;
}

const char* ulp_bin_label(int bin) {
  static const char* const labels[kUlpBins] = {"0", "1", "2", "3-4", "5-8", "9-16", "17-256", ">256"};
  return bin >= 0 && bin < kUlpBins ? labels[bin] : "?";
}

bool worse(const Offender& a, const Offender& b) {
  if (a.ulp != b.ulp) return a.ulp > b.ulp;
  if (a.abs_diff != b.abs_diff) return a.abs_diff > b.abs_diff;
  return a.index < b.index;
}

namespace {

// The heap keeps the least bad kept offender on top, so "is this one worse than the least bad" is O(1).
bool heap_order(const Offender& a, const Offender& b) { return worse(a, b); }

// The ratio, with 0/0 = 0 and x/0 = inf (SPEC §5's normwise metrics of identical all-zero tensors are 0).
double safe_ratio(double num, double den) {
  if (num == 0.0) return 0.0;
  if (den == 0.0) return std::numeric_limits<double>::infinity();
  return num / den;
}

}  // namespace

ComparisonAccumulator::ComparisonAccumulator(Format format, int top_k, std::optional<Tolerance> tolerance)
    : top_k_(std::max(0, top_k)) {
  s_.format = format;
  s_.tolerance = tolerance;
}

void ComparisonAccumulator::offer(const Offender& o) {
  if (top_k_ == 0) return;
  if (static_cast<int>(heap_.size()) < top_k_) {
    heap_.push_back(o);
    std::push_heap(heap_.begin(), heap_.end(), heap_order);
  } else if (worse(o, heap_.front())) {
    std::pop_heap(heap_.begin(), heap_.end(), heap_order);
    heap_.back() = o;
    std::push_heap(heap_.begin(), heap_.end(), heap_order);
  }
}

template <class T>
void ComparisonAccumulator::add_run(const T* cand, const T* ref, int64_t n, int64_t first) {
  if (format_of<T>() != s_.format)
    throw std::logic_error("ComparisonAccumulator fed a different element format than it was made for");
  const int width = params(s_.format).bits;
  const double inf = std::numeric_limits<double>::infinity();
  for (int64_t i = 0; i < n; ++i) {
    const Element c = decode(cand, i), r = decode(ref, i);
    const int64_t index = first + i;
    ++s_.elements;
    const bool c_nan = std::isnan(c.value), r_nan = std::isnan(r.value);
    const bool c_inf = std::isinf(c.value), r_inf = std::isinf(r.value);
    s_.candidate_nonfinite.nan += c_nan;
    s_.candidate_nonfinite.inf += c_inf;
    s_.reference_nonfinite.nan += r_nan;
    s_.reference_nonfinite.inf += r_inf;
    if (!r_nan && !r_inf) {
      sum_sq_ref_.add(r.value);
      s_.max_abs_ref = std::max(s_.max_abs_ref, std::fabs(r.value));
    }
    if ((c_nan && r_nan) || c.bits == r.bits) {
      ++s_.ulp_histogram[0];
      if (!s_.max_rel && !r_nan && !r_inf && r.value != 0.0) s_.max_rel = Located{};  // defined, and 0 so far
      continue;
    }
    ++s_.mismatched;
    if (c_nan || r_nan || c_inf || r_inf) {
      ++s_.nonfinite_mismatches;
      ++s_.ulp_histogram[kUlpBins - 1];
      if (s_.max_ulp != kInfiniteUlp) {
        s_.max_ulp = kInfiniteUlp;
        s_.max_ulp_index = index;
      }
      if (s_.tolerance && s_.tolerance_violations++ == 0) s_.first_violation_index = index;
      offer({index, c.value, r.value, inf, kInfiniteUlp});
      continue;
    }
    const uint64_t ulp = ulp_distance(c.bits, r.bits, width);
    if (ulp == 0) ++s_.signed_zero_mismatches;
    ++s_.ulp_histogram[ulp_bin(ulp)];
    if (s_.max_ulp_index < 0 || ulp > s_.max_ulp) {
      s_.max_ulp = ulp;
      s_.max_ulp_index = index;
    }
    // |C - R| of two bf16/f32 values is exact in binary64 unless their exponents are far apart, where the
    // rounding is far below anything a report shows. Two binary64 values can differ by more than the largest
    // double (+max vs −max): |C − R| is then inf, its correct rounding, and the ratios use |C − R|/2.
    const double diff = std::fabs(c.value - r.value);
    const bool in_range = std::isfinite(diff);
    const double half = in_range ? 0.0 : std::fabs(0.5 * c.value - 0.5 * r.value);
    if (in_range) {
      sum_sq_diff_.add(diff);
    } else {
      sum_sq_diff_.add(half, 1);
      max_half_abs_beyond_range_ = std::max(max_half_abs_beyond_range_, half);
    }
    if (s_.max_abs.index < 0 || diff > s_.max_abs.value) s_.max_abs = {diff, index};
    if (r.value != 0.0) {
      const double rel = in_range ? diff / std::fabs(r.value) : std::ldexp(half / std::fabs(r.value), 1);
      if (!s_.max_rel || s_.max_rel->index < 0 || rel > s_.max_rel->value) s_.max_rel = Located{rel, index};
    }
    // Written as "not within" so that a NaN bound (a NaN tolerance, or rtol = inf against R = 0) violates. Beyond
    // binary64's range both sides are halved (exact at that scale): as inf <= inf, −max against +max used to pass
    // rtol = 1.5. A bound that overflows only when halved does exceed |C − R|/2, so inf there is right.
    if (s_.tolerance) {
      const Tolerance& t = *s_.tolerance;
      const bool within = in_range ? diff <= t.atol + t.rtol * std::fabs(r.value)
                                   : half <= 0.5 * t.atol + (0.5 * t.rtol) * std::fabs(r.value);
      if (!within && s_.tolerance_violations++ == 0) s_.first_violation_index = index;
    }
    offer({index, c.value, r.value, diff, ulp});
  }
}

void ComparisonAccumulator::add(const bf16_bits* c, const bf16_bits* r, int64_t n, int64_t first) {
  add_run(c, r, n, first);
}
void ComparisonAccumulator::add(const float* c, const float* r, int64_t n, int64_t first) { add_run(c, r, n, first); }
void ComparisonAccumulator::add(const double* c, const double* r, int64_t n, int64_t first) {
  add_run(c, r, n, first);
}

ComparisonStats ComparisonAccumulator::finish() const {
  ComparisonStats s = s_;
  s.sum_sq_diff = sum_sq_diff_.value();
  s.sum_sq_ref = sum_sq_ref_.value();
  const double inf = std::numeric_limits<double>::infinity();
  if (s.nonfinite_mismatches > 0) {
    s.rel_l2 = inf;
    s.normalized_max = inf;
  } else {
    s.rel_l2 = ScaledSumOfSquares::norm_ratio(sum_sq_diff_, sum_sq_ref_);
    s.normalized_max = std::isinf(s.max_abs.value)
                           ? std::ldexp(max_half_abs_beyond_range_ / s.max_abs_ref, 1)
                           : safe_ratio(s.max_abs.index >= 0 ? s.max_abs.value : 0.0, s.max_abs_ref);
  }
  s.worst = heap_;
  std::sort(s.worst.begin(), s.worst.end(), worse);
  return s;
}

}  // namespace mhc::metrics
