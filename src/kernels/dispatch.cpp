#include "kernels/dispatch.hpp"

#include "io/errors.hpp"

#if MHCDIFF_HAVE_CUDA
#include "kernels/cuda/operator_cuda.hpp"
#endif

namespace mhc {

bool cuda_available() {
#if MHCDIFF_HAVE_CUDA
  return cuda::device_available();
#else
  return false;
#endif
}

std::string device_name(Device device) {
#if MHCDIFF_HAVE_CUDA
  if (device == Device::cuda) return cuda::device_name();
#endif
  (void)device;
  return "cpu";
}

Device resolve_device(const std::string& requested) {
  if (requested == "cpu") return Device::cpu;
  if (requested == "auto") return cuda_available() ? Device::cuda : Device::cpu;
  if (requested == "cuda") {
    if (!cuda_available())
      throw InputError(MHCDIFF_HAVE_CUDA ? "--device cuda: no usable CUDA GPU was found"
                                         : "--device cuda: this mhcdiff was built without the CUDA backend");
    return Device::cuda;
  }
  throw InputError("--device must be auto, cpu or cuda (got '" + requested + "')");
}

RunStats forward_on(Device device, const PolicyDesc& pd, const InputsView& in, const ForwardOutputs& out,
                    const CpuOptions& opt) {
#if MHCDIFF_HAVE_CUDA
  if (device == Device::cuda) return cuda::forward(pd, in, out, opt.exact_backend, opt.threads);
#endif
  (void)device;
  return forward_cpu(pd, in, out, opt);
}

RunStats backward_on(Device device, const PolicyDesc& pd, const InputsView& in, const BackwardOutputs& out,
                     const CpuOptions& opt) {
#if MHCDIFF_HAVE_CUDA
  if (device == Device::cuda) return cuda::backward(pd, in, out, opt.exact_backend, opt.threads);
#endif
  (void)device;
  return backward_cpu(pd, in, out, opt);
}

}  // namespace mhc
