// Block quantization arithmetic, written once over the lane policy P. The per-block parameters are
// plain floats computed by one function, so every path (and CUDA) derives the same scale from the
// same minimum and maximum. Included inside a namespace (see prelude.hpp).

struct block_params {
  float scale;      // x ~= code * scale + offset
  float inv_scale;  // levels / range: 0 for a constant block, so every code is 0
  float offset;     // 0 (symmetric) or the block minimum
  float lowest;     // smallest code
  float highest;    // largest code
};

// `lo` and `hi` are the block's minimum and maximum. Signed zeros are made +0 first: min and max
// pick between -0 and +0 by lane order, which differs between paths.
ZOE_ARITH block_params make_block_params(const ::zoe::kernels::detail::quant_layout& layout, float lo, float hi) {
  lo = lo + 0.0f;
  hi = hi + 0.0f;
  block_params p{};
  if (layout.symmetric) {
    const float qmax = layout.bits == 8 ? 127.0f : 7.0f;
    const float a = -lo > hi ? -lo : hi;
    p.scale = a / qmax;
    p.inv_scale = a > 0.0f ? qmax / a : 0.0f;
    p.offset = 0.0f;
    p.lowest = -qmax;
    p.highest = qmax;
  } else {
    const float levels = layout.bits == 8 ? 255.0f : 15.0f;
    const float range = hi - lo;
    p.scale = range / levels;
    p.inv_scale = range > 0.0f ? levels / range : 0.0f;
    p.offset = lo;
    p.lowest = 0.0f;
    p.highest = levels;
  }
  return p;
}

// The parameters broadcast to P's lanes.
template <class P>
struct block_lanes {
  typename P::F scale, inv_scale, offset, lowest, highest;
  ZOE_ARITH explicit block_lanes(const block_params& b)
      : scale(P::f(b.scale)), inv_scale(P::f(b.inv_scale)), offset(P::f(b.offset)), lowest(P::f(b.lowest)),
        highest(P::f(b.highest)) {}
};

// Clamping before rounding keeps the code in range even when (x - offset) * inv_scale rounds a
// hair past the last level (and sends NaN to the lowest code: max returns its second operand when
// unordered). The clamped value y lies in [-127, 255]; adding 1.5 * 2^23 puts the sum in [2^23,
// 2^24), where the ulp is 1, so the FPU rounds y to the nearest integer, ties to even (1.5 * 2^23 is
// even, so the tie goes the same way as for y alone), and the sum's bits are 0x4b400000 + code: the
// low byte is the code in two's complement (int8) or plain (uint8). No float-to-int conversion with
// its overflow fix-up, and storing a code is keeping a byte. Returns those bits.
inline constexpr float code_magic = 0x1.8p23f;
inline constexpr std::uint32_t code_magic_bits = 0x4b400000u;

template <class P>
ZOE_ARITH typename P::U quantize_bits(typename P::F x, const block_lanes<P>& b) {
  return P::bits(P::min(P::max((x - b.offset) * b.inv_scale, b.lowest), b.highest) + P::f(code_magic));
}

// The code as an integer.
template <class P>
ZOE_ARITH typename P::I quantize_value(typename P::F x, const block_lanes<P>& b) {
  return P::as_i(quantize_bits<P>(x, b) - P::u(code_magic_bits));
}

template <class P>
ZOE_ARITH typename P::F dequantize_value(typename P::I code, const block_lanes<P>& b) {
  return P::to_float(code) * b.scale + b.offset;
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
