// The CPU loops over the shared arithmetic, written once over a lane policy V: full vectors of V
// first, then the tail one lane at a time with scalar_lanes (the same arithmetic, so the bits do
// not depend on where a vector boundary falls). The scalar path instantiates them with
// V = scalar_lanes. Included inside a namespace (see prelude.hpp), after the arithmetic.

using ::zoe::kernels::dtype;
using ::zoe::kernels::detail::adam_args;
using ::zoe::kernels::detail::cast_args;
using ::zoe::kernels::detail::dequant_args;
using ::zoe::kernels::detail::quant_args;

// Calls f.template operator()<T>() with T the run-time dtype as a compile-time constant.
template <class Fn>
ZOE_ARITH void with_dtype(dtype t, Fn&& fn) {
  switch (t) {
    case dtype::fp32: fn.template operator()<dtype::fp32>(); break;
    case dtype::fp16: fn.template operator()<dtype::fp16>(); break;
    case dtype::bf16: fn.template operator()<dtype::bf16>(); break;
  }
}

// ---- Adam ----------------------------------------------------------------------------------------

// Elements [i, end) in steps of P::lanes(); returns where it stopped (the tail is left).
template <class P, dtype G, dtype W, bool with_working, bool stream = false>
ZOE_ARITH std::size_t adam_lanes(const adam_args& a, const adam_coeffs<P>& c, std::size_t i, std::size_t end) {
  const std::size_t n = P::lanes();
  for (; i + n <= end; i += n) {
    auto p = P::load_f32(a.params + i);
    auto m = P::load_f32(a.exp_avg + i);
    auto v = P::load_f32(a.exp_avg_sq + i);
    adam_update<P>(c, p, load_as_float<P, G>(a.grad, i), m, v);
    P::store_f32(p, a.params + i);
    P::store_f32(m, a.exp_avg + i);
    P::store_f32(v, a.exp_avg_sq + i);
    if constexpr (with_working) store_from_float<P, W, stream>(p, a.working, i);
  }
  return i;
}

// Ranges at least this long write a 16-bit working copy with streaming stores: a shard that size
// is not read back by this core soon (it goes to the device), and a normal store would first read
// every line it fills -- 2 more bytes per parameter on top of the 30 an fp32-gradient step moves.
inline constexpr std::size_t adam_stream_min = std::size_t{1} << 18;

template <class V, dtype G, dtype W, bool with_working>
void adam_typed(const adam_args& a, std::size_t begin, std::size_t end) {
  std::size_t i = begin;
  if constexpr (with_working && W != dtype::fp32 && V::can_stream) {
    const std::size_t align = V::lanes() * sizeof(std::uint16_t);
    const auto address = reinterpret_cast<std::uintptr_t>(static_cast<std::uint16_t*>(a.working) + begin);
    if (end - begin >= adam_stream_min && address % sizeof(std::uint16_t) == 0) {
      // One element at a time up to the alignment Stream needs: the same arithmetic, the same bits.
      const std::size_t head = begin + ((align - address % align) % align) / sizeof(std::uint16_t);
      adam_lanes<scalar_lanes, G, W, true>(a, adam_coeffs<scalar_lanes>(a.s), begin, head);
      i = adam_lanes<V, G, W, true, true>(a, adam_coeffs<V>(a.s), head, end);
      V::stream_fence();
      if (i < end) adam_lanes<scalar_lanes, G, W, true>(a, adam_coeffs<scalar_lanes>(a.s), i, end);
      return;
    }
  }
  i = adam_lanes<V, G, W, with_working>(a, adam_coeffs<V>(a.s), i, end);
  if (i < end) adam_lanes<scalar_lanes, G, W, with_working>(a, adam_coeffs<scalar_lanes>(a.s), i, end);
}

template <class V>
void adam_range_of(const adam_args& a, std::size_t begin, std::size_t end) {
  with_dtype(a.grad_type, [&]<dtype G>() {
    if (a.working == nullptr) {
      adam_typed<V, G, dtype::fp32, false>(a, begin, end);
    } else if (a.working_type == dtype::bf16) {
      adam_typed<V, G, dtype::bf16, true>(a, begin, end);
    } else {
      adam_typed<V, G, dtype::fp16, true>(a, begin, end);
    }
  });
}

// ---- casts, scaling, checks ----------------------------------------------------------------------

template <class P, dtype S, dtype D>
ZOE_ARITH std::size_t cast_lanes(const cast_args& a, std::size_t i, std::size_t end) {
  const std::size_t n = P::lanes();
  for (; i + n <= end; i += n) store_from_float<P, D>(load_as_float<P, S>(a.src, i), a.dst, i);
  return i;
}

