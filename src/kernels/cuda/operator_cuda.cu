// Host-in, host-out entry points of the CUDA backend: inputs are streamed through the GPU in slabs of
// tokens (bounded device memory), the kernels of operator_kernels.cu compute every element, and the exact
// elements the GPU's certified fast path could not certify are finished here with the multiprecision
// fallback, from the host copy of the inputs (the same terms the CPU path sums).
#include "kernels/cuda/operator_cuda.hpp"

#include <cuda_runtime.h>

#include <algorithm>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/cpu/operator_cpu.hpp"
#include "kernels/finite_scan.hpp"
#include "kernels/cuda/cuda_check.hpp"
#include "kernels/cuda/operator_kernels.hpp"

namespace mhc::cuda {
namespace {

void check_shape(const InputsView& in) {
  if (in.shape.H < 1 || in.shape.H > kMaxStreams)
    throw std::invalid_argument("H must be in 1..16 (got " + std::to_string(in.shape.H) + ")");
  if (in.shape.D < 1) throw std::invalid_argument("D must be at least 1");
}

// At most this much device memory per slab, and never more than half of what is free.
constexpr size_t kMaxSlabBytes = size_t{4} << 30;

int64_t slab_tokens(size_t bytes_per_token, int64_t S) {
  size_t free_bytes = 0, total_bytes = 0;
  MHC_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
  const size_t budget = std::min(kMaxSlabBytes, free_bytes / 2);
  return std::clamp<int64_t>(static_cast<int64_t>(budget / std::max<size_t>(bytes_per_token, 1)), 1, std::max<int64_t>(S, 1));
}

template <class T>
void to_device(T* dst, const T* src, size_t count) {
  if (count) MHC_CUDA_CHECK(cudaMemcpy(dst, src, count * sizeof(T), cudaMemcpyHostToDevice));
}

template <class T>
void to_host(T* dst, const T* src, size_t count) {
  if (dst && count) MHC_CUDA_CHECK(cudaMemcpy(dst, src, count * sizeof(T), cudaMemcpyDeviceToHost));
}

template <class T>
T* optional_device(DeviceBuffer<T>& buffer, const void* host_pointer) {
  return host_pointer ? buffer.get() : nullptr;
}

// The inputs of one slab on the device.
struct DeviceSlab {
  DeviceBuffer<bf16_bits> x, residual, grad_out;
  DeviceBuffer<float> post, comb;
  DeviceBuffer<unsigned long long> fallback_count, fallback_items;
  DeferredDotScratch deferred;  // the exact backward's (launch_backward)

  DeviceSlab(const Shape& slab, bool with_grad)
      : x(size_t(slab.S) * slab.D),
        residual(size_t(slab.S) * slab.H * slab.D),
        grad_out(with_grad ? size_t(slab.S) * slab.H * slab.D : 0),
        post(size_t(slab.S) * slab.H),
        comb(size_t(slab.S) * slab.H * slab.H),
        fallback_count(1),
        fallback_items(kFallbackCapacity),
        deferred(with_grad ? kDeferredDotCapacity : 0) {}

  // Copies tokens [s0, s0 + count) of `in` and returns the device view of them.
  InputsView upload(const InputsView& in, int64_t s0, int64_t count) {
    const int H = in.shape.H;
    const int64_t D = in.shape.D;
    to_device(x.get(), in.x + s0 * D, size_t(count) * D);
    to_device(residual.get(), in.residual + s0 * H * D, size_t(count) * H * D);
    to_device(post.get(), in.post + s0 * H, size_t(count) * H);
    to_device(comb.get(), in.comb + s0 * H * H, size_t(count) * H * H);
    if (in.grad_out && grad_out.size()) to_device(grad_out.get(), in.grad_out + s0 * H * D, size_t(count) * H * D);
    MHC_CUDA_CHECK(cudaMemset(fallback_count.get(), 0, sizeof(unsigned long long)));
    return {Shape{count, H, D}, x.get(), residual.get(), post.get(), comb.get(),
            in.grad_out && grad_out.size() ? grad_out.get() : nullptr};
  }

  FallbackList fallback() { return {fallback_count.get(), fallback_items.get(), kFallbackCapacity}; }

