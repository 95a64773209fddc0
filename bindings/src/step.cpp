// Between micro-batches: the optimizer step (and its announcement, also during them), the loss scale, and
// checkpoints (with the caller's client bytes, and the group settings a loaded one kept).
#include <cstring>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "objects.hpp"
#include "status.hpp"
#include "zoe/core/error.hpp"
#include "zoe/core/str.hpp"

using zoe::bindings::expect_pointer;
using zoe::bindings::guarded;
using zoe::bindings::live;

namespace {

// NULL and "" both mean the engine's default (a tag of the step count, or the latest).
std::string tag_of(const char* tag) { return tag == nullptr ? std::string() : std::string(tag); }

// zoe_step and zoe_step_groups: the checks they share, `step` on the engine, and the result.
template <typename Step>
void run_step(zoe_engine& e, zoe_step_result* result, Step&& step) {
  zoe::bindings::expect_struct(result, ZOE_FIELDS_END(zoe_step_result, optimizer_steps), "zoe_step_result");
  e.tracker.expect_closed();
  if (!e.tracker.any_reduced_in_step()) {
    throw zoe::usage_error(
        "no gradient was reduced in this step: hand in each module's gradients during backward "
        "(zoe_fetch with ZOE_PASS_BACKWARD, zoe_module_gradients, zoe_reduce_gradients) before stepping");
  }
  const zoe::engine::step_result r = step();
  e.tracker.step_done();
  result->skipped = r.skipped ? 1 : 0;
  result->loss_scale = r.loss_scale;
  result->grad_norm = r.grad_norm;
  result->clip_coefficient = r.clip_coefficient;
  result->optimizer_steps = r.optimizer_steps;
}

// zoe_step_groups and zoe_checkpoint_groups: one zoe_group_hyper per parameter group.
void expect_group_count(const zoe_engine& e, std::size_t count) {
  const std::size_t expected = e.engine->layout().group_count();
  if (count != expected) {
    throw zoe::usage_error(zoe::str("count is ", count, ", but the model has ", expected,
                                    " parameter groups (the largest zoe_parameter_desc.group + 1)"));
  }
}

// The caller's array of zoe_group_hyper: its elements are the caller's struct, groups[0].struct_size
// bytes apart (a caller built against a zoe.h before betas and eps has a shorter one), each checked
// before anything is read or written.
template <typename Hyper>
class group_array {
 public:
  group_array(Hyper* groups, std::size_t count) : first_(groups) {
    expect_pointer(groups, "groups");
    zoe::bindings::expect_struct(groups, ZOE_FIELDS_END(zoe_group_hyper, weight_decay), "zoe_group_hyper (groups[0])");
    stride_ = groups->struct_size;
    if (stride_ % alignof(zoe_group_hyper) != 0) {
      throw zoe::usage_error(zoe::str("zoe_group_hyper (groups[0]).struct_size ", stride_, " is not a multiple of ",
                                      alignof(zoe_group_hyper), ": set it to sizeof(zoe_group_hyper)"));
    }
    for (std::size_t g = 1; g < count; ++g) {
      if (at(g).struct_size != stride_) {
        throw zoe::usage_error(zoe::str("zoe_group_hyper (groups[", g, "]).struct_size is ", at(g).struct_size,
                                        ", groups[0]'s ", stride_, ": the array is of one struct"));
      }
    }
  }
  [[nodiscard]] Hyper& at(std::size_t g) const {
    using byte = std::conditional_t<std::is_const_v<Hyper>, const unsigned char, unsigned char>;
    return *reinterpret_cast<Hyper*>(reinterpret_cast<byte*>(first_) + g * stride_);
  }
  /// Whether the caller's struct has betas and eps.
  [[nodiscard]] bool has_adam() const noexcept { return stride_ >= ZOE_FIELDS_END(zoe_group_hyper, eps); }

