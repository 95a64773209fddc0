// The decisions of trace-based prefetch (see prefetch_policy.hpp for the rules).
#include "zoe/engine/coordinator/prefetch_policy.hpp"

#include <algorithm>
#include <unordered_set>

#include "zoe/core/check.hpp"
#include "zoe/core/log.hpp"
#include "zoe/core/str.hpp"

namespace zoe::engine {

std::string_view gather_status_name(gather_status s) noexcept {
  switch (s) {
    case gather_status::released: return "released";
    case gather_status::in_flight: return "in flight";
    case gather_status::gathered: return "gathered";
  }
  return "unknown";
}

prefetch_limits prefetch_limits::from(const zero_config& zero) noexcept {
  prefetch_limits l;
  l.prefetch_bucket_size = zero.prefetch_bucket_size;
  l.max_live_parameters = zero.max_live_parameters;
  l.max_reuse_distance = zero.max_reuse_distance;
  l.param_persistence_threshold = zero.param_persistence_threshold;
  l.model_persistence_threshold = zero.model_persistence_threshold;
  return l;
}

namespace {

std::string describe_module(const model_layout& layout, module_id m) {
  return str("module '", layout.module(m).name, "' (id ", m, ")");
}

std::string describe_parameter(const model_layout& layout, parameter_id p) {
  const parameter_layout& pl = layout.parameter(p);
  return str("parameter '", layout.module(pl.module).name, ".", pl.name, "' (id ", p, ")");
}

}  // namespace

prefetch_policy::prefetch_policy(const model_layout& layout, const prefetch_limits& limits)
    : layout_(&layout),
      limits_(limits),
      params_(layout.parameters().size()),
      active_(layout.modules().size(), 0),
      occurrences_(layout.modules().size()) {
  // DeepSpeed's choice, in registration order: small enough, and room left under the model total
  // (a parameter that does not fit is skipped; smaller ones after it may still fit).
  for (const parameter_layout& p : layout.parameters()) {
    if (p.numel > limits_.param_persistence_threshold) continue;
    if (p.numel > limits_.model_persistence_threshold - persistent_numel_) continue;
    params_[p.id].persistent = true;
    persistent_.push_back(p.id);
    persistent_numel_ += p.numel;
  }
}

std::uint64_t prefetch_policy::gathered_numel(parameter_id p) const noexcept {
  return layout_->parameters()[p].padded_numel(layout_->options().world_size);
}

prefetch_policy::param_state& prefetch_policy::state(parameter_id p) {
  ZOE_EXPECTS(p < params_.size(), "prefetch_policy: unknown parameter id ", p, " (the layout has ", params_.size(),
              " parameters)");
  return params_[p];
}

const prefetch_policy::param_state& prefetch_policy::state(parameter_id p) const {
  ZOE_EXPECTS(p < params_.size(), "prefetch_policy: unknown parameter id ", p, " (the layout has ", params_.size(),
              " parameters)");
  return params_[p];
}

gather_status prefetch_policy::status(parameter_id parameter) const { return state(parameter).status; }

bool prefetch_policy::persistent(parameter_id parameter) const { return state(parameter).persistent; }

void prefetch_policy::require_open(std::string_view what, module_id module) const {
  ZOE_EXPECTS(module < active_.size(), "prefetch_policy::", what, ": unknown module id ", module, " (the layout has ",
              active_.size(), " modules)");
  ZOE_EXPECTS(open_, "prefetch_policy::", what, " of ", describe_module(*layout_, module),
              " outside a step (call begin_step first)");
}

void prefetch_policy::begin_step(step_kind kind) {
  ZOE_EXPECTS(!open_, "prefetch_policy::begin_step: a step is open already, at fetch ", position_,
              " (call end_step first)");
  open_ = true;
  inference_ = kind == step_kind::inference;
  position_ = 0;
  cursor_ = 0;
  if (recording_ && !inference_) trace_.clear();
}

fetch_decision prefetch_policy::on_fetch(module_id module) {
  require_open("on_fetch", module);
  if (!recording_ && !inference_ && (position_ >= trace_.size() || trace_[position_] != module)) depart(module);

  fetch_decision decision;
  for (const parameter_id p : layout_->module(module).parameters) {
    param_state& st = params_[p];
    if (st.ahead) {  // its prefetch has served the use it was made for
      st.ahead = false;
      ahead_numel_ -= gathered_numel(p);
    }
    if (st.status == gather_status::released) {
      st.status = gather_status::in_flight;
      live_numel_ += gathered_numel(p);
      decision.gather.push_back(p);
    }
  }
  ++active_[module];

  if (inference_) {
    // Neither part of the trace nor served by it.
  } else if (recording_) {
    trace_.push_back(module);
  } else {
    // The entries of this fetch (and any the prefetch was blocked before) are served by demand now.
    for (const std::size_t end = first_entry_[position_ + 1]; cursor_ < end; ++cursor_) {
      const trace_entry& e = entries_[cursor_];
      params_[e.parameter].serve_until = std::max(params_[e.parameter].serve_until, e.position + 1);
    }
    prefetch_after(decision.prefetch);
  }
  ++position_;
  return decision;
}

void prefetch_policy::prefetch_after(std::vector<parameter_id>& out) {
  for (; cursor_ < entries_.size(); ++cursor_) {
    const trace_entry& e = entries_[cursor_];
    param_state& st = params_[e.parameter];
    if (st.status != gather_status::released) {
      // Already there: not gathered again, so it must stay until this use (release checks this).
      st.serve_until = std::max(st.serve_until, e.position + 1);
      continue;
    }
    const std::uint64_t g = gathered_numel(e.parameter);
    // Within the bucket, or alone when nothing is ahead: DeepSpeed admits a parameter while less
    // than the bucket is being prefetched, so one larger than the bucket does not stop the walk for
    // good. ahead_numel_ is then over the bucket, which leaves no room until that use comes.
    // live_numel_ may exceed the live limit through demand fetches, which then leaves no room.
    const std::uint64_t bucket = limits_.prefetch_bucket_size;
    const bool fits_bucket = ahead_numel_ == 0 ? bucket > 0 : ahead_numel_ <= bucket && g <= bucket - ahead_numel_;
    const bool fits_live = live_numel_ <= limits_.max_live_parameters && g <= limits_.max_live_parameters - live_numel_;
    if (!fits_bucket || !fits_live) return;  // resumes here at the next fetch, keeping trace order
    st.status = gather_status::in_flight;
    st.ahead = true;
    st.serve_until = e.position + 1;
    ahead_numel_ += g;
    live_numel_ += g;
    out.push_back(e.parameter);
  }
}

bool prefetch_policy::reused_soon(module_id module, std::size_t position) const {
  const std::vector<std::size_t>& at = occurrences_[module];
  const auto next = std::upper_bound(at.begin(), at.end(), position);
  if (next == at.end()) return false;
  // DeepSpeed counts the elements of every fetch between this one and the reuse.
  return prefix_numel_[*next] - prefix_numel_[position + 1] < limits_.max_reuse_distance;
}

std::vector<parameter_id> prefetch_policy::on_release(module_id module) {
  require_open("on_release", module);
  ZOE_EXPECTS(active_[module] > 0, "prefetch_policy::on_release of ", describe_module(*layout_, module),
              ": it has no fetch in this step that was not released yet");
  std::vector<parameter_id> release;
  if (--active_[module] > 0) return release;  // fetched again and still in use

  const std::size_t current = position_ - 1;  // the latest fetch; position_ > 0 as a fetch is active
  const bool following = !recording_ && !inference_;
  const bool reused = following && reused_soon(module, current);
  for (const parameter_id p : layout_->module(module).parameters) {
    const param_state& st = params_[p];
    if (st.status == gather_status::released || st.persistent) continue;
    if (following && (reused || st.serve_until > current + 1)) continue;
    mark_released(p);
    release.push_back(p);
  }
  return release;
}

std::vector<parameter_id> prefetch_policy::end_step() {
  ZOE_EXPECTS(open_, "prefetch_policy::end_step: no step is open (call begin_step first)");
  for (module_id m = 0; m < active_.size(); ++m) {
    ZOE_EXPECTS(active_[m] == 0, "prefetch_policy::end_step: ", describe_module(*layout_, m), " was fetched ",
                active_[m], " time(s) more than released in this step");
  }
  std::vector<parameter_id> release;
  for (parameter_id p = 0; p < params_.size(); ++p) {
    param_state& st = params_[p];
    st.ahead = false;
    if (st.status == gather_status::released || st.persistent) continue;
    mark_released(p);
    release.push_back(p);
  }
  ahead_numel_ = 0;
  if (recording_ && !inference_) complete_trace();
  open_ = false;
  inference_ = false;
  return release;
}

void prefetch_policy::complete_trace() {
  if (trace_.empty()) return;  // nothing to follow: the next step records again
  entries_.clear();
  first_entry_.assign(1, 0);
  prefix_numel_.assign(1, 0);
  for (auto& at : occurrences_) at.clear();
  for (std::size_t pos = 0; pos < trace_.size(); ++pos) {
    const module_layout& m = layout_->module(trace_[pos]);
    std::uint64_t numel = 0;
    for (const parameter_id p : m.parameters) {
      entries_.push_back({p, pos});
      numel += gathered_numel(p);
    }
    first_entry_.push_back(entries_.size());
    prefix_numel_.push_back(prefix_numel_.back() + numel);
    occurrences_[m.id].push_back(pos);
  }
  recording_ = false;
  log::debug("prefetch: recorded a trace of ", trace_.size(), " module fetches (", entries_.size(),
             " parameter uses); later steps prefetch along it");
}

void prefetch_policy::depart(module_id module) {
  const std::string expected = position_ < trace_.size()
                                   ? str("expected ", describe_module(*layout_, trace_[position_]))
                                   : str("the trace ends after ", trace_.size(), " fetches");
  log::info("prefetch trace invalidated at fetch ", position_, " of the step: ", expected, ", got ",
            describe_module(*layout_, module), "; recording the trace anew");
  // What this step matched stays the start of the new trace; the rest is recorded as it comes.
  trace_.resize(position_);
  recording_ = true;
  entries_.clear();
  cursor_ = 0;
  // Prefetched parameters stay gathered (freed at their module's release or at end_step), but no
  // longer run ahead of a trace.
  for (param_state& st : params_) st.ahead = false;
  ahead_numel_ = 0;
}

void prefetch_policy::on_gathered(parameter_id parameter) {
  param_state& st = state(parameter);
  ZOE_EXPECTS(st.status == gather_status::in_flight,
              "prefetch_policy::on_gathered: ", describe_parameter(*layout_, parameter), " is ",
              gather_status_name(st.status), ", not in flight");
  st.status = gather_status::gathered;
}

void prefetch_policy::on_freed(parameter_id parameter) {
  const param_state& st = state(parameter);
  ZOE_EXPECTS(st.status != gather_status::released,
              "prefetch_policy::on_freed: ", describe_parameter(*layout_, parameter), " is released already");
  mark_released(parameter);
}

void prefetch_policy::mark_released(parameter_id p) noexcept {
  param_state& st = params_[p];
  const std::uint64_t g = gathered_numel(p);
  if (st.ahead) ahead_numel_ -= g;
  live_numel_ -= g;
  st = param_state{gather_status::released, st.persistent, false, 0};
}

std::vector<parameter_id> prefetch_policy::lookahead(std::uint64_t max_numel) const {
  std::vector<parameter_id> out;
  if (recording_ || inference_) return out;
  std::unordered_set<parameter_id> taken;
  std::uint64_t numel = 0;
  for (std::size_t i = cursor_; i < entries_.size(); ++i) {
    const parameter_id p = entries_[i].parameter;
    if (params_[p].status != gather_status::released || taken.contains(p)) continue;
    const std::uint64_t g = gathered_numel(p);
    if (g > max_numel - numel) break;
    numel += g;
    taken.insert(p);
    out.push_back(p);
  }
  return out;
}

}  // namespace zoe::engine
