// Kernel timing on device-resident data (SPEC §8). Inputs are made on the GPU by a counter-based hash
// (no host generation of gigabytes); small shapes rotate through several input sets so the timing is of
// device memory, not of the 60 MB L2.
#include "kernels/cuda/bench_cuda.hpp"

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <vector>

#include "kernels/cuda/cuda_check.hpp"
#include "kernels/cuda/operator_kernels.hpp"

namespace mhc::cuda {
namespace {

__device__ __forceinline__ uint64_t splitmix64(uint64_t z) {
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

__device__ __forceinline__ float uniform01(uint64_t h) { return float(h >> 40) * 0x1p-24f; }

// Peer-test style data (SPEC §7 randn): bf16 of N(0, 1) by Box-Muller; only needs to look like real data.
__global__ void fill_normal_bf16(bf16_bits* p, int64_t n, uint64_t seed) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const uint64_t h = splitmix64(seed ^ (uint64_t(i) * 0x2545f4914f6cdd1dull));
    const float u1 = fmaxf(uniform01(h), 0x1p-24f), u2 = uniform01(h << 24);
    const float z = sqrtf(-2.0f * logf(u1)) * cospif(2.0f * u2);
    p[i] = round_to_bf16_rne(z);
  }
}

__global__ void fill_uniform_f32(float* p, int64_t n, uint64_t seed, float scale) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    p[i] = scale * uniform01(splitmix64(seed ^ (uint64_t(i) * 0x9e3779b97f4a7c15ull)));
}

constexpr int kFillBlocks = 1024, kFillThreads = 256;

// Host values into a device buffer of the same length (the host generator made them for this shape).
template <class T>
void upload(DeviceBuffer<T>& device, const std::vector<T>& host) {
  if (host.size() != device.size()) throw std::logic_error("bench inputs: a host tensor has the wrong length");
  MHC_CUDA_CHECK(cudaMemcpy(device.get(), host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice));
}

struct InputSet {
  DeviceBuffer<bf16_bits> x, residual, grad_out;
  DeviceBuffer<float> post, comb;

  // The buffers of one set of the shape, unfilled.
  explicit InputSet(const Shape& sh)
      : x(size_t(sh.S) * sh.D),
        residual(size_t(sh.S) * sh.H * sh.D),
        grad_out(size_t(sh.S) * sh.H * sh.D),
        post(size_t(sh.S) * sh.H),
        comb(size_t(sh.S) * sh.H * sh.H) {}

  // Filled on the GPU (the bench's randn-like data).
  InputSet(const Shape& sh, uint64_t seed) : InputSet(sh) {
    fill_normal_bf16<<<kFillBlocks, kFillThreads>>>(x.get(), x.size(), seed * 8 + 1);
    MHC_CUDA_CHECK_LAUNCH();
    fill_normal_bf16<<<kFillBlocks, kFillThreads>>>(residual.get(), residual.size(), seed * 8 + 2);
    MHC_CUDA_CHECK_LAUNCH();
    fill_normal_bf16<<<kFillBlocks, kFillThreads>>>(grad_out.get(), grad_out.size(), seed * 8 + 3);
    MHC_CUDA_CHECK_LAUNCH();
    fill_uniform_f32<<<kFillBlocks, kFillThreads>>>(post.get(), post.size(), seed * 8 + 4, 2.0f);
    MHC_CUDA_CHECK_LAUNCH();
    fill_uniform_f32<<<kFillBlocks, kFillThreads>>>(comb.get(), comb.size(), seed * 8 + 5, 1.0f);
    MHC_CUDA_CHECK_LAUNCH();
  }

  // Filled from host inputs of the shape (bench --preset).
  InputSet(const Shape& sh, const Inputs& host) : InputSet(sh) {
    upload(x, host.x);
    upload(residual, host.residual);
    upload(grad_out, host.grad_out);
    upload(post, host.post);
    upload(comb, host.comb);
  }

  InputsView view(const Shape& sh) const {
    return {sh, x.get(), residual.get(), post.get(), comb.get(), grad_out.get()};
  }
};

