#pragma once
// Ranks that are threads of one process: body(r) on one thread per rank, for the in-process
// worlds of the tests (tests/engine's thread_world and host_exchange).

#include <cstddef>
#include <exception>
#include <functional>
#include <thread>
#include <vector>

namespace zoe::testing {

/// Runs body(r) for r in [0, ranks) on one thread each and waits for all; then rethrows the
/// failure of the lowest rank that threw.
inline void run_rank_threads(std::size_t ranks, const std::function<void(std::size_t)>& body) {
  std::vector<std::exception_ptr> failures(ranks);
  {
    std::vector<std::jthread> threads;
    for (std::size_t r = 0; r < ranks; ++r) {
      threads.emplace_back([&, r] {
        try {
          body(r);
        } catch (...) {
          failures[r] = std::current_exception();
        }
      });
    }
  }
  for (const std::exception_ptr& f : failures) {
    if (f) std::rethrow_exception(f);
  }
}

}  // namespace zoe::testing
