#pragma once
// IEEE binary32/binary64 operations with the rounding written out, so no compiler may contract or
// reassociate them. On the GPU the *_rn intrinsics are never fused by nvcc; on the CPU the library is
// compiled with -ffp-contract=off, and fused steps use fma explicitly.
#include <cmath>
#include <cstdint>
#include <cstring>

#include "numerics/host_device.hpp"

namespace mhc {

MHC_HD float mul_rn32(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}

MHC_HD float add_rn32(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}

// fma32(a,b,c) = RN32(a*b + c), one rounding.
MHC_HD float fma_rn32(float a, float b, float c) {
#if defined(__CUDA_ARCH__)
  return __fmaf_rn(a, b, c);
#else
  return std::fma(a, b, c);
#endif
}

// RN64(a*b + c), one rounding.
MHC_HD double fma_rn64(double a, double b, double c) {
#if defined(__CUDA_ARCH__)
  return __fma_rn(a, b, c);
#else
  return std::fma(a, b, c);
#endif
}

MHC_HD double mul_rn64(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __dmul_rn(a, b);
#else
  return a * b;
#endif
}

MHC_HD double add_rn64(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __dadd_rn(a, b);
#else
  return a + b;
#endif
}

MHC_HD double sub_rn64(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __dsub_rn(a, b);
#else
  return a - b;
#endif
}

// RN of a + b and a - b in either format, for the code below that is written once for both.
MHC_HD float add_rn(float a, float b) { return add_rn32(a, b); }
MHC_HD double add_rn(double a, double b) { return add_rn64(a, b); }
MHC_HD float sub_rn(float a, float b) { return add_rn32(a, -b); }
MHC_HD double sub_rn(double a, double b) { return sub_rn64(a, b); }

// Knuth's TwoSum: s + e == a + b exactly, s = RN(a + b) (binary32 or binary64; no overflow).
template <class T>
MHC_HD void two_sum(T a, T b, T& s, T& e) {
  s = add_rn(a, b);
  const T bb = sub_rn(s, a);
  e = add_rn(sub_rn(a, sub_rn(s, bb)), sub_rn(b, bb));
}

// RD(a + b) and RU(a + b), rounded down / up in binary64 or binary32: the ends of an interval that encloses
// a + b. On the GPU the directed-rounding instructions; on the host (tests) add_directed_host: RN and the exact
// error of the addition (TwoSum), one step down / up when it lost something, and IEEE's signs of exact zeros
// (x + (-x) is -0 rounded down, +0 rounded up; two zeros keep their sign only when they agree, else as x + (-x)).
#if !defined(__CUDA_ARCH__)
template <class T>
T add_directed_host(T a, T b, bool up) {
  T t, error;
  two_sum(a, b, t, error);
  const T zero = T(0), inf = T(HUGE_VAL);
  if (t == zero) {
    const bool negative = up ? std::signbit(a) && std::signbit(b) && a == zero
                             : std::signbit(a) || std::signbit(b) || a != zero;
    return negative ? -zero : zero;
  }
  if (up) return error > zero ? std::nextafter(t, inf) : t;
  return error < zero ? std::nextafter(t, -inf) : t;
}
#endif

MHC_HD double add_rd64(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __dadd_rd(a, b);
#else
  return add_directed_host(a, b, false);
#endif
}

MHC_HD double add_ru64(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __dadd_ru(a, b);
#else
  return add_directed_host(a, b, true);
#endif
}

MHC_HD float add_rd32(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fadd_rd(a, b);
#else
  return add_directed_host(a, b, false);
#endif
}

MHC_HD float add_ru32(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fadd_ru(a, b);
#else
  return add_directed_host(a, b, true);
#endif
}

// RU32(a·b), for the binary32 filter's error bound. On the host the product is exact in binary64 (48
// significant bits), so one RN32 and a step up when that fell below it give RU32.
MHC_HD float mul_ru32(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_ru(a, b);
#else
  const double p = double(a) * double(b);
  const float f = static_cast<float>(p);
  return double(f) < p ? std::nextafter(f, HUGE_VALF) : f;
#endif
}

// RU32(a·b + c), one rounding upwards: the binary32 filter's per-element bound. On the host a·b is exact in
// binary64, and TwoSum splits its sum with c exactly into t + err (|err| at most half a binary64 unit of t).
// f = RN32(t) is the answer when it lies above t (then also above t + err: f is a binary64 too), or equals t
// with err <= 0; otherwise (below t, or equal with err > 0) the binary32 after it is. An exact zero is +0 unless
// both parts are -0 (IEEE's rounding upwards).
MHC_HD float fma_ru32(float a, float b, float c) {
#if defined(__CUDA_ARCH__)
  return __fmaf_ru(a, b, c);
#else
  const double p = double(a) * double(b);
  double t, err;
  two_sum(p, double(c), t, err);
  if (t == 0.0) return std::signbit(p) && std::signbit(c) ? -0.0f : 0.0f;
  const float f = static_cast<float>(t);
  return double(f) < t || (double(f) == t && err > 0.0) ? std::nextafter(f, HUGE_VALF) : f;
#endif
}

MHC_HD uint32_t float_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
#endif
}

MHC_HD float float_from_bits(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
#endif
}

MHC_HD uint64_t double_bits(double d) {
#if defined(__CUDA_ARCH__)
  return static_cast<uint64_t>(__double_as_longlong(d));
#else
  uint64_t u;
  std::memcpy(&u, &d, sizeof u);
  return u;
#endif
}

MHC_HD double double_from_bits(uint64_t u) {
#if defined(__CUDA_ARCH__)
  return __longlong_as_double(static_cast<long long>(u));
#else
  double d;
  std::memcpy(&d, &u, sizeof d);
  return d;
#endif
}

// RN32 of a binary64 value (one rounding).
MHC_HD float round_to_fp32_rne(double d) {
#if defined(__CUDA_ARCH__)
  return __double2float_rn(d);
#else
  return static_cast<float>(d);
#endif
}

// Round-to-odd from binary64 to binary32: truncate, and set the last bit when anything was lost.
// Rounding to odd at 24 bits and then to nearest at 8 bits is one correct rounding (Boldo & Melquiond,
// "When double rounding is odd"), which is how a binary64 or exact value reaches bf16 without double rounding.
MHC_HD float round_to_fp32_odd(double d) {
  float f = round_to_fp32_rne(d);
  double back = static_cast<double>(f);
  if (back != d && d == d) {
    uint32_t u = float_bits(f);
    if ((u & 1u) == 0) {
      // f is the even neighbour; the odd one lies on the other side of d.
      if (std::fabs(back) > std::fabs(d)) u -= 1; else u += 1;
    }
    f = float_from_bits(u);
  }
  return f;
}

// Round-to-odd to binary64 of an exact value hi + lo, where hi = RN64(hi + lo).
MHC_HD double round_to_fp64_odd(double hi, double lo) {
  if (lo == 0.0 || hi == 0.0) return hi;  // exact (a normalised pair never has hi == 0 with lo != 0)
  uint64_t u = double_bits(hi);
  if ((u & 1u) == 0) {
    // hi is the even neighbour of the exact value; the odd one is one step towards lo.
    bool lo_points_away_from_zero = (lo > 0) == (hi > 0);
    if (lo_points_away_from_zero) u += 1; else u -= 1;
  }
  return double_from_bits(u);
}

}  // namespace mhc
