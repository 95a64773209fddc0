// A micro-batch: begin and end, fetch and release of modules, parameter addresses, and the
// gradients handed in. Each module call is checked against the tracker first, so a call out of
// order is refused naming the module before the engine is touched.
#include <algorithm>
#include <exception>

#include "objects.hpp"
#include "status.hpp"
#include "zoe/core/error.hpp"
#include "zoe/core/log.hpp"
#include "zoe/core/str.hpp"

namespace zoe::bindings {
namespace {

// One call on one module, from the tracker's start() to its finish(): the transition is applied
// only when done() was reached, and the module is never left busy.
class module_call {
 public:
  module_call(micro_batch_tracker& tracker, std::uint32_t module, module_op op)
      : tracker_(tracker), module_(module), op_(tracker.start(module, op)) {}
  ~module_call() { tracker_.finish(module_, op_, done_); }
  module_call(const module_call&) = delete;
  module_call& operator=(const module_call&) = delete;
  void done() noexcept { done_ = true; }

 private:
  micro_batch_tracker& tracker_;
  std::uint32_t module_;
  module_op op_;
  bool done_ = false;
};

module_op fetch_op(int pass) {
  switch (pass) {
    case ZOE_PASS_FORWARD: return module_op::fetch_forward;
    case ZOE_PASS_BACKWARD: return module_op::fetch_backward;
  }
  throw usage_error(str("pass ", pass, " is not a zoe_pass (ZOE_PASS_FORWARD or ZOE_PASS_BACKWARD)"));
}

}  // namespace
}  // namespace zoe::bindings

using zoe::bindings::expect_pointer;
using zoe::bindings::guarded;
using zoe::bindings::live;
using zoe::bindings::module_op;

extern "C" {

zoe_status zoe_begin_micro_batch(zoe_engine* engine) {
  return guarded("zoe_begin_micro_batch", [&] {
    zoe_engine& e = live(engine, "engine");
    e.tracker.expect_closed();
    e.engine->begin_micro_batch();
    e.tracker.open();
  });
}

zoe_status zoe_end_micro_batch(zoe_engine* engine) {
  return guarded("zoe_end_micro_batch", [&] {
    zoe_engine& e = live(engine, "engine");
    e.tracker.expect_can_close();
    try {
      e.engine->end_micro_batch();
    } catch (...) {
      // A failure past the checks (an NVMe write of a gradient or a parameter) closes the
      // micro-batch all the same; the engine says whether its gradients still count.
      if (!e.engine->micro_batch_open()) e.tracker.close(true);
      throw;
    }
    e.tracker.close(true);
  });
}

zoe_status zoe_fetch(zoe_engine* engine, zoe_module_id module, zoe_pass pass, zoe_stream* stream) {
  return guarded("zoe_fetch", [&] {
    zoe_engine& e = live(engine, "engine");
    const zoe::stream_view s = zoe::bindings::stream_on(*e.device, stream);
    zoe::bindings::module_call call(e.tracker, module, zoe::bindings::fetch_op(zoe::bindings::enum_value(pass)));
    // The pass picks the gather: a backward fetch gathers from the hpZ secondary shards.
    const zoe::engine::fetch_handle fetched = e.engine->fetch(
        module, pass == ZOE_PASS_BACKWARD ? zoe::engine::fetch_pass::backward : zoe::engine::fetch_pass::forward);
    try {
      fetched.wait(s);
    } catch (...) {
      // The fetch is open in the engine: end it, so that the module is as before the call and the
      // fetch may be retried.
      try {
        e.engine->release(module, s);
      } catch (const std::exception& r) {
        zoe::log::warn("zoe_fetch: releasing module '", e.tracker.name(module), "' after its failed fetch: ", r.what());
      }
      throw;
    }
    call.done();
  });
}

zoe_status zoe_release(zoe_engine* engine, zoe_module_id module, zoe_stream* stream) {
  return guarded("zoe_release", [&] {
    zoe_engine& e = live(engine, "engine");
    const zoe::stream_view s = zoe::bindings::stream_on(*e.device, stream);
    zoe::bindings::module_call call(e.tracker, module, module_op::release);
    e.engine->release(module, s);
    call.done();
  });
}

zoe_status zoe_parameter_address(zoe_engine* engine, zoe_parameter_id parameter, void** address) {
  return guarded("zoe_parameter_address", [&] {
    zoe_engine& e = live(engine, "engine");
    expect_pointer(address, "address (the out-parameter)");
    const zoe::engine::parameter_id id = zoe::bindings::layout_id(e, parameter);
    const zoe::engine::parameter_layout& p = e.engine->layout().parameter(id);
    e.tracker.expect_fetched(p.module, p.name);
    *address = e.engine->address(id);
  });
}

zoe_status zoe_module_gradients(zoe_engine* engine, zoe_module_id module, zoe_stream* stream, void** buffers,
                                size_t count) {
  return guarded("zoe_module_gradients", [&] {
    zoe_engine& e = live(engine, "engine");
    const zoe::stream_view s = zoe::bindings::stream_on(*e.device, stream);
    const std::size_t expected = e.tracker.parameter_count(module);
    if (count != expected) {
      throw zoe::usage_error(zoe::str("module '", e.tracker.name(module), "' has ", expected,
                                      " parameters, so it has as many gradient buffers; count is ", count));
    }
    if (count > 0) expect_pointer(buffers, "buffers");
    zoe::bindings::module_call call(e.tracker, module, module_op::acquire_gradients);
    const std::vector<void*> acquired = e.engine->gradient_buffers(module, s);
    if (acquired.size() != count) {
      throw zoe::internal_error(zoe::str("module '", e.tracker.name(module), "': the engine handed out ",
                                         acquired.size(), " gradient buffers for ", count, " parameters"));
    }
    std::copy(acquired.begin(), acquired.end(), buffers);
    call.done();
  });
}

zoe_status zoe_reduce_gradients(zoe_engine* engine, zoe_module_id module, zoe_stream* stream) {
  return guarded("zoe_reduce_gradients", [&] {
    zoe_engine& e = live(engine, "engine");
    const zoe::stream_view s = zoe::bindings::stream_on(*e.device, stream);
    zoe::bindings::module_call call(e.tracker, module, module_op::reduce_gradients);
    e.engine->reduce_gradients(module, s);
    call.done();
  });
}

}  // extern "C"
