// The SIMD paths: the shared arithmetic instantiated on Highway vectors, once per target
// (SSE4, AVX2, AVX-512, and whatever newer targets the Highway in use compiles), each in its own
// namespace, and dispatched at run time.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "cpu/simd_kernels.cpp"
#include <hwy/foreach_target.h>  // re-includes this file once per target

#include <hwy/cache_control.h>
#include <hwy/highway.h>

#include "arith/prelude.hpp"
#include "cpu/kernel_table.hpp"
#include "dispatch.hpp"

// The few x86 fast paths below that Highway has no op for (or only a slower one) are chosen by
// what the target can do, never by its name: a newer Highway's best target (AVX3_DL, AVX3_ZEN4,
// AVX3_SPR, AVX10, ...) would otherwise silently fall back to the portable code. Every x86 target
// has SSE2's packs and cvtps2dq, and the vector width says which register size they take: 64 bytes
// is AVX-512 (F and BW, which Highway requires of every such target), 32 bytes AVX2 (with F16C,
// which Highway's AVX2 and newer targets require). ZOE_X86_BITS is that width in bits on an x86
// target, 0 on the others (Highway's portable emulations and other architectures).
#undef ZOE_X86_BITS
#if HWY_ARCH_X86 && HWY_TARGET <= (1LL << HWY_HIGHEST_TARGET_BIT_X86)
#define ZOE_X86_BITS (HWY_MAX_BYTES * 8)
#else
#define ZOE_X86_BITS 0
#endif
// The guard: an x86 target of another width would have no fast path at all.
static_assert(ZOE_X86_BITS == 0 || ZOE_X86_BITS == 128 || ZOE_X86_BITS == 256 || ZOE_X86_BITS == 512,
              "an x86 Highway target of a vector width the fast paths below do not handle");

HWY_BEFORE_NAMESPACE();
namespace zoe::kernels::detail::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

#include "arith/lanes_scalar.inl"

// Full vectors of integer keys of the raw bits of `Bits` elements (int16_t or int32_t): 16-bit
// input is scanned for its block extremes in 16-bit lanes (see quant.inl).
template <class Bits>
struct simd_keys {
  using D = hn::ScalableTag<Bits>;
  using V = hn::Vec<D>;
  static std::size_t lanes() { return hn::Lanes(D()); }
  static V load(const void* base, std::size_t i) { return hn::LoadU(D(), static_cast<const Bits*>(base) + i); }
  static V set(std::int32_t x) { return hn::Set(D(), static_cast<Bits>(x)); }
  static V and_(V a, V b) { return hn::And(a, b); }
  static V xor_(V a, V b) { return hn::Xor(a, b); }
  static V sign_fill(V a) { return hn::ShiftRight<sizeof(Bits) * 8 - 1>(a); }
  static V min(V a, V b) { return hn::Min(a, b); }
  static V max(V a, V b) { return hn::Max(a, b); }
  static std::int32_t min_of_lanes(V v) { return hn::GetLane(hn::MinOfLanes(D(), v)); }
  static std::int32_t max_of_lanes(V v) { return hn::GetLane(hn::MaxOfLanes(D(), v)); }
};

// A full vector of float lanes: the value type the SIMD paths instantiate the arithmetic on.
struct simd_lanes {
  using DF = hn::ScalableTag<float>;
  using DU = hn::RebindToUnsigned<DF>;
  using DI = hn::RebindToSigned<DF>;
  using F = hn::Vec<DF>;
  using U = hn::Vec<DU>;
  using I = hn::Vec<DI>;
  using M = hn::Mask<DI>;

  static std::size_t lanes() { return hn::Lanes(DF()); }

  // AVX2 and newer have vcvtph2ps (Highway's AVX2 and newer targets require F16C). Highway's SSE4
  // emulation of PromoteTo from float16_t mishandles infinities and NaNs, so SSE4 keeps
  // float_from_fp16.
#if ZOE_X86_BITS >= 256 && !defined(HWY_DISABLE_F16C)
  static constexpr bool native_fp16 = true;
#else
  static constexpr bool native_fp16 = false;
#endif
  static F load_fp16(const std::uint16_t* p) {
    const hn::Rebind<hwy::float16_t, DF> dh;
    return hn::PromoteTo(DF(), hn::LoadU(dh, reinterpret_cast<const hwy::float16_t*>(p)));
  }

  static F f(float x) { return hn::Set(DF(), x); }
  static U u(std::uint32_t x) { return hn::Set(DU(), x); }
  static U bits(F x) { return hn::BitCast(DU(), x); }
  static F from_bits(U x) { return hn::BitCast(DF(), x); }

