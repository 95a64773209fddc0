#pragma once
// The host program's collectives (engine/comm/host_collectives.hpp) for ranks that are threads of
// one process: what a test hands the host communicator backend in place of torch.distributed.
// Groups are made as torch.distributed.new_group makes them: every rank asks for every group in the
// same order (the k-th create_group of each rank is group k; ranks that disagree fail naming both
// lists), and each non-member gets a handle it can only destroy. A collective posts this rank's
// buffers, meets the group's other ranks, computes its output from theirs into scratch, meets them
// again (nobody writes before everyone has read, so every in-place form is safe), then writes it.
// fp32 reductions add in rank order (the values the tests use are small integers, exact in any
// order). A rank that does not arrive within the timeout makes the others fail with comm_error
// naming the group, so a test whose ranks disagree fails instead of hanging.

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "zoe/engine/comm/host_collectives.hpp"

namespace zoe::testing {

class host_exchange {
 public:
  /// `size` ranks, `ranks_per_node` of them to a node (0: one node).
  explicit host_exchange(std::size_t size, std::size_t ranks_per_node = 0,
                         std::chrono::milliseconds timeout = std::chrono::minutes(1));
  ~host_exchange();
  host_exchange(const host_exchange&) = delete;
  host_exchange& operator=(const host_exchange&) = delete;

  [[nodiscard]] std::size_t size() const noexcept;
  /// World rank `rank`'s collectives (each rank's object is made once and shared).
  [[nodiscard]] std::shared_ptr<engine::host_collectives> rank(std::size_t rank);

  /// Makes every rank's `nth` (from 0) call named `what` ("all_gather", "create_group", ...) throw
  /// comm_error(message) before it meets anyone.
  void fail_call(std::string what, std::size_t nth, std::string message);
  /// The calls named `what` rank `rank` made so far (failed ones included).
  [[nodiscard]] std::size_t calls(std::size_t rank, std::string_view what) const;
  /// Groups made and not yet destroyed, over every rank (members' and others' handles alike).
  [[nodiscard]] std::size_t groups_alive() const;

  /// Runs body(r) on one thread per rank and waits for all; then rethrows the failure of the
  /// lowest rank that threw.
  void run(const std::function<void(std::size_t)>& body);

  struct state;

 private:
  std::shared_ptr<state> state_;
  // Held here, not in the state they point to: a state owning its ranks would keep itself alive.
  std::vector<std::shared_ptr<engine::host_collectives>> ranks_;
};

}  // namespace zoe::testing
