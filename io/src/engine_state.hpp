#pragma once
// The bookkeeping behind io_engine: user requests, the pieces they were cut into, the raw
// operations in flight, and the state machine that moves a piece from planned to done.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "notifier.hpp"
#include "request_planner.hpp"
#include "stats_recorder.hpp"
#include "zoe/io/engine_options.hpp"
#include "zoe/io/io_backend.hpp"
#include "zoe/io/io_request.hpp"

namespace zoe::io::detail {

/// A slab of reusable slots addressed by index, so tags stay small integers.
template <typename T>
class slab {
 public:
  std::uint32_t add(T value) {
    if (free_.empty()) {
      // Room for every id to come back, so remove() never allocates (it undoes failed submits).
      free_.reserve(items_.size() + 1);
      items_.push_back(std::move(value));
      return static_cast<std::uint32_t>(items_.size() - 1);
    }
    const std::uint32_t id = free_.back();
    free_.pop_back();
    items_[id] = std::move(value);
    return id;
  }
  void remove(std::uint32_t id) noexcept { free_.push_back(id); }
  T& operator[](std::uint32_t id) { return items_[id]; }

 private:
  std::vector<T> items_;
  std::vector<std::uint32_t> free_;
};

/// The contract io_engine.hpp states is kept here: submit() is all or nothing and starts no I/O
/// (only collecting does), run()'s requests complete into a queue of their own, and a backend
/// that throws from submit() took none of the batch, whose requests then fail.
class engine_state {
 public:
  using clock_deadline = std::chrono::steady_clock::time_point;
  engine_state(std::unique_ptr<io_backend> backend, engine_options options);
  ~engine_state();
  engine_state(const engine_state&) = delete;
  engine_state& operator=(const engine_state&) = delete;

  void submit(std::span<const io_request> requests);
  std::size_t collect(std::vector<io_completion>& out, std::size_t min_count, bool block) {
    return collect(submitted_, out, min_count, block);
  }
  /// collect() that gives up at `deadline`, sleeping on the notifier between polls.
  std::size_t collect_until(std::vector<io_completion>& out, std::size_t min_count, clock_deadline deadline);
  /// The notifier's fd, turning its bookkeeping on.
  [[nodiscard]] int notify_fd() const noexcept;
  void run(std::span<const io_request> requests);
  /// Waits for every request in flight, dropping the results. Logs (never throws) if it cannot.
  void drain() noexcept;
  bool register_buffers(std::span<const std::span<std::byte>> regions);
  [[nodiscard]] std::size_t outstanding() const noexcept { return submitted_.outstanding; }
  [[nodiscard]] const engine_options& options() const noexcept { return options_; }
  [[nodiscard]] std::string_view backend_name() const noexcept { return backend_->name(); }
  [[nodiscard]] io_stats stats() const noexcept { return stats_.snapshot(); }

 private:
  struct failure {
    bool failed = false;
    int os_errno = 0;
    std::uint64_t at = 0;  ///< file offset of the failure: the lowest one is reported
    std::string message;
  };
  /// Where the completions of one kind of request go until they are handed out.
  struct completion_queue {
    std::vector<io_completion> done;
    std::size_t outstanding = 0;  ///< queued and not yet handed out
  };
  struct user_slot {
    io_request request;
    std::size_t pieces_left = 0;
    failure error;
    completion_queue* queue = nullptr;
    std::chrono::steady_clock::time_point started{};
  };
  enum class stage : std::uint8_t { direct, bounce_read, rmw_wait_lock, rmw_fill, rmw_write };
  struct piece {
    std::uint32_t user = 0;
    piece_plan plan;
    stage at = stage::direct;
    std::uint64_t cover_begin = 0;  ///< the aligned range the bounce buffer stands for
    std::uint64_t cover_end = 0;
    std::byte* bounce = nullptr;
    std::size_t bounce_lent = 0;  ///< the length bounce_memory lent (at least the cover)
    std::size_t raws_left = 0;
    std::size_t bytes_read = 0;  ///< bounce_read: how much of the cover the read found
    bool locked = false;
    bool extending = false;  ///< its aligned write reaches past the logical end of the file
    failure error;
  };
  struct raw_slot {
    std::uint32_t piece = 0;
    raw_op op;                  ///< the whole operation; resubmissions cover [sub_start, length)
    std::size_t done = 0;       ///< bytes known transferred from the start
    std::size_t sub_start = 0;  ///< where the submission in flight begins
    bool eof_ok = false;        ///< a read that may end at end of file (bounce fills)
    unsigned retries = 0;
  };
  using clock = std::chrono::steady_clock;
  struct delayed_raw {
    clock::time_point due;
    std::uint32_t raw = 0;
  };

