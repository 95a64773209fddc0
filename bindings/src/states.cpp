// Reading and writing a parameter's states as fp32: for debugging, tests against a reference, and a
// framework's load_state_dict.
#include <algorithm>
#include <vector>

#include "objects.hpp"
#include "status.hpp"
#include "zoe/core/error.hpp"
#include "zoe/core/str.hpp"

namespace {

zoe::engine::state_kind state_of(int s) {
  switch (s) {
    case ZOE_STATE_PARAMETER: return zoe::engine::state_kind::master;
    case ZOE_STATE_GRADIENT: return zoe::engine::state_kind::gradient;
    case ZOE_STATE_EXP_AVG: return zoe::engine::state_kind::exp_avg;
    case ZOE_STATE_EXP_AVG_SQ: return zoe::engine::state_kind::exp_avg_sq;
  }
  throw zoe::usage_error(zoe::str("state ", s,
                                  " is not a zoe_state (ZOE_STATE_PARAMETER, ZOE_STATE_GRADIENT, ZOE_STATE_EXP_AVG "
                                  "or ZOE_STATE_EXP_AVG_SQ)"));
}

// zoe_read_state and zoe_write_state: the parameter and state named, `count` its element count and
// `values` given, and no micro-batch or inference fetch open.
struct state_target {
  zoe::engine::parameter_id id;
  zoe::engine::state_kind kind;
};

// `state` as read by enum_value: passing the zoe_state itself by value would load it as the enum,
// undefined for a value outside the enumerators (UBSan's enum check).
state_target expect_state_target(zoe_engine& e, zoe_parameter_id parameter, int state, const float* values,
                                 std::size_t count) {
  const zoe::engine::parameter_id id = zoe::bindings::layout_id(e, parameter);
  const zoe::engine::state_kind kind = state_of(state);
  const zoe::engine::parameter_layout& p = e.engine->layout().parameter(id);
  if (count != p.numel) {
    throw zoe::usage_error(zoe::str("parameter '", p.name, "' has ", p.numel, " elements; count is ", count));
  }
  zoe::bindings::expect_pointer(values, "values");
  e.tracker.expect_closed();
  return {id, kind};
}

}  // namespace

using zoe::bindings::expect_pointer;
using zoe::bindings::guarded;
using zoe::bindings::live;

extern "C" {

zoe_status zoe_parameter_numel(const zoe_engine* engine, zoe_parameter_id parameter, uint64_t* numel) {
  return guarded("zoe_parameter_numel", [&] {
    const zoe_engine& e = live(engine, "engine");
    expect_pointer(numel, "numel (the out-parameter)");
    *numel = e.engine->layout().parameter(zoe::bindings::layout_id(e, parameter)).numel;
  });
}

zoe_status zoe_read_state(zoe_engine* engine, zoe_parameter_id parameter, zoe_state state, float* values,
                          size_t count) {
  return guarded("zoe_read_state", [&] {
    zoe_engine& e = live(engine, "engine");
    const auto [id, kind] = expect_state_target(e, parameter, zoe::bindings::enum_value(state), values, count);
    const std::vector<float> read = e.engine->read_state(id, kind);
    std::copy(read.begin(), read.end(), values);
  });
}

zoe_status zoe_write_state(zoe_engine* engine, zoe_parameter_id parameter, zoe_state state, const float* values,
                           size_t count) {
  return guarded("zoe_write_state", [&] {
    zoe_engine& e = live(engine, "engine");
    const auto [id, kind] = expect_state_target(e, parameter, zoe::bindings::enum_value(state), values, count);
    e.engine->write_state(id, kind, {values, count});
  });
}

}  // extern "C"
