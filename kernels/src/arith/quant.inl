// Block quantization arithmetic, written once over the lane policy P. The per-block parameters are
// plain floats computed by one function, so every path (and CUDA) derives the same scale from the
// same minimum and maximum. Included inside a namespace (see prelude.hpp).

struct block_params {
  float scale;      // x ~= code * scale + offset
  float inv_scale;  // levels / range, the range taken in the coding domain (see `prescaled`)
  float offset;     // 0 (symmetric) or the block minimum
  float lowest;     // smallest code
  bool prescaled;   // code from x * prescale - offset * prescale (see make_block_params)
  float prescale;   // the power of two of the coding domain: 1 unless `prescaled`
};

// Two kinds of block have a range that float cannot code from directly, and both are coded in a
// domain scaled by a power of two, x * prescale - offset * prescale, against
// inv_scale = levels / (range * prescale); scaling by a power of two is exact, so the codes are
// those the unscaled arithmetic would give if it had the exponent range:
// - a range so small that levels / range overflows to infinity (below about levels * 2^-128; only
//   fp32 or bf16 values near 1e-37 and below reach it) would code every nonzero value as infinity.
//   Its values are far below 2^-64, so times 2^64 they are exact (subnormals included) and
//   levels / (range * 2^64) is finite.
// - an asymmetric block of huge values of both signs (near +-2^127, fp32 or bf16) has a range
//   hi - lo that overflows to infinity, and so do some x - lo. Halved, every value and the range
//   fit (|hi / 2 - lo / 2| < 2^128), and the extremes, at least 2^104 in magnitude, halve exactly.
inline constexpr float tiny_block_prescale = 0x1p64f;
inline constexpr float huge_block_prescale = 0x1p-1f;
inline constexpr float float_max = 0x1.fffffep127f;

// The multiplier for the codes: levels / range, or 0 for a range of 0, NaN or infinity (every code
// 0), and the prescaled one for a tiny range.
ZOE_ARITH void set_inv_scale(block_params& p, float levels, float range) {
  const float inv = range > 0.0f ? levels / range : 0.0f;
  p.prescaled = inv > float_max;
  p.prescale = p.prescaled ? tiny_block_prescale : 1.0f;
  p.inv_scale = p.prescaled ? levels / (range * tiny_block_prescale) : inv;
}

// `lo` and `hi` are the block's minimum and maximum. Signed zeros are made +0 first: min and max
// pick between -0 and +0 by lane order, which differs between paths.
ZOE_ARITH block_params make_block_params(const ::zoe::kernels::detail::quant_layout& layout, float lo, float hi) {
  lo = lo + 0.0f;
  hi = hi + 0.0f;
  block_params p{};
  if (layout.symmetric) {
    // a <= FLT_MAX for finite values: no overflow to guard against.
    const float qmax = layout.bits == 8 ? 127.0f : 7.0f;
    const float a = -lo > hi ? -lo : hi;
    p.scale = a / qmax;
    set_inv_scale(p, qmax, a);
    p.offset = 0.0f;
    p.lowest = -qmax;
  } else {
    const float levels = layout.bits == 8 ? 255.0f : 15.0f;
    const float range = hi - lo;
    p.offset = lo;
    p.lowest = 0.0f;
    if (range > float_max && lo >= -float_max && hi <= float_max) {
      // Finite extremes, overflowing range: coded halved (see huge_block_prescale). The scale, at
      // most 2^128 / 15 / 2, stays finite.
      const float half_range = hi * huge_block_prescale - lo * huge_block_prescale;
      p.scale = half_range / levels / huge_block_prescale;
      p.inv_scale = levels / half_range;
      p.prescaled = true;
      p.prescale = huge_block_prescale;
    } else {
      p.scale = range / levels;
      set_inv_scale(p, levels, range);
    }
  }
  return p;
}

// The parameters decoding needs: a block's stored scale and offset (zero point).
ZOE_ARITH block_params stored_block_params(float scale, float offset) {
  block_params p{};
  p.scale = scale;
  p.offset = offset;
  p.prescale = 1.0f;
  return p;
}

