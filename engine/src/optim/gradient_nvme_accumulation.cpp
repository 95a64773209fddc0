// The gradient path's accumulation into nvme homes: a pipelined read-modify-write through the
// worker's swap channel, in pieces of the staging buffers, taking each piece's part of the summary.
#include "gradient_path_impl.hpp"

#include <algorithm>
#include <cstring>
#include <deque>
#include <optional>
#include <span>
#include <vector>

#include "zoe/core/check.hpp"
#include "zoe/core/str.hpp"
#include "zoe/kernels/cast.hpp"

namespace zoe::engine {

// The read-modify-write of an nvme home, piece by piece: [copy the reduced piece from the device]
// and [read the home's piece] into two staging buffers, add (or, in micro-batch 0, cast: no read),
// take the piece's part of the summary, write it back. A piece's write runs while the next piece is
// copied, read and added; its buffers return once the write is known good. A parameter the
// micro-batch did not touch is zeroed (micro-batch 0: written, not read) or only read (the last).
void gradient_path::impl::process_nvme(parameter_id p, const std::byte* source, bool first, bool last,
                                       io::swap_channel& channel) {
  const parameter_layout& prm = param(p);
  const io::swap_extent extent = home(p).extent;
  const std::uint64_t n = prm.shard_numel;
  const std::uint64_t piece = options.staging_buffer_bytes / sizeof(float);
  const bool write = source != nullptr || first;
  const bool read = !first;
  if (!write && !last) return;
  ZOE_EXPECTS(tiers.begin_move(p, state_kind::gradient, write ? move_kind::write : move_kind::read),
              "gradient_path: the gradient of '", prm.name, "' is in flight elsewhere");

  struct flight {
    allocators::buffer_lease source;
    allocators::buffer_lease data;
    std::uint64_t offset = 0;  ///< bytes into the extent
  };
  std::deque<flight> writes;  ///< submitted, their buffers held until they are known good
  std::optional<carried_error> failed;
  std::vector<io::io_completion> done;
  bool read_done = false;
  std::uint64_t read_offset = 0;
  // user_data: 1 for the piece's read, 2 + offset for a write.
  constexpr std::uint64_t read_tag = 1;
  constexpr std::uint64_t write_tag = 2;
  const auto note_failure = [&](const io::io_completion& c, const char* op, std::uint64_t offset) {
    if (failed) return;  // the first failure is the one to report
    failed = carried_error{
        c.corrupt ? error_category::corrupt : error_category::io, c.os_errno,
        str("gradient_path: ", op, " the gradient of parameter '", prm.name, "' (", n * sizeof(float),
            " bytes, swap extent ", extent.id, ") failed at byte offset ", offset, " of the extent: ", c.message)};
  };
  // Waits for at least one completion and takes each: the read, or a write (its buffers return).
  const auto collect = [&] {
    done.clear();
    channel.wait(done, 1);
    for (const io::io_completion& c : done) {
      if (c.user_data == read_tag) {
        read_done = true;
        if (c.ok()) {
          add_stat(&gradient_path_stats::bytes_read, c.bytes);
        } else {
          note_failure(c, "reading", read_offset);
        }
        continue;
      }
      const std::uint64_t offset = c.user_data - write_tag;
      const auto it = std::find_if(writes.begin(), writes.end(), [&](const flight& w) { return w.offset == offset; });
      if (c.ok()) {
        add_stat(&gradient_path_stats::bytes_written, c.bytes);
      } else {
        note_failure(c, "writing", offset);
      }
      if (it != writes.end()) writes.erase(it);
    }
  };
  // The piece in hand: its read and its device copy may be in flight until the cleanup below.
  std::optional<flight> current;
  try {
    for (std::uint64_t e = 0; e < n && !failed; e += piece) {
      const std::uint64_t len = std::min(piece, n - e);
      const std::uint64_t offset = e * sizeof(float);
      const std::size_t bytes = static_cast<std::size_t>(len * sizeof(float));
      // Buffers for this piece: while the pool is dry, earlier writes must finish first. Only this
      // thread takes them, so with no write out they are all free.
      const std::size_t want = source != nullptr ? 2 : 1;
      std::optional<std::vector<allocators::buffer_lease>> leases;
      while (!(leases = staging->try_acquire_many(want)) && !writes.empty()) collect();
      if (!leases) leases = staging->acquire_many(want);
      flight& f = current.emplace(flight{.source = {}, .data = std::move(leases->back()), .offset = offset});
      if (source != nullptr) f.source = std::move(leases->front());
      if (read) {
        read_done = false;
        read_offset = offset;
        channel.submit({io::io_op::read, extent, offset, f.data.span().first(bytes), read_tag});
      }
      if (source != nullptr) {
        const std::size_t element = kernels::dtype_size(prm.dtype);
        dev.copy_async(f.source.data(), source + e * element, static_cast<std::size_t>(len) * element,
                       copy_kind::device_to_host, stream.view());
      }
      if (read) {
        while (!read_done && channel.outstanding() > 0) collect();
      }
      if (source != nullptr) {
        dev.synchronize(stream.view());
        add_stat(&gradient_path_stats::bytes_to_host, len * kernels::dtype_size(prm.dtype));
      }
      if (failed) break;
      float* const data = reinterpret_cast<float*>(f.data.data());
      const std::span<float> values(data, static_cast<std::size_t>(len));
      const kernels::const_tensor_view fp32_values = kernels::view(std::span<const float>(values));
      if (source != nullptr) {
        const kernels::const_tensor_view src{prm.dtype, f.source.data(), static_cast<std::size_t>(len)};
        if (first) {
          kernels::cast(src, kernels::view(values));
        } else {
          kernels::accumulate(src, values);
        }
      } else if (first) {
        std::memset(data, 0, bytes);
      }
      if (last) {
        // This piece's chunks of the sum (it starts on a chunk: the plan's buffers hold whole ones).
        const std::size_t at = static_cast<std::size_t>(e / sum_chunk);
        (void)kernels::sum_of_squares(
            fp32_values, std::as_writable_bytes(std::span<double>(partials[p]).subspan(at, chunks_of(len))));
        if (kernels::has_inf_nan(fp32_values)) overflows[p] = 1;
      }
      if (write) {
        channel.submit({io::io_op::write, extent, offset, f.data.span().first(bytes), write_tag + offset});
        f.source.release();
        writes.push_back(std::move(f));
      }
      current.reset();
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
  bool channel_broken = false;
  const auto drain = [&](auto&& busy) {
    while (!channel_broken && busy() && channel.outstanding() > 0) {
      try {
        collect();
      } catch (...) {
        if (!failed) failed = carried_error::of(std::current_exception());
        channel_broken = true;
      }
    }
  };
  drain([&] { return current && read && !read_done; });
  drain([&] { return !writes.empty(); });
  if (channel_broken) {
    // Its requests may still use their buffers (swap_channel.hpp): keep them until the path closes.
    const auto keep = [this](allocators::buffer_lease& lease) {
      if (lease) quarantined.push_back(std::move(lease));
    };
    if (current) {
      keep(current->source);
      keep(current->data);
    }
    for (flight& w : writes) keep(w.data);
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
