// VINF_HD marks small inline functions that the host compiler and nvcc both compile, so the CPU
// and CUDA paths share one definition of the arithmetic.
#pragma once

#if defined(__CUDACC__)
#define VINF_HD __host__ __device__ __forceinline__
#else
#define VINF_HD inline
#endif
