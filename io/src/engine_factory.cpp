#include "zoe/io/engine_factory.hpp"

#include "posix_backend.hpp"
#include "zoe/core/check.hpp"
#include "zoe/core/log.hpp"

namespace zoe::io {

std::vector<std::string> available_backends() { return {"posix"}; }

std::vector<std::string> available_backends_and_auto() {
  auto names = available_backends();
  names.emplace_back("auto");
  return names;
}

std::unique_ptr<io_backend> make_backend(std::string_view name, const engine_options& options) {
  options.validate();
  if (name == "posix" || name == "auto") {
    if (name == "auto") log::info("I/O backend auto: took posix (the only backend in this build)");
    return std::make_unique<detail::posix_backend>(options);
  }
  std::string known;
  for (const auto& b : available_backends()) known += (known.empty() ? "" : ", ") + b;
  throw usage_error(str("unknown I/O engine '", name, "' (this build has: ", known, ", auto)"));
}

std::unique_ptr<io_engine> make_engine(std::string_view name, const engine_options& options) {
  return std::make_unique<io_engine>(make_backend(name, options), options);
}

}  // namespace zoe::io
