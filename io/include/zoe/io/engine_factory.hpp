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

/// Makes the backend `name` ("posix", or "auto" for the best one that works here). Throws
/// usage_error naming the backend when it is unknown, and io_error when the kernel refuses it.
[[nodiscard]] std::unique_ptr<io_backend> make_backend(std::string_view name, const engine_options& options);

/// make_backend wrapped in an io_engine.
[[nodiscard]] std::unique_ptr<io_engine> make_engine(std::string_view name, const engine_options& options);

}  // namespace zoe::io
