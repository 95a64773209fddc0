#pragma once
// What the shared arithmetic (the *.inl files next to this one) needs before it is included inside
// a namespace: standard headers, the argument structs, and ZOE_ARITH, which makes a function
// callable from host and device code under nvcc and forces inlining elsewhere.
//
// Why *.inl included inside a namespace: every instruction set must get its own copy of the
// arithmetic. A header compiled once per target under different flags but with one set of names
// breaks the one-definition rule: the linker keeps one copy, maybe the AVX-512 one, and an
// AVX2-only CPU crashes. So each includer opens its own namespace (per Highway target, the scalar
// path, CUDA) and includes the arithmetic there; the names differ, nothing is shared.

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "kernel_args.hpp"

#if defined(__CUDACC__)
#define ZOE_ARITH __host__ __device__ __forceinline__
#else
#define ZOE_ARITH inline __attribute__((always_inline))
#endif
