#include "zoe/io/io_engine.hpp"

#include "engine_state.hpp"
#include "zoe/core/log.hpp"

namespace zoe::io {

io_engine::io_engine(std::unique_ptr<io_backend> backend, engine_options options)
    : state_(std::make_unique<detail::engine_state>(std::move(backend), options)) {}

io_engine::~io_engine() {
  // The backend may still be writing into or reading from caller buffers: drain before going.
  std::vector<io_completion> discard;
  try {
    while (state_->outstanding() > 0) {
      discard.clear();
      state_->collect(discard, state_->outstanding(), true);
    }
  } catch (const std::exception& e) {
    log::error("io_engine shutting down with requests in flight: ", e.what());
  }
}

void io_engine::submit(std::span<const io_request> requests) {
  for (const io_request& r : requests) state_->submit(r);
}

std::size_t io_engine::poll(std::vector<io_completion>& out) { return state_->collect(out, 0, false); }

std::size_t io_engine::wait(std::vector<io_completion>& out, std::size_t min_count) {
  return state_->collect(out, min_count, true);
}

void io_engine::run(std::span<const io_request> requests) {
  const std::size_t before = state_->outstanding();
  submit(requests);
  std::vector<io_completion> completions;
  state_->collect(completions, before + requests.size(), true);
  for (const io_completion& c : completions) c.throw_if_failed();
}

bool io_engine::register_buffers(std::span<const std::span<std::byte>> regions) {
  return state_->register_buffers(regions);
}

std::size_t io_engine::outstanding() const noexcept { return state_->outstanding(); }
std::string_view io_engine::backend_name() const noexcept { return state_->backend_name(); }
const engine_options& io_engine::options() const noexcept { return state_->options(); }

}  // namespace zoe::io
