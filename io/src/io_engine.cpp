#include "zoe/io/io_engine.hpp"

#include "engine_state.hpp"

namespace zoe::io {

io_engine::io_engine(std::unique_ptr<io_backend> backend, engine_options options)
    : state_(std::make_unique<detail::engine_state>(std::move(backend), options)) {}

io_engine::~io_engine() { state_->drain(); }

void io_engine::submit(std::span<const io_request> requests) { state_->submit(requests); }

std::size_t io_engine::poll(std::vector<io_completion>& out) { return state_->collect(out, 0, false); }

std::size_t io_engine::wait(std::vector<io_completion>& out, std::size_t min_count) {
  return state_->collect(out, min_count, true);
}

std::size_t io_engine::wait(std::vector<io_completion>& out, std::size_t min_count, std::chrono::nanoseconds timeout) {
  return state_->collect_until(out, min_count, detail::deadline_after(timeout));
}

io_stats io_engine::stats() const noexcept { return state_->stats(); }
int io_engine::notify_fd() const noexcept { return state_->notify_fd(); }

void io_engine::run(std::span<const io_request> requests) { state_->run(requests); }

bool io_engine::register_buffers(std::span<const std::span<std::byte>> regions) {
  return state_->register_buffers(regions);
}

std::size_t io_engine::outstanding() const noexcept { return state_->outstanding(); }
std::string_view io_engine::backend_name() const noexcept { return state_->backend_name(); }
const engine_options& io_engine::options() const noexcept { return state_->options(); }

}  // namespace zoe::io
