#pragma once
// Lets one header define arithmetic that both the CPU loops and the CUDA kernels call (STYLE: one definition).
#if defined(__CUDACC__)
#define MHC_HD __host__ __device__ __forceinline__
#else
#define MHC_HD inline
#endif
