#include "fault_injecting_backend.hpp"

#include <algorithm>

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

fault_injecting_backend::fault_injecting_backend(std::unique_ptr<io::io_backend> inner,
                                                 std::shared_ptr<fault_plan> plan)
    : inner_(std::move(inner)), plan_(std::move(plan)) {}

void fault_injecting_backend::submit(std::span<const io::raw_op> ops) {
  forward_.clear();
  for (io::raw_op op : ops) {
    const auto rule = plan_->take(op);
    if (rule && rule->inject_errno != 0) {
      injected_.push_back({op.tag, -std::int64_t{rule->inject_errno}});
      continue;
    }
    if (rule && rule->short_to > 0) op.length = std::min(op.length, rule->short_to);
    forward_.push_back(op);
  }
  inner_in_flight_ += forward_.size();
  if (!forward_.empty()) inner_->submit(forward_);
}

std::size_t fault_injecting_backend::reap(std::vector<io::raw_result>& out, std::size_t min_results) {
  std::size_t n = injected_.size();
  out.insert(out.end(), injected_.begin(), injected_.end());
  injected_.clear();
  const std::size_t want = min_results > n ? std::min(min_results - n, inner_in_flight_) : 0;
  const std::size_t got = inner_->reap(out, want);
  inner_in_flight_ -= got;
  return n + got;
}

}  // namespace zoe::testing
