#pragma once
// The ranks of a checkpoint save or load as the save and the load use them: host bytes broadcast
// from one rank to the others or sent from one rank to another, and every rank's verdict combined, so that when one
// rank fails (a corrupt file, a failed write) every rank fails with that rank's error. At world size 1 (or with no
// communicator) there is nothing to send and a failure is rethrown as it is.

#include <cstddef>
#include <exception>
#include <span>
#include <string>

#include "zoe/core/device.hpp"
#include "zoe/engine/comm/communicator.hpp"

namespace zoe::engine::detail {

/// Driven by one thread (the caller's). The communicator and the device must outlive it.
class rank_link {
 public:
  /// This process alone: rank 0 of 1.
  rank_link() = default;
  /// The ranks of `comm`, whose collectives run on `dev` in pieces of at most `chunk_bytes` (> 0)
  /// through device memory where `dev` is not the host (host memory is device memory there).
  /// Makes a stream and, off the host, a small buffer for the verdicts on `dev` when the world has
  /// more than one rank (device_error, memory_error if refused). A refused transfer buffer is not
  /// thrown here, where the other ranks would not hear of it: the first agree() fails every rank
  /// with it.
  rank_link(communicator& comm, device& dev, std::size_t chunk_bytes);
  /// Frees the device buffer after the stream's work. Never throws.
  ~rank_link();
  rank_link(const rank_link&) = delete;
  rank_link& operator=(const rank_link&) = delete;

  [[nodiscard]] std::size_t rank() const noexcept;
  [[nodiscard]] std::size_t size() const noexcept;

  /// The bytes of `data` at `root` overwrite `data` at every other rank (collective: every rank
  /// passes the same size and root). Nothing at world size 1. Throws what the communicator and
  /// the device throw (comm_error naming a rank that failed or vanished).
  void broadcast(std::span<std::byte> data, std::size_t root);
  /// The bytes of `data` at rank `from` overwrite `data` at rank `to`; no other rank receives them
  /// (collective: every rank passes the same size, from and to; the others' `data` is untouched).
  /// Nothing at world size 1. Throws as broadcast().
  void send_to(std::span<std::byte> data, std::size_t from, std::size_t to);
  /// `text` at `root` replaces `text` at every other rank (collective).
  void broadcast(std::string& text, std::size_t root);
  /// Collective: returns when no rank failed (`local`: this rank's failure, null for none);
  /// otherwise every rank throws the failure of the lowest failing rank, as the same class
  /// (checkpoint_error, io_error with its errno, usage_error, ...; std::bad_alloc as memory_error,
  /// anything else as internal_error), its message prefixed with "rank r of n: ". At world size 1
  /// `local` itself is rethrown.
  void agree(const std::exception_ptr& local);

 private:
  /// Runs `collective` on device memory `buffer` holding `data` (copied there first when `upload`,
  /// back when `download`); on `data` itself on the host device.
  template <typename Collective>
  void on_device(std::span<std::byte> data, void* buffer, bool upload, bool download, Collective&& collective);
  /// Runs collective(buffer, n) on `data` in pieces of at most chunk_bytes_ through on_device().
  template <typename Collective>
  void in_chunks(std::span<std::byte> data, bool upload, bool download, Collective&& collective);

  communicator* comm_ = nullptr;
  device* dev_ = nullptr;
  std::size_t chunk_bytes_ = 0;
  device_stream stream_;
  // Only where the device is not the host: the verdicts of every rank, and the pieces.
  // Freed after the destructor has synchronized stream_ (members go after its body).
  device_allocation verdict_buffer_;
  device_allocation device_buffer_;  // chunk_bytes_
  std::exception_ptr setup_failure_;
};

}  // namespace zoe::engine::detail
