#!/usr/bin/env bash
# c_api_exports_test.sh is only worth running if it fails on a leak: run it on the two builds of
# exports_fixture/fixture.cpp, the clean one (hidden visibility, version script: must pass) and the
# leaky one (default visibility: must fail naming the C++ function), and on a header that declares a
# function the library lacks and a SONAME it does not have (both must fail, naming them).
# Usage: c_api_exports_self_test.sh CHECKER CLEAN_LIBRARY LEAKY_LIBRARY
set -uo pipefail
[ $# -eq 3 ] || { echo "usage: $0 CHECKER CLEAN_LIBRARY LEAKY_LIBRARY" >&2; exit 2; }
checker=$1 clean=$2 leaky=$3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
clean_soname=$(readelf -d "$clean" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')

failures=0
expect() {  # expect WANT_STATUS NEEDLE DESCRIPTION -- command...
  local want=$1 needle=$2 what=$3 status
  shift 4
  "$@" >"$work/out" 2>&1
  status=$?
  if [ "$status" -ne "$want" ] || ! grep -qF -- "$needle" "$work/out"; then
    echo "FAIL: $what: exit $status, wanted $want and output containing '$needle'; output:" >&2
    cat "$work/out" >&2
    failures=$((failures + 1))
  else
    echo "ok: $what"
  fi
}

cat >"$work/fixture.h" <<'HEADER'
#define ZOE_API __attribute__((visibility("default")))
ZOE_API int zoe_fixture_entry(int count);
HEADER
cp "$work/fixture.h" "$work/more.h"
printf 'ZOE_API int\n    zoe_fixture_missing(void);\n' >>"$work/more.h"

expect 0 "exports 1 zoe_* symbols" "the clean library passes" -- \
  bash "$checker" "$clean" --header "$work/fixture.h" --soname "$clean_soname"
expect 1 "zoe::ci::fixture_leaked_function(int)" "a leaked C++ function is named, demangled" -- \
  bash "$checker" "$leaky"
expect 1 "std::" "leaked std:: instantiations are named" -- bash "$checker" "$leaky"
expect 1 "declares zoe_fixture_missing but" "a declared function the library lacks is named" -- \
  bash "$checker" "$clean" --header "$work/more.h"
expect 1 "expected 'libzoe_wrong.so.9'" "a wrong SONAME is named" -- \
  bash "$checker" "$clean" --soname libzoe_wrong.so.9
expect 2 "no library at" "a missing library is a usage error" -- bash "$checker" "$work/absent.so"

[ "$failures" -eq 0 ] || { echo "$failures failure(s)" >&2; exit 1; }