  static F div(F a, F b) { return a / b; }
  static F sqrt(F x) { return hn::Sqrt(x); }
  static F min(F a, F b) { return hn::Min(a, b); }
  static F max(F a, F b) { return hn::Max(a, b); }
  static F abs(F x) { return hn::Abs(x); }

  template <int k>
  static U shr(U x) {
    return hn::ShiftRight<k>(x);
  }
  template <int k>
  static U shl(U x) {
    return hn::ShiftLeft<k>(x);
  }

  static M gt(U a, U b) { return hn::BitCast(DI(), a) > hn::BitCast(DI(), b); }
  static M lt(U a, U b) { return hn::BitCast(DI(), a) < hn::BitCast(DI(), b); }
  static U select(M m, U yes, U no) { return hn::IfThenElse(hn::RebindMask(DU(), m), yes, no); }
  static bool any(M m) { return !hn::AllFalse(DI(), m); }

  static F to_float(I x) { return hn::ConvertTo(DF(), x); }
  static I as_i(U x) { return hn::BitCast(DI(), x); }
  static U as_u(I x) { return hn::BitCast(DU(), x); }

  static F load_f32(const float* p) { return hn::LoadU(DF(), p); }
  static void store_f32(F v, float* p) { hn::StoreU(v, DF(), p); }
  static U load_u16(const std::uint16_t* p) {
    return hn::PromoteTo(DU(), hn::LoadU(hn::Rebind<std::uint16_t, DU>(), p));
  }
  // Lanes hold 0..65535, so the saturating demotion from int32 is exact.
  static void store_u16(U v, std::uint16_t* p) {
    const hn::Rebind<std::uint16_t, DI> d16;
    hn::StoreU(hn::DemoteTo(d16, as_i(v)), d16, p);
  }
  // Non-temporal stores of the 16-bit lanes (Lanes() * 2 bytes, `p` aligned to that): the line is
  // written without first being read (no read-for-ownership). Only where that is at least 16
  // bytes: Highway's Stream of a smaller vector writes 16 bytes.
#if ZOE_X86_BITS >= 256
  static constexpr bool can_stream = true;
#else
  static constexpr bool can_stream = false;
#endif
  static void stream_u16(U v, std::uint16_t* p) {
    if constexpr (can_stream) {
      const hn::Rebind<std::uint16_t, DI> d16;
      hn::Stream(hn::DemoteTo(d16, as_i(v)), d16, p);
    } else {
      store_u16(v, p);
    }
  }
  // Orders the streaming stores before whatever follows (another thread or a DMA reading them).
  static void stream_fence() { hwy::FlushStream(); }
  // Copies bytes to `dst`: plain stores up to a vector-aligned address, streaming stores of whole
  // byte vectors (at least 16 bytes) after it, plain stores for the rest.
  static void stream_bytes(std::uint8_t* dst, const std::uint8_t* src, std::size_t len) {
    const hn::ScalableTag<std::uint8_t> d8;
    const std::size_t n = hn::Lanes(d8);
    std::size_t k = 0;
    if (n >= 16) {
      const std::size_t misalign = reinterpret_cast<std::uintptr_t>(dst) % n;
      const std::size_t head = misalign == 0 ? 0 : (n - misalign < len ? n - misalign : len);
      for (; k < head; ++k) dst[k] = src[k];
      for (; k + n <= len; k += n) hn::Stream(hn::LoadU(d8, src + k), d8, dst + k);
    }
    for (; k < len; ++k) dst[k] = src[k];
  }
  static I load_i8(const std::int8_t* p) { return hn::PromoteTo(DI(), hn::LoadU(hn::Rebind<std::int8_t, DI>(), p)); }

