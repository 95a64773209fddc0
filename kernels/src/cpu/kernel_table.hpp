#pragma once
// The CPU kernels of one path, as a table of plain functions over index ranges. The public entry
// points validate their arguments, split the work with TBB and call the active path's table.

#include <cstddef>

#include "kernel_args.hpp"
#include "zoe/kernels/cpu_path.hpp"

namespace zoe::kernels::detail {

struct kernel_table {
  void (*adam_range)(const adam_args& a, std::size_t begin, std::size_t end);
  void (*cast_range)(const cast_args& a, std::size_t begin, std::size_t end);
  /// fp32 dst[i] += float(src[i]) for i in [begin, end) (a.dst_type is fp32).
  void (*accumulate_range)(const cast_args& a, std::size_t begin, std::size_t end);
  void (*scale_f32)(float* x, std::size_t count, float factor);
  bool (*nonfinite_range)(const void* src, dtype type, std::size_t begin, std::size_t end);
  void (*sum_squares)(const float* x, std::size_t count, double* lanes8);
  void (*quantize_blocks)(const quant_args& a, std::size_t first_block, std::size_t last_block);
  void (*dequantize_blocks)(const dequant_args& a, std::size_t first_block, std::size_t last_block);
};

/// The plain float instantiation (cpu/scalar_kernels.cpp).
[[nodiscard]] const kernel_table& scalar_table() noexcept;
/// Highway's run-time dispatch over the SIMD targets (cpu/simd_kernels.cpp).
[[nodiscard]] const kernel_table& simd_table() noexcept;
/// The table of the active path (cpu_path.cpp).
[[nodiscard]] const kernel_table& active_table();

/// Highway's target bit for a SIMD path, 0 for scalar/automatic (cpu/simd_kernels.cpp).
[[nodiscard]] long long simd_target_bit(cpu_path p) noexcept;
/// Highway's supported-target mask for this CPU, before any forcing.
[[nodiscard]] long long simd_supported_targets() noexcept;
/// Restricts Highway's dispatch to `target_bits` (0: no restriction).
void simd_force_targets(long long target_bits) noexcept;
/// The SIMD path Highway dispatches to now.
[[nodiscard]] cpu_path simd_active_path() noexcept;

}  // namespace zoe::kernels::detail
