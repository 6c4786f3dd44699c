#pragma once
// The GPU build of numerics/bf16.hpp's rounding routes, checked on the device (rounding_check.cu).
#include <cstdint>

namespace mhc::testing {

struct RoundingCheck {
  uint64_t checked = 0;
  uint64_t mismatches = 0;
  uint64_t first = 0;  // the first mismatching input's bits
};

// rnb (a hardware conversion on the GPU) against round_to_bf16_rne(float), on all 2^32 binary32 inputs.
RoundingCheck check_float_rounding_on_gpu();
// round_to_bf16_rne(double) (cvt.rn.bf16.f64 on sm_90) against round-to-odd binary32, on 2^28 hashed inputs.
RoundingCheck check_double_rounding_on_gpu();
// add_rd32, add_ru32 and mul_ru32 (instructions on the GPU) against their host emulation on 2^20 hashed operand
// pairs (`first`: the index of the first mismatching pair).
RoundingCheck check_directed_binary32_on_gpu();

}  // namespace mhc::testing
