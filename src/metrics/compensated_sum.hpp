#pragma once
// Neumaier's compensated sum (improved Kahan–Babuška): the norms of SPEC §5 must be accumulated "in fp64 or
// better"; a plain binary64 sum of 16.8 M squares loses up to ~24 bits, this one keeps the error near one
// rounding of the final result. Hand-written because it is eight lines and the order must stay the
// streaming order (a library reduction could reorder and change the last bits run to run).
#include <cmath>

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

}  // namespace mhc::metrics