// A block is decoded halved, (code * (scale / 2) + offset / 2) * 2, from this scale up: with |code|
// <= 255 < 2^8, code * scale may then pass FLT_MAX (huge blocks, symmetric blocks near FLT_MAX)
// before the offset brings it back, or the rounding of the scale carry code * scale + offset past
// it when x is near FLT_MAX. Halving is exact at these magnitudes (except for a subnormal offset,
// whose last bit is far below the step), so where the direct sum stays finite the halved one gives
// its bits.
inline constexpr float halved_decode_scale = 0x1p100f;

// The parameters broadcast to P's lanes.
template <class P>
struct block_lanes {
  typename P::F scale, inv_scale, offset, lowest, prescale, prescaled_offset, half_scale, half_offset;
  bool halved;  // decode halved (see halved_decode_scale)
  ZOE_ARITH explicit block_lanes(const block_params& b)
      : scale(P::f(b.scale)),
        inv_scale(P::f(b.inv_scale)),
        offset(P::f(b.offset)),
        lowest(P::f(b.lowest)),
        prescale(P::f(b.prescale)),
        prescaled_offset(P::f(b.offset * b.prescale)),
        half_scale(P::f(b.scale * 0.5f)),
        half_offset(P::f(b.offset * 0.5f)),
        halved(b.scale >= halved_decode_scale && b.scale <= float_max) {}
};

// The code of x: (x - offset) * inv_scale rounded to the nearest integer, ties to even (with
// `prescaled`, (x * prescale - offset * prescale) * inv_scale, see block_params). Only the lower
// clamp is applied, and only for NaN (max returns its second operand when unordered, so NaN gets
// the lowest code): the block's lo and hi are its exact extremes (see the keys below), so with
// u = 2^-24, (x - lo) <= range and |x| <= a hold after rounding too (rounding is monotonic, so
// likewise in the scaled domain), inv_scale is finite, and the scaled value lies within
// levels * (1 + u)^2 of the range, short of half a step past either end. Symmetric blocks skip the
// subtraction: their offset is +0, and x - (+0) is x, bit for bit. P::round_to_int rounds the way
// every path does (scalar_lanes: adding 1.5 * 2^23, see there; x86: cvtps2dq).
template <class P, bool symmetric, bool prescaled>
ZOE_ARITH typename P::I quantize_value(typename P::F x, const block_lanes<P>& b) {
  if constexpr (prescaled) {
    x = x * b.prescale;
    if constexpr (!symmetric) x = x - b.prescaled_offset;
  } else if constexpr (!symmetric) {
    x = x - b.offset;
  }
  return P::round_to_int(P::max(x * b.inv_scale, b.lowest));
}

// code * scale + offset; halved for a huge scale and clamped to +-FLT_MAX, where the decoded
// value, within half a step of a finite x, may still round just past it (see halved_decode_scale).
// The clamp keeps NaN: max and min return their second operand when unordered.
template <class P>
ZOE_ARITH typename P::F dequantize_value(typename P::I code, const block_lanes<P>& b) {
  if (b.halved) {
    const auto x = (P::to_float(code) * b.half_scale + b.half_offset) * P::f(2.0f);
    return P::min(P::f(float_max), P::max(P::f(-float_max), x));
  }
  return P::to_float(code) * b.scale + b.offset;
}

// ---- block extremes on integer keys ---------------------------------------------------------------
// A block's minimum and maximum are taken on integer keys of the elements' bits rather than on
// floats. The keys order exactly as the values do, so finite blocks get the same extremes as a
// float min/max would, and three things improve: 16-bit input is scanned as 16-bit integers, twice
// the lanes and no widening (the widening then happens once, in the coding pass); a symmetric
// block needs one max per element on the magnitude instead of a min and a max; and NaN has a
// place in the order (above infinity, by sign), so a block holding one gets the same (NaN) scale
// on every path, where float min/max would depend on lane order. K is a key lane policy: int16 or
// int32 lanes on SIMD paths, one int32 on the scalar path and CUDA (16-bit bits sign-extended,
// which keeps both keys' order and values).

