// Error translation at the C boundary, the thread-local last error, and the status names.
#include "status.hpp"

#include <exception>
#include <new>
#include <string>

#include "zoe/core/error.hpp"
#include "zoe/core/str.hpp"

namespace zoe::bindings {
namespace {

// The message zoe_last_error() returns: per thread, valid until the thread's next failing call.
thread_local std::string last_error;  // NOLINT(readability-identifier-naming)

zoe_status record(const char* call, zoe_status status, const char* message) noexcept {
  try {
    last_error.assign(call).append(": ").append(message);
  } catch (...) {
    // No memory for the message: keep the status, say at least which call failed.
    last_error.clear();
  }
  return status;
}

}  // namespace

zoe_status fail_current(const char* call) noexcept {
  try {
    throw;
  } catch (const zoe::error& e) {
    return record(call, static_cast<zoe_status>(e.category()), e.what());
  } catch (const std::bad_alloc& e) {
    return record(call, ZOE_ERROR_MEMORY, "out of host memory (std::bad_alloc)");
  } catch (const std::exception& e) {
    return record(call, ZOE_ERROR_INTERNAL, e.what());
  } catch (...) {
    return record(call, ZOE_ERROR_INTERNAL, "an exception of unknown type");
  }
}

void expect_pointer(const void* pointer, const char* what) {
  if (pointer == nullptr) throw usage_error(str(what, " is NULL"));
}

void expect_struct_size(const void* s, std::size_t struct_size, std::size_t fields_end, const char* type) {
  if (s == nullptr) throw usage_error(str("the ", type, " pointer is NULL"));
  if (struct_size < fields_end) {
    throw usage_error(str(type, ".struct_size is ", struct_size, "; this version of zoe reads ", fields_end,
                          " bytes of it (initialize it with its ..._INIT macro, which sets sizeof(", type, "))"));
  }
}

}  // namespace zoe::bindings

extern "C" {

const char* zoe_status_string(zoe_status status) {
  const int value = zoe::bindings::enum_value(status);
  if (value == ZOE_SUCCESS) return "success";
  if (value < ZOE_ERROR_INTERNAL || value > ZOE_ERROR_TIMEOUT) return "unknown";
  // The names are string literals (category_name returns views of them): NUL-terminated.
  return zoe::category_name(static_cast<zoe::error_category>(value)).data();
}

const char* zoe_last_error(void) { return zoe::bindings::last_error.c_str(); }

const char* zoe_version(void) { return ZOE_VERSION_STRING; }

}  // extern "C"
