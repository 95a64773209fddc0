#pragma once
// A world of ranks that are threads of one process, for the tests of what runs collectively
// (checkpoints on many ranks) without launching processes: each rank's communicator meets the
// others' at every collective. Only what those tests use is there: broadcast, all_gather and
// barrier, on host memory (the host device's device memory). A collective runs when it is called,
// not in stream order: a caller queues nothing before it on the stream (as a caller that
// synchronizes its stream first, like the checkpoint's rank_link on the host device). A rank that
// does not arrive within the timeout makes the others fail with comm_error naming it, so a test
// whose ranks disagree fails instead of hanging.

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <vector>

#include "zoe/engine/comm/communicator.hpp"

namespace zoe::testing {

class thread_world {
 public:
  explicit thread_world(std::size_t size, std::chrono::milliseconds timeout = std::chrono::seconds(60));
  ~thread_world();
  thread_world(const thread_world&) = delete;
  thread_world& operator=(const thread_world&) = delete;

  /// Rank `rank`'s communicator (owned by the world; one thread drives it).
  [[nodiscard]] engine::communicator& rank(std::size_t rank);
  [[nodiscard]] std::size_t size() const noexcept;

  /// Runs body(r) on one thread per rank and waits for all; rethrows the first rank's failure
  /// (lowest rank) after every thread ended.
  void run(const std::function<void(std::size_t)>& body);

  struct shared;

 private:
  std::shared_ptr<shared> shared_;
  std::vector<std::unique_ptr<engine::communicator>> ranks_;
};

}  // namespace zoe::testing
