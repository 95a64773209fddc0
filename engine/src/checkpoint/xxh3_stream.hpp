#pragma once
// XXH3-64 over bytes that arrive in pieces: the checksum of a checkpoint file, computed as it is
// written or read, never over the whole file in memory.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>

namespace zoe::engine::detail {

/// Not thread-safe. The digest of the pieces equals XXH3_64bits (seed 0) of their concatenation.
class xxh3_stream {
 public:
  /// Throws memory_error when the hash state cannot be allocated.
  xxh3_stream();
  ~xxh3_stream();
  xxh3_stream(const xxh3_stream&) = delete;
  xxh3_stream& operator=(const xxh3_stream&) = delete;

  void update(std::span<const std::byte> data) noexcept;
  /// The hash of everything so far (more may follow). Never throws.
  [[nodiscard]] std::uint64_t digest() const noexcept;

 private:
  struct state;
  std::unique_ptr<state> state_;
};

/// XXH3-64 (seed 0) of bytes held whole (a manifest's text, the client bytes). Never throws.
[[nodiscard]] std::uint64_t hash_of(std::string_view bytes) noexcept;

/// 16 lower-case hex digits, as manifests write hashes.
[[nodiscard]] std::string hash_hex(std::uint64_t hash);

}  // namespace zoe::engine::detail