int64_t forward_bytes(const Shape& sh) {
  return 2 * sh.S * sh.D + 4 * sh.S * sh.H * sh.D + 4 * sh.S * sh.H * (1 + sh.H);
}

int64_t backward_bytes(const Shape& sh) {
  return 2 * sh.S * sh.D * 2 + 2 * sh.S * sh.H * sh.D * 3 + 4 * sh.S * sh.H * (1 + sh.H) * 2;
}

class EventTimer {
 public:
  EventTimer() {
    MHC_CUDA_CHECK(cudaEventCreate(&start_));
    MHC_CUDA_CHECK(cudaEventCreate(&stop_));
  }
  ~EventTimer() {
    cudaEventDestroy(start_);
    cudaEventDestroy(stop_);
  }
  EventTimer(const EventTimer&) = delete;
  EventTimer& operator=(const EventTimer&) = delete;

  // Median and minimum over `reps` timed calls of fn(rep), after `warmup` untimed ones.
  template <class F>
  std::pair<double, double> time(int reps, int warmup, F&& fn) {
    for (int i = 0; i < warmup; ++i) fn(i);
    MHC_CUDA_CHECK(cudaDeviceSynchronize());
    std::vector<double> ms;
    for (int i = 0; i < reps; ++i) {
      MHC_CUDA_CHECK(cudaEventRecord(start_));
      fn(i);
      MHC_CUDA_CHECK(cudaEventRecord(stop_));
      MHC_CUDA_CHECK(cudaEventSynchronize(stop_));
      float t = 0;
      MHC_CUDA_CHECK(cudaEventElapsedTime(&t, start_, stop_));
      ms.push_back(t);
    }
    std::sort(ms.begin(), ms.end());
    return {ms[ms.size() / 2], ms.front()};
  }

 private:
  cudaEvent_t start_{}, stop_{};
};

template <class T>
void dump_device(const std::filesystem::path& file, const T* device, size_t count) {
  std::vector<T> host(count);
  MHC_CUDA_CHECK(cudaMemcpy(host.data(), device, count * sizeof(T), cudaMemcpyDeviceToHost));
  std::ofstream os(file, std::ios::binary);
  os.write(reinterpret_cast<const char*>(host.data()), std::streamsize(count * sizeof(T)));
  if (!os) throw std::runtime_error("cannot write " + file.string());
}

}  // namespace