 private:
  Hyper* first_;
  std::size_t stride_ = 0;
};

// zoe_step_groups and zoe_announce_step_groups: the caller's groups as the engine takes them.
std::vector<zoe::engine::group_hyper> group_settings(const zoe_engine& e, const zoe_group_hyper* groups,
                                                     std::size_t count) {
  expect_group_count(e, count);
  const group_array<const zoe_group_hyper> given(groups, count);
  const zoe::engine::optimizer_config configured =
      e.engine->config().optimizer.value_or(zoe::engine::optimizer_config{});
  std::vector<zoe::engine::group_hyper> settings;
  for (std::size_t g = 0; g < count; ++g) {
    const zoe_group_hyper& h = given.at(g);
    zoe::engine::group_hyper s{
        .lr = h.lr, .weight_decay = h.weight_decay, .betas = configured.betas, .eps = configured.eps};
    // eps 0, or a struct without the fields: the configuration's betas and eps.
    if (given.has_adam() && h.eps != 0) {
      s.betas = {h.beta1, h.beta2};
      s.eps = h.eps;
    }
    settings.push_back(s);
  }
  return settings;
}

// zoe_checkpoint_save and zoe_checkpoint_save_client (a blob of `bytes` at `client`; none when 0).
zoe_status save_checkpoint(const char* call, zoe_engine* engine, const char* directory, const char* tag,
                           const void* client, size_t bytes) {
  return guarded(call, [&] {
    zoe_engine& e = live(engine, "engine");
    expect_pointer(directory, "directory");
    if (bytes > 0) expect_pointer(client, "client");
    e.tracker.expect_closed();
    const std::string_view blob =
        bytes == 0 ? std::string_view() : std::string_view(static_cast<const char*>(client), bytes);
    (void)e.engine->save_checkpoint(directory, tag_of(tag), blob);
  });
}

}  // namespace

extern "C" {

zoe_status zoe_loss_scale(const zoe_engine* engine, double* scale) {
  return guarded("zoe_loss_scale", [&] {
    const zoe_engine& e = live(engine, "engine");
    expect_pointer(scale, "scale (the out-parameter)");
    *scale = e.engine->loss_scale();
  });
}

zoe_status zoe_step(zoe_engine* engine, double lr, zoe_step_result* result) {
  return guarded("zoe_step", [&] {
    zoe_engine& e = live(engine, "engine");
    run_step(e, result, [&] { return e.engine->step(lr); });
  });
}

zoe_status zoe_step_groups(zoe_engine* engine, const zoe_group_hyper* groups, size_t count, zoe_step_result* result) {
  return guarded("zoe_step_groups", [&] {
    zoe_engine& e = live(engine, "engine");
    const std::vector<zoe::engine::group_hyper> settings = group_settings(e, groups, count);
    run_step(e, result, [&] { return e.engine->step(settings); });
  });
}

zoe_status zoe_announce_step_groups(zoe_engine* engine, const zoe_group_hyper* groups, size_t count) {
  return guarded("zoe_announce_step_groups", [&] {
    zoe_engine& e = live(engine, "engine");
    e.engine->announce_step(group_settings(e, groups, count));
  });
}

zoe_status zoe_checkpoint_save(zoe_engine* engine, const char* directory, const char* tag) {
  return save_checkpoint("zoe_checkpoint_save", engine, directory, tag, nullptr, 0);
}

zoe_status zoe_checkpoint_save_client(zoe_engine* engine, const char* directory, const char* tag, const void* client,
                                      size_t bytes) {
  return save_checkpoint("zoe_checkpoint_save_client", engine, directory, tag, client, bytes);
}

zoe_status zoe_checkpoint_load(zoe_engine* engine, const char* directory, const char* tag) {
  return guarded("zoe_checkpoint_load", [&] {
    zoe_engine& e = live(engine, "engine");
    expect_pointer(directory, "directory");
    e.tracker.expect_closed();
    e.engine->load_checkpoint(directory, tag_of(tag));
    // The engine starts a new step: the gradients handed in before the load no longer count.
    e.tracker.step_done();
  });
}

zoe_status zoe_checkpoint_client(zoe_engine* engine, void* buffer, size_t capacity, size_t* length) {
  return guarded("zoe_checkpoint_client", [&] {
    const zoe_engine& e = live(engine, "engine");
    expect_pointer(length, "length (the out-parameter)");
    const auto& loaded = e.engine->loaded();
    const std::string_view blob = loaded ? std::string_view(loaded->client) : std::string_view();
    if (buffer != nullptr && capacity >= blob.size() && !blob.empty()) std::memcpy(buffer, blob.data(), blob.size());
    *length = blob.size();
  });
}

zoe_status zoe_checkpoint_groups(zoe_engine* engine, zoe_group_hyper* groups, size_t count) {
  return guarded("zoe_checkpoint_groups", [&] {
    const zoe_engine& e = live(engine, "engine");
    const auto& loaded = e.engine->loaded();
    if (!loaded) {
      throw zoe::usage_error(
          "no checkpoint was loaded into this engine (zoe_checkpoint_load): no group settings to give");
    }
    expect_group_count(e, count);
    const group_array<zoe_group_hyper> out(groups, count);
    for (std::size_t g = 0; g < count; ++g) {
      const zoe::engine::group_hyper& saved = loaded->groups[g];
      zoe_group_hyper& h = out.at(g);
      h.lr = saved.lr;
      h.weight_decay = saved.weight_decay;
      if (out.has_adam()) {
        h.beta1 = saved.betas[0];
        h.beta2 = saved.betas[1];
        h.eps = saved.eps;
      }
    }
  });
}

}  // extern "C"
