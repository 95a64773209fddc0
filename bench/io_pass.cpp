#include "io_pass.hpp"

#include <atomic>
#include <exception>
#include <thread>
#include <vector>

#include "support/measure.hpp"

namespace zoe::bench {

double run_pass(io_target& target, const pass_layout& layout, const host_buffer& memory, io::io_op op,
                const stamped_data* data, const block_visitor& visit) {
  const std::size_t threads = layout.threads;
  const std::uint64_t blocks = (layout.size + layout.block - 1) / layout.block;
  std::atomic<bool> go{false};
  std::atomic<std::size_t> ready{0};
  std::vector<std::exception_ptr> errors(threads);
  std::vector<std::jthread> pool;
  for (std::size_t t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      try {
        // A write's random bodies are laid in every slot before the clock starts, as fio fills its
        // buffers once; the timed path only stamps each block for its offset.
        if (op == io::io_op::write) {
          for (std::size_t s = 0; s < layout.queue_depth; ++s) data->lay_bodies(layout.slot(memory, t, s));
        }
        ready.fetch_add(1, std::memory_order_release);
        while (!go.load(std::memory_order_acquire)) std::this_thread::yield();
        std::uint64_t next = blocks * t / threads;
        const std::uint64_t last = blocks * (t + 1) / threads;
        std::vector<io::io_completion> done;
        const auto submit = [&](std::size_t slot_index) {
          const std::uint64_t offset = next * layout.block;
          const auto length = static_cast<std::size_t>(std::min<std::uint64_t>(layout.block, layout.size - offset));
          const auto buffer = layout.slot(memory, t, slot_index).first(length);
          if (op == io::io_op::write) data->stamp(buffer, offset);
          // The tag carries the block offset and its buffer slot (queue depth is at most 4096).
          target.submit(t, op, buffer, offset, (offset << 16) | slot_index);
          ++next;
        };
        for (std::size_t s = 0; s < layout.queue_depth && next < last; ++s) submit(s);
        while (target.outstanding(t) > 0) {
          done.clear();
          target.wait(t, done);
          for (const io::io_completion& c : done) {
            c.throw_if_failed();
            const std::size_t slot_index = c.user_data & 0xffff;
            if (visit) visit(layout.slot(memory, t, slot_index).first(c.bytes), c.user_data >> 16);
            if (next < last) submit(slot_index);
          }
        }
      } catch (...) {
        errors[t] = std::current_exception();
        // Only this thread may wait on its engine (an io_uring ring has one issuer), and the
        // buffers stay in use until their requests complete: drain before handing the error on.
        try {
          std::vector<io::io_completion> rest;
          while (target.outstanding(t) > 0) target.wait(t, rest);
        } catch (...) {  // the first error is the one to report
        }
      }
    });
  }
  while (ready.load(std::memory_order_acquire) < threads) std::this_thread::yield();
  const auto start = bench_clock::now();
  go.store(true, std::memory_order_release);
  pool.clear();
  if (op == io::io_op::write) target.after_write();
  const double seconds = seconds_since(start);
  for (const auto& e : errors) {
    if (e) std::rethrow_exception(e);
  }
  return seconds;
}

std::optional<std::uint64_t> earlier_seed(io_target& target, const pass_layout& layout, const host_buffer& memory) {
  if (!target.holds_earlier_run()) return std::nullopt;
  const auto sector = layout.slot(memory, 0, 0).first(sector_size);
  target.submit(0, io::io_op::read, sector, 0, 0);
  std::vector<io::io_completion> done;
  while (target.outstanding(0) > 0) target.wait(0, done);
  for (const auto& c : done) c.throw_if_failed();
  return stamped_data::seed_of(sector);
}

}  // namespace zoe::bench