  [[nodiscard]] file& target_of(const piece& p) { return *users_[p.user].request.target; }
  [[nodiscard]] std::size_t file_alignment(const piece& p);
  void validate(const io_request& request) const;
  void enqueue(std::span<const io_request> requests, completion_queue& queue);
  void add_pieces(const io_request& request, std::uint32_t user);
  std::size_t collect(completion_queue& queue, std::vector<io_completion>& out, std::size_t min_count, bool block);
  std::size_t collect_loop(completion_queue& queue, std::vector<io_completion>& out, std::size_t min_count, bool block);
  /// Leaves the notifier readable if a poll could do something now, and its timer set for the
  /// next EAGAIN retry: what notify_fd() promises between calls.
  void arm_notification();
  void pump(clock::time_point now);
  /// When the first EAGAIN retry falls due (delayed_ not empty).
  [[nodiscard]] clock::time_point next_due() const;
  void submit_ready();
  void activate(std::uint32_t piece_id);
  void start_rmw(std::uint32_t piece_id);
  void queue_raw(std::uint32_t piece_id, io_op op, std::byte* buffer, std::size_t length, std::uint64_t offset,
                 bool eof_ok);
  void on_result(const raw_result& result, clock::time_point now);
  void finish_raw(std::uint32_t raw_id, failure error);
  void advance(std::uint32_t piece_id);
  void finish_piece(std::uint32_t piece_id);
  void release_bounce(piece& p);
  [[nodiscard]] failure os_failure(const raw_slot& r, int os_errno);
  [[nodiscard]] failure failure_of(const raw_slot& r, int os_errno, std::string_view cause);

  /// Declared before the backend, so it outlives it: a thread pool's worker may still be writing
  /// its eventfd while the backend joins it. Shared: files whose unlock it waits for hold it weakly.
  std::shared_ptr<notifier> notifier_;
  std::unique_ptr<io_backend> backend_;
  engine_options options_;
  std::size_t bounce_size_ = 0;

  slab<user_slot> users_;
  slab<piece> pieces_;
  slab<raw_slot> raws_;
  std::deque<std::uint32_t> planned_;             ///< pieces not started (bounded activation)
  std::deque<std::uint32_t> lock_wait_;           ///< read-modify-write pieces waiting for a block lock
  std::deque<std::uint32_t> ready_;               ///< raw ops to (re)submit
  std::vector<delayed_raw> delayed_;              ///< raw ops that met EAGAIN, resubmitted once due
  std::shared_ptr<bounce_memory> bounce_memory_;  ///< options_.bounce, or the heap
  completion_queue submitted_;                    ///< requests from submit(), handed out by poll() and wait()
  completion_queue running_;                      ///< the requests of run()
  std::vector<raw_op> submit_batch_;
  std::vector<raw_result> results_;
  std::size_t active_pieces_ = 0;
  std::size_t raws_in_flight_ = 0;
  stats_recorder stats_;
  /// The backend may hold results no eventfd write announces: the notifier was cleared, or the
  /// backend was handed operations (a failed start), since the last reap.
  bool backend_unreaped_ = false;
};

}  // namespace zoe::io::detail