template <class V>
void cast_range_of(const cast_args& a, std::size_t begin, std::size_t end) {
  with_dtype(a.src_type, [&]<dtype S>() {
    with_dtype(a.dst_type, [&]<dtype D>() {
      const std::size_t i = cast_lanes<V, S, D>(a, begin, end);
      cast_lanes<scalar_lanes, S, D>(a, i, end);
    });
  });
}

template <class P>
ZOE_ARITH std::size_t scale_lanes(float* x, std::size_t i, std::size_t end, float factor) {
  const std::size_t n = P::lanes();
  const auto f = P::f(factor);
  for (; i + n <= end; i += n) P::store_f32(P::load_f32(x + i) * f, x + i);
  return i;
}

template <class V>
void scale_f32_of(float* x, std::size_t count, float factor) {
  scale_lanes<scalar_lanes>(x, scale_lanes<V>(x, 0, count, factor), count, factor);
}

// x - x is 0 for every finite x and NaN for infinities and NaNs, so one running sum flags both.
template <class P, dtype T>
ZOE_ARITH bool nonfinite_lanes(const void* src, std::size_t& i, std::size_t end) {
  const std::size_t n = P::lanes();
  auto acc = P::f(0.0f);
  for (; i + n <= end; i += n) {
    const auto x = load_as_float<P, T>(src, i);
    acc = acc + (x - x);
  }
  // Compare bits, not floats: a max over lanes may drop a NaN.
  return P::any(P::gt(P::bits(acc) & P::u(0x7fffffffu), P::u(0)));
}

// Adds the squares of x[0, count) into eight fp64 lanes, element i into lane i % 8 (count a
// multiple of 8 except on the last call for a chunk).
template <class V>
void sum_squares_of(const float* x, std::size_t count, double* lanes8) {
  std::size_t i = V::sum_squares8(x, count, lanes8);
  for (; i < count; ++i) lanes8[i % 8] += static_cast<double>(x[i]) * static_cast<double>(x[i]);
}

template <class V>
bool nonfinite_range_of(const void* src, dtype type, std::size_t begin, std::size_t end) {
  bool found = false;
  with_dtype(type, [&]<dtype T>() {
    std::size_t i = begin;
    found = nonfinite_lanes<V, T>(src, i, end);
    found = nonfinite_lanes<scalar_lanes, T>(src, i, end) || found;
  });
  return found;
}

// ---- quantization --------------------------------------------------------------------------------

// Minimum and maximum of src[i, end); with `widened` (may be null), also stores the values as fp32
// at widened[k - first] so a second pass over 16-bit input need not convert again.
template <class P, dtype T>
ZOE_ARITH std::size_t minmax_lanes(const void* src, std::size_t i, std::size_t end, float& lo, float& hi,
                                   float* widened = nullptr, std::size_t first = 0) {
  const std::size_t n = P::lanes();
  if (i + n > end) return i;
  auto vlo = load_as_float<P, T>(src, i);
  auto vhi = vlo;
  if (widened != nullptr) P::store_f32(vlo, widened + (i - first));
  i += n;
  // Four vectors a step into separate accumulators: min and max have a latency of several cycles,
  // and one chain would leave the vector units idle. Min and max of finite values do not depend on
  // the order (a block holding NaN has no meaningful scale on any path).
  if (i + 4 * n <= end) {
    auto lo1 = vlo, lo2 = vlo, lo3 = vlo, hi1 = vhi, hi2 = vhi, hi3 = vhi;
    for (; i + 4 * n <= end; i += 4 * n) {
      const auto x0 = load_as_float<P, T>(src, i);
      const auto x1 = load_as_float<P, T>(src, i + n);
      const auto x2 = load_as_float<P, T>(src, i + 2 * n);
      const auto x3 = load_as_float<P, T>(src, i + 3 * n);
      if (widened != nullptr) {
        P::store_f32(x0, widened + (i - first));
        P::store_f32(x1, widened + (i + n - first));
        P::store_f32(x2, widened + (i + 2 * n - first));
        P::store_f32(x3, widened + (i + 3 * n - first));
      }
      vlo = P::min(vlo, x0);
      vhi = P::max(vhi, x0);
      lo1 = P::min(lo1, x1);
      hi1 = P::max(hi1, x1);
      lo2 = P::min(lo2, x2);
      hi2 = P::max(hi2, x2);
      lo3 = P::min(lo3, x3);
      hi3 = P::max(hi3, x3);
    }
    vlo = P::min(P::min(vlo, lo1), P::min(lo2, lo3));
    vhi = P::max(P::max(vhi, hi1), P::max(hi2, hi3));
  }
  for (; i + n <= end; i += n) {
    const auto x = load_as_float<P, T>(src, i);
    if (widened != nullptr) P::store_f32(x, widened + (i - first));
    vlo = P::min(vlo, x);
    vhi = P::max(vhi, x);
  }
  lo = scalar_lanes::min(lo, P::min_of_lanes(vlo));
  hi = scalar_lanes::max(hi, P::max_of_lanes(vhi));
  return i;
}

