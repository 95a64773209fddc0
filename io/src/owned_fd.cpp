#include "owned_fd.hpp"

#include <unistd.h>

#include <utility>

namespace zoe::io::detail {

owned_fd::owned_fd(owned_fd&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}

owned_fd& owned_fd::operator=(owned_fd&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = std::exchange(other.fd_, -1);
  }
  return *this;
}

owned_fd::~owned_fd() {
  if (fd_ >= 0) ::close(fd_);
}

}  // namespace zoe::io::detail
