#pragma once
// Metrics against the exact truth (SPEC §5): error in units of the truth's ULP, elements not correctly
// rounded, and the cancellation census. Streaming, like ComparisonAccumulator.
//
// The truth of an element is given twice: `truth_rounded`, the exact value correctly rounded to the tensor's
// own format (what the `exact` policy stores), and `truth64`, RN64 of the exact value (out_f64). A value is
// correctly rounded when it equals truth_rounded (as a value: -0 and +0 are both the rounding of an exact 0).
// truth64 stands in for the real number t: its relative error (2^-53) is far below the 2^-8 / 2^-24 ULP
// this measures.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <initializer_list>

#include "kernels/tensors.hpp"
#include "metrics/comparison.hpp"

namespace mhc::metrics {

struct TruthStats {
  Format format = Format::bf16;
  int64_t elements = 0;
  int64_t not_correctly_rounded = 0;
  Located max_error_ulp;        // max |y − t| / ulp(t) (infinite where y is non-finite and t is not)
  double mean_error_ulp = 0.0;  // over elements with a finite error
  Located max_abs_error;        // max |y − t| over finite pairs
  double rel_l2 = 0.0;          // ‖y − t‖₂ / ‖t‖₂ (inf with a non-finite disagreement)
  double normalized_max = 0.0;  // max|y − t| / max|t|
  int64_t nonfinite_disagreements = 0;
};

class TruthAccumulator {
 public:
  explicit TruthAccumulator(Format format);
  // truth64 may be null: the truth's rounded value then stands in for it (a file's exact group without *_f64).
  void add(const bf16_bits* y, const bf16_bits* truth_rounded, const double* truth64, int64_t n, int64_t first);
  void add(const float* y, const float* truth_rounded, const double* truth64, int64_t n, int64_t first);
  TruthStats finish() const;

 private:
  template <class T>
  void add_run(const T* y, const T* truth_rounded, const double* truth64, int64_t n, int64_t first);

  TruthStats s_;
  CompensatedSum error_ulp_sum_;
  ScaledSumOfSquares sum_sq_error_, sum_sq_truth_;
  int64_t finite_errors_ = 0;
  double max_abs_truth_ = 0.0;
};

// ---- Cancellation census ------------------------------------------------------------------------------
// κ = (|p·x| + Σ_k |c_k·r_k|) / |t| for out[s,ho,d]. A case is t ≠ 0 with κ ≥ K. Each case of a candidate y is
// exactly one of: flushed (y = ±0), sign_flipped (y ≠ 0, not NaN, with the other sign; -inf for t > 0 too),
// survived (same sign, |y − t| ≤ |t|/2: an exact tie survives), distorted (the rest: NaN, too far off, or an
// infinity of the right sign). Ghosts: t = 0 exactly
// (t == 0 in binary64 iff the exact sum is 0: no product of the operator underflows) but y ≠ 0.

inline constexpr double kDefaultCensusThreshold = 256.0;

struct CensusStats {
  double threshold = kDefaultCensusThreshold;
  int64_t elements = 0;
  int64_t cases = 0;
  int64_t survived = 0;
  int64_t flushed = 0;
  int64_t sign_flipped = 0;
  int64_t distorted = 0;
  int64_t exact_zeros = 0;
  int64_t ghosts = 0;
  double max_kappa = 0.0;  // over t ≠ 0
  int64_t max_kappa_index = -1;
  // The first element of each bad kind (-1: none), so a report can say where to look (`mhcdiff explain`).
  int64_t first_flushed = -1, first_sign_flipped = -1, first_distorted = -1, first_ghost = -1;

  // The lowest index among all lost cases (flushed, sign-flipped or distorted), -1 when every case survived.
  int64_t first_lost() const {
    int64_t first = -1;
    for (int64_t i : {first_flushed, first_sign_flipped, first_distorted})
      if (i >= 0 && (first < 0 || i < first)) first = i;
    return first;
  }

  // survived / cases; 1 when there are no cases (nothing could fail to survive).
  double survivor_fraction() const { return cases ? static_cast<double>(survived) / cases : 1.0; }
};

class CensusAccumulator {
 public:
  explicit CensusAccumulator(double threshold = kDefaultCensusThreshold);
  // y: the candidate's stored values; truth64: RN64 of the exact values; magnitude: |p·x| + Σ|c_k·r_k|.
  void add(const bf16_bits* y, const double* truth64, const double* magnitude, int64_t n, int64_t first);
  CensusStats finish() const { return s_; }

 private:
  CensusStats s_;
};

// |p·x| + Σ_k |c_k·r_k| for every out[s,ho,d] of a slab ([S,H,D] row-major). Each product is exact in binary64;
// the sum of H+1 non-negative terms is within (H+1)·2^-53 relative, ample for κ.
void out_term_magnitudes(const InputsView& in, double* dst);

// κ of an element from its term magnitudes and RN64 of its exact value t ≠ 0 (finite): magnitude / |t| in binary64,
// taken as at least 1, which the exact κ is by the triangle inequality. The rounded sum of magnitudes can fall just
// below |t| where every term has one sign (κ = 0.9999999999999998 was printed, and a threshold of 1 missed it).
inline double cancellation_kappa(double magnitude, double t) {
  const double kappa = magnitude / std::fabs(t);
  return kappa < 1.0 ? 1.0 : kappa;  // a NaN stays NaN
}

}  // namespace mhc::metrics
