// The per-module state machine of a micro-batch (see micro_batch_tracker.hpp).
#include "micro_batch_tracker.hpp"

#include <utility>

#include "zoe/core/error.hpp"
#include "zoe/core/str.hpp"

namespace zoe::bindings {

micro_batch_tracker::micro_batch_tracker(std::vector<std::string> names, std::vector<std::size_t> parameter_counts,
                                         std::vector<bool> frozen) {
  modules_.resize(names.size());
  for (std::size_t i = 0; i < names.size(); ++i) {
    modules_[i].name = std::move(names[i]);
    modules_[i].parameters = parameter_counts.at(i);
    modules_[i].frozen = i < frozen.size() && frozen[i];
  }
}

const char* micro_batch_tracker::fetched_name(fetched f) noexcept {
  switch (f) {
    case fetched::forward: return "forward";
    case fetched::backward: return "backward";
    case fetched::inference: return "inference";
    case fetched::no: break;
  }
  return "nothing";
}

void micro_batch_tracker::expect_module(std::uint32_t module) const {
  if (module >= modules_.size()) {
    throw usage_error(str("module ", module, " is not a module of this engine (it has ", modules_.size(),
                          modules_.size() == 1 ? " module)" : " modules)"));
  }
}

std::size_t micro_batch_tracker::parameter_count(std::uint32_t module) const {
  expect_module(module);
  return modules_[module].parameters;
}

const std::string& micro_batch_tracker::name(std::uint32_t module) const {
  expect_module(module);
  return modules_[module].name;
}

void micro_batch_tracker::expect_closed() const {
  const std::lock_guard lock(mutex_);
  if (open_) throw usage_error("a micro-batch is open: end it with zoe_end_micro_batch first");
  // One rule for inference fetches: none may be open across a call that needs the engine between
  // steps (a micro-batch's begin, the step, states, checkpoints).
  for (const module_state& m : modules_) {
    if (m.fetch == fetched::inference || m.busy) {
      throw usage_error(str("module '", m.name,
                            "' is fetched for inference (a forward fetch outside a micro-batch) and not released: "
                            "zoe_release it first"));
    }
  }
}

void micro_batch_tracker::expect_open() const {
  const std::lock_guard lock(mutex_);
  if (!open_) throw usage_error("no micro-batch is open: call zoe_begin_micro_batch first");
}

void micro_batch_tracker::open() {
  const std::lock_guard lock(mutex_);
  open_ = true;
  reduced_in_micro_batch_ = 0;
  for (module_state& m : modules_) {
    m.fetch = fetched::no;
    m.grads = gradients::none;
    m.backward_pending = false;
  }
}

void micro_batch_tracker::expect_can_close() const {
  const std::lock_guard lock(mutex_);
  if (!open_) throw usage_error("no micro-batch is open: call zoe_begin_micro_batch first");
  for (const module_state& m : modules_) {
    if (m.busy) throw usage_error(str("a call on module '", m.name, "' is still in progress on another thread"));
    if (m.fetch != fetched::no) {
      throw usage_error(str("module '", m.name, "' is still fetched: release it (zoe_release) first"));
    }
    if (m.backward_pending) {
      throw usage_error(str("module '", m.name,
                            "' was fetched for backward and its gradients were not reduced: fetch it for backward, "
                            "then zoe_module_gradients and zoe_reduce_gradients"));
    }
  }
}

void micro_batch_tracker::close(bool counted) {
  const std::lock_guard lock(mutex_);
  open_ = false;
  if (counted) reduced_in_step_ += reduced_in_micro_batch_;
  reduced_in_micro_batch_ = 0;
}

bool micro_batch_tracker::any_reduced_in_step() const {
  const std::lock_guard lock(mutex_);
  return reduced_in_step_ > 0;
}

void micro_batch_tracker::step_done() {
  const std::lock_guard lock(mutex_);
  reduced_in_step_ = 0;
}

void micro_batch_tracker::check(const module_state& m, module_op op) const {
  if (m.busy) {
    throw usage_error(
        str("a call on module '", m.name, "' is in progress on another thread (calls on one module must not overlap)"));
  }
  switch (op) {
    case module_op::fetch_forward:
    case module_op::fetch_backward:
    case module_op::fetch_inference:
      if (m.fetch != fetched::no) {
        throw usage_error(str("module '", m.name, "' is already fetched (for ", fetched_name(m.fetch),
                              ") and not released: zoe_release it first"));
      }
      if (op == module_op::fetch_backward && m.grads != gradients::none) {
        throw usage_error(str("the gradients of module '", m.name,
                              "' were already handed in in this micro-batch: a second backward fetch would hand in "
                              "a second set"));
      }
      return;
    case module_op::release:
      if (m.fetch == fetched::no) throw usage_error(str("module '", m.name, "' is not fetched: nothing to release"));
      if (m.grads == gradients::acquired) {
        throw usage_error(
            str("module '", m.name,
                "' has gradients acquired and not reduced: call zoe_reduce_gradients before releasing it"));
      }
      return;
    case module_op::acquire_gradients:
      if (m.fetch != fetched::backward) {
        throw usage_error(str("module '", m.name, "' is not fetched for backward (it is ",
                              m.fetch == fetched::no ? "not fetched" : str("fetched for ", fetched_name(m.fetch)),
                              "): zoe_fetch it with ZOE_PASS_BACKWARD first"));
      }
      if (m.grads != gradients::none) {
        throw usage_error(str("the gradients of module '", m.name, "' were already acquired in this micro-batch"));
      }
      return;
    case module_op::reduce_gradients:
      if (m.grads != gradients::acquired) {
        throw usage_error(str("the gradients of module '", m.name, "' were ",
                              m.grads == gradients::reduced ? "already reduced" : "not acquired",
                              " in this micro-batch (zoe_module_gradients hands out the buffers to reduce)"));
      }
      return;
  }
  throw usage_error(str("unknown operation on module '", m.name, "'"));
}

module_op micro_batch_tracker::start(std::uint32_t module, module_op op) {
  expect_module(module);
  const std::lock_guard lock(mutex_);
  module_state& m = modules_[module];
  if (!open_) {
    if (op == module_op::fetch_forward) op = module_op::fetch_inference;
    const bool inference_release = op == module_op::release && m.fetch == fetched::inference;
    if (op != module_op::fetch_inference && !inference_release) {
      throw usage_error(str("module '", m.name, "': no micro-batch is open: call zoe_begin_micro_batch first (",
                            op == module_op::fetch_backward
                                ? "outside a micro-batch only a ZOE_PASS_FORWARD fetch may come, for inference)"
                                : "outside one a module may only be fetched for inference, ZOE_PASS_FORWARD)"));
    }
  }
  check(m, op);
  m.busy = true;
  return op;
}

void micro_batch_tracker::finish(std::uint32_t module, module_op op, bool succeeded) noexcept {
  const std::lock_guard lock(mutex_);
  module_state& m = modules_[module];
  m.busy = false;
  if (!succeeded) return;
  switch (op) {
    case module_op::fetch_forward: m.fetch = fetched::forward; break;
    case module_op::fetch_inference: m.fetch = fetched::inference; break;
    case module_op::fetch_backward:
      m.fetch = fetched::backward;
      m.backward_pending = !m.frozen;
      break;
    case module_op::release: m.fetch = fetched::no; break;
    case module_op::acquire_gradients: m.grads = gradients::acquired; break;
    case module_op::reduce_gradients:
      m.grads = gradients::reduced;
      m.backward_pending = false;
      ++reduced_in_micro_batch_;
      break;
  }
}

std::vector<std::uint32_t> micro_batch_tracker::fetched_modules() const {
  const std::lock_guard lock(mutex_);
  std::vector<std::uint32_t> out;
  for (std::size_t m = 0; m < modules_.size(); ++m) {
    if (modules_[m].fetch != fetched::no) out.push_back(static_cast<std::uint32_t>(m));
  }
  return out;
}

void micro_batch_tracker::expect_fetched(std::uint32_t module, std::string_view parameter) const {
  expect_module(module);
  const std::lock_guard lock(mutex_);
  if (modules_[module].fetch == fetched::no) {
    throw usage_error(str("parameter '", parameter, "': its module '", modules_[module].name,
                          "' is not fetched (valid from zoe_fetch until zoe_release)"));
  }
}

}  // namespace zoe::bindings
