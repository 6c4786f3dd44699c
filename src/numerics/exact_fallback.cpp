#include "numerics/exact_fallback.hpp"

#include <cmath>
#include <limits>
#include <stdexcept>

#include <boost/multiprecision/cpp_bin_float.hpp>

#if MHCDIFF_HAVE_MPFR
#include <mpfr.h>
#endif

namespace mhc {
namespace {

// 2200 bits hold any partial sum of the operator's terms exactly: the terms span 2^-1074 (binary64
// subnormals, in case a caller passes them) up to 2^1024, and no more than 2^40 terms are summed.
using Wide = boost::multiprecision::number<
    boost::multiprecision::cpp_bin_float<2200, boost::multiprecision::digit_base_2>,
    boost::multiprecision::et_off>;

bool has_nonfinite(std::span<const double> terms, double& ieee) {
  bool any = false;
  for (double t : terms) {
    if (!std::isfinite(t)) {
      ieee = any ? ieee + t : t;
      any = true;
    }
  }
  return any;
}

double exact_zero(std::span<const double> terms) {
  for (double t : terms)
    if (!(t == 0.0 && std::signbit(t))) return 0.0;
  return terms.empty() ? 0.0 : -0.0;
}

bool is_odd(double d) { return (double_bits(d) & 1u) != 0; }

// Given the exact value v and a binary64 d within one ulp of it, both roundings of v.
ExactRounded round_wide(const Wide& v) {
  ExactRounded r;
  double d = v.convert_to<double>();
  Wide rest = v - Wide(d);
  if (rest == 0) {
    r.rn64 = r.ro64 = d;
    return r;
  }
  double toward = rest > 0 ? std::numeric_limits<double>::infinity() : -std::numeric_limits<double>::infinity();
  double next = std::nextafter(d, toward);
  // Step until v lies strictly between d and next (guards against an unfaithful conversion).
  while ((rest > 0 && Wide(next) <= v) || (rest < 0 && Wide(next) >= v)) {
    d = next;
    rest = v - Wide(d);
    if (rest == 0) {
      r.rn64 = r.ro64 = d;
      return r;
    }
    next = std::nextafter(d, toward);
  }
  Wide to_d = abs(rest);
  Wide to_next = abs(Wide(next) - v);
  if (to_d < to_next) r.rn64 = d;
  else if (to_next < to_d) r.rn64 = next;
  else r.rn64 = is_odd(d) ? next : d;
  r.ro64 = is_odd(d) ? d : next;
  return r;
}

#if MHCDIFF_HAVE_MPFR
ExactRounded exact_sum_mpfr(std::span<const double> terms) {
  mpfr_t acc;
  mpfr_init2(acc, 2200);
  mpfr_set_zero(acc, 1);
  for (double t : terms) mpfr_add_d(acc, acc, t, MPFR_RNDN);  // exact at this precision
  ExactRounded r;
  if (mpfr_zero_p(acc)) {
    r.rn64 = r.ro64 = exact_zero(terms);
  } else {
    r.rn64 = mpfr_get_d(acc, MPFR_RNDN);
    double toward_zero = mpfr_get_d(acc, MPFR_RNDZ);
    r.ro64 = toward_zero;
    if (mpfr_cmp_d(acc, toward_zero) != 0 && !is_odd(toward_zero))
      r.ro64 = std::nextafter(toward_zero, mpfr_sgn(acc) > 0 ? std::numeric_limits<double>::infinity()
                                                             : -std::numeric_limits<double>::infinity());
  }
  mpfr_clear(acc);
  return r;
}
#endif

}  // namespace

bool mpfr_available() { return MHCDIFF_HAVE_MPFR != 0; }

ExactRounded exact_sum_multiprecision(std::span<const double> terms, ExactBackend backend) {
  ExactRounded r;
  double ieee = 0.0;
  if (has_nonfinite(terms, ieee)) {
    r.rn64 = r.ro64 = ieee;
    return r;
  }
  if (backend == ExactBackend::mpfr) {
#if MHCDIFF_HAVE_MPFR
    return exact_sum_mpfr(terms);
#else
    throw std::invalid_argument("this mhcdiff was built without MPFR; rebuild with -DMHCDIFF_MPFR=ON or use the boost backend");
#endif
  }
  Wide acc = 0;
  for (double t : terms) acc += Wide(t);
  if (acc == 0) {
    r.rn64 = r.ro64 = exact_zero(terms);
    return r;
  }
  return round_wide(acc);
}

}  // namespace mhc