  // The listed elements after the kernel ran; nullopt-like empty + overflow flag when the list overflowed.
  std::vector<unsigned long long> fallback_items_on_host(unsigned long long& count) {
    MHC_CUDA_CHECK(cudaMemcpy(&count, fallback_count.get(), sizeof count, cudaMemcpyDeviceToHost));
    std::vector<unsigned long long> items(std::min(count, kFallbackCapacity));
    to_host(items.data(), fallback_items.get(), items.size());
    return items;
  }
};

InputsView host_slab(const InputsView& in, int64_t s0, int64_t count) {
  const int H = in.shape.H;
  const int64_t D = in.shape.D;
  return {Shape{count, H, D}, in.x + s0 * D, in.residual + s0 * H * D, in.post + s0 * H, in.comb + s0 * H * H,
          in.grad_out ? in.grad_out + s0 * H * D : nullptr};
}

template <class T>
T* offset(T* p, int64_t n) {
  return p ? p + n : nullptr;
}

ForwardOutputs host_slab(const ForwardOutputs& out, const Shape& sh, int64_t s0) {
  const int64_t n = s0 * sh.H * sh.D;
  return {offset(out.out, n), offset(out.out_f64, n)};
}

BackwardOutputs host_slab(const BackwardOutputs& out, const Shape& sh, int64_t s0) {
  const int64_t H = sh.H, D = sh.D;
  return {offset(out.grad_x, s0 * D),       offset(out.grad_residual, s0 * H * D), offset(out.grad_post, s0 * H),
          offset(out.grad_comb, s0 * H * H), offset(out.grad_x_f64, s0 * D),       offset(out.grad_residual_f64, s0 * H * D),
          offset(out.grad_post_f64, s0 * H), offset(out.grad_comb_f64, s0 * H * H)};
}

FallbackKind kind_of(unsigned long long item) { return static_cast<FallbackKind>(item >> kFallbackKindShift); }
int64_t index_of(unsigned long long item) { return static_cast<int64_t>(item & kFallbackIndexMask); }

// Finishes on the host the exact elements of one slab that the GPU listed as uncertified (hin, fwd, bwd: the
// slab's host inputs and outputs), or, when the list overflowed, calls recompute_slab (the CPU path over the
// whole slab: bit-identical by construction, SPEC §2). Returns how many elements were listed.
template <class Recompute>
int64_t finish_listed_elements(DeviceSlab& dev, const InputsView& hin, const ForwardOutputs& fwd,
                               const BackwardOutputs& bwd, ExactBackend backend, std::vector<double>& terms,
                               Recompute&& recompute_slab) {
  unsigned long long listed = 0;
  const std::vector<unsigned long long> items = dev.fallback_items_on_host(listed);
  if (listed > kFallbackCapacity) {
    recompute_slab();
  } else {
    for (unsigned long long item : items) finish_exact_element(hin, kind_of(item), index_of(item), fwd, bwd, backend, terms);
  }
  return static_cast<int64_t>(listed);
}

}  // namespace

bool device_available() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();  // no driver / no device: clear the sticky error, report "none"
    return false;
  }
  return count > 0;
}

std::string device_name() {
  int device = 0;
  MHC_CUDA_CHECK(cudaGetDevice(&device));
  cudaDeviceProp prop{};
  MHC_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  return prop.name;
}

// An fp32 policy has no binary64 twins: its kernels never write them, so they are neither allocated nor copied
// back, and a caller's buffers stay untouched as on the CPU (copied, they would have held uninitialised device
// memory).
RunStats forward(const PolicyDesc& pd, const InputsView& in, const ForwardOutputs& requested, ExactBackend backend,
                 int cpu_threads) {
  const ForwardOutputs out = stores_f64(pd) ? requested : ForwardOutputs{requested.out, nullptr};
  check_shape(in);
  RunStats stats;
  const Shape& sh = in.shape;
  if (pd.accumulator == Accumulator::exact) stats.exact_elements = sh.S * sh.H * sh.D;
  if (sh.S == 0) return stats;
  const bool f64 = out.out_f64 != nullptr;
  const size_t per_token = 2 * size_t(sh.D) * (1 + 2 * sh.H) + 4 * size_t(sh.H) * (1 + sh.H) + (f64 ? 8 * size_t(sh.H) * sh.D : 0);
  const int64_t slab = slab_tokens(per_token, sh.S);
  const Shape slab_shape{slab, sh.H, sh.D};
  DeviceSlab dev(slab_shape, false);
  DeviceBuffer<bf16_bits> d_out(size_t(slab) * sh.H * sh.D);
  DeviceBuffer<double> d_out64(f64 ? size_t(slab) * sh.H * sh.D : 0);
  std::vector<double> terms;
  for (int64_t s0 = 0; s0 < sh.S; s0 += slab) {
    const int64_t count = std::min(slab, sh.S - s0);
    const InputsView hin = host_slab(in, s0, count);
    const InputsView din = dev.upload(in, s0, count);
    const ForwardOutputs dout{d_out.get(), optional_device(d_out64, out.out_f64)};
    launch_forward(pd, din, dout, dev.fallback(), nullptr, forward_inputs_finite(hin, cpu_threads));
    MHC_CUDA_CHECK(cudaDeviceSynchronize());
    const ForwardOutputs hout = host_slab(out, sh, s0);
    const size_t n = size_t(count) * sh.H * sh.D;
    to_host(hout.out, d_out.get(), n);
    to_host(hout.out_f64, d_out64.get(), n);
    if (pd.accumulator != Accumulator::exact) continue;
    const CpuOptions cpu{cpu_threads, backend};
    stats.fallback_elements +=
        finish_listed_elements(dev, hin, hout, {}, backend, terms, [&] { forward_cpu(pd, hin, hout, cpu); });
  }
  return stats;
}

