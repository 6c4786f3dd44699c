#pragma once
// bfloat16 as raw bits, with round-to-nearest-even conversions (SPEC §2: RNb). NaN stays NaN (quieted,
// sign kept), overflow goes to ±inf, subnormals round like any other value.
#include <cstdint>

#include "numerics/fp_ops.hpp"

namespace mhc {

using bf16_bits = uint16_t;

MHC_HD float bf16_to_float(bf16_bits b) { return float_from_bits(static_cast<uint32_t>(b) << 16); }

// RNb from binary32.
MHC_HD bf16_bits round_to_bf16_rne(float f) {
  uint32_t u = float_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<bf16_bits>((u >> 16) | 0x0040u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<bf16_bits>(u >> 16);
}

// RNb from binary64, rounded once (via round-to-odd binary32, never via RN32).
MHC_HD bf16_bits round_to_bf16_rne(double d) { return round_to_bf16_rne(round_to_fp32_odd(d)); }

// RNb then back to binary32: the value a bf16 rounding step leaves in an fp32 register.
MHC_HD float rnb(float f) { return bf16_to_float(round_to_bf16_rne(f)); }

MHC_HD bool bf16_is_nan(bf16_bits b) { return (b & 0x7fffu) > 0x7f80u; }

}  // namespace mhc
