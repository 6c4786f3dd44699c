// Device side of RoundingRoutesAgreeOnTheGpu (cuda_operator_test.cpp): numerics/bf16.hpp as compiled for
// the GPU. rnb (the hardware conversion there) against the integer route on every binary32 input (NaN
// against any NaN), and RNb of binary64 (the hardware conversion on sm_90) against round-to-odd on hashed inputs
// concentrated near bf16 rounding boundaries.
#include "rounding_check.hpp"

#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

#include "numerics/bf16.hpp"

namespace mhc::testing {
namespace {

__device__ uint64_t mix64(uint64_t z) {
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

__global__ void check_float_routes(unsigned long long* mismatches, unsigned long long* first) {
  const uint64_t stride = uint64_t(gridDim.x) * blockDim.x;
  for (uint64_t i = uint64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < (uint64_t{1} << 32); i += stride) {
    const float f = float_from_bits(static_cast<uint32_t>(i));
    const bf16_bits want = round_to_bf16_rne(f);  // the integer route
    const uint32_t got = float_bits(rnb(f));      // the hardware conversion
    const bool same = bf16_is_nan(want) ? (got & 0xffffu) == 0 && bf16_is_nan(bf16_bits(got >> 16))
                                        : got == uint32_t(want) << 16;
    if (!same && atomicAdd(mismatches, 1ull) == 0) *first = i;
  }
}

__global__ void check_double_route(uint64_t count, unsigned long long* mismatches, unsigned long long* first) {
  const uint64_t stride = uint64_t(gridDim.x) * blockDim.x;
  for (uint64_t i = uint64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < count; i += stride) {
    uint64_t u = mix64(i);
    // Every exponent; the bits below bf16's last place often all-zero, all-one, or a tie pattern.
    const uint64_t below = (uint64_t{1} << 45) - 1;
    switch (mix64(~i) % 4) {
      case 0: u &= ~below; u |= uint64_t{1} << 44; break;                // an exact tie
      case 1: u &= ~below; u |= (uint64_t{1} << 44) | (mix64(i + 7) & 1); break;
      case 2: u |= below >> (mix64(i + 3) % 45); break;
      default: break;
    }
    const double d = double_from_bits(u);
    const bf16_bits got = round_to_bf16_rne(d), want = round_to_bf16_rne(round_to_fp32_odd(d));
    const bool same = bf16_is_nan(want) ? bf16_is_nan(got) : got == want;
    if (!same && atomicAdd(mismatches, 1ull) == 0) *first = u;
  }
}

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}

RoundingCheck run(bool doubles) {
  unsigned long long* d = nullptr;
  check(cudaMalloc(&d, 2 * sizeof(unsigned long long)), "cudaMalloc");
  check(cudaMemset(d, 0, 2 * sizeof(unsigned long long)), "cudaMemset");
  RoundingCheck r;
  if (doubles) {
    r.checked = uint64_t{1} << 28;
    check_double_route<<<1024, 256>>>(r.checked, d, d + 1);
  } else {
    r.checked = uint64_t{1} << 32;
    check_float_routes<<<1024, 256>>>(d, d + 1);
  }
  check(cudaGetLastError(), "launch");
  unsigned long long h[2] = {0, 0};
  check(cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost), "cudaMemcpy");
  cudaFree(d);
  r.mismatches = h[0];
  r.first = h[1];
  return r;
}

}  // namespace

RoundingCheck check_float_rounding_on_gpu() { return run(false); }
RoundingCheck check_double_rounding_on_gpu() { return run(true); }

}  // namespace mhc::testing
