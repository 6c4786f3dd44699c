#include "kernels/finite_scan.hpp"

#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "kernels/cpu/operator_cpu.hpp"

namespace mhc {
namespace {

// Values per task: large enough that scheduling costs nothing next to the scan, small enough that the cores
// share a slab evenly.
constexpr int64_t kBlock = int64_t{1} << 16;

// Whether any of the n values has every bit of `exponent` set in its bit pattern (Word: an unsigned integer of
// the value's size; the bits are read through memcpy, the aliasing-safe way for binary32). One OR per value and
// no branch inside a block, so the compiler vectorises it: std::all_of's early exit kept the scan to one core at
// about 9 GB/s (2-core VM), slower than the slab's copy to the GPU.
template <class Word, class Value>
bool any_exponent_all_ones(const Value* p, int64_t n, Word exponent, int threads) {
  static_assert(sizeof(Word) == sizeof(Value));
  bool found = false;
#pragma omp parallel for schedule(static) num_threads(threads) reduction(|| : found)
  for (int64_t b0 = 0; b0 < n; b0 += kBlock) {
    const int64_t b1 = std::min(n, b0 + kBlock);
    Word hits = 0;
    for (int64_t i = b0; i < b1; ++i) {
      Word bits;
      std::memcpy(&bits, p + i, sizeof bits);
      hits |= static_cast<Word>((bits & exponent) == exponent);
    }
    found = found || hits != 0;
  }
  return found;
}

}  // namespace

bool forward_inputs_finite(const InputsView& in, int threads) {
  const Shape& sh = in.shape;
  const int64_t H = sh.H;
  const int t = cpu_thread_count(threads);
  return !any_exponent_all_ones<bf16_bits>(in.x, sh.S * sh.D, 0x7f80u, t) &&
         !any_exponent_all_ones<bf16_bits>(in.residual, sh.S * H * sh.D, 0x7f80u, t) &&
         !any_exponent_all_ones<uint32_t>(in.post, sh.S * H, 0x7f800000u, t) &&
         !any_exponent_all_ones<uint32_t>(in.comb, sh.S * H * H, 0x7f800000u, t);
}

}  // namespace mhc
