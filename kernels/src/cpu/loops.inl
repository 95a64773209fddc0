// The CPU loops over the shared arithmetic, written once over a lane policy V: full vectors of V
// first, then the tail one lane at a time with scalar_lanes (the same arithmetic, so the bits do
// not depend on where a vector boundary falls). The scalar path instantiates them with
// V = scalar_lanes. Included inside a namespace (see prelude.hpp), after the arithmetic.

using ::zoe::kernels::dtype;
using ::zoe::kernels::detail::adam_args;
using ::zoe::kernels::detail::cast_args;
using ::zoe::kernels::detail::dequant_args;
using ::zoe::kernels::detail::quant_args;

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

// dst (fp32) + src widened: one addition per element, the same on every path.
template <class P, dtype S>
ZOE_ARITH std::size_t accumulate_lanes(const cast_args& a, std::size_t i, std::size_t end) {
  const std::size_t n = P::lanes();
  float* const dst = static_cast<float*>(a.dst);
  for (; i + n <= end; i += n) P::store_f32(P::load_f32(dst + i) + load_as_float<P, S>(a.src, i), dst + i);
  return i;
}

template <class V>
void accumulate_range_of(const cast_args& a, std::size_t begin, std::size_t end) {
  with_dtype(a.src_type, [&]<dtype S>() {
    const std::size_t i = accumulate_lanes<V, S>(a, begin, end);
    accumulate_lanes<scalar_lanes, S>(a, i, end);
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

// The stored type of a dtype's raw bits, as the key lanes read them.
template <dtype T>
using key_bits = std::conditional_t<T == dtype::fp32, std::int32_t, std::int16_t>;

// Folds the keys of src[i, end) into `k` with key lanes K; returns where K's vectors stopped. Four
// vectors a step into separate accumulators: min and max have a latency, and one chain would
// leave the vector units idle.
template <class K, dtype T, bool symmetric>
ZOE_ARITH std::size_t fold_key_lanes(const void* src, std::size_t i, std::size_t end, block_keys& k) {
  const std::size_t n = K::lanes();
  typename K::V lo[4];
  typename K::V hi[4];
  for (int j = 0; j < 4; ++j) {
    lo[j] = K::set(k.lo);
    hi[j] = K::set(k.hi);
  }
  for (; i + 4 * n <= end; i += 4 * n) {
    for (std::size_t j = 0; j < 4; ++j) fold_keys<K, T, symmetric>(K::load(src, i + j * n), lo[j], hi[j]);
  }
  for (; i + n <= end; i += n) fold_keys<K, T, symmetric>(K::load(src, i), lo[0], hi[0]);
  k.lo = K::min_of_lanes(K::min(K::min(lo[0], lo[1]), K::min(lo[2], lo[3])));
  k.hi = K::max_of_lanes(K::max(K::max(hi[0], hi[1]), K::max(hi[2], hi[3])));
  return i;
}

// The extremes of src[begin, end) (not empty) as keys: P's key vectors, then one key at a time.
template <class P, dtype T, bool symmetric>
ZOE_ARITH block_keys block_extremes(const void* src, std::size_t begin, std::size_t end) {
  using KS = scalar_keys<key_bits<T>>;
  const std::int32_t first = KS::load(src, begin);
  block_keys k{};
  k.lo = key_of<KS, T, symmetric>(first);
  k.hi = k.lo;
  const std::size_t i = fold_key_lanes<typename P::template keys<key_bits<T>>, T, symmetric>(src, begin, end, k);
  fold_key_lanes<KS, T, symmetric>(src, i, end, k);
  return k;
}

// The extremes of `group` blocks of `len` elements (a multiple of the key lanes), block j at
// src[base + j * len], reading one vector of each block in turn, as glibc's large memcpy reads
// four pages side by side: a 2048-element fp16 block is one 4 KiB page, the hardware prefetchers
// stop at page boundaries, and one page at a time keeps too few misses in flight for one core. The
// blocks are then coded from L1.
template <class P, dtype T, bool symmetric, std::size_t group>
ZOE_ARITH void group_extremes(const void* src, std::size_t base, std::size_t len, block_keys* k) {
  using K = typename P::template keys<key_bits<T>>;
  const std::size_t n = K::lanes();
  typename K::V lo[group];
  typename K::V hi[group];
  for (std::size_t j = 0; j < group; ++j) {
    lo[j] = key_of<K, T, symmetric>(K::load(src, base + j * len));
    hi[j] = lo[j];
  }
  for (std::size_t i = n; i + n <= len; i += n) {
    for (std::size_t j = 0; j < group; ++j) fold_keys<K, T, symmetric>(K::load(src, base + j * len + i), lo[j], hi[j]);
  }
  for (std::size_t j = 0; j < group; ++j) k[j] = {K::min_of_lanes(lo[j]), K::max_of_lanes(hi[j])};
}

// The codes of src[at, at + 4 * P::lanes()) into out[0, 4 * P::lanes()), packed together; with
// `stream`, stored with a streaming store (`out` aligned to the packed size).
template <class P, dtype T, bool symmetric, bool prescaled, bool stream = false>
ZOE_ARITH void code8_step(const void* src, std::size_t at, std::uint8_t* out, const block_lanes<P>& b) {
  const std::size_t n = P::lanes();
  const auto c0 = quantize_value<P, symmetric, prescaled>(load_as_float<P, T>(src, at), b);
  const auto c1 = quantize_value<P, symmetric, prescaled>(load_as_float<P, T>(src, at + n), b);
  const auto c2 = quantize_value<P, symmetric, prescaled>(load_as_float<P, T>(src, at + 2 * n), b);
  const auto c3 = quantize_value<P, symmetric, prescaled>(load_as_float<P, T>(src, at + 3 * n), b);
  P::template store_codes4<symmetric, stream>(c0, c1, c2, c3, out);
}

// Codes of src[at + i, at + end) into out[i, end), four vectors a step packed together, then one
// vector at a time; returns where the vectors stopped. `ahead` (may be null) is input that will
// be needed next: its lines are prefetched into L2 at the pace these are coded (the hardware
// prefetcher stops at each 4 KiB page, so without it every block would start with a stall).
template <class P, dtype T, bool symmetric, bool prescaled>
ZOE_ARITH std::size_t code8_lanes(const void* src, std::size_t at, std::uint8_t* out, std::size_t i, std::size_t end,
                                  const block_lanes<P>& b, const char* ahead = nullptr) {
  const std::size_t n = P::lanes();
  constexpr std::size_t size = ::zoe::kernels::dtype_size(T);
  for (; i + 4 * n <= end; i += 4 * n) {
    if (ahead != nullptr) {
      for (std::size_t line = 0; line < 4 * n * size; line += 64) P::prefetch_l2(ahead + i * size + line);
    }
    code8_step<P, T, symmetric, prescaled>(src, at + i, out + i, b);
  }
  for (; i + n <= end; i += n) {
    P::template store_code<symmetric>(quantize_value<P, symmetric, prescaled>(load_as_float<P, T>(src, at + i), b),
                                      out + i);
  }
  return i;
}

// Codes of a block's src[at, at + valid) into out[0, valid): P's vectors, then one lane at a time.
template <class P, dtype T, bool symmetric>
ZOE_ARITH void code8_block(const void* src, std::size_t at, std::uint8_t* out, std::size_t valid,
                           const block_params& params, const char* ahead = nullptr) {
  with_flag(params.prescaled, [&]<bool prescaled>() {
    const std::size_t i =
        code8_lanes<P, T, symmetric, prescaled>(src, at, out, 0, valid, block_lanes<P>(params), ahead);
    code8_lanes<scalar_lanes, T, symmetric, prescaled>(src, at, out, i, valid, block_lanes<scalar_lanes>(params));
  });
}

// One block's scale (and zero point) stored; its parameters returned.
template <dtype T>
ZOE_ARITH block_params store_block_params(const quant_args& a, std::size_t blk, block_keys k) {
  const block_params params = params_of_keys<T>(a.layout, k);
  a.scales[blk] = params.scale;
  if (a.zero_points != nullptr) a.zero_points[blk] = params.offset;
  return params;
}

// Whole 8-bit blocks [blk, end_blk) (a multiple of `group` blocks, each a multiple of `group`
// code steps), coded by groups: while group g is coded from L1, each code step also folds one
// step of group g + 1's keys, reading its blocks in turn, so the loads from memory of the next
// group overlap the arithmetic on this one instead of alternating with it. The codes go out with
// streaming stores when `direct` (the output aligned to a code step's bytes), else they are
// written to the output, or with `staging` (not null) to it and then streamed out per block.
template <class V, dtype T, bool symmetric, std::size_t group, bool direct>
void code_groups(const quant_args& a, std::size_t blk, std::size_t end_blk, std::uint8_t* staging) {
  using K = typename V::template keys<key_bits<T>>;
  const std::size_t len = a.layout.block;
  const std::size_t step = 4 * V::lanes();  // elements per code step
  const std::size_t keys_per_step = step / K::lanes();
  block_keys keys[group];
  group_extremes<V, T, symmetric, group>(a.in, blk * len - a.in_base, len, keys);
  for (; blk < end_blk; blk += group) {
    const std::size_t base = blk * len - a.in_base;
    const bool has_next = blk + group < end_blk;
    const std::size_t next = base + group * len;
    typename K::V lo[group];
    typename K::V hi[group];
    for (std::size_t j = 0; j < group; ++j) {  // (without a next group: this group, unused)
      lo[j] = key_of<K, T, symmetric>(K::load(a.in, (has_next ? next : base) + j * len));
      hi[j] = lo[j];
    }
    std::size_t next_offset = 0;  // of the next step to fold, in each of the next group's blocks
    for (std::size_t k = 0; k < group; ++k) {
      const block_params params = store_block_params<T>(a, blk + k, keys[k]);
      const block_lanes<V> bv(params);
      auto* const codes = reinterpret_cast<std::uint8_t*>(a.codes + (blk + k) * len);
      std::uint8_t* const out = staging != nullptr ? staging : codes;
      const std::size_t at = base + k * len;
      with_flag(params.prescaled, [&]<bool prescaled>() {
        for (std::size_t i = 0; i < len; i += group * step) {
          for (std::size_t j = 0; j < group; ++j) {
            code8_step<V, T, symmetric, prescaled, direct>(a.in, at + i + j * step, out + i + j * step, bv);
            if (has_next) {
              for (std::size_t q = 0; q < keys_per_step; ++q) {
                fold_keys<K, T, symmetric>(K::load(a.in, next + j * len + next_offset + q * K::lanes()), lo[j], hi[j]);
              }
            }
          }
          next_offset += step;
        }
      });
      if (staging != nullptr) V::stream_bytes(codes, staging, len);
    }
    if (has_next) {
      for (std::size_t j = 0; j < group; ++j) keys[j] = {K::min_of_lanes(lo[j]), K::max_of_lanes(hi[j])};
    }
  }
}

// Elements a call must cover for its 8-bit codes to be streamed.
inline constexpr std::size_t quant_stream_min = std::size_t{1} << 18;

template <class V, dtype T, bool symmetric>
void quantize_blocks_typed(const quant_args& a, std::size_t first_block, std::size_t last_block) {
  const auto& l = a.layout;
  const auto* in = static_cast<const char*>(a.in);
  constexpr std::size_t size = ::zoe::kernels::dtype_size(T);
  constexpr std::size_t segment = 512;  // int4 codes are staged as bytes, then packed
  alignas(64) std::uint8_t staged[segment];
  // Long ranges of 8-bit codes go out with streaming stores: a normal store first reads each line
  // it fills, 1 more byte per element on top of the 3 an fp16 element moves. Straight from the
  // registers where the output is aligned (code_groups), else staged per block in an L1 buffer and
  // streamed from its first vector-aligned byte.
  constexpr std::size_t stream_block_limit = 4096;
  alignas(64) std::uint8_t stream_buffer[stream_block_limit];
  const bool stream = V::can_stream && l.bits == 8 && l.block <= stream_block_limit &&
                      (last_block - first_block) * l.block >= quant_stream_min;
  const auto code_block = [&](std::size_t blk, std::size_t src_base, std::size_t valid, const block_params& params,
                              const char* ahead) {
    std::uint8_t* out = stream ? stream_buffer : reinterpret_cast<std::uint8_t*>(a.codes + blk * l.block);
    code8_block<V, T, symmetric>(a.in, src_base, out, valid, params, ahead);
    for (std::size_t k = valid; k < l.block; ++k) out[k] = 0;
    if (stream) V::stream_bytes(reinterpret_cast<std::uint8_t*>(a.codes + blk * l.block), stream_buffer, l.block);
  };
  // Whole 8-bit blocks go by groups of four (up to 16 KiB of input, which stays in L1; see
  // code_groups). Measured on the 2-core AVX-512 machine, groups of 1, 2 or 8 were slower. The
  // per-block loop below takes the rest.
  constexpr std::size_t group = 4;
  const std::size_t group_step = group * 4 * V::lanes();
  std::size_t blk = first_block;
  if (l.bits == 8 && l.block % group_step == 0 && l.block * size * group <= 4 * 4096) {
    std::size_t whole = (a.count / l.block < last_block ? a.count / l.block : last_block);
    whole = whole > first_block ? first_block + (whole - first_block) / group * group : first_block;
    const bool aligned = reinterpret_cast<std::uintptr_t>(a.codes + first_block * l.block) % (4 * V::lanes()) == 0;
    if (whole > first_block && stream && aligned) {
      code_groups<V, T, symmetric, group, true>(a, first_block, whole, nullptr);
    } else if (whole > first_block) {
      code_groups<V, T, symmetric, group, false>(a, first_block, whole, stream ? stream_buffer : nullptr);
    }
    blk = whole;
  }
  for (; blk < last_block; ++blk) {
    const std::size_t begin = blk * l.block;
    const std::size_t valid = (a.count - begin < l.block ? a.count - begin : l.block);
    const std::size_t src_base = begin - a.in_base;
    const block_params params =
        store_block_params<T>(a, blk, block_extremes<V, T, symmetric>(a.in, src_base, src_base + valid));
    if (l.bits == 8) {
      code_block(blk, src_base, valid, params, blk + 1 < last_block ? in + (src_base + l.block) * size : nullptr);
      continue;
    }
    std::byte* out = a.codes + begin / 2;
    for (std::size_t s = 0; s < l.block; s += segment) {
      const std::size_t len = l.block - s < segment ? l.block - s : segment;
      const std::size_t live = valid > s ? (valid - s < len ? valid - s : len) : 0;
      // Staged as bytes: symmetric codes in two's complement, whose low nibble is the int4 code.
      code8_block<V, T, symmetric>(a.in, src_base + s, staged, live, params);
      for (std::size_t k = live; k < len; ++k) staged[k] = 0;
      for (std::size_t k = 0; k < len; k += 2) {
        out[(s + k) / 2] = static_cast<std::byte>(
            pack_nibbles(static_cast<std::int8_t>(staged[k]), static_cast<std::int8_t>(staged[k + 1])));
      }
    }
  }
  if (stream) V::stream_fence();
}

template <class V>
void quantize_blocks_of(const quant_args& a, std::size_t first_block, std::size_t last_block) {
  with_dtype(a.in_type, [&]<dtype T>() {
    if (a.layout.symmetric) {
      quantize_blocks_typed<V, T, true>(a, first_block, last_block);
    } else {
      quantize_blocks_typed<V, T, false>(a, first_block, last_block);
    }
  });
}

// Dequantizes codes[i, end) (as int8 or uint8 bytes) into out elements out_index + i.
template <class P, dtype T, bool accumulate>
ZOE_ARITH std::size_t decode8_lanes(const void* codes, bool is_signed, void* out, std::size_t out_index, std::size_t i,
                                    std::size_t end, const block_lanes<P>& b) {
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
    const block_params params =
        stored_block_params(a.scales[blk], a.zero_points != nullptr ? a.zero_points[blk] : 0.0f);
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
        for (std::size_t k = 0; k < len; ++k)
          staged[k] = unpack_nibble(in[(s + k) / 2], ((s + k) & 1u) != 0, l.symmetric);
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
