#pragma once
// bfloat16 as raw bits, with round-to-nearest-even conversions (SPEC §2: RNb). NaN stays NaN (quieted,
// sign kept), overflow goes to ±inf, subnormals round like any other value.
#include <cstdint>

#include "numerics/fp_ops.hpp"

namespace mhc {

using bf16_bits = uint16_t;

MHC_HD float bf16_to_float(bf16_bits b) { return float_from_bits(static_cast<uint32_t>(b) << 16); }

// RNb from binary32 by integer operations: add 0x7fff plus the last kept bit, truncate. Any input.
MHC_HD bf16_bits round_to_bf16_rne(float f) {
  uint32_t u = float_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<bf16_bits>((u >> 16) | 0x0040u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<bf16_bits>(u >> 16);
}

// RNb of two binary32 values packed as a pair (`high` in the high half, as a chunk holds elements 2j + 1 and
// 2j). On sm_80+ one instruction for both (cvt.rn.bf16x2.f32: RNE, subnormals kept, overflow to inf; only a NaN's
// payload can differ from the integer route, and the exact filters never keep a NaN).
MHC_HD uint32_t round_to_bf16x2_rne(float high, float low) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  uint32_t pair;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(pair) : "f"(high), "f"(low));
  return pair;
#else
  return static_cast<uint32_t>(round_to_bf16_rne(high)) << 16 | round_to_bf16_rne(low);
#endif
}

// RNb then back to binary32: the value a bf16 rounding step leaves in an fp32 register. On the GPU this is
// the hardware conversion (cvt.rn.bf16.f32: RNE, subnormals kept, overflow to inf), which runs on the
// conversion pipe and so leaves the integer pipe, which the bf16 policies saturate, to the integer route
// of the stored results (docs/cuda.md). Only a NaN's payload can differ (SPEC §5 does not compare them);
// tests/gpu checks both routes against each other on all 2^32 inputs.
MHC_HD float rnb(float f) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  unsigned short h;
  asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h) : "f"(f));
  return bf16_to_float(h);
#else
  return bf16_to_float(round_to_bf16_rne(f));
#endif
}

// RNb from binary64, rounded once. In bf16's normal range (2^-126 <= |d| < 2^128) the rounding is done on
// the high word: the bits below bf16's last place are bit 12 (the round bit), bits 0..11 and the low word
// (sticky, folded into bit 0), so adding 0xfff plus the last kept bit carries exactly when RNE rounds up;
// the exponent is then rebiased from 1023 to 127 (a carry out of the largest binade gives bf16 inf, as RNE
// does). Integer operations only: on the GPU the float conversions run on a narrow pipe (docs/cuda.md).
// Elsewhere (subnormal, zero, inf, NaN) through round-to-odd binary32, never via RN32.
// The high-word route alone: `in_range` says whether it applies.
MHC_HD bf16_bits round_to_bf16_rne_in_range(double d, bool& in_range) {
  const uint64_t u = double_bits(d);
  const uint32_t hi = static_cast<uint32_t>(u >> 32), lo = static_cast<uint32_t>(u);
  const uint32_t mag = hi & 0x7fffffffu;
  constexpr uint32_t kLowest = (1023u - 126u) << 20, kBeyond = (1023u + 128u) << 20;
  in_range = mag - kLowest < kBeyond - kLowest;
  const uint32_t h = mag | (lo != 0 ? 1u : 0u);
  const uint32_t r = (h + 0xfffu + ((h >> 13) & 1u)) >> 13;
  return static_cast<bf16_bits>((r - (896u << 7)) | ((hi >> 16) & 0x8000u));
}

// On Hopper the GPU converts binary64 to bf16 in one instruction (cvt.rn.bf16.f64, one rounding), which
// runs on the conversion pipe and has no branch; tests/gpu checks it against round-to-odd.
MHC_HD bf16_bits round_to_bf16_rne(double d) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  unsigned short h;
  asm("cvt.rn.bf16.f64 %0, %1;" : "=h"(h) : "d"(d));
  return h;
#else
  bool in_range = false;
  const bf16_bits b = round_to_bf16_rne_in_range(d, in_range);
  return in_range ? b : round_to_bf16_rne(round_to_fp32_odd(d));
#endif
}


MHC_HD bool bf16_is_nan(bf16_bits b) { return (b & 0x7fffu) > 0x7f80u; }

}  // namespace mhc