  // Round to nearest, ties to even (the MXCSR default), as scalar_lanes::round_to_int. x86 has it
  // in one instruction; Highway's NearestInt adds an overflow fix-up that codes never need.
  static I round_to_int(F x) {
#if ZOE_X86_BITS == 512
    return I{_mm512_cvtps_epi32(x.raw)};
#elif ZOE_X86_BITS == 256
    return I{_mm256_cvtps_epi32(x.raw)};
#elif ZOE_X86_BITS == 128
    return I{_mm_cvtps_epi32(x.raw)};
#else
    return as_i(bits(x + f(0x1.8p23f)) - u(0x4b400000u));
#endif
  }
  // Quantization codes (-127..127 when `is_signed`, else 0..255; exact under saturation) as bytes.
  template <bool is_signed>
  static void store_code(I code, std::uint8_t* p) {
    using code_byte = std::conditional_t<is_signed, std::int8_t, std::uint8_t>;
    const hn::Rebind<code_byte, DI> d8;
    hn::StoreU(hn::DemoteTo(d8, code), d8, reinterpret_cast<code_byte*>(p));
  }
  // Four vectors of codes as 4 * Lanes() bytes, in order. On x86 two saturating packs to 16 bits
  // and one to 8 interleave the vectors per 128-bit block, and one dword permutation puts them
  // back in order: 4 shuffles for 4 vectors where 4 separate demotions take 8 (AVX-512).
  // With `stream` (only where can_stream), a streaming store to `p`, which is 4 * Lanes() aligned.
  template <bool is_signed, bool stream = false>
  static void store_codes4(I c0, I c1, I c2, I c3, std::uint8_t* p) {
#if ZOE_X86_BITS == 512
    const __m512i lo = _mm512_packs_epi32(c0.raw, c1.raw);
    const __m512i hi = _mm512_packs_epi32(c2.raw, c3.raw);
    const __m512i bytes = is_signed ? _mm512_packs_epi16(lo, hi) : _mm512_packus_epi16(lo, hi);
    // Dword 4 * block + k holds vector k's lanes 4 * block ..; it belongs at 4 * k + block.
    const __m512i order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
    const __m512i codes = _mm512_permutexvar_epi32(order, bytes);
    if constexpr (stream) {
      _mm512_stream_si512(reinterpret_cast<__m512i*>(p), codes);
    } else {
      _mm512_storeu_si512(p, codes);
    }
#elif ZOE_X86_BITS == 256
    const __m256i lo = _mm256_packs_epi32(c0.raw, c1.raw);
    const __m256i hi = _mm256_packs_epi32(c2.raw, c3.raw);
    const __m256i bytes = is_signed ? _mm256_packs_epi16(lo, hi) : _mm256_packus_epi16(lo, hi);
    const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    const __m256i codes = _mm256_permutevar8x32_epi32(bytes, order);
    if constexpr (stream) {
      _mm256_stream_si256(reinterpret_cast<__m256i*>(p), codes);
    } else {
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), codes);
    }
#elif ZOE_X86_BITS == 128
    const __m128i lo = _mm_packs_epi32(c0.raw, c1.raw);
    const __m128i hi = _mm_packs_epi32(c2.raw, c3.raw);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p), is_signed ? _mm_packs_epi16(lo, hi) : _mm_packus_epi16(lo, hi));
#else
    const std::size_t n = lanes();
    store_code<is_signed>(c0, p);
    store_code<is_signed>(c1, p + n);
    store_code<is_signed>(c2, p + 2 * n);
    store_code<is_signed>(c3, p + 3 * n);
#endif
  }
  static I load_u8(const std::uint8_t* p) { return hn::PromoteTo(DI(), hn::LoadU(hn::Rebind<std::uint8_t, DI>(), p)); }

  // A prefetch into L2 (and the outer levels) only, which Highway does not offer: prefetcht2 on x86
  // (prefetcht1 and prefetcht2 both fill L2 on Intel). Quantization's per-block loop fetches the
  // next block with it while coding the current one (see code8_lanes). Forced inline: GCC 12 finds
  // an out-of-line function whose only statement is a prefetch free of side effects ("const") and
  // deletes every call to it. Elsewhere (MSVC) the plain prefetch.
  HWY_INLINE static void prefetch_l2(const void* p) {
#if defined(__GNUC__)
    __builtin_prefetch(p, 0, 1);
#else
    hwy::Prefetch(static_cast<const std::uint8_t*>(p));
#endif
  }

  template <class Bits>
  using keys = simd_keys<Bits>;

  // Eight fp64 lanes as 8/n vectors of n <= 2 doubles on every target, so the summation order
  // (lane i % 8, then a fixed tree) is the scalar path's whatever the vector width.
  static std::size_t sum_squares8(const float* x, std::size_t count, double* lanes8) {
    const hn::CappedTag<double, 2> dd;
    const hn::Rebind<float, decltype(dd)> df;
    const std::size_t n = hn::Lanes(dd);
    const std::size_t vectors = 8 / n;
    hn::Vec<decltype(dd)> acc[8];
    for (std::size_t j = 0; j < vectors; ++j) acc[j] = hn::LoadU(dd, lanes8 + j * n);
    std::size_t i = 0;
    for (; i + 8 <= count; i += 8) {
      for (std::size_t j = 0; j < vectors; ++j) {
        const auto v = hn::PromoteTo(dd, hn::LoadU(df, x + i + j * n));
        acc[j] = acc[j] + v * v;
      }
    }
    for (std::size_t j = 0; j < vectors; ++j) hn::StoreU(acc[j], dd, lanes8 + j * n);
    return i;
  }
};

#include "arith/convert.inl"
#include "arith/adam.inl"
#include "arith/quant.inl"
#include "cpu/loops.inl"

