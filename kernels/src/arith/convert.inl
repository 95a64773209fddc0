// fp32 <-> fp16 / bf16, written once over the lane policy P (scalar_lanes or a SIMD policy) with
// integer arithmetic and one float addition, so every path rounds identically. No hardware
// conversion instruction is used: AVX512_BF16's flushes subnormals, and emulations differ on NaN.
// Included inside a namespace (see prelude.hpp).

// bf16: round to nearest even at bit 16 by adding 0x7fff plus the lowest kept bit; a carry out of
// the mantissa correctly bumps the exponent (up to infinity). NaN keeps sign and upper payload and
// gets the quiet bit, so no payload can round into an infinity.
template <class P>
ZOE_ARITH typename P::U bf16_from_float(typename P::F x) {
  using U = typename P::U;
  const U b = P::bits(x);
  const U magnitude = b & P::u(0x7fffffffu);
  const U rounded = P::template shr<16>(b + P::u(0x7fffu) + (P::template shr<16>(b) & P::u(1)));
  const U quiet_nan = P::template shr<16>(b) | P::u(0x40u);
  return P::select(P::gt(magnitude, P::u(0x7f800000u)), quiet_nan, rounded);
}

template <class P>
ZOE_ARITH typename P::F float_from_bf16(typename P::U h) {
  return P::from_bits(P::template shl<16>(h));
}

// binary16: three cases chosen lane by lane.
//  normal results: rebias the exponent (127 -> 15) and round to nearest even at bit 13; anything
//   that rounds past 65504 lands on or beyond 0x7c00 and is clamped to infinity;
//  subnormal results (|x| < 2^-14): adding 0.5f puts the binary16 subnormal step 2^-24 at the ulp
//   of the sum, so the FPU's own round-to-nearest-even does the rounding;
//  NaN: quiet, upper payload kept.
template <class P>
ZOE_ARITH typename P::U fp16_from_float(typename P::F x) {
  using U = typename P::U;
  const U b = P::bits(x);
  const U sign = P::template shr<16>(b) & P::u(0x8000u);
  const U magnitude = b & P::u(0x7fffffffu);
  const U rebiased = magnitude - P::u(0x38000000u);
  U normal = P::template shr<13>(rebiased + P::u(0xfffu) + (P::template shr<13>(rebiased) & P::u(1)));
  normal = P::select(P::gt(normal, P::u(0x7c00u)), P::u(0x7c00u), normal);
  const U subnormal = P::bits(P::from_bits(magnitude) + P::f(0.5f)) - P::u(0x3f000000u);
  const U quiet_nan = P::u(0x7e00u) | (P::template shr<13>(magnitude) & P::u(0x3ffu));
  const U finite = P::select(P::lt(magnitude, P::u(0x38800000u)), subnormal, normal);
  return sign | P::select(P::gt(magnitude, P::u(0x7f800000u)), quiet_nan, finite);
}

// Exact: normals rebias, subnormals are their integer mantissa times 2^-24, infinities and NaNs keep
// their payload (NaN made quiet).
template <class P>
ZOE_ARITH typename P::F float_from_fp16(typename P::U h) {
  using U = typename P::U;
  const U magnitude = h & P::u(0x7fffu);
  const U sign = P::template shl<16>(h & P::u(0x8000u));
  const U shifted = P::template shl<13>(magnitude);
  const U normal = shifted + P::u(0x38000000u);
  const U inf_or_nan = shifted + P::u(0x70000000u);
  const U special = P::select(P::gt(magnitude, P::u(0x7c00u)), inf_or_nan | P::u(0x00400000u), inf_or_nan);
  const U subnormal = P::bits(P::to_float(P::as_i(magnitude)) * P::f(0x1p-24f));
  const U wide =
      P::select(P::lt(magnitude, P::u(0x400u)), subnormal, P::select(P::gt(magnitude, P::u(0x7bffu)), special, normal));
  return P::from_bits(sign | wide);
}

// Widening binary16 is exact, so there is one right answer for every input, NaN included (quiet, its
// payload shifted up). A policy with P::native_fp16 loads and widens in hardware (F16C / AVX-512
// vcvtph2ps gives exactly float_from_fp16's bits, and costs one instruction instead of a dozen);
// the others use the integer arithmetic above. Narrowing has no such exemption: it rounds, and the
// hardware's rounding of NaN and its flags are not ours, so fp16_from_float is always used.
template <class P>
ZOE_ARITH typename P::F widen_fp16(const std::uint16_t* p) {
  if constexpr (P::native_fp16) {
    return P::load_fp16(p);
  } else {
    return float_from_fp16<P>(P::load_u16(p));
  }
}

// Loads or stores lanes of a buffer of `T`, widening to or narrowing from float.
template <class P, ::zoe::kernels::dtype T>
ZOE_ARITH typename P::F load_as_float(const void* base, std::size_t i) {
  if constexpr (T == ::zoe::kernels::dtype::fp32) {
    return P::load_f32(static_cast<const float*>(base) + i);
  } else if constexpr (T == ::zoe::kernels::dtype::bf16) {
    return float_from_bf16<P>(P::load_u16(static_cast<const std::uint16_t*>(base) + i));
  } else {
    return widen_fp16<P>(static_cast<const std::uint16_t*>(base) + i);
  }
}

// With `stream`, 16-bit results go out with P::stream_u16 (base + i aligned as it asks).
template <class P, ::zoe::kernels::dtype T, bool stream = false>
ZOE_ARITH void store_from_float(typename P::F v, void* base, std::size_t i) {
  if constexpr (T == ::zoe::kernels::dtype::fp32) {
    P::store_f32(v, static_cast<float*>(base) + i);
  } else {
    const typename P::U h = T == ::zoe::kernels::dtype::bf16 ? bf16_from_float<P>(v) : fp16_from_float<P>(v);
    if constexpr (stream) {
      P::stream_u16(h, static_cast<std::uint16_t*>(base) + i);
    } else {
      P::store_u16(h, static_cast<std::uint16_t*>(base) + i);
    }
  }
}
