#include "rank_link.hpp"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <new>
#include <vector>

#include "checkpoint_format.hpp"
#include "zoe/core/check.hpp"
#include "zoe/core/log.hpp"
#include "zoe/engine/checkpoint/checkpoint.hpp"

namespace zoe::engine::detail {

namespace {

// What each rank tells the others about its failure: the class, the errno of an io_error and the
// length of the message that follows (from the lowest failing rank only).
struct verdict {
  std::uint32_t kind = 0;  // 0: no failure; an error_category; or one of the kinds below
  std::int32_t os_errno = 0;
  std::uint32_t message_bytes = 0;
  std::uint32_t unused = 0;
};
static_assert(sizeof(verdict) == 16);

constexpr std::uint32_t checkpoint_kind = 100;  // checkpoint_error (category corrupt, like corruption_error)
constexpr std::uint32_t bad_alloc_kind = 101;
constexpr std::uint32_t other_kind = 102;  // not a zoe::error
// A message longer than this is cut: it still names the file first.
constexpr std::size_t message_limit = 4000;

verdict describe(const std::exception_ptr& failure, std::string& message) {
  verdict v;
  try {
    std::rethrow_exception(failure);
  } catch (const checkpoint_error& e) {
    v.kind = checkpoint_kind;
    message = e.what();
  } catch (const io_error& e) {
    v.kind = static_cast<std::uint32_t>(e.category());
    v.os_errno = e.os_errno();
    message = e.what();
  } catch (const error& e) {
    v.kind = static_cast<std::uint32_t>(e.category());
    message = e.what();
  } catch (const std::bad_alloc& e) {
    v.kind = bad_alloc_kind;
    message = e.what();
  } catch (const std::exception& e) {
    v.kind = other_kind;
    message = e.what();
  } catch (...) {
    v.kind = other_kind;
    message = "an exception that is not a std::exception";
  }
  if (message.size() > message_limit) message.resize(message_limit);
  v.message_bytes = static_cast<std::uint32_t>(message.size());
  return v;
}

[[noreturn]] void throw_as(const verdict& v, const std::string& m) {
  switch (v.kind) {
    case checkpoint_kind: throw checkpoint_error(m);
    case bad_alloc_kind: throw memory_error(m);
    case static_cast<std::uint32_t>(error_category::usage): throw usage_error(m);
    case static_cast<std::uint32_t>(error_category::config): throw config_error(m);
    case static_cast<std::uint32_t>(error_category::io): throw io_error(m, v.os_errno);
    case static_cast<std::uint32_t>(error_category::corrupt): throw corruption_error(m);
    case static_cast<std::uint32_t>(error_category::memory): throw memory_error(m);
    case static_cast<std::uint32_t>(error_category::device): throw device_error(m);
    case static_cast<std::uint32_t>(error_category::comm): throw comm_error(m);
    case static_cast<std::uint32_t>(error_category::timeout): throw timeout_error(m);
    default: throw internal_error(m);
  }
}

}  // namespace

rank_link::rank_link(communicator& comm, device& dev, std::size_t chunk_bytes)
    : comm_(&comm), dev_(&dev), chunk_bytes_(chunk_bytes) {
  ZOE_EXPECTS(chunk_bytes > 0, "rank_link: pieces of 0 bytes");
  if (comm.size() <= 1) return;
  stream_ = dev.create_stream();
  if (dev.kind() == device_kind::host) return;
  verdict_buffer_ = device_allocation(dev, sizeof(verdict) * comm.size());
  try {
    device_buffer_ = device_allocation(dev, chunk_bytes_);
  } catch (...) {
    setup_failure_ = std::current_exception();
  }
}

rank_link::~rank_link() {
  if (verdict_buffer_.data() == nullptr) return;
  try {
    dev_->synchronize(stream_.view());
  } catch (const std::exception& e) {
    log::warn("checkpoint: work on the device failed before its transfer buffers were freed: ", e.what());
  }
}

std::size_t rank_link::rank() const noexcept { return comm_ != nullptr ? comm_->rank() : 0; }
std::size_t rank_link::size() const noexcept { return comm_ != nullptr ? comm_->size() : 1; }

template <typename Collective>
void rank_link::on_device(std::span<std::byte> data, void* buffer, bool upload, bool download,
                          Collective&& collective) {
  const stream_view stream = stream_.view();
  if (dev_->kind() == device_kind::host) {
    collective(data.data());
  } else {
    ZOE_ASSERT(buffer != nullptr);
    if (upload) dev_->copy_async(buffer, data.data(), data.size(), copy_kind::host_to_device, stream);
    collective(buffer);
    if (download) dev_->copy_async(data.data(), buffer, data.size(), copy_kind::device_to_host, stream);
  }
  // A failed transfer (a rank that vanished) is reported here, naming the rank.
  dev_->synchronize(stream);
}

template <typename Collective>
void rank_link::in_chunks(std::span<std::byte> data, bool upload, bool download, Collective&& collective) {
  for (std::size_t at = 0; at < data.size();) {
    const std::size_t n = std::min(chunk_bytes_, data.size() - at);
    on_device(data.subspan(at, n), device_buffer_.data(), upload, download,
              [&](void* buffer) { collective(buffer, n); });
    at += n;
  }
}

void rank_link::broadcast(std::span<std::byte> data, std::size_t root) {
  if (size() <= 1) return;
  const bool mine = rank() == root;
  in_chunks(data, mine, !mine, [&](void* buffer, std::size_t n) { comm_->broadcast(buffer, n, root, stream_.view()); });
}

void rank_link::send_to(std::span<std::byte> data, std::size_t from, std::size_t to) {
  if (size() <= 1) return;
  in_chunks(data, rank() == from, rank() == to && from != to,
            [&](void* buffer, std::size_t n) { comm_->point_to_point(buffer, n, from, to, stream_.view()); });
}

void rank_link::broadcast(std::string& text, std::size_t root) {
  if (size() <= 1) return;
  std::uint64_t length = text.size();
  broadcast(std::as_writable_bytes(std::span(&length, 1)), root);
  text.resize(static_cast<std::size_t>(length));
  broadcast(std::as_writable_bytes(std::span(text)), root);
}

void rank_link::agree(const std::exception_ptr& local) {
  if (size() <= 1) {
    if (local) std::rethrow_exception(local);
    return;
  }
  std::string message;
  std::vector<verdict> all(size());
  const std::exception_ptr& failure = local ? local : setup_failure_;
  if (failure) all[rank()] = describe(failure, message);
  const std::span<std::byte> bytes = std::as_writable_bytes(std::span(all));
  on_device(bytes, verdict_buffer_.data(), true, true, [&](void* buffer) {
    std::byte* const recv = static_cast<std::byte*>(buffer);
    comm_->all_gather(recv + rank() * sizeof(verdict), recv, sizeof(verdict), stream_.view());
  });
  const auto failed = std::find_if(all.begin(), all.end(), [](const verdict& v) { return v.kind != 0; });
  if (failed == all.end()) return;
  const auto root = static_cast<std::size_t>(failed - all.begin());
  message.resize(failed->message_bytes);
  // Through the verdict buffer where the transfer buffer may be the failure.
  for (std::size_t at = 0; at < message.size();) {
    const std::size_t n =
        std::min(message.size() - at, verdict_buffer_.size() == 0 ? message.size() : verdict_buffer_.size());
    const std::span<std::byte> piece = std::as_writable_bytes(std::span(message)).subspan(at, n);
    on_device(piece, verdict_buffer_.data(), rank() == root, rank() != root,
              [&](void* buffer) { comm_->broadcast(buffer, n, root, stream_.view()); });
    at += n;
  }
  throw_as(*failed, str("rank ", root, " of ", size(), ": ", message));
}

}  // namespace zoe::engine::detail