// The magnitude bits of each sign-magnitude type: the key of |x| for symmetric blocks.
template <::zoe::kernels::dtype T>
inline constexpr std::int32_t magnitude_mask = T == ::zoe::kernels::dtype::fp32 ? 0x7fffffff : 0x7fff;

template <class K, ::zoe::kernels::dtype T>
ZOE_ARITH typename K::V magnitude_key(typename K::V bits) {
  return K::and_(bits, K::set(magnitude_mask<T>));
}

// Negative values have their magnitude bits flipped, so larger magnitudes order lower; -0 lands
// just below +0. The map is its own inverse (the sign bit stays), so it also turns a key back into
// bits.
template <class K, ::zoe::kernels::dtype T>
ZOE_ARITH typename K::V ordered_key(typename K::V bits) {
  return K::xor_(bits, K::and_(K::sign_fill(bits), K::set(magnitude_mask<T>)));
}

// The float whose key (as an int32, 16-bit keys sign-extended) is `key`.
template <::zoe::kernels::dtype T>
ZOE_ARITH float float_of_key(std::int32_t key, bool magnitude) {
  using P = scalar_lanes;
  using K = scalar_keys<std::int32_t>;
  const auto bits = static_cast<std::uint32_t>(magnitude ? key : ordered_key<K, T>(key));
  if constexpr (T == ::zoe::kernels::dtype::fp32) {
    return P::from_bits(bits);
  } else if constexpr (T == ::zoe::kernels::dtype::bf16) {
    return float_from_bf16<P>(bits & 0xffffu);
  } else {
    return float_from_fp16<P>(bits & 0xffffu);
  }
}

// A block's extremes as keys: for a symmetric block the largest magnitude key (in `hi`; `lo` is
// unused), otherwise the smallest and largest ordered keys.
struct block_keys {
  std::int32_t lo;
  std::int32_t hi;
};

// The keys of elements with raw bits `bits` in a symmetric block (magnitudes) or not (ordered).
template <class K, ::zoe::kernels::dtype T, bool symmetric>
ZOE_ARITH typename K::V key_of(typename K::V bits) {
  if constexpr (symmetric) {
    return magnitude_key<K, T>(bits);
  } else {
    return ordered_key<K, T>(bits);
  }
}

// Folds key vector `bits` (the raw bits of some elements) into the running extremes.
template <class K, ::zoe::kernels::dtype T, bool symmetric>
ZOE_ARITH void fold_keys(typename K::V bits, typename K::V& lo, typename K::V& hi) {
  const typename K::V k = key_of<K, T, symmetric>(bits);
  if constexpr (!symmetric) lo = K::min(lo, k);
  hi = K::max(hi, k);
}

// The block parameters from the extremes found as keys: symmetric blocks as the extremes -a and a.
template <::zoe::kernels::dtype T>
ZOE_ARITH block_params params_of_keys(const ::zoe::kernels::detail::quant_layout& layout, block_keys k) {
  if (layout.symmetric) {
    const float a = float_of_key<T>(k.hi, true);
    return make_block_params(layout, -a, a);
  }
  return make_block_params(layout, float_of_key<T>(k.lo, false), float_of_key<T>(k.hi, false));
}

// int4: element 2i in the low nibble, 2i+1 in the high nibble. Symmetric codes are two's complement
// nibbles, asymmetric ones plain 0..15.
ZOE_ARITH std::uint8_t pack_nibbles(std::int8_t even, std::int8_t odd) {
  return static_cast<std::uint8_t>((static_cast<unsigned>(even) & 0xfu) | ((static_cast<unsigned>(odd) & 0xfu) << 4));
}

ZOE_ARITH std::int8_t unpack_nibble(std::uint8_t byte, bool high, bool symmetric) {
  const unsigned nibble = high ? (byte >> 4) & 0xfu : byte & 0xfu;
  // Sign-extend the nibble for symmetric codes: 8..15 stand for -8..-1.
  return static_cast<std::int8_t>(symmetric && nibble >= 8u ? static_cast<int>(nibble) - 16 : static_cast<int>(nibble));
}
