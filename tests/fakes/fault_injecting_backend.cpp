#include "fault_injecting_backend.hpp"

#include <sys/eventfd.h>

#include <algorithm>
#include <cerrno>

#include "zoe/core/error.hpp"
#include "zoe/core/str.hpp"

namespace zoe::testing {

void fault_plan::add(const fault_rule& rule) {
  const std::lock_guard lock(mutex_);
  rules_.push_back(rule);
}

std::optional<fault_rule> fault_plan::take(const io::raw_op& op) {
  const std::lock_guard lock(mutex_);
  for (fault_rule& rule : rules_) {
    const bool kind = !rule.op || *rule.op == op.op;
    const bool touches = op.offset < rule.end && rule.begin < op.offset + op.length;
    if (kind && touches && rule.times != 0) {
      if (rule.times > 0) --rule.times;
      ++fired_;
      return rule;
    }
  }
  return std::nullopt;
}

int fault_plan::fired() const {
  const std::lock_guard lock(mutex_);
  return fired_;
}

void fault_plan::clear() {
  const std::lock_guard lock(mutex_);
  rules_.clear();
}

void fault_plan::release_held() {
  const std::lock_guard lock(mutex_);
  release_ = true;
  // A reap now has something to do: say so, as a real backend does when results come in, so a
  // driver asleep on the fd (the mover, with nothing else to wait for) starts them.
  for (const int fd : notify_fds_) static_cast<void>(::eventfd_write(fd, 1));
}

void fault_plan::notify_on_release(int eventfd) {
  const std::lock_guard lock(mutex_);
  notify_fds_.push_back(eventfd);
}

bool fault_plan::held_released() const {
  const std::lock_guard lock(mutex_);
  return release_;
}

fault_injecting_backend::fault_injecting_backend(std::unique_ptr<io::io_backend> inner,
                                                 std::shared_ptr<fault_plan> plan)
    : inner_(std::move(inner)), plan_(std::move(plan)) {}

void fault_injecting_backend::submit(std::span<const io::raw_op> ops) {
  start_released();
  // Decide every operation first: a throwing submit must take none of them.
  std::vector<std::pair<io::raw_op, std::optional<fault_rule>>> decided;
  for (const io::raw_op& op : ops) decided.emplace_back(op, plan_->take(op));
  for (const auto& [op, rule] : decided) {
    if (rule && rule->throw_on_submit) {
      const int e = rule->inject_errno != 0 ? rule->inject_errno : EIO;
      throw io_error(str("injected: the backend refused a batch of ", ops.size(), " operations"), e);
    }
  }
  forward_.clear();
  for (auto [op, rule] : decided) {
    if (rule && rule->inject_errno != 0) {
      injected_.push_back({op.tag, -std::int64_t{rule->inject_errno}});
    } else if (rule && rule->hold) {
      held_.push_back(op);
    } else {
      if (rule && rule->short_to > 0) op.length = std::min(op.length, rule->short_to);
      forward_.push_back(op);
    }
  }
  forward(forward_);
  // The inner backend never sees an injected failure, so nothing else would signal it.
  if (!injected_.empty() && notify_fd_ >= 0) static_cast<void>(::eventfd_write(notify_fd_, 1));
}

void fault_injecting_backend::notify_on_result(int eventfd) {
  notify_fd_ = eventfd;
  plan_->notify_on_release(eventfd);
  inner_->notify_on_result(eventfd);
}

void fault_injecting_backend::forward(std::span<const io::raw_op> ops) {
  if (ops.empty()) return;
  inner_in_flight_ += ops.size();
  inner_->submit(ops);
}

void fault_injecting_backend::start_released() {
  if (held_.empty() || !plan_->held_released()) return;
  const std::vector<io::raw_op> released = std::move(held_);
  held_.clear();
  forward(released);
}

std::size_t fault_injecting_backend::reap(std::vector<io::raw_result>& out, std::size_t min_results) {
  start_released();
  const std::size_t in_flight = injected_.size() + held_.size() + inner_in_flight_;
  if (min_results > in_flight) {
    throw internal_error(
        str("reap asked to block for ", min_results, " results with ", in_flight, " operations in flight"));
  }
  std::size_t n = injected_.size();
  out.insert(out.end(), injected_.begin(), injected_.end());
  injected_.clear();
  const std::size_t want = min_results > n ? min_results - n : 0;
  if (want > inner_in_flight_) {
    throw internal_error(str("reap would block for ", want, " results of operations held back by the test"));
  }
  const std::size_t got = inner_->reap(out, want);
  inner_in_flight_ -= got;
  return n + got;
}

}  // namespace zoe::testing