// Minimum and maximum of each of `group` blocks of `len` elements (a multiple of P::lanes()), block k
// at src[base + k * len], reading one vector of each block in turn, as glibc's large memcpy reads
// four pages side by side: a 2048-element fp16 block is one 4 KiB page, the hardware prefetchers
// stop at page boundaries, and one page at a time keeps too few misses in flight for one core. The
// blocks are then coded from L1. Min and max of finite values do not depend on the order.
template <class P, dtype T, std::size_t group>
ZOE_ARITH void minmax_interleaved(const void* src, std::size_t base, std::size_t len, float* lo, float* hi) {
  const std::size_t n = P::lanes();
  typename P::F vlo[group];
  typename P::F vhi[group];
  for (std::size_t k = 0; k < group; ++k) {
    vlo[k] = load_as_float<P, T>(src, base + k * len);
    vhi[k] = vlo[k];
  }
  for (std::size_t i = n; i + n <= len; i += n) {
    for (std::size_t k = 0; k < group; ++k) {
      const auto x = load_as_float<P, T>(src, base + k * len + i);
      vlo[k] = P::min(vlo[k], x);
      vhi[k] = P::max(vhi[k], x);
    }
  }
  for (std::size_t k = 0; k < group; ++k) {
    lo[k] = P::min_of_lanes(vlo[k]);
    hi[k] = P::max_of_lanes(vhi[k]);
  }
}

// `ahead` (may be null) is the next block's input: it is prefetched at the pace the current block
// is coded. A block of 2048 fp16 is one 4 KiB page and the hardware prefetcher stops at page
// boundaries, so without this every block would start with a stall on memory.
template <class P, dtype T>
ZOE_ARITH std::size_t code8_lanes(const void* src, std::size_t src_index, void* codes, std::size_t i,
                                  std::size_t end, const block_lanes<P>& b,
                                  const char* ahead = nullptr, std::size_t ahead_element_bytes = 0) {
  const std::size_t n = P::lanes();
  for (; i + n <= end; i += n) {
    if (ahead != nullptr) P::prefetch(ahead + i * ahead_element_bytes);
    P::store_low_bytes(quantize_bits<P>(load_as_float<P, T>(src, src_index + i), b),
                       static_cast<std::uint8_t*>(codes) + i);
  }
  return i;
}

// Elements a call must cover for its 8-bit codes to be streamed.
inline constexpr std::size_t quant_stream_min = std::size_t{1} << 18;

