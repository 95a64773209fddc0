#include "swap_store_support.hpp"

#include <stdexcept>

#include "zoe/io/engine_factory.hpp"

namespace zoe::testing {

io::swap_store_options store_options(std::vector<std::filesystem::path> paths, std::uint64_t capacity,
                                     std::string engine) {
  io::swap_store_options o;
  o.paths = std::move(paths);
  o.capacity = capacity;
  o.engine = std::move(engine);
  o.io.block_size = store_chunk;
  o.io.queue_depth = 4;
  return o;
}

std::optional<std::string> backend_refusal(const std::string& backend) {
  try {
    (void)io::make_backend(backend, {.block_size = store_chunk, .queue_depth = 4});
  } catch (const std::exception& e) {
    return backend + " is refused here: " + e.what();
  }
  return std::nullopt;
}

void store_write(io::swap_channel& ch, const io::swap_extent& e, std::uint64_t offset, std::span<std::byte> data) {
  const io::swap_request r{io::io_op::write, e, offset, data, 0};
  ch.run(std::span(&r, 1));
}

io::io_completion store_read(io::swap_channel& ch, const io::swap_extent& e, std::uint64_t offset,
                             std::span<std::byte> out) {
  ch.submit({io::io_op::read, e, offset, out, 0});
  std::vector<io::io_completion> done;
  ch.wait(done, 1);
  return done.at(0);
}

std::filesystem::path only_swap_file(const io::swap_store& store, std::size_t index) {
  const auto files = open_files_under(store.folders().at(index));
  if (files.size() != 1) throw std::runtime_error("expected one swap file in " + store.folders().at(index).string());
  return files[0];
}

void flip_byte(const std::filesystem::path& file, std::uint64_t at) {
  auto byte = peek_file(file, at, 1);
  byte[0] = ~byte[0];
  poke_file(file, at, byte);
}

}  // namespace zoe::testing
