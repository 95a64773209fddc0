#pragma once
// Building an engine by backend name, as the command line and the config name them.

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "zoe/io/engine_options.hpp"
#include "zoe/io/io_engine.hpp"

namespace zoe::io {

/// Backends compiled into this build, in the order "auto" prefers them.
[[nodiscard]] std::vector<std::string> available_backends();

/// available_backends() plus "auto": what a command line may name.
[[nodiscard]] std::vector<std::string> available_backends_and_auto();

/// A backend and, when it was picked by "auto", which one was taken and why the ones before it
/// were skipped (e.g. "I/O engine auto: took aio (uring skipped: cannot set up an io_uring ring
/// ...: Operation not permitted (io_uring is disabled by sysctl kernel.io_uring_disabled=2))").
struct backend_choice {
  std::unique_ptr<io_backend> backend;
  std::string explanation;  ///< empty when the backend was named explicitly
};

/// Makes the backend `name` ("uring", "aio", "posix", or "auto": the first of
/// available_backends() that the kernel accepts). Throws usage_error naming the backend when it is
/// unknown or not in this build, and io_error when the kernel refuses it (for "auto": refuses
/// every one, naming each reason).
[[nodiscard]] backend_choice choose_backend(std::string_view name, const engine_options& options);

/// choose_backend, logging the explanation of an "auto" choice at info level.
[[nodiscard]] std::unique_ptr<io_backend> make_backend(std::string_view name, const engine_options& options);

/// make_backend wrapped in an io_engine.
[[nodiscard]] std::unique_ptr<io_engine> make_engine(std::string_view name, const engine_options& options);

}  // namespace zoe::io