template <class V, dtype T>
void quantize_blocks_typed(const quant_args& a, std::size_t first_block, std::size_t last_block) {
  const auto& l = a.layout;
  constexpr std::size_t segment = 512;  // int4 codes are staged as bytes, then packed
  alignas(64) std::int8_t staged[segment];
  // 16-bit blocks up to this size are widened once into fp32 during the min/max pass (exact, so the
  // codes do not change) and coded from there, when the conversion is most of the arithmetic: fp16
  // without hardware widening. With vcvtph2ps (V::native_fp16), and for bf16 (a shift), converting
  // again from the block still in L1 is cheaper than storing and reloading twice the bytes.
  constexpr std::size_t widen_limit = 4096;
  constexpr bool may_widen = T == dtype::fp16 && !V::native_fp16;
  alignas(64) float widened[may_widen ? widen_limit : 1];
  const bool widen = may_widen && l.bits == 8 && l.block <= widen_limit;
  // Long ranges of 8-bit codes are coded into an L1 buffer and streamed out: a normal store first
  // reads each line it fills, 1 more byte per element on top of the 3 an fp16 element moves.
  constexpr std::size_t stream_block_limit = 4096;
  alignas(64) std::uint8_t stream_buffer[stream_block_limit];
  const bool stream = V::can_stream && l.bits == 8 && l.block <= stream_block_limit &&
                      (last_block - first_block) * l.block >= quant_stream_min;
  // Whole 8-bit blocks go by groups of four (up to 16 KiB of input, which stays in L1): min and max
  // of the four read side by side (minmax_interleaved), then each block coded from L1 while the
  // next group's input is prefetched into L2, one line per line coded. Measured on the 2-core
  // AVX-512 machine (shared, loaded), 64M fp16, block 2048, medians of interleaved runs: 0.43-0.45
  // of a large memcpy before, 0.46-0.55 with this (0.57-0.64 in the quieter rounds). Groups of 1,
  // 2 or 8, prefetching into L1, a burst of prefetches, or prefetching two or three groups ahead
  // were all slower. The per-block loop below takes the rest.
  constexpr std::size_t group = 4;
  const std::size_t size = ::zoe::kernels::dtype_size(T);
  const std::size_t line = 64 / size;  // elements per cache line of input
  const bool grouped = !widen && l.bits == 8 && l.block % V::lanes() == 0 && l.block * size * group <= 4 * 4096;
  std::size_t blk = first_block;
  if (grouped) {
    for (; blk + group <= last_block && (blk + group) * l.block <= a.count; blk += group) {
      const std::size_t src_base = blk * l.block - a.in_base;
      float lo[group];
      float hi[group];
      minmax_interleaved<V, T, group>(a.in, src_base, l.block, lo, hi);
      const bool next = blk + 2 * group <= last_block;
      for (std::size_t k = 0; k < group; ++k) {
        const std::size_t b = blk + k;
        const std::size_t at = src_base + k * l.block;
        const block_params params = make_block_params(l, lo[k], hi[k]);
        a.scales[b] = params.scale;
        if (a.zero_points != nullptr) a.zero_points[b] = params.offset;
        const block_lanes<V> bv(params);
        const block_lanes<scalar_lanes> bs(params);
        std::byte* out = stream ? reinterpret_cast<std::byte*>(stream_buffer) : a.codes + b * l.block;
        const char* ahead = static_cast<const char*>(a.in) + (at + group * l.block) * size;
        for (std::size_t i = 0; i < l.block; i += line) {
          const std::size_t end = l.block - i < line ? l.block : i + line;
          if (next) V::prefetch_l2(ahead + i * size);
          const std::size_t j = code8_lanes<V, T>(a.in, at, out, i, end, bv);
          code8_lanes<scalar_lanes, T>(a.in, at, out, j, end, bs);
        }
        if (stream) V::stream_bytes(reinterpret_cast<std::uint8_t*>(a.codes + b * l.block), stream_buffer, l.block);
      }
    }
  }
  for (; blk < last_block; ++blk) {
    const std::size_t begin = blk * l.block;
    const std::size_t valid = (a.count - begin < l.block ? a.count - begin : l.block);
    const std::size_t src_base = begin - a.in_base;
    float lo = load_as_float<scalar_lanes, T>(a.in, src_base);
    float hi = lo;
    std::size_t i = minmax_lanes<V, T>(a.in, src_base, src_base + valid, lo, hi, widen ? widened : nullptr, src_base);
    for (; i < src_base + valid; ++i) {
      const float x = load_as_float<scalar_lanes, T>(a.in, i);
      if (widen) widened[i - src_base] = x;
      lo = scalar_lanes::min(lo, x);
      hi = scalar_lanes::max(hi, x);
    }
    const block_params params = make_block_params(l, lo, hi);
    a.scales[blk] = params.scale;
    if (a.zero_points != nullptr) a.zero_points[blk] = params.offset;
    const block_lanes<V> bv(params);
    const block_lanes<scalar_lanes> bs(params);
    if (l.bits == 8) {
      std::byte* out = stream ? reinterpret_cast<std::byte*>(stream_buffer) : a.codes + begin;
      const char* ahead = blk + 1 < last_block
                              ? static_cast<const char*>(a.in) + (src_base + l.block) * ::zoe::kernels::dtype_size(T)
                              : nullptr;
      if (widen) {
        const std::size_t j = code8_lanes<V, dtype::fp32>(widened, 0, out, 0, valid, bv, ahead,
                                                            ::zoe::kernels::dtype_size(T));
        code8_lanes<scalar_lanes, dtype::fp32>(widened, 0, out, j, valid, bs);
      } else {
        const std::size_t j = code8_lanes<V, T>(a.in, src_base, out, 0, valid, bv, ahead,
                                                  ::zoe::kernels::dtype_size(T));
        code8_lanes<scalar_lanes, T>(a.in, src_base, out, j, valid, bs);
      }
      for (std::size_t k = valid; k < l.block; ++k) out[k] = std::byte{0};
      if (stream) V::stream_bytes(reinterpret_cast<std::uint8_t*>(a.codes + begin), stream_buffer, l.block);
    } else {
      std::byte* out = a.codes + begin / 2;
      for (std::size_t s = 0; s < l.block; s += segment) {
        const std::size_t len = l.block - s < segment ? l.block - s : segment;
        const std::size_t live = valid > s ? (valid - s < len ? valid - s : len) : 0;
        // Staged as signed bytes: asymmetric int4 codes (0..15) fit too.
        const std::size_t j = code8_lanes<V, T>(a.in, src_base + s, staged, 0, live, bv);
        code8_lanes<scalar_lanes, T>(a.in, src_base + s, staged, j, live, bs);
        for (std::size_t k = live; k < len; ++k) staged[k] = 0;
        for (std::size_t k = 0; k < len; k += 2) {
          out[(s + k) / 2] = static_cast<std::byte>(pack_nibbles(staged[k], staged[k + 1]));
        }
      }
    }
  }
  if (stream) V::stream_fence();
}

