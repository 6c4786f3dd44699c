#pragma once
// The per-tensor comparison of a candidate against a reference (SPEC §5), accumulated in one streaming pass
// over slabs: feed consecutive runs of elements with add(), read the answer with finish(). Bounded memory:
// the accumulator holds counters, a few located maxima and the top-k heap, never the tensors.
//
// Conventions (docs/metrics.md):
//   - mismatch = the bit patterns differ; +0 vs -0 is a mismatch of 0 ULP; NaN vs NaN (any payloads) is equal.
//   - a pair with a non-finite side that is not equal (NaN vs number, inf vs finite, +inf vs -inf) is a
//     "non-finite mismatch": infinitely many ULP apart, and it makes rel_l2 / normalized_max infinite.
//   - abs / rel / normwise metrics use the finite pairs; rel only where the reference is non-zero.
#include <array>
#include <cstdint>
#include <limits>
#include <optional>
#include <vector>

#include "metrics/compensated_sum.hpp"
#include "metrics/ulp.hpp"

namespace mhc::metrics {

inline constexpr uint64_t kInfiniteUlp = std::numeric_limits<uint64_t>::max();
inline constexpr int kUlpBins = 8;

// Histogram bins 0, 1, 2, 3-4, 5-8, 9-16, 17-256, >256 (an infinite distance falls in >256).
int ulp_bin(uint64_t ulp);
const char* ulp_bin_label(int bin);

// A maximum and the first flat index where it was reached (-1: nothing qualified).
struct Located {
  double value = 0.0;
  int64_t index = -1;
};

struct Offender {
  int64_t index = 0;
  double candidate = 0.0;
  double reference = 0.0;
  double abs_diff = 0.0;  // inf for a non-finite mismatch
  uint64_t ulp = 0;       // kInfiniteUlp for a non-finite mismatch
};

// Orders offenders worst first: more ULP, then larger |Δ|, then the lower index (deterministic).
bool worse(const Offender& a, const Offender& b);

// torch.testing.assert_close's criterion |C - R| <= atol + rtol·|R| (non-finite pairs must be equal).
struct Tolerance {
  double rtol = 0.0;
  double atol = 0.0;
};

struct NonFiniteCounts {
  int64_t nan = 0;
  int64_t inf = 0;
};

struct ComparisonStats {
  Format format = Format::bf16;
  int64_t elements = 0;
  int64_t mismatched = 0;              // bit patterns differ (NaN vs NaN excepted)
  int64_t signed_zero_mismatches = 0;  // +0 vs -0: mismatched, 0 ULP
  int64_t nonfinite_mismatches = 0;
  std::array<int64_t, kUlpBins> ulp_histogram{};
  uint64_t max_ulp = 0;
  int64_t max_ulp_index = -1;
  Located max_abs;  // max |C - R| over finite mismatched pairs (index -1 and 0 when none)
  // max |C - R| / |R| over finite pairs with R != 0: nullopt when there is no such pair; like max_abs, 0 with
  // index -1 when none of them differs (identical tensors).
  std::optional<Located> max_rel;
  double sum_sq_diff = 0.0;
  double sum_sq_ref = 0.0;
  double max_abs_ref = 0.0;  // over finite reference values
  double rel_l2 = 0.0;          // ‖C−R‖₂/‖R‖₂ (0/0 = 0, x/0 = inf; inf with any non-finite mismatch)
  double normalized_max = 0.0;  // max|C−R| / max|R|, same conventions
  NonFiniteCounts candidate_nonfinite, reference_nonfinite;
  std::vector<Offender> worst;  // top-k, worst first

  std::optional<Tolerance> tolerance;  // set when the accumulator checked one
  int64_t tolerance_violations = 0;
  int64_t first_violation_index = -1;

  double mismatch_fraction() const { return elements ? static_cast<double>(mismatched) / elements : 0.0; }
};

class ComparisonAccumulator {
 public:
  explicit ComparisonAccumulator(Format format, int top_k = 10, std::optional<Tolerance> tolerance = {});

  // Elements [first_index, first_index + n) of both tensors, in row-major order. Calls must cover the tensor
  // in increasing index order for the "first index" of each maximum to be the first in the tensor.
  void add(const bf16_bits* candidate, const bf16_bits* reference, int64_t n, int64_t first_index);
  void add(const float* candidate, const float* reference, int64_t n, int64_t first_index);
  void add(const double* candidate, const double* reference, int64_t n, int64_t first_index);

  ComparisonStats finish() const;

 private:
  template <class T>
  void add_run(const T* candidate, const T* reference, int64_t n, int64_t first_index);
  void offer(const Offender& o);

  ComparisonStats s_;
  int top_k_;
  ScaledSumOfSquares sum_sq_diff_, sum_sq_ref_;
  // max |C−R|/2 over finite pairs whose difference exceeds binary64 (only binary64 values beyond ±2^1023 can):
  // max_abs is then inf, its correct rounding, and normalized_max comes from this.
  double max_half_abs_beyond_range_ = 0.0;
  std::vector<Offender> heap_;  // min-heap on worse(): the least bad of the kept offenders on top
};

}  // namespace mhc::metrics
