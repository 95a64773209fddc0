#pragma once
// What the C API knows of a micro-batch, module by module, so that a call out of order is refused
// with a message naming the module before the engine sees it: whether a micro-batch is open, and
// for each module whether it is fetched (for forward or backward) and where its gradients are
// (acquired, reduced) in this micro-batch; also whether any gradient was reduced in the step.
//
// A call on a module is two-phased: start() checks the transition under the lock and marks the
// module busy, the engine call runs without the lock (a fetch may wait for another thread's
// release), and finish() applies the transition (or drops it when the engine call failed). A
// second call on a busy module is refused: calls on one module must not overlap.
//
// Thread-safety: start/finish/expect_fetched may be called from several threads (for different
// modules); open/close/expect_can_close/step_done from the one thread that drives the engine.

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

namespace zoe::bindings {

/// The calls on one module that change its state. fetch_inference: a forward fetch outside a
/// micro-batch (start() turns fetch_forward into it there).
enum class module_op : std::uint8_t {
  fetch_forward,
  fetch_backward,
  fetch_inference,
  release,
  acquire_gradients,
  reduce_gradients
};

class micro_batch_tracker {
 public:
  /// One entry per module, by id: its name and its parameter count; `frozen` (empty: none) marks
  /// the modules whose parameters are all frozen, which a backward fetch leaves with no gradients
  /// to hand in.
  micro_batch_tracker(std::vector<std::string> names, std::vector<std::size_t> parameter_counts,
                      std::vector<bool> frozen = {});

  /// usage_error when a micro-batch is open, or naming the module while an inference fetch (a
  /// forward fetch outside a micro-batch) is not released.
  void expect_closed() const;
  /// usage_error when no micro-batch is open.
  void expect_open() const;
  /// Marks a micro-batch open (its modules start unfetched, no gradients).
  void open();
  /// usage_error naming the first module still fetched, or fetched for backward without its
  /// gradients reduced.
  void expect_can_close() const;
  /// Marks the micro-batch closed; its reduces count for the step when `counted`.
  void close(bool counted);
  /// Whether a gradient was reduced in a micro-batch of this step (closed and counted).
  [[nodiscard]] bool any_reduced_in_step() const;
  /// The step is done (or a checkpoint load started a new one): nothing reduced yet.
  void step_done();

  /// usage_error naming the module: unknown module, the module busy, a transition `op` does not
  /// allow from its state, or no micro-batch open (but for a forward fetch, which is then an
  /// inference fetch, and the release of one). Marks it busy and returns the op begun (what
  /// finish() takes): fetch_inference for a forward fetch outside a micro-batch, else `op`.
  module_op start(std::uint32_t module, module_op op);
  /// Ends the call start() began: applies `op` when `succeeded`, and clears the busy mark.
  void finish(std::uint32_t module, module_op op, bool succeeded) noexcept;
  /// usage_error naming `parameter` unless its module `module` is fetched (its address is asked for).
  void expect_fetched(std::uint32_t module, std::string_view parameter) const;

  /// The modules fetched now (for an engine destroyed in the middle of a micro-batch).
  [[nodiscard]] std::vector<std::uint32_t> fetched_modules() const;

  [[nodiscard]] std::size_t parameter_count(std::uint32_t module) const;
  [[nodiscard]] const std::string& name(std::uint32_t module) const;
  /// usage_error naming `module` when it is not a module of the engine.
  void expect_module(std::uint32_t module) const;

 private:
  enum class fetched : std::uint8_t { no, forward, backward, inference };
  enum class gradients : std::uint8_t { none, acquired, reduced };
  struct module_state {
    std::string name;
    std::size_t parameters = 0;
    fetched fetch = fetched::no;
    gradients grads = gradients::none;  ///< in this micro-batch
    bool backward_pending = false;      ///< fetched for backward and its gradients not reduced yet
    bool frozen = false;                ///< every parameter frozen: backward takes no gradient
    bool busy = false;
  };

  void check(const module_state& m, module_op op) const;
  /// "forward", "backward", "inference" (what a module is fetched for).
  static const char* fetched_name(fetched f) noexcept;

  mutable std::mutex mutex_;
  std::vector<module_state> modules_;
  bool open_ = false;
  std::size_t reduced_in_micro_batch_ = 0;
  std::size_t reduced_in_step_ = 0;
};

}  // namespace zoe::bindings