ShapeTiming bench_shape(const Shape& sh, const std::vector<Policy>& policies, const DeviceBenchOptions& opt,
                        bool dump) {
  if (sh.S < 1 || sh.H < 1 || sh.H > kMaxStreams || sh.D < 1)
    throw std::invalid_argument("bench shape must have S >= 1, H in 1..16 and D >= 1");
  ShapeTiming result;
  result.shape = sh;

  // Enough input sets that one pass over them is several times the L2 (the GPU's, read off the device).
  int device = 0;
  MHC_CUDA_CHECK(cudaGetDevice(&device));
  int l2_bytes = 0;
  MHC_CUDA_CHECK(cudaDeviceGetAttribute(&l2_bytes, cudaDevAttrL2CacheSize, device));
  const int64_t set_bytes = forward_bytes(sh) + 2 * sh.S * sh.H * sh.D;
  const int sets = static_cast<int>(std::clamp<int64_t>((4 * int64_t(l2_bytes) + set_bytes - 1) / set_bytes, 1, 32));
  std::vector<InputSet> inputs;
  for (int i = 0; i < sets; ++i) {
    if (opt.host_inputs) inputs.emplace_back(sh, opt.host_inputs(sh, opt.seed + i));
    else inputs.emplace_back(sh, opt.seed + i);
  }

  DeviceBuffer<bf16_bits> out(size_t(sh.S) * sh.H * sh.D), grad_x(size_t(sh.S) * sh.D),
      grad_residual(size_t(sh.S) * sh.H * sh.D);
  DeviceBuffer<float> grad_post(size_t(sh.S) * sh.H), grad_comb(size_t(sh.S) * sh.H * sh.H);
  DeviceBuffer<unsigned long long> fb_count(1), fb_items(1 << 16);
  const FallbackList fallback{fb_count.get(), fb_items.get(), fb_items.size()};
  const DeferredDotScratch deferred;
  const ForwardOutputs fwd_out{out.get(), nullptr};
  const BackwardOutputs bwd_out{grad_x.get(), grad_residual.get(), grad_post.get(), grad_comb.get()};

  EventTimer timer;
  constexpr int kWarmup = 3;
  result.copy_bytes = forward_bytes(sh);
  {
    DeviceBuffer<char> src(size_t(result.copy_bytes / 2)), dst(size_t(result.copy_bytes / 2));
    MHC_CUDA_CHECK(cudaMemset(src.get(), 1, src.bytes()));
    auto [median, min] = timer.time(opt.reps, kWarmup, [&](int) {
      MHC_CUDA_CHECK(cudaMemcpyAsync(dst.get(), src.get(), src.bytes(), cudaMemcpyDeviceToDevice));
    });
    result.copy_median_ms = median;
    (void)min;
  }

  auto fallbacks_of_last_launch = [&] {
    unsigned long long n = 0;
    MHC_CUDA_CHECK(cudaMemcpy(&n, fb_count.get(), sizeof n, cudaMemcpyDeviceToHost));
    return static_cast<int64_t>(n);
  };
  for (const Policy& p : policies) {
    KernelTiming f{p.name, false};
    auto [fm, fmin] = timer.time(opt.reps, kWarmup, [&](int rep) {
      MHC_CUDA_CHECK(cudaMemsetAsync(fb_count.get(), 0, sizeof(unsigned long long)));
      launch_forward(p.desc, inputs[rep % sets].view(sh), fwd_out, fallback, nullptr);
    });
    f.median_ms = fm, f.min_ms = fmin, f.bytes = forward_bytes(sh);
    f.fallback_elements = fallbacks_of_last_launch();
    result.kernels.push_back(f);
    if (dump) dump_device(std::filesystem::path(opt.dump_dir) / (p.name + ".out.bin"), out.get(), out.size());
    if (!opt.backward) continue;
    KernelTiming b{p.name, true};
    auto [bm, bmin] = timer.time(opt.reps, kWarmup, [&](int rep) {
      MHC_CUDA_CHECK(cudaMemsetAsync(fb_count.get(), 0, sizeof(unsigned long long)));
      launch_backward(p.desc, inputs[rep % sets].view(sh), bwd_out, fallback, nullptr, deferred.view());
    });
    b.median_ms = bm, b.min_ms = bmin, b.bytes = backward_bytes(sh);
    b.fallback_elements = fallbacks_of_last_launch();
    result.kernels.push_back(b);
    if (dump) {
      const std::filesystem::path dir(opt.dump_dir);
      dump_device(dir / (p.name + ".grad_x.bin"), grad_x.get(), grad_x.size());
      dump_device(dir / (p.name + ".grad_residual.bin"), grad_residual.get(), grad_residual.size());
      dump_device(dir / (p.name + ".grad_post.bin"), grad_post.get(), grad_post.size());
      dump_device(dir / (p.name + ".grad_comb.bin"), grad_comb.get(), grad_comb.size());
    }
  }
  if (dump) {
    // The last timed launch of every policy used input set (reps - 1) % sets: dump that one.
    const std::filesystem::path dir(opt.dump_dir);
    const InputSet& in = inputs[(opt.reps - 1) % sets];
    dump_device(dir / "x.bin", in.x.get(), in.x.size());
    dump_device(dir / "residual.bin", in.residual.get(), in.residual.size());
    dump_device(dir / "grad_out.bin", in.grad_out.get(), in.grad_out.size());
    dump_device(dir / "post.bin", in.post.get(), in.post.size());
    dump_device(dir / "comb.bin", in.comb.get(), in.comb.size());
    std::ofstream meta(dir / "meta.json");
    meta << "{\"S\": " << sh.S << ", \"H\": " << sh.H << ", \"D\": " << sh.D << ", \"policies\": [";
    for (size_t i = 0; i < policies.size(); ++i) meta << (i ? ", " : "") << '"' << policies[i].name << '"';
    meta << "]}\n";
  }
  return result;
}

}  // namespace mhc::cuda
