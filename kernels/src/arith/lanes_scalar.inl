// One lane of float: the value type the scalar CPU path and the CUDA kernels instantiate the shared
// arithmetic on, and the one every SIMD path uses for its tail. Included inside a namespace (see
// prelude.hpp); no include guard on purpose.

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
  ZOE_ARITH static U shr(U x) { return x >> k; }
  template <int k>
  ZOE_ARITH static U shl(U x) { return x << k; }

  // Compare as signed 32-bit integers; the arithmetic only compares values below 2^31.
  ZOE_ARITH static M gt(U a, U b) { return static_cast<I>(a) > static_cast<I>(b); }
  ZOE_ARITH static M lt(U a, U b) { return static_cast<I>(a) < static_cast<I>(b); }
  ZOE_ARITH static U select(M m, U yes, U no) { return m ? yes : no; }
  ZOE_ARITH static bool any(M m) { return m; }

  ZOE_ARITH static F to_float(I x) { return static_cast<F>(x); }
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
  // The low byte of each lane (quantization codes, see quant.inl).
  ZOE_ARITH static void store_low_bytes(U v, std::uint8_t* p) { *p = static_cast<std::uint8_t>(v & 0xffu); }
  ZOE_ARITH static I load_u8(const std::uint8_t* p) { return *p; }

  ZOE_ARITH static void prefetch(const void*) {}
  ZOE_ARITH static void prefetch_l2(const void*) {}

  ZOE_ARITH static float max_of_lanes(F v) { return v; }
  ZOE_ARITH static float min_of_lanes(F v) { return v; }

  // Squares of x[0, 8k) into lanes8[i % 8] in fp64; returns 8k, the elements consumed.
  static std::size_t sum_squares8(const float* x, std::size_t count, double* lanes8) {
    std::size_t i = 0;
    for (; i + 8 <= count; i += 8) {
      for (std::size_t j = 0; j < 8; ++j) lanes8[j] += static_cast<double>(x[i + j]) * static_cast<double>(x[i + j]);
    }
    return i;
  }
};