void adam_range(const adam_args& a, std::size_t begin, std::size_t end) { adam_range_of<simd_lanes>(a, begin, end); }
void cast_range(const cast_args& a, std::size_t begin, std::size_t end) { cast_range_of<simd_lanes>(a, begin, end); }
void accumulate_range(const cast_args& a, std::size_t begin, std::size_t end) {
  accumulate_range_of<simd_lanes>(a, begin, end);
}
void scale_f32(float* x, std::size_t count, float factor) { scale_f32_of<simd_lanes>(x, count, factor); }
bool nonfinite_range(const void* src, dtype type, std::size_t begin, std::size_t end) {
  return nonfinite_range_of<simd_lanes>(src, type, begin, end);
}
void sum_squares(const float* x, std::size_t count, double* lanes8) { sum_squares_of<simd_lanes>(x, count, lanes8); }
void quantize_blocks(const quant_args& a, std::size_t first, std::size_t last) {
  quantize_blocks_of<simd_lanes>(a, first, last);
}
void dequantize_blocks(const dequant_args& a, std::size_t first, std::size_t last) {
  dequantize_blocks_of<simd_lanes>(a, first, last);
}

}  // namespace zoe::kernels::detail::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace zoe::kernels::detail {

HWY_EXPORT(adam_range);
HWY_EXPORT(cast_range);
HWY_EXPORT(accumulate_range);
HWY_EXPORT(scale_f32);
HWY_EXPORT(nonfinite_range);
HWY_EXPORT(sum_squares);
HWY_EXPORT(quantize_blocks);
HWY_EXPORT(dequantize_blocks);

namespace {
void dispatch_adam(const adam_args& a, std::size_t b, std::size_t e) { HWY_DYNAMIC_DISPATCH(adam_range)(a, b, e); }
void dispatch_cast(const cast_args& a, std::size_t b, std::size_t e) { HWY_DYNAMIC_DISPATCH(cast_range)(a, b, e); }
void dispatch_accumulate(const cast_args& a, std::size_t b, std::size_t e) {
  HWY_DYNAMIC_DISPATCH(accumulate_range)(a, b, e);
}
void dispatch_scale(float* x, std::size_t n, float f) { HWY_DYNAMIC_DISPATCH(scale_f32)(x, n, f); }
bool dispatch_nonfinite(const void* s, dtype t, std::size_t b, std::size_t e) {
  return HWY_DYNAMIC_DISPATCH(nonfinite_range)(s, t, b, e);
}
void dispatch_sum_squares(const float* x, std::size_t n, double* l) { HWY_DYNAMIC_DISPATCH(sum_squares)(x, n, l); }
void dispatch_quantize(const quant_args& a, std::size_t f, std::size_t l) {
  HWY_DYNAMIC_DISPATCH(quantize_blocks)(a, f, l);
}
void dispatch_dequantize(const dequant_args& a, std::size_t f, std::size_t l) {
  HWY_DYNAMIC_DISPATCH(dequantize_blocks)(a, f, l);
}
}  // namespace

const kernel_table& simd_table() noexcept {
  static const kernel_table table{dispatch_adam,      dispatch_cast,        dispatch_accumulate, dispatch_scale,
                                  dispatch_nonfinite, dispatch_sum_squares, dispatch_quantize,   dispatch_dequantize};
  return table;
}

long long simd_target_bit(cpu_path p) noexcept {
  switch (p) {
    case cpu_path::sse4: return HWY_SSE4;
    case cpu_path::avx2: return HWY_AVX2;
    case cpu_path::avx512: return HWY_AVX3;
    case cpu_path::automatic:
    case cpu_path::scalar: break;
  }
  return 0;
}

long long simd_supported_targets() noexcept { return static_cast<long long>(hwy::SupportedTargets() & HWY_TARGETS); }

void simd_force_targets(long long target_bits) noexcept { hwy::SetSupportedTargetsForTest(target_bits); }

cpu_path simd_active_path() noexcept {
  const std::int64_t best = hwy::SupportedTargets() & HWY_TARGETS;
  const std::int64_t chosen = best & -best;  // lower bits are better targets
  // By range, as the fast paths are chosen: a newer target than AVX3 (AVX3_ZEN4, ...) is AVX-512.
  if (chosen == 0) return cpu_path::scalar;
  if (chosen <= HWY_AVX3) return cpu_path::avx512;
  if (chosen <= HWY_AVX2) return cpu_path::avx2;
  if (chosen <= HWY_SSE4) return cpu_path::sse4;
  return cpu_path::scalar;  // Highway's own portable fallback: the same arithmetic as scalar
}

}  // namespace zoe::kernels::detail
#endif  // HWY_ONCE
