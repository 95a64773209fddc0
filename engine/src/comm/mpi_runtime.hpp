#pragma once
// Open MPI for the whole process: initialised once, on the first mpi communicator, with
// MPI_THREAD_MULTIPLE when the library offers it (else every MPI call of zoe runs under one mutex),
// and finalized at exit unless this process detected a peer's failure. MPI_Finalize synchronizes
// with every rank, so after a peer died (or stopped answering) it can hang for ever: a process that
// detected one itself (a timeout, a failed transfer) exits without it, and mpirun reports that the
// rank exited without finalizing. A rank whose collective failed on the notice of a rank that
// skips MPI_Finalize skips it too (the culprit may be dead, and mpirun does not reliably end a rank
// hanging in MPI_Finalize). A rank that only threw past its communicator (and its peers failing on
// that notice) still finalizes: when every rank threw the same error (a setting all refuse) the
// peers are well and the job ends cleanly.
//
// It also carries the failure notices: a rank that fails tells every other rank once, with a short
// message on a communicator of its own (a duplicate of MPI_COMM_WORLD), so a peer waiting in any
// collective of any world fails at once naming it instead of waiting for its timeout. The same
// communicator carries, under tags of their own, the arrival messages of each world's creation
// (mpi_world.cpp), which must run before any blocking MPI call that every rank has to make.

#include <mpi.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>

namespace zoe::engine::detail {

/// A failure another rank announced.
struct peer_notice {
  std::size_t world_rank = 0;         ///< the culprit: the rank that died or failed, not the notice's sender
  bool sender_skips_finalize = true;  ///< the sender detected a failure itself (see record_failure)
  std::string message;
};

class mpi_runtime {
 public:
  /// The process's runtime; initialises MPI on the first call (thread-safe). Throws comm_error
  /// when MPI_Init_thread fails.
  static mpi_runtime& instance();

  mpi_runtime(const mpi_runtime&) = delete;
  mpi_runtime& operator=(const mpi_runtime&) = delete;

  /// Holds the lock that serialises MPI calls when MPI lacks MPI_THREAD_MULTIPLE; empty otherwise.
  /// Every MPI call of zoe after initialisation is made while holding it.
  [[nodiscard]] std::unique_lock<std::mutex> serialize();

  [[nodiscard]] std::size_t world_rank() const noexcept { return world_rank_; }
  [[nodiscard]] std::size_t world_size() const noexcept { return world_size_; }
  [[nodiscard]] int tag_upper_bound() const noexcept { return tag_ub_; }
  /// zoe's own duplicate of MPI_COMM_WORLD (errors returned as codes), for the notices and the
  /// arrival messages of a world's creation.
  [[nodiscard]] MPI_Comm control_comm() const noexcept { return notice_comm_; }
  /// The tag of this process's next world creation on control_comm(): never the notices' tag, and
  /// the same on every rank as long as the ranks create their worlds alike. Thread-safe.
  [[nodiscard]] int next_creation_tag() noexcept;

  /// Marks the process as having detected a peer's failure: MPI_Finalize is skipped at exit.
  /// Never throws.
  void record_failure() noexcept;
  /// Tells every other rank that world rank `culprit` (this one, or a peer this one found dead or
  /// failing) failed, with `message` (truncated to a short notice); only the first call of the
  /// process sends. Does not record a failure (a rank that merely threw may still finalize).
  /// Waits at most about a second for the sends to leave (a dead peer never takes its notice).
  /// Never throws.
  void announce_failure(std::size_t culprit, std::string_view message) noexcept;
  /// The first failure another rank announced, if any has arrived (receives pending notices).
  /// Thread-safe; never throws (an MPI error while probing is ignored: the caller's own wait
  /// reports the transport's failure).
  [[nodiscard]] std::optional<peer_notice> poll_notice() noexcept;

 private:
  mpi_runtime();
  static void finalize_at_exit() noexcept;

  bool serialized_ = false;
  std::mutex mpi_mutex_;
  std::size_t world_rank_ = 0;
  std::size_t world_size_ = 1;
  int tag_ub_ = 32767;
  MPI_Comm notice_comm_ = MPI_COMM_NULL;
  std::atomic<std::uint64_t> creations_{0};

  std::mutex notice_mutex_;
  bool failed_ = false;
  bool announced_ = false;
  std::optional<peer_notice> notice_;
};

/// Throws comm_error "<what>: <MPI's error string>" when `rc` is not MPI_SUCCESS.
void check_mpi(int rc, std::string_view what);

}  // namespace zoe::engine::detail
