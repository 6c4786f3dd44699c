// The forward kernels: one thread per (token, chunk of 8 d). Every value comes from forward_value /
// forward_exact (kernels/operator_math.hpp), as on the CPU.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "kernels/cuda/cuda_check.hpp"
#include "kernels/cuda/kernel_common.cuh"
#include "kernels/cuda/operator_kernels.hpp"

namespace mhc::cuda {
namespace {

using namespace detail;

// ---- Forward ----------------------------------------------------------------------------------------------
// One thread per (token, chunk of 8 d): it loads x and the H residual rows of its chunk (16 bytes each when
// aligned) and writes the H output chunks. HC is H as a constant (0: the generic kernel, H read at run time).

constexpr int kForwardThreads = 128;

template <Mode M, int HC, bool kAligned, class Pol>
__global__ void __launch_bounds__(kForwardThreads)
    forward_kernel(Pol pol, InputsView in, ForwardOutputs out, FallbackList fb) {
  constexpr int HA = HC > 0 ? HC : kMaxStreams;
  // Unrolled with a constant H (registers); the generic kernel keeps its loops (small code, local arrays).
  constexpr int kUnroll = HC > 0 ? HC : 1;
  const int H = HC > 0 ? HC : in.shape.H;
  const PolicyDesc pd = pol.get();
  const int64_t D = in.shape.D;
  const int64_t chunks = (D + kChunk - 1) / kChunk;
  const int64_t c = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= chunks) return;
  const int64_t d0 = c * kChunk;
  const int n = static_cast<int>(D - d0 < kChunk ? D - d0 : kChunk);
  for (int64_t s = blockIdx.y; s < in.shape.S; s += gridDim.y) {
    const Chunk xc = load_chunk<kAligned>(in.x + s * D + d0, n);
    Chunk rc[HA];
#pragma unroll kUnroll
    for (int k = 0; k < H; ++k)
      rc[k] = load_chunk<kAligned>(in.residual + (s * H + k) * D + d0, n);
    const float* post = in.post + s * H;
    const float* comb = in.comb + s * H * H;
#pragma unroll kUnroll
    for (int ho = 0; ho < H; ++ho) {
      float cc[HA];  // comb[s, k, ho]: the column of ho
#pragma unroll kUnroll
      for (int k = 0; k < H; ++k) cc[k] = __ldg(comb + k * H + ho);
      const float p = __ldg(post + ho);
      const int64_t base = (s * H + ho) * D + d0;
      Chunk oc;
#pragma unroll
      for (int e = 0; e < kChunk; ++e) {
        float r[HA];
#pragma unroll kUnroll
        for (int k = 0; k < H; ++k) r[k] = chunk_elem(rc[k], e);
        if constexpr (M == Mode::exact) {
          const ExactRounded v = forward_exact(p, chunk_elem(xc, e), cc, r, H).result();
          chunk_set(oc, e, v.bf16());
          if (e < n) {
            if (out.out_f64) out.out_f64[base + e] = v.rn64;
            if (!v.certified) push_fallback(fb, FallbackKind::out, base + e);
          }
        } else {
          const RoundedT<M> v = forward_value<RoundedT<M>>(pd, p, chunk_elem(xc, e), cc, r, H);
          chunk_set(oc, e, round_to_bf16_rne(v));
          if constexpr (M == Mode::fp64)
            if (e < n && out.out_f64) out.out_f64[base + e] = v;
        }
      }
      store_chunk<kAligned>(out.out + base, n, oc);
    }
  }
}

// ---- Launch configuration ---------------------------------------------------------------------------------

constexpr unsigned kMaxGridY = 65535;

dim3 forward_grid(const Shape& sh) {
  const int64_t chunks = (sh.D + kChunk - 1) / kChunk;
  return dim3(static_cast<unsigned>((chunks + kForwardThreads - 1) / kForwardThreads),
              static_cast<unsigned>(std::min<int64_t>(sh.S, kMaxGridY)));
}

template <Mode M, int HC, bool kAligned, class Pol>
void launch_forward_kernel(Pol pol, const InputsView& in, const ForwardOutputs& out, const FallbackList& fb,
                           cudaStream_t stream) {
  forward_kernel<M, HC, kAligned, Pol><<<forward_grid(in.shape), kForwardThreads, 0, stream>>>(pol, in, out, fb);
  MHC_CUDA_CHECK_LAUNCH();
}

// Specialised H in {1, 2, 4, 8}; false when H is another value.
template <Mode M, class Pol>
bool launch_forward_specialised(Pol pol, const InputsView& in, const ForwardOutputs& out, const FallbackList& fb,
                                cudaStream_t stream) {
  switch (in.shape.H) {
    case 1: launch_forward_kernel<M, 1, true>(pol, in, out, fb, stream); return true;
    case 2: launch_forward_kernel<M, 2, true>(pol, in, out, fb, stream); return true;
    case 4: launch_forward_kernel<M, 4, true>(pol, in, out, fb, stream); return true;
    case 8: launch_forward_kernel<M, 8, true>(pol, in, out, fb, stream); return true;
    default: return false;
  }
}

template <Mode M>
void launch_forward_generic(const PolicyDesc& pd, const InputsView& in, const ForwardOutputs& out,
                            const FallbackList& fb, cudaStream_t stream, bool aligned) {
  if (aligned) launch_forward_kernel<M, 0, true>(RuntimePolicy{pd}, in, out, fb, stream);
  else launch_forward_kernel<M, 0, false>(RuntimePolicy{pd}, in, out, fb, stream);
}

bool forward_is_specialised(const PolicyDesc& pd, const InputsView& in, const ForwardOutputs& out) {
  if (!specialised_shape(in.shape) || !rows_aligned(in, out.out, nullptr)) return false;
  return pd.accumulator == Accumulator::exact ||
         with_static_preset(pd, [](auto) { return true; });
}

}  // namespace

void launch_forward(const PolicyDesc& pd, const InputsView& in, const ForwardOutputs& out, const FallbackList& fb,
                    cudaStream_t stream) {
  if (in.shape.S == 0) return;
  const bool aligned = rows_aligned(in, out.out, nullptr);
  if (forward_is_specialised(pd, in, out)) {
    if (pd.accumulator == Accumulator::exact) {
      launch_forward_specialised<Mode::exact>(RuntimePolicy{pd}, in, out, fb, stream);
      return;
    }
    with_static_preset(pd, [&](auto pol) {
      return launch_forward_specialised<static_mode<decltype(pol)>()>(pol, in, out, fb, stream);
    });
    return;
  }
  switch (pd.accumulator) {
    case Accumulator::fp32: launch_forward_generic<Mode::fp32>(pd, in, out, fb, stream, aligned); break;
    case Accumulator::fp64: launch_forward_generic<Mode::fp64>(pd, in, out, fb, stream, aligned); break;
    case Accumulator::exact: launch_forward_generic<Mode::exact>(pd, in, out, fb, stream, aligned); break;
  }
}

const char* forward_kernel_family(const PolicyDesc& pd, const InputsView& in) {
  ForwardOutputs aligned_out;  // the caller's outputs are cudaMalloc'ed: aligned
  return forward_is_specialised(pd, in, aligned_out) ? "specialised" : "generic";
}

}  // namespace mhc::cuda