template <class V>
void quantize_blocks_of(const quant_args& a, std::size_t first_block, std::size_t last_block) {
  with_dtype(a.in_type, [&]<dtype T>() { quantize_blocks_typed<V, T>(a, first_block, last_block); });
}

// Dequantizes codes[i, end) (as int8 or uint8 bytes) into out elements out_index + i.
template <class P, dtype T, bool accumulate>
ZOE_ARITH std::size_t decode8_lanes(const void* codes, bool is_signed, void* out, std::size_t out_index,
                                    std::size_t i, std::size_t end, const block_lanes<P>& b) {
  const std::size_t n = P::lanes();
  for (; i + n <= end; i += n) {
    const auto q = is_signed ? P::load_i8(static_cast<const std::int8_t*>(codes) + i)
                             : P::load_u8(static_cast<const std::uint8_t*>(codes) + i);
    auto x = dequantize_value<P>(q, b);
    if constexpr (accumulate) x = P::load_f32(static_cast<const float*>(out) + out_index + i) + x;
    store_from_float<P, T>(x, out, out_index + i);
  }
  return i;
}

template <class V, dtype T, bool accumulate>
void dequantize_blocks_typed(const dequant_args& a, std::size_t first_block, std::size_t last_block) {
  const auto& l = a.layout;
  constexpr std::size_t segment = 512;
  alignas(64) std::int8_t staged[segment];
  for (std::size_t blk = first_block; blk < last_block; ++blk) {
    const std::size_t begin = blk * l.block;
    const std::size_t valid = (a.count - begin < l.block ? a.count - begin : l.block);
    const std::size_t out_base = begin - a.out_base;
    const block_params params{a.scales[blk], 0.0f, a.zero_points != nullptr ? a.zero_points[blk] : 0.0f, 0.0f,
                              0.0f};
    const block_lanes<V> bv(params);
    const block_lanes<scalar_lanes> bs(params);
    if (l.bits == 8) {
      const std::byte* in = a.codes + begin;
      const std::size_t j = decode8_lanes<V, T, accumulate>(in, l.symmetric, a.out, out_base, 0, valid, bv);
      decode8_lanes<scalar_lanes, T, accumulate>(in, l.symmetric, a.out, out_base, j, valid, bs);
    } else {
      const auto* in = reinterpret_cast<const std::uint8_t*>(a.codes + begin / 2);
      for (std::size_t s = 0; s < valid; s += segment) {
        const std::size_t len = valid - s < segment ? valid - s : segment;
        for (std::size_t k = 0; k < len; ++k) staged[k] = unpack_nibble(in[(s + k) / 2], ((s + k) & 1u) != 0, l.symmetric);
        const std::size_t j = decode8_lanes<V, T, accumulate>(staged, true, a.out, out_base + s, 0, len, bv);
        decode8_lanes<scalar_lanes, T, accumulate>(staged, true, a.out, out_base + s, j, len, bs);
      }
    }
  }
}

template <class V>
void dequantize_blocks_of(const dequant_args& a, std::size_t first_block, std::size_t last_block) {
  with_dtype(a.out_type, [&]<dtype T>() {
    if constexpr (T == dtype::fp32) {
      if (a.accumulate) {
        dequantize_blocks_typed<V, T, true>(a, first_block, last_block);
        return;
      }
    }
    dequantize_blocks_typed<V, T, false>(a, first_block, last_block);
  });
}
