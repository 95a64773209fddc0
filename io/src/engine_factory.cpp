#include "zoe/io/engine_factory.hpp"

#include "posix_backend.hpp"
#include "zoe/core/check.hpp"
#include "zoe/core/log.hpp"
#ifdef ZOE_HAVE_URING
#include "uring_backend.hpp"
#endif
#ifdef ZOE_HAVE_AIO
#include "aio_backend.hpp"
#endif

namespace zoe::io {
namespace {

struct backend_maker {
  std::string_view name;
  std::unique_ptr<io_backend> (*make)(const engine_options&);
};

template <typename Backend>
std::unique_ptr<io_backend> make_as(const engine_options& options) {
  return std::make_unique<Backend>(options);
}

// In the order "auto" prefers them: io_uring does the most per syscall and registers buffers,
// libaio is the DeepSpeed path, the thread pool works everywhere.
const std::vector<backend_maker>& makers() {
  static const std::vector<backend_maker> list = {
#ifdef ZOE_HAVE_URING
      {"uring", &make_as<detail::uring_backend>},
#endif
#ifdef ZOE_HAVE_AIO
      {"aio", &make_as<detail::aio_backend>},
#endif
      {"posix", &make_as<detail::posix_backend>},
  };
  return list;
}

}  // namespace

std::vector<std::string> available_backends() {
  std::vector<std::string> names;
  for (const backend_maker& m : makers()) names.emplace_back(m.name);
  return names;
}

std::vector<std::string> available_backends_and_auto() {
  auto names = available_backends();
  names.emplace_back("auto");
  return names;
}

backend_choice choose_backend(std::string_view name, const engine_options& options) {
  options.validate();
  if (name == "auto") {
    std::string skipped;
    for (const backend_maker& m : makers()) {
      try {
        backend_choice choice{m.make(options), str("I/O engine auto: took ", m.name)};
        if (!skipped.empty()) choice.explanation += str(" (", skipped, ")");
        return choice;
      } catch (const std::exception& e) {
        // The kernel may lack a backend the build has (io_uring off by sysctl or seccomp, no aio):
        // say why and try the next.
        skipped += str(skipped.empty() ? "" : "; ", m.name, " skipped: ", e.what());
      }
    }
    throw io_error(str("I/O engine auto: no backend works here (", skipped, ")"), 0);
  }
  for (const backend_maker& m : makers()) {
    if (m.name == name) return {m.make(options), {}};
  }
  std::string known;
  for (const auto& b : available_backends()) known += (known.empty() ? "" : ", ") + b;
  const bool known_elsewhere = name == "uring" || name == "aio";
  throw usage_error(str("unknown I/O engine '", name, "' (this build has: ", known, ", auto",
                        known_elsewhere ? "; it was built without " + std::string(name) : std::string(), ")"));
}

std::unique_ptr<io_backend> make_backend(std::string_view name, const engine_options& options) {
  backend_choice choice = choose_backend(name, options);
  if (!choice.explanation.empty()) log::info(choice.explanation);
  return std::move(choice.backend);
}

std::unique_ptr<io_engine> make_engine(std::string_view name, const engine_options& options) {
  return std::make_unique<io_engine>(make_backend(name, options), options);
}

}  // namespace zoe::io
