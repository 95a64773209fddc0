#include "c_api_checks.hpp"

#include <cstdio>
#include <cstdlib>
#include <string>

#include "entry.hpp"
#include "zoe/core/str.hpp"

namespace zoe::fuzz {

namespace {
// ZOE_FUZZ_TRACE set: every call and its result to stderr, to read what a crash input does.
const bool trace = std::getenv("ZOE_FUZZ_TRACE") != nullptr;
}  // namespace

bool succeeded(zoe_status status, const char* call) {
  if (trace) std::fprintf(stderr, "%s: %s\n", call, status == ZOE_SUCCESS ? "success" : zoe_last_error());
  if (status == ZOE_SUCCESS) return true;
  const std::string message = zoe_last_error();
  if (status == ZOE_ERROR_INTERNAL) throw invariant_failure(str(call, " failed inside zoe (internal): ", message));
  if (status < ZOE_ERROR_INTERNAL || status > ZOE_ERROR_TIMEOUT) {
    throw invariant_failure(str(call, " returned ", static_cast<int>(status), ", no zoe_status"));
  }
  if (message.empty()) throw invariant_failure(str(call, " failed (", zoe_status_string(status), ") with no message"));
  return false;
}

void must_succeed(zoe_status status, const char* call) {
  if (!succeeded(status, call)) {
    throw invariant_failure(str(call, " failed (", zoe_status_string(status), "): ", zoe_last_error()));
  }
}

}  // namespace zoe::fuzz
