#pragma once
// Run-time choices turned into compile-time constants, so each kernel loop is instantiated once per
// choice and branches on nothing inside: the dtype of a buffer, or a flag.

#include "zoe/kernels/dtype.hpp"

namespace zoe::kernels::detail {

/// Calls fn.template operator()<T>() with T the run-time dtype as a compile-time constant.
template <class Fn>
void with_dtype(dtype t, Fn&& fn) {
  switch (t) {
    case dtype::fp32: fn.template operator()<dtype::fp32>(); break;
    case dtype::fp16: fn.template operator()<dtype::fp16>(); break;
    case dtype::bf16: fn.template operator()<dtype::bf16>(); break;
  }
}

/// Calls fn.template operator()<flag>() with a run-time flag as a compile-time constant.
template <class Fn>
void with_flag(bool flag, Fn&& fn) {
  if (flag) {
    fn.template operator()<true>();
  } else {
    fn.template operator()<false>();
  }
}

}  // namespace zoe::kernels::detail
