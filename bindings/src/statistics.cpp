// The engine's figures as JSON, and each offload stage of a step timed alone.
#include <cstring>
#include <string>

#include "objects.hpp"
#include "status.hpp"
#include "zoe/engine/statistics.hpp"

using zoe::bindings::expect_pointer;
using zoe::bindings::guarded;
using zoe::bindings::live;

extern "C" {

zoe_status zoe_statistics(zoe_engine* engine, char* buffer, size_t capacity, size_t* length) {
  return guarded("zoe_statistics", [&] {
    zoe_engine& e = live(engine, "engine");
    expect_pointer(length, "length (the out-parameter)");
    const std::string json = zoe::engine::statistics_json(*e.engine);
    // As snprintf: the whole text and its NUL, or nothing; the length either way.
    if (buffer != nullptr && capacity > json.size()) std::memcpy(buffer, json.c_str(), json.size() + 1);
    *length = json.size();
  });
}

zoe_status zoe_measure_stages(zoe_engine* engine, zoe_stage_times* times) {
  return guarded("zoe_measure_stages", [&] {
    zoe_engine& e = live(engine, "engine");
    zoe::bindings::expect_struct(times, ZOE_FIELDS_END(zoe_stage_times, optimizer_io_s), "zoe_stage_times");
    e.tracker.expect_closed();
    const zoe::engine::stage_times t = e.engine->measure_stages();
    times->param_io_s = t.param_io_s;
    times->adam_s = t.adam_s;
    times->optimizer_io_s = t.optimizer_io_s;
    // The replay's fields came later: a caller built before them passes a smaller struct_size.
    if (times->struct_size >= ZOE_FIELDS_END(zoe_stage_times, io_write_bytes)) {
      times->io_s = t.io_s;
      times->io_read_bytes = t.io_read_bytes;
      times->io_write_bytes = t.io_write_bytes;
    }
  });
}

}  // extern "C"
