#pragma once
// Multiprecision fallback for sums the fast path (exact_sum.hpp) cannot certify. Host only.
#include <span>
#include <string_view>

#include "numerics/exact_sum.hpp"

namespace mhc {

enum class ExactBackend { boost, mpfr };

// True when this build has MPFR (CMake option MHCDIFF_MPFR).
bool mpfr_available();

// The exact sum of binary64 terms, correctly rounded (rn64) and rounded to odd (ro64), computed in a
// multiprecision float wide enough that every addition is exact. Throws std::invalid_argument when
// the mpfr backend is asked for in a build without MPFR.
ExactRounded exact_sum_multiprecision(std::span<const double> terms, ExactBackend backend = ExactBackend::boost);

}  // namespace mhc
