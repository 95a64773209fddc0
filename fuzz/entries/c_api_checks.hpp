#pragma once
// What every C API call a fuzz entry makes must satisfy, whatever its arguments.

#include <zoe/zoe.h>

namespace zoe::fuzz {

/// True for ZOE_SUCCESS, false for a failure zoe documents (with zoe_last_error() naming what is
/// wrong). Throws invariant_failure naming `call` for ZOE_ERROR_INTERNAL (a bug: an invariant or a
/// foreign exception inside zoe), a status outside the enum, or a failure with no message. With
/// ZOE_FUZZ_TRACE set in the environment, writes the call and its result to stderr.
bool succeeded(zoe_status status, const char* call);

/// succeeded(), and invariant_failure naming `call` unless it succeeded: for calls that cannot fail
/// on the arguments the entry gives them.
void must_succeed(zoe_status status, const char* call);

}  // namespace zoe::fuzz
