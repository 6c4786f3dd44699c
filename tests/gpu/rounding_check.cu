// Device side of RoundingRoutesAgreeOnTheGpu (cuda_operator_test.cpp): numerics/bf16.hpp as compiled for
// the GPU. rnb and the packed pair conversion (hardware conversions there) against the integer route on every
// binary32 input (NaN against any NaN), RNb of binary64 (the hardware conversion on sm_90) against round-to-odd
// on hashed inputs concentrated near bf16 rounding boundaries, and the directed binary32 operations of
// numerics/fp_ops.hpp (instructions on the GPU) against their host emulation.
#include "rounding_check.hpp"

#include <cuda_runtime.h>

#include <stdexcept>
#include <string>
#include <vector>

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
    // The pair conversion, with this input in each half (its partner: the input with the bits reversed).
    const float partner = float_from_bits(__brev(static_cast<uint32_t>(i)));
    const bf16_bits want_partner = round_to_bf16_rne(partner);
    const uint32_t pair = round_to_bf16x2_rne(f, partner), swapped = round_to_bf16x2_rne(partner, f);
    auto half_same = [](bf16_bits got_half, bf16_bits want_half) {
      return bf16_is_nan(want_half) ? bf16_is_nan(got_half) : got_half == want_half;
    };
    const bool pair_same = half_same(bf16_bits(pair >> 16), want) && half_same(bf16_bits(pair), want_partner) &&
                           half_same(bf16_bits(swapped), want) && half_same(bf16_bits(swapped >> 16), want_partner);
    if (!(same && pair_same) && atomicAdd(mismatches, 1ull) == 0) *first = i;
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

// Operands with a spread of exponents, often close enough for inexact sums and products, with zeros and
// subnormals among them; each thread writes RD/RU of the sum and RU of the product.
__device__ float hashed_operand(uint64_t h) {
  const uint32_t bits = static_cast<uint32_t>(h);
  switch ((h >> 40) % 8) {
    case 0: return 0.0f;
    case 1: return float_from_bits(bits & 0x807fffffu);                                    // subnormal
    case 2: return float_from_bits((bits & 0x807fffffu) | ((120u + (h >> 50) % 16) << 23));  // near 1
    default: return float_from_bits((bits & 0x807fffffu) | ((64u + (h >> 50) % 128) << 23));
  }
}

__global__ void directed_ops(uint64_t count, float* operands, float* results) {
  const uint64_t stride = uint64_t(gridDim.x) * blockDim.x;
  for (uint64_t i = uint64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < count; i += stride) {
    const float a = hashed_operand(mix64(2 * i)), b = hashed_operand(mix64(2 * i + 1));
    operands[2 * i] = a, operands[2 * i + 1] = b;
    results[3 * i] = add_rd32(a, b), results[3 * i + 1] = add_ru32(a, b), results[3 * i + 2] = mul_ru32(a, b);
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

RoundingCheck check_directed_binary32_on_gpu() {
  constexpr uint64_t kCount = uint64_t{1} << 20;
  float* d = nullptr;
  check(cudaMalloc(&d, 5 * kCount * sizeof(float)), "cudaMalloc");
  directed_ops<<<256, 256>>>(kCount, d, d + 2 * kCount);
  check(cudaGetLastError(), "launch");
  std::vector<float> h(5 * kCount);
  check(cudaMemcpy(h.data(), d, h.size() * sizeof(float), cudaMemcpyDeviceToHost), "cudaMemcpy");
  cudaFree(d);
  RoundingCheck r;
  r.checked = kCount;
  for (uint64_t i = 0; i < kCount; ++i) {
    const float a = h[2 * i], b = h[2 * i + 1];
    const float* got = h.data() + 2 * kCount + 3 * i;
    const float want[3] = {add_rd32(a, b), add_ru32(a, b), mul_ru32(a, b)};  // the host emulation
    for (int k = 0; k < 3; ++k)
      if (float_bits(got[k]) != float_bits(want[k]) && r.mismatches++ == 0) r.first = i;
  }
  return r;
}

}  // namespace mhc::testing
