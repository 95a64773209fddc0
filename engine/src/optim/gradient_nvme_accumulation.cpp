// The gradient path's accumulation into nvme homes: a pipelined read-modify-write whose reads and
// writes are pieces of the rank's mover, in pieces of the staging buffers, taking each piece's
// part of the summary on the worker.
#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <vector>

#include "gradient_path_impl.hpp"
#include "zoe/core/check.hpp"
#include "zoe/core/str.hpp"
#include "zoe/kernels/cast.hpp"

namespace zoe::engine {

namespace {
// The writes of one read-modify-write, shared with their done callbacks on the mover's thread.
struct nvme_writes {
  std::mutex mutex;
  std::condition_variable returned;
  std::size_t out = 0;                  ///< submitted, not yet known good or failed
  std::optional<carried_error> failed;  ///< the first that failed

  void over(const carried_error* e) {
    {
      const std::lock_guard lock(mutex);
      if (e != nullptr && !failed) failed = *e;
      --out;
    }
    returned.notify_all();
  }
};
}  // namespace

// The read-modify-write of an nvme home, piece by piece: [copy the reduced piece from the device]
// and [read the home's piece] into two staging buffers, add (or, in micro-batch 0, cast: no read),
// take the piece's part of the summary, write it back. The read is a demand piece of the mover (this
// worker waits on it); the write a write-behind that runs while the next piece is copied, read and
// added, its buffer held until the write is known good; when the pool is dry the worker waits for
// the writes, raised to demand. A parameter the micro-batch did not touch is zeroed (micro-batch 0:
// written, not read) or only read (the last).
void gradient_path::impl::process_nvme(parameter_id p, const std::byte* source, bool first, bool last) {
  const parameter_layout& prm = param(p);
  const io::swap_extent extent = home(p).extent;
  const std::uint64_t n = prm.shard_numel;
  const std::uint64_t piece = options.staging_buffer_bytes / sizeof(float);
  const bool write = source != nullptr || first;
  const bool read = !first;
  if (!write && !last) return;
  ZOE_ASSERT(movers != nullptr);
  ZOE_EXPECTS(tiers.begin_move(p, state_kind::gradient, write ? move_kind::write : move_kind::read),
              "gradient_path: the gradient of '", prm.name, "' is in flight elsewhere");
  const std::string what = str("the gradient of parameter '", prm.name, "'");
  const auto writes = std::make_shared<nvme_writes>();
  const std::uint64_t group = movers->new_group();
  std::optional<carried_error> failed;
  // The piece in hand's buffers: its read and its device copy may be in flight until the cleanup below.
  std::optional<allocators::buffer_lease> source_lease;
  std::future<std::optional<carried_error>> read_over;
  try {
    for (std::uint64_t e = 0; e < n && !failed; e += piece) {
      const std::uint64_t len = std::min(piece, n - e);
      const std::uint64_t offset = e * sizeof(float);
      const std::size_t bytes = static_cast<std::size_t>(len * sizeof(float));
      // Buffers for this piece: while the pool is dry, earlier writes must return theirs first.
      // Only this thread takes them, so with no write out they are all free.
      const std::size_t want = source != nullptr ? 2 : 1;
      std::optional<std::vector<allocators::buffer_lease>> leases;
      while (!(leases = staging->try_acquire_many(want))) {
        std::unique_lock lock(writes->mutex);
        if (writes->out == 0) break;
        const std::size_t before = writes->out;
        lock.unlock();
        movers->raise(group);  // the worker waits on them now
        lock.lock();
        writes->returned.wait(lock, [&] { return writes->out < before; });
      }
      if (!leases) leases = staging->acquire_many(want);
      auto data = std::make_shared<allocators::buffer_lease>(std::move(leases->back()));
      if (source != nullptr) source_lease = std::move(leases->front());
      if (read) {
        auto outcome = std::make_shared<std::promise<std::optional<carried_error>>>();
        read_over = outcome->get_future();
        mover::piece r;
        r.priority = move_priority::demand;
        r.buffer = data->span();
        r.bytes = bytes;
        r.read = mover::io_range{extent, offset};
        r.what = what;
        r.done = [outcome](const carried_error* err) {
          outcome->set_value(err != nullptr ? std::optional<carried_error>(*err) : std::nullopt);
        };
        movers->submit(std::move(r));
      }
      if (source != nullptr) {
        const std::size_t element = kernels::dtype_size(prm.dtype);
        dev.copy_async(source_lease->data(), source + e * element, static_cast<std::size_t>(len) * element,
                       copy_kind::device_to_host, stream.view());
      }
      if (read) {
        if (std::optional<carried_error> err = read_over.get()) failed = std::move(err);
        add_stat(&gradient_path_stats::bytes_read, failed ? 0 : bytes);
      }
      if (source != nullptr) {
        dev.synchronize(stream.view());
        add_stat(&gradient_path_stats::bytes_to_host, len * kernels::dtype_size(prm.dtype));
      }
      if (failed) break;
      float* const values_at = reinterpret_cast<float*>(data->data());
      const std::span<float> values(values_at, static_cast<std::size_t>(len));
      const kernels::const_tensor_view fp32_values = kernels::view(std::span<const float>(values));
      if (source != nullptr) {
        const kernels::const_tensor_view src{prm.dtype, source_lease->data(), static_cast<std::size_t>(len)};
        if (first) {
          kernels::cast(src, kernels::view(values));
        } else {
          kernels::accumulate(src, values);
        }
      } else if (first) {
        std::memset(values_at, 0, bytes);
      }
      source_lease.reset();
      if (last) {
        // This piece's chunks of the sum (it starts on a chunk: the plan's buffers hold whole ones).
        const std::size_t at = static_cast<std::size_t>(e / sum_chunk);
        (void)kernels::sum_of_squares(
            fp32_values, std::as_writable_bytes(std::span<double>(partials[p]).subspan(at, chunks_of(len))));
        if (kernels::has_inf_nan(fp32_values)) overflows[p] = 1;
      }
      if (write) {
        mover::piece w;
        w.priority = move_priority::write_behind;
        w.group = group;
        w.buffer = data->span();
        w.bytes = bytes;
        w.write = mover::io_range{extent, offset};
        w.what = what;
        // The buffer goes back to the pool once the write is over, known good or failed.
        w.done = [this, writes, data, bytes](const carried_error* err) {
          if (err == nullptr) add_stat(&gradient_path_stats::bytes_written, bytes);
          data->release();
          writes->over(err);
        };
        {
          const std::lock_guard lock(writes->mutex);
          ++writes->out;
        }
        try {
          movers->submit(std::move(w));
        } catch (...) {
          const std::lock_guard lock(writes->mutex);
          --writes->out;
          throw;
        }
      }
    }
  } catch (...) {
    if (!failed) failed = carried_error::of(std::current_exception());
  }
  // No buffer goes back while anything may still fill or read it: the piece in hand's device copy
  // and read, then every write.
  try {
    dev.synchronize(stream.view());
  } catch (...) {
    if (!failed) failed = carried_error::of(std::current_exception());
  }
  if (read_over.valid()) read_over.wait();
  source_lease.reset();
  {
    std::unique_lock lock(writes->mutex);
    if (writes->out > 0) {
      lock.unlock();
      movers->raise(group);
      lock.lock();
    }
    writes->returned.wait(lock, [&] { return writes->out == 0; });
    if (!failed && writes->failed) failed = writes->failed;
  }
  if (failed) {
    tiers.abort_move(p, state_kind::gradient);
    failed->raise();
  }
  tiers.finish_move(p, state_kind::gradient);
  if (last) {
    // The shard's value: the chunk partials added in order from 0.0, as sum_of_squares adds them.
    double total = 0.0;
    for (const double x : partials[p]) total += x;
    sums[p] = total;
  }
}

}  // namespace zoe::engine
