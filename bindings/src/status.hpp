#pragma once
// The boundary between the C API and the C++ library: every C entry point runs its body through
// guarded(), which turns whatever the body throws into a zoe_status and the calling thread's last
// error, so that no exception crosses into C. zoe::error carries its status (one class per code);
// std::bad_alloc is ZOE_ERROR_MEMORY; anything else is a bug of zoe (ZOE_ERROR_INTERNAL).

#include <cstddef>
#include <cstring>
#include <string>
#include <type_traits>

#include "zoe/zoe.h"

namespace zoe::bindings {

/// Translates the exception in flight into a status and records "<call>: <message>" as the
/// calling thread's last error. Call only from a catch block. Never throws.
[[nodiscard]] zoe_status fail_current(const char* call) noexcept;

/// Runs `body` for the C function named `call`: ZOE_SUCCESS when it returns, else the status of
/// what it threw (see fail_current). The last error is left as it was on success.
template <typename Body>
[[nodiscard]] zoe_status guarded(const char* call, Body&& body) noexcept {
  try {
    body();
    return ZOE_SUCCESS;
  } catch (...) {
    return fail_current(call);
  }
}

/// The value a C caller passed for an enum, as an int. Read as bytes: C may pass any int, and in
/// C++ loading a value that is not one of the enumerators' as the enum type is undefined (UBSan's
/// enum check stops there), so a C enum is checked as an int before it is used as its type.
template <typename Enum>
[[nodiscard]] int enum_value(const Enum& e) noexcept {
  static_assert(std::is_enum_v<Enum> && sizeof(Enum) == sizeof(int));
  int v = 0;
  std::memcpy(&v, &e, sizeof v);
  return v;
}

/// Throws usage_error naming `what` when `pointer` is NULL.
void expect_pointer(const void* pointer, const char* what);

/// Checks a caller's size-prefixed struct: usage_error naming `type` when `s` is NULL or its
/// struct_size is smaller than `fields_end`, the end of the last field this version reads.
/// Returns *s.
template <typename Struct>
const Struct& expect_struct(const Struct* s, std::size_t fields_end, const char* type);
void expect_struct_size(const void* s, std::size_t struct_size, std::size_t fields_end, const char* type);

template <typename Struct>
const Struct& expect_struct(const Struct* s, std::size_t fields_end, const char* type) {
  expect_struct_size(s, s == nullptr ? 0 : s->struct_size, fields_end, type);
  return *s;
}

/// The end of field `member` of struct `type`: the struct_size a caller must at least give for
/// this version to read that field.
#define ZOE_FIELDS_END(type, member) (offsetof(type, member) + sizeof(decltype(type::member)))

}  // namespace zoe::bindings
