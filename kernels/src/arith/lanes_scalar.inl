// One lane of float: the value type the scalar CPU path and the CUDA kernels instantiate the shared
// arithmetic on, and the one every SIMD path uses for its tail. Included inside a namespace (see
// prelude.hpp); no include guard on purpose.

// One int32 key lane (see quant.inl's block extremes); `Bits` is the stored type of the raw bits.
template <class Bits>
struct scalar_keys {
  using V = std::int32_t;
  ZOE_ARITH static std::size_t lanes() { return 1; }
  ZOE_ARITH static V load(const void* base, std::size_t i) { return static_cast<const Bits*>(base)[i]; }
  ZOE_ARITH static V set(std::int32_t x) { return x; }
  ZOE_ARITH static V and_(V a, V b) { return a & b; }
  ZOE_ARITH static V xor_(V a, V b) { return a ^ b; }
  ZOE_ARITH static V sign_fill(V a) { return a < 0 ? -1 : 0; }
  ZOE_ARITH static V min(V a, V b) { return a < b ? a : b; }
  ZOE_ARITH static V max(V a, V b) { return a > b ? a : b; }
  ZOE_ARITH static std::int32_t min_of_lanes(V v) { return v; }
  ZOE_ARITH static std::int32_t max_of_lanes(V v) { return v; }
};

struct scalar_lanes {
  using F = float;
  using U = std::uint32_t;
  using I = std::int32_t;
  using M = bool;

  ZOE_ARITH static std::size_t lanes() { return 1; }
  // No hardware fp16 -> fp32 widening: convert.inl's integer arithmetic does it (see widen_fp16).
  static constexpr bool native_fp16 = false;

  ZOE_ARITH static F f(float x) { return x; }
  ZOE_ARITH static U u(std::uint32_t x) { return x; }

  ZOE_ARITH static U bits(F x) {
#if defined(__CUDA_ARCH__)
    return __float_as_uint(x);
#else
    return __builtin_bit_cast(std::uint32_t, x);
#endif
  }
  ZOE_ARITH static F from_bits(U x) {
#if defined(__CUDA_ARCH__)
    return __uint_as_float(x);
#else
    return __builtin_bit_cast(float, x);
#endif
  }

  ZOE_ARITH static F div(F a, F b) {
#if defined(__CUDA_ARCH__)
    return __fdiv_rn(a, b);
#else
    return a / b;
#endif
  }
  ZOE_ARITH static F sqrt(F x) {
#if defined(__CUDA_ARCH__)
    return __fsqrt_rn(x);
#else
    return std::sqrt(x);
#endif
  }
  // The x86 minps/maxps semantics (second operand when unordered), which the SIMD paths have.
  ZOE_ARITH static F min(F a, F b) { return a < b ? a : b; }
  ZOE_ARITH static F max(F a, F b) { return a > b ? a : b; }
  ZOE_ARITH static F abs(F x) { return from_bits(bits(x) & 0x7fffffffu); }

  template <int k>
  ZOE_ARITH static U shr(U x) {
    return x >> k;
  }
  template <int k>
  ZOE_ARITH static U shl(U x) {
    return x << k;
  }

  // Compare as signed 32-bit integers; the arithmetic only compares values below 2^31.
  ZOE_ARITH static M gt(U a, U b) { return static_cast<I>(a) > static_cast<I>(b); }
  ZOE_ARITH static M lt(U a, U b) { return static_cast<I>(a) < static_cast<I>(b); }
  ZOE_ARITH static U select(M m, U yes, U no) { return m ? yes : no; }
  ZOE_ARITH static bool any(M m) { return m; }

  ZOE_ARITH static F to_float(I x) { return static_cast<F>(x); }
  // Rounds to the nearest integer, ties to even, for |x| < 2^22 (quantization codes): adding
  // 1.5 * 2^23 puts the sum in [2^23, 2^24), where the ulp is 1, so the FPU rounds x to an integer
  // (1.5 * 2^23 is even, so a tie goes the same way as for x alone), and the sum's bits are
  // 0x4b400000 plus that integer. No float-to-int conversion with its overflow handling.
  ZOE_ARITH static I round_to_int(F x) { return static_cast<I>(bits(x + 0x1.8p23f) - 0x4b400000u); }
  ZOE_ARITH static I as_i(U x) { return static_cast<I>(x); }
  ZOE_ARITH static U as_u(I x) { return static_cast<U>(x); }

  ZOE_ARITH static F load_f32(const float* p) { return *p; }
  ZOE_ARITH static void store_f32(F v, float* p) { *p = v; }
  ZOE_ARITH static U load_u16(const std::uint16_t* p) { return *p; }
  ZOE_ARITH static void store_u16(U v, std::uint16_t* p) { *p = static_cast<std::uint16_t>(v); }
  // Streaming (non-temporal) stores of 16-bit lanes: none here, so no alignment is asked for.
  static constexpr bool can_stream = false;
  ZOE_ARITH static void stream_u16(U v, std::uint16_t* p) { store_u16(v, p); }
  ZOE_ARITH static void stream_fence() {}
  // Copies bytes to `dst` with streaming stores where it can (here: a plain copy).
  static void stream_bytes(std::uint8_t* dst, const std::uint8_t* src, std::size_t len) {
    for (std::size_t k = 0; k < len; ++k) dst[k] = src[k];
  }
  ZOE_ARITH static I load_i8(const std::int8_t* p) { return *p; }
  // Quantization codes (-127..127 when `is_signed`, else 0..255) as bytes: one lane, or four.
  template <bool is_signed>
  ZOE_ARITH static void store_code(I code, std::uint8_t* p) {
    *p = static_cast<std::uint8_t>(code);
  }
  template <bool is_signed, bool stream = false>
  ZOE_ARITH static void store_codes4(I c0, I c1, I c2, I c3, std::uint8_t* p) {
    p[0] = static_cast<std::uint8_t>(c0);
    p[1] = static_cast<std::uint8_t>(c1);
    p[2] = static_cast<std::uint8_t>(c2);
    p[3] = static_cast<std::uint8_t>(c3);
  }
  ZOE_ARITH static I load_u8(const std::uint8_t* p) { return *p; }

  ZOE_ARITH static void prefetch_l2(const void*) {}

  // Integer keys of the raw bits of `Bits` elements (int16_t or int32_t), one int32 lane, 16-bit
  // bits sign-extended (see quant.inl).
  template <class Bits>
  using keys = scalar_keys<Bits>;

  // Squares of x[0, 8k) into lanes8[i % 8] in fp64; returns 8k, the elements consumed.
  static std::size_t sum_squares8(const float* x, std::size_t count, double* lanes8) {
    std::size_t i = 0;
    for (; i + 8 <= count; i += 8) {
      for (std::size_t j = 0; j < 8; ++j) lanes8[j] += static_cast<double>(x[i + j]) * static_cast<double>(x[i + j]);
    }
    return i;
  }
};
