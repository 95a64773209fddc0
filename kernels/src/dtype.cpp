#include "zoe/kernels/dtype.hpp"

#include "zoe/core/check.hpp"

namespace zoe::kernels {

std::string_view dtype_name(dtype t) noexcept {
  switch (t) {
    case dtype::fp32: return "fp32";
    case dtype::fp16: return "fp16";
    case dtype::bf16: return "bf16";
  }
  return "unknown";
}

dtype parse_dtype(std::string_view text, std::string_view what) {
  if (text == "fp32" || text == "float32") return dtype::fp32;
  if (text == "fp16" || text == "float16") return dtype::fp16;
  if (text == "bf16" || text == "bfloat16") return dtype::bf16;
  throw usage_error(str(what, ": unknown element type '", text, "' (expected fp32, fp16 or bf16)"));
}

}  // namespace zoe::kernels
