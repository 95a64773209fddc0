#include "stream_failures.hpp"

#include <utility>

#include "zoe/core/error.hpp"
#include "zoe/core/log.hpp"
#include "zoe/core/str.hpp"

namespace zoe::detail {
namespace {

// The text of a task's exception, whatever it threw.
std::string describe(const std::exception_ptr& failure) {
  try {
    std::rethrow_exception(failure);
  } catch (const std::exception& e) {
    return e.what();
  } catch (...) {
    return "a non-standard exception";
  }
}

[[noreturn]] void throw_failure(const std::exception_ptr& failure, const std::string& device_name) {
  throw device_error(str(device_name, ": a host task on a stream failed: ", describe(failure)));
}

}  // namespace

void stream_failures::record(const void* stream, std::exception_ptr failure) noexcept {
  try {
    const std::lock_guard lock(mutex_);
    failures_.try_emplace(stream, std::move(failure));
  } catch (...) {
    log::error("a host task on a stream failed and its failure could not be kept: ", describe(failure));
  }
}

std::exception_ptr stream_failures::take(const void* stream) noexcept {
  const std::lock_guard lock(mutex_);
  const auto it = failures_.find(stream);
  if (it == failures_.end()) return nullptr;
  std::exception_ptr failure = std::move(it->second);
  failures_.erase(it);
  return failure;
}

void stream_failures::rethrow(const void* stream, const std::string& device_name) {
  if (const std::exception_ptr failure = take(stream)) throw_failure(failure, device_name);
}

void stream_failures::rethrow_any(const std::string& device_name) {
  std::unordered_map<const void*, std::exception_ptr> all;
  {
    const std::lock_guard lock(mutex_);
    all.swap(failures_);
  }
  if (all.empty()) return;
  // More than one stream failed: the first is thrown, the others would be lost, so they are logged.
  auto it = all.begin();
  for (auto other = std::next(it); other != all.end(); ++other) {
    log::error(device_name, ": a host task on another stream also failed: ", describe(other->second));
  }
  throw_failure(it->second, device_name);
}

void stream_failures::forget(const void* stream, const std::string& device_name) noexcept {
  if (const std::exception_ptr failure = take(stream)) {
    log::error(device_name, ": stream destroyed with a host task failure never synchronized: ", describe(failure));
  }
}

}  // namespace zoe::detail
