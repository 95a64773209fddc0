#pragma once
// A file descriptor with one owner, closed when the owner goes.

namespace zoe::io::detail {

/// Owns a file descriptor; closing it drops any flock held through it. Move-only.
class owned_fd {
 public:
  owned_fd() = default;
  explicit owned_fd(int fd) noexcept : fd_(fd) {}
  owned_fd(owned_fd&& other) noexcept;
  owned_fd& operator=(owned_fd&& other) noexcept;
  ~owned_fd();
  owned_fd(const owned_fd&) = delete;
  owned_fd& operator=(const owned_fd&) = delete;

  [[nodiscard]] int get() const noexcept { return fd_; }
  [[nodiscard]] bool valid() const noexcept { return fd_ >= 0; }

 private:
  int fd_ = -1;
};

}  // namespace zoe::io::detail
