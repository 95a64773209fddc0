#pragma once
// The seeded initializers: counter-based, so element i of a parameter depends only on (init,
// scale, seed, i), never on the order, the thread count or the configuration, and a reference
// implementation can reproduce any piece of a parameter's initial value.
//
//   r(k)    = the k-th output of splitmix64 seeded with `seed` (k counted from 0): the mix of
//             seed + (k + 1) * 0x9E3779B97F4A7C15
//   u(k)    = (r(k) >> 11) * 2^-53, uniform in [0, 1) with 53 bits
//   uniform: element i = scale * (2 u(i) - 1) in double, rounded to float (and kept below scale)
//   normal:  element i = scale * sqrt(-2 ln(1 - u(2i))) * cos(2 pi u(2i+1)) in double (Box-Muller),
//            rounded to float
//
// The arithmetic is double; std::log and std::cos are glibc's, deterministic on one platform.

#include <cstdint>
#include <span>

#include "zoe/zoe.h"

namespace zoe::bindings {

/// Writes elements [first, first + values.size()) of initializer `init` (a zoe_init value as a
/// caller passed it: ZOE_INIT_ZEROS, ZOE_INIT_UNIFORM or ZOE_INIT_NORMAL). usage_error for ZOE_INIT_DATA or an unknown
/// one. Thread-safe.
void fill_initial(int init, float scale, std::uint64_t seed, std::uint64_t first, std::span<float> values);

}  // namespace zoe::bindings
