#pragma once
// Element types the kernels read and write, and typed views over caller-owned memory. 16-bit
// floats travel as their raw bits (std::uint16_t): C++20 has no standard half or bfloat16 type.

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

namespace zoe::kernels {

/// Floating-point element types: IEEE binary32, IEEE binary16, and bfloat16 (the top half of a
/// binary32).
enum class dtype : std::uint8_t { fp32 = 0, fp16 = 1, bf16 = 2 };

/// "fp32", "fp16" or "bf16". Never throws.
[[nodiscard]] std::string_view dtype_name(dtype t) noexcept;

/// Bytes per element: 4 or 2. Never throws.
[[nodiscard]] constexpr std::size_t dtype_size(dtype t) noexcept { return t == dtype::fp32 ? 4 : 2; }

/// Parses "fp32" / "fp16" / "bf16" (also "float32", "float16", "bfloat16"). Throws usage_error
/// naming `what` (a flag or key) and the accepted names otherwise.
[[nodiscard]] dtype parse_dtype(std::string_view text, std::string_view what);

/// A mutable run of `count` elements of type `type` at `data` (not owned).
struct tensor_view {
  dtype type = dtype::fp32;
  void* data = nullptr;
  std::size_t count = 0;

  [[nodiscard]] std::size_t bytes() const noexcept { return count * dtype_size(type); }
};

/// A read-only run of `count` elements of type `type` at `data` (not owned).
struct const_tensor_view {
  dtype type = dtype::fp32;
  const void* data = nullptr;
  std::size_t count = 0;

  constexpr const_tensor_view() noexcept = default;
  constexpr const_tensor_view(dtype t, const void* d, std::size_t n) noexcept : type(t), data(d), count(n) {}
  // A mutable view is also a read-only one.
  constexpr const_tensor_view(tensor_view v) noexcept  // NOLINT(google-explicit-constructor)
      : type(v.type), data(v.data), count(v.count) {}

  [[nodiscard]] std::size_t bytes() const noexcept { return count * dtype_size(type); }
};

/// Views of fp32 data.
[[nodiscard]] inline tensor_view view(std::span<float> s) noexcept { return {dtype::fp32, s.data(), s.size()}; }
[[nodiscard]] inline const_tensor_view view(std::span<const float> s) noexcept {
  return {dtype::fp32, s.data(), s.size()};
}
/// Views of 16-bit data (`t` is fp16 or bf16; the bits are stored as std::uint16_t).
[[nodiscard]] inline tensor_view view(std::span<std::uint16_t> s, dtype t) noexcept { return {t, s.data(), s.size()}; }
[[nodiscard]] inline const_tensor_view view(std::span<const std::uint16_t> s, dtype t) noexcept {
  return {t, s.data(), s.size()};
}

}  // namespace zoe::kernels
