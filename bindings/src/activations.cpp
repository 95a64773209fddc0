// Activation checkpoints: a device buffer kept off the device from forward until backward, in the
// engine's activation store (pinned host, or NVMe once the host share is full).
#include "objects.hpp"
#include "status.hpp"
#include "zoe/core/error.hpp"

using zoe::bindings::expect_pointer;
using zoe::bindings::guarded;
using zoe::bindings::live;

extern "C" {

zoe_status zoe_activation_save(zoe_engine* engine, const void* pointer, size_t bytes, zoe_stream* stream,
                               zoe_activation_id* activation) {
  return guarded("zoe_activation_save", [&] {
    zoe_engine& e = live(engine, "engine");
    const zoe::stream_view s = zoe::bindings::stream_on(*e.device, stream);
    expect_pointer(pointer, "pointer");
    expect_pointer(activation, "activation (the out-parameter)");
    if (bytes == 0) throw zoe::usage_error("0 bytes to save: give the activation's size");
    // The store is emptied at the end of each micro-batch: a save outside one would be lost.
    e.tracker.expect_open();
    *activation = e.engine->activations().save(pointer, bytes, s);
  });
}

zoe_status zoe_activation_load(zoe_engine* engine, zoe_activation_id activation, zoe_stream* stream, void** pointer) {
  return guarded("zoe_activation_load", [&] {
    zoe_engine& e = live(engine, "engine");
    const zoe::stream_view s = zoe::bindings::stream_on(*e.device, stream);
    expect_pointer(pointer, "pointer (the out-parameter)");
    e.tracker.expect_open();
    *pointer = e.engine->activations().load(activation, s);
  });
}

zoe_status zoe_activation_free(zoe_engine* engine, zoe_activation_id activation, zoe_stream* stream) {
  return guarded("zoe_activation_free", [&] {
    zoe_engine& e = live(engine, "engine");
    const zoe::stream_view s = zoe::bindings::stream_on(*e.device, stream);
    e.tracker.expect_open();
    e.engine->activations().free(activation, s);
  });
}

}  // extern "C"
