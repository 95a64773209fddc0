#include "zoe/io/io_stats.hpp"

#include <algorithm>

#include "stats_recorder.hpp"
#include "zoe/core/units.hpp"

namespace zoe::io {

double io_direction_stats::gib_per_s() const noexcept {
  if (busy_ns == 0) return 0;
  return static_cast<double>(bytes) / static_cast<double>(GiB) / (static_cast<double>(busy_ns) * 1e-9);
}

io_direction_stats& io_direction_stats::operator+=(const io_direction_stats& other) noexcept {
  requests += other.requests;
  bytes += other.bytes;
  errors += other.errors;
  busy_ns += other.busy_ns;
  latency_ns += other.latency_ns;
  return *this;
}

namespace detail {
namespace {

// One writer (the driving thread): a relaxed load and store is all an increment needs, and on
// x86 they are plain moves, where fetch_add would be a locked instruction per request.
void add(std::atomic<std::uint64_t>& counter, std::uint64_t value) noexcept {
  counter.store(counter.load(std::memory_order_relaxed) + value, std::memory_order_relaxed);
}

std::uint64_t ns_between(stats_recorder::clock::time_point from, stats_recorder::clock::time_point to) noexcept {
  return to > from ? static_cast<std::uint64_t>(std::chrono::nanoseconds(to - from).count()) : 0;
}

std::int64_t ns_since_epoch(stats_recorder::clock::time_point t) noexcept {
  return std::chrono::nanoseconds(t.time_since_epoch()).count();
}

}  // namespace

void stats_recorder::started(io_op op, clock::time_point now) noexcept {
  direction& d = of(op);
  // The epoch itself never names a start: a clock read at it counts as one tick later.
  if (d.outstanding++ == 0)
    d.busy_since.store(std::max<std::int64_t>(ns_since_epoch(now), 1), std::memory_order_relaxed);
}

void stats_recorder::finished(io_op op, clock::time_point since, clock::time_point now, std::uint64_t bytes,
                              bool failed) noexcept {
  direction& d = of(op);
  add(d.requests, 1);
  add(failed ? d.errors : d.bytes, failed ? 1 : bytes);
  add(d.latency_ns, ns_between(since, now));
  leave(d, now);
}

void stats_recorder::withdrawn(io_op op, clock::time_point now) noexcept { leave(of(op), now); }

void stats_recorder::leave(direction& d, clock::time_point now) noexcept {
  if (--d.outstanding > 0) return;
  const std::int64_t since = d.busy_since.load(std::memory_order_relaxed);
  add(d.busy_ns, ns_between(clock::time_point(std::chrono::nanoseconds(since)), now));
  d.busy_since.store(0, std::memory_order_relaxed);
}

io_stats stats_recorder::snapshot() const noexcept {
  const auto now = clock::now();
  const auto read = [&](const direction& d) {
    io_direction_stats s;
    s.requests = d.requests.load(std::memory_order_relaxed);
    s.bytes = d.bytes.load(std::memory_order_relaxed);
    s.errors = d.errors.load(std::memory_order_relaxed);
    s.latency_ns = d.latency_ns.load(std::memory_order_relaxed);
    s.busy_ns = d.busy_ns.load(std::memory_order_relaxed);
    // The interval still open counts up to now.
    if (const std::int64_t since = d.busy_since.load(std::memory_order_relaxed); since != 0) {
      s.busy_ns += ns_between(clock::time_point(std::chrono::nanoseconds(since)), now);
    }
    return s;
  };
  return {read(read_), read(write_)};
}

}  // namespace detail
}  // namespace zoe::io
