#pragma once
// Every CUDA runtime call is checked; a failure becomes CudaError (an internal error, not bad input),
// naming the call and where it was made. An allocation larger than the GPU's free memory is std::bad_alloc instead.
#include <cuda_runtime.h>

#include <cstddef>
#include <new>
#include <stdexcept>
#include <string>

namespace mhc::cuda {

class CudaError : public std::runtime_error {
 public:
  explicit CudaError(const std::string& what) : std::runtime_error(what) {}
};

inline void check_cuda(cudaError_t status, const char* call, const char* file, int line) {
  if (status != cudaSuccess)
    throw CudaError(std::string("CUDA error ") + cudaGetErrorName(status) + " (" + cudaGetErrorString(status) +
                    ") in " + call + " at " + file + ":" + std::to_string(line));
}

#define MHC_CUDA_CHECK(call) ::mhc::cuda::check_cuda((call), #call, __FILE__, __LINE__)
// After every kernel launch: a bad configuration shows up here, not at the next unrelated call.
#define MHC_CUDA_CHECK_LAUNCH() ::mhc::cuda::check_cuda(cudaGetLastError(), "kernel launch", __FILE__, __LINE__)

// Owning device allocation (cudaMalloc: plain device memory, never managed).
template <class T>
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t count) : count_(count) {
    if (!count_) return;
    const cudaError_t status = cudaMalloc(&ptr_, count_ * sizeof(T));
    if (status == cudaErrorMemoryAllocation) {
      // A request larger than the GPU's free memory (a --shape or slab too large), not an internal error: the same
      // exception as the host's, which the CLI reports as not enough memory. The error is not sticky; it is
      // cleared so that no later check reports it again.
      cudaGetLastError();
      count_ = 0;
      throw std::bad_alloc();
    }
    MHC_CUDA_CHECK(status);
  }
  ~DeviceBuffer() {
    if (ptr_) cudaFree(ptr_);  // no throw from a destructor; a failed free leaks at worst
  }
  DeviceBuffer(DeviceBuffer&& o) noexcept : ptr_(o.ptr_), count_(o.count_) { o.ptr_ = nullptr, o.count_ = 0; }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    if (this != &o) {
      if (ptr_) cudaFree(ptr_);
      ptr_ = o.ptr_, count_ = o.count_;
      o.ptr_ = nullptr, o.count_ = 0;
    }
    return *this;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  T* get() const { return ptr_; }
  size_t size() const { return count_; }
  size_t bytes() const { return count_ * sizeof(T); }

 private:
  T* ptr_ = nullptr;
  size_t count_ = 0;
};

}  // namespace mhc::cuda
