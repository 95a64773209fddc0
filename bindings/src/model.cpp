// The model builder: modules and parameter descriptions, checked as they are added so that a bad
// one is refused naming it, before any engine is built.
#include <cmath>
#include <limits>
#include <utility>

#include "objects.hpp"
#include "status.hpp"
#include "zoe/core/error.hpp"
#include "zoe/core/str.hpp"

namespace zoe::bindings {
namespace {

kernels::dtype dtype_of(int t, const std::string& parameter) {
  switch (t) {
    case ZOE_FP32: return kernels::dtype::fp32;
    case ZOE_FP16: return kernels::dtype::fp16;
    case ZOE_BF16: return kernels::dtype::bf16;
  }
  throw usage_error(
      str("parameter '", parameter, "': dtype ", t, " is not a zoe_dtype (ZOE_FP32, ZOE_FP16 or ZOE_BF16)"));
}

void check_init(const zoe_parameter_desc& d, const std::string& parameter) {
  const int init = enum_value(d.init);
  switch (init) {
    case ZOE_INIT_DATA:
      if (d.data == nullptr) throw usage_error(str("parameter '", parameter, "': ZOE_INIT_DATA with data NULL"));
      return;
    case ZOE_INIT_ZEROS: return;
    case ZOE_INIT_UNIFORM:
    case ZOE_INIT_NORMAL:
      if (!std::isfinite(d.scale) || d.scale < 0) {
        throw usage_error(
            str("parameter '", parameter, "': the initializer's scale ", d.scale, " is not a finite number >= 0"));
      }
      return;
  }
  throw usage_error(str("parameter '", parameter, "': init ", init,
                        " is not a zoe_init (ZOE_INIT_DATA, ZOE_INIT_ZEROS, ZOE_INIT_UNIFORM or ZOE_INIT_NORMAL)"));
}

// The shape, each extent > 0, and its element count (which must fit 64 bits).
std::vector<std::uint64_t> shape_of(const zoe_parameter_desc& d, const std::string& parameter, std::uint64_t& numel) {
  // More extents than any framework's tensor has is a count gone wrong, not a shape to read.
  constexpr std::size_t max_ndim = 64;
  if (d.ndim > max_ndim) {
    throw usage_error(str("parameter '", parameter, "': ndim ", d.ndim, " is more than ", max_ndim, " extents"));
  }
  if (d.ndim > 0 && d.shape == nullptr) {
    throw usage_error(str("parameter '", parameter, "': shape is NULL with ndim ", d.ndim));
  }
  std::vector<std::uint64_t> shape(d.shape, d.shape + d.ndim);
  numel = 1;
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == 0) throw usage_error(str("parameter '", parameter, "': extent ", i, " of its shape is 0"));
    if (numel > std::numeric_limits<std::uint64_t>::max() / shape[i]) {
      throw usage_error(str("parameter '", parameter, "': its element count overflows 64 bits"));
    }
    numel *= shape[i];
  }
  return shape;
}

}  // namespace
}  // namespace zoe::bindings

using zoe::bindings::expect_pointer;
using zoe::bindings::guarded;
using zoe::bindings::live;

extern "C" {

zoe_status zoe_model_create(zoe_model** model) {
  return guarded("zoe_model_create", [&] {
    expect_pointer(model, "model (the out-parameter)");
    *model = zoe::bindings::adopt(std::make_unique<zoe_model>());
  });
}

zoe_status zoe_model_destroy(zoe_model* model) {
  return guarded("zoe_model_destroy", [&] { zoe::bindings::retire(model, "model").reset(); });
}

zoe_status zoe_model_add_module(zoe_model* model, const char* name, zoe_module_id* module) {
  return guarded("zoe_model_add_module", [&] {
    zoe_model& m = live(model, "model");
    expect_pointer(name, "the module's name");
    expect_pointer(module, "module (the out-parameter)");
    const std::string n(name);
    if (n.empty()) throw zoe::usage_error("a module's name is empty");
    for (const zoe_model::module& existing : m.modules) {
      if (existing.name == n) throw zoe::usage_error(zoe::str("module name '", n, "' is already in the model"));
    }
    if (m.modules.size() >= std::numeric_limits<zoe_module_id>::max()) {
      throw zoe::usage_error("the model has as many modules as a zoe_module_id counts");
    }
    m.modules.push_back({.name = n, .parameters = {}});
    *module = static_cast<zoe_module_id>(m.modules.size() - 1);
  });
}

zoe_status zoe_model_add_parameter(zoe_model* model, zoe_module_id module, const zoe_parameter_desc* desc,
                                   zoe_parameter_id* parameter) {
  return guarded("zoe_model_add_parameter", [&] {
    zoe_model& m = live(model, "model");
    const zoe_parameter_desc& d =
        zoe::bindings::expect_struct(desc, ZOE_FIELDS_END(zoe_parameter_desc, seed), "zoe_parameter_desc");
    // Fields past `seed` came later: a caller built before them passes a smaller struct_size and
    // gets their defaults (trainable, group 0).
    const bool has_frozen = d.struct_size >= ZOE_FIELDS_END(zoe_parameter_desc, frozen);
    const bool has_group = d.struct_size >= ZOE_FIELDS_END(zoe_parameter_desc, group);
    expect_pointer(parameter, "parameter (the out-parameter)");
    expect_pointer(d.name, "zoe_parameter_desc.name");
    const std::string name(d.name);
    if (name.empty()) throw zoe::usage_error("a parameter's name is empty");
    if (module >= m.modules.size()) {
      throw zoe::usage_error(zoe::str("parameter '", name, "': module ", module,
                                      " is not a module of this model (it has ", m.modules.size(), ")"));
    }
    for (const zoe_model::parameter& existing : m.parameters) {
      if (existing.name == name)
        throw zoe::usage_error(zoe::str("parameter name '", name, "' is already in the model"));
    }
    if (m.parameters.size() >= std::numeric_limits<zoe_parameter_id>::max()) {
      throw zoe::usage_error("the model has as many parameters as a zoe_parameter_id counts");
    }
    zoe_model::parameter p;
    p.dtype = zoe::bindings::dtype_of(zoe::bindings::enum_value(d.dtype), name);
    zoe::bindings::check_init(d, name);
    p.shape = zoe::bindings::shape_of(d, name, p.numel);
    p.init = d.init;
    p.data = d.data;
    p.scale = d.scale;
    p.seed = d.seed;
    if (has_frozen && d.frozen != 0 && d.frozen != 1) {
      throw zoe::usage_error(zoe::str("parameter '", name, "': frozen is ", d.frozen, "; give 0 or 1"));
    }
    p.frozen = has_frozen && d.frozen == 1;
    p.group = has_group ? d.group : 0;
    static_assert(ZOE_MAX_PARAMETER_GROUP == zoe::engine::max_parameter_group);
    if (p.group > ZOE_MAX_PARAMETER_GROUP) {
      throw zoe::usage_error(zoe::str("parameter '", name, "': group is ", p.group, ", above ", ZOE_MAX_PARAMETER_GROUP,
                                      " (ZOE_MAX_PARAMETER_GROUP), the largest parameter group"));
    }
    p.module = module;
    p.name = name;
    const auto id = static_cast<zoe_parameter_id>(m.parameters.size());
    m.modules[module].parameters.push_back(id);
    try {
      m.parameters.push_back(std::move(p));
    } catch (...) {
      m.modules[module].parameters.pop_back();
      throw;
    }
    *parameter = id;
  });
}

}  // extern "C"
