#pragma once
// A non-owning handle to a stream of some compute device, so kernels and copies can be declared
// in public headers without CUDA headers. For the CUDA device it holds a cudaStream_t; for the
// host device, the host stream object. A default-constructed view is the device's default stream.

#include <cstdint>

namespace zoe {

class stream_view {
 public:
  constexpr stream_view() noexcept = default;
  constexpr explicit stream_view(void* native) noexcept : native_(native) {}

  /// The device-specific handle (cudaStream_t or host stream pointer); nullptr is the default stream.
  [[nodiscard]] constexpr void* native() const noexcept { return native_; }
  [[nodiscard]] constexpr bool is_default() const noexcept { return native_ == nullptr; }

  friend constexpr bool operator==(stream_view a, stream_view b) noexcept = default;

 private:
  void* native_ = nullptr;
};

}  // namespace zoe