RunStats backward(const PolicyDesc& pd, const InputsView& in, const BackwardOutputs& requested, ExactBackend backend,
                  int cpu_threads) {
  BackwardOutputs out = requested;
  if (!stores_f64(pd)) out.grad_x_f64 = out.grad_residual_f64 = out.grad_post_f64 = out.grad_comb_f64 = nullptr;
  check_shape(in);
  if (!in.grad_out) throw std::invalid_argument("the backward needs grad_out in the inputs");
  RunStats stats;
  const Shape& sh = in.shape;
  const int64_t H = sh.H, D = sh.D;
  if (pd.accumulator == Accumulator::exact) stats.exact_elements = sh.S * (D + H * D + H + H * H);
  if (sh.S == 0) return stats;
  const bool f64 = out.grad_x_f64 || out.grad_residual_f64 || out.grad_post_f64 || out.grad_comb_f64;
  const size_t per_token = 2 * size_t(D) * (1 + 2 * H) + 4 * size_t(H) * (1 + H)       // inputs
                           + 2 * size_t(D) * (1 + H) + 4 * size_t(H) * (1 + H)         // outputs
                           + (f64 ? 8 * (size_t(D) * (1 + H) + size_t(H) * (1 + H)) : 0);
  const int64_t slab = slab_tokens(per_token, sh.S);
  DeviceSlab dev(Shape{slab, sh.H, D}, true);
  DeviceBuffer<bf16_bits> d_gx(size_t(slab) * D), d_gr(size_t(slab) * H * D);
  DeviceBuffer<float> d_gp(size_t(slab) * H), d_gc(size_t(slab) * H * H);
  DeviceBuffer<double> d_gx64(out.grad_x_f64 ? d_gx.size() : 0), d_gr64(out.grad_residual_f64 ? d_gr.size() : 0),
      d_gp64(out.grad_post_f64 ? d_gp.size() : 0), d_gc64(out.grad_comb_f64 ? d_gc.size() : 0);
  std::vector<double> terms;
  for (int64_t s0 = 0; s0 < sh.S; s0 += slab) {
    const int64_t count = std::min(slab, sh.S - s0);
    const InputsView din = dev.upload(in, s0, count);
    const BackwardOutputs dout{d_gx.get(),
                               d_gr.get(),
                               d_gp.get(),
                               d_gc.get(),
                               optional_device(d_gx64, out.grad_x_f64),
                               optional_device(d_gr64, out.grad_residual_f64),
                               optional_device(d_gp64, out.grad_post_f64),
                               optional_device(d_gc64, out.grad_comb_f64)};
    launch_backward(pd, din, dout, dev.fallback(), nullptr, dev.deferred.view());
    MHC_CUDA_CHECK(cudaDeviceSynchronize());
    const BackwardOutputs hout = host_slab(out, sh, s0);
    to_host(hout.grad_x, d_gx.get(), size_t(count) * D);
    to_host(hout.grad_residual, d_gr.get(), size_t(count) * H * D);
    to_host(hout.grad_post, d_gp.get(), size_t(count) * H);
    to_host(hout.grad_comb, d_gc.get(), size_t(count) * H * H);
    to_host(hout.grad_x_f64, d_gx64.get(), size_t(count) * D);
    to_host(hout.grad_residual_f64, d_gr64.get(), size_t(count) * H * D);
    to_host(hout.grad_post_f64, d_gp64.get(), size_t(count) * H);
    to_host(hout.grad_comb_f64, d_gc64.get(), size_t(count) * H * H);
    if (pd.accumulator != Accumulator::exact) continue;
    const InputsView hin = host_slab(in, s0, count);
    const CpuOptions cpu{cpu_threads, backend};
    stats.fallback_elements +=
        finish_listed_elements(dev, hin, {}, hout, backend, terms, [&] { backward_cpu(pd, hin, hout, cpu); });
  }
  return stats;
}

}  // namespace mhc::cuda
