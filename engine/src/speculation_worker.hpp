#pragma once
// The thread that runs the optimizer step's speculation inside backward (optimizer_step.hpp,
// "Speculation"): the gradient path's worker hands it each parameter whose gradient is final
// (gradient_path_options::on_final), and it steps that shard ahead while backward goes on with
// earlier layers. One parameter at a time, in the order they come; the engine waits for it to be
// idle before anything else touches the optimizer step.

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

#include "zoe/engine/model/layout.hpp"

namespace zoe::engine::detail {

class speculation_worker {
 public:
  /// Starts the thread; `step` runs on it for every parameter handed in (it must not throw).
  explicit speculation_worker(std::function<void(parameter_id)> step);
  /// Finishes what was handed in, then joins the thread. Never throws.
  ~speculation_worker();
  speculation_worker(const speculation_worker&) = delete;
  speculation_worker& operator=(const speculation_worker&) = delete;

  /// Queues `p` (any thread).
  void hand_in(parameter_id p);
  /// Waits until every parameter handed in so far has been stepped.
  void wait_idle();

 private:
  void run() noexcept;

  std::function<void(parameter_id)> step_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<parameter_id> queue_;
  bool busy_ = false;
  bool stopping_ = false;
  std::thread thread_;  // last: it starts with everything above in place
};

}  // namespace zoe::engine::detail
