#pragma once
// Waiting without spinning hot: the first polls yield the core, later ones sleep, doubling up to
// about a millisecond. Many ranks share few cores, so a rank waiting for a peer must leave the
// core to that peer.

#include <sched.h>

#include <algorithm>
#include <chrono>
#include <thread>

namespace zoe::engine::detail {

class backoff {
 public:
  /// One pause between two polls.
  void pause() noexcept {
    if (yields_ < yield_polls) {
      ++yields_;
      sched_yield();
      return;
    }
    std::this_thread::sleep_for(sleep_);
    sleep_ = std::min(sleep_ * 2, max_sleep);
  }

 private:
  static constexpr int yield_polls = 16;
  static constexpr std::chrono::microseconds max_sleep{1000};
  int yields_ = 0;
  std::chrono::microseconds sleep_{20};
};

}  // namespace zoe::engine::detail
