#!/usr/bin/env bash
# CI must not build without CUDA: with nvcc out of reach and CI set, scripts/setup and the configure
# step with ZOE_REQUIRE_CUDA=ON fail and say why; outside CI, setup says the CUDA targets are skipped.
# Usage: cuda_guard_test.sh SOURCE_DIR
set -uo pipefail
root=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# nvcc in /usr/bin or /bin (Debian's own toolkit) cannot be hidden by dropping PATH folders without
# hiding bash and cmake too: skip (ctest reads exit 77 as a skip).
for d in /usr/bin /bin; do
  if [ -x "$d/nvcc" ]; then
    echo "SKIP: nvcc is in $d, which this test cannot take off PATH" >&2
    exit 77
  fi
done
# PATH without any folder that holds nvcc, and no other way to name a toolkit.
no_nvcc_path=$(tr ':' '\n' <<<"$PATH" | while read -r d; do [ -n "$d" ] && [ ! -x "$d/nvcc" ] && echo "$d"; done | paste -sd:)
hide() { env -u CUDACXX -u CUDA_PATH CUDA_HOME="$work/no-toolkit" PATH="$no_nvcc_path" "$@"; }
failures=0
expect() {  # expect WANT_STATUS(0|nonzero) NEEDLE DESCRIPTION -- command...
  local want=$1 needle=$2 what=$3 status
  shift 4
  "$@" >"$work/out" 2>&1
  status=$?
  if { [ "$want" = 0 ] && [ "$status" -ne 0 ]; } || { [ "$want" = nonzero ] && [ "$status" -eq 0 ]; } ||
     ! grep -qF -- "$needle" "$work/out"; then
    echo "FAIL: $what: exit $status, wanted $want and output containing '$needle'; output:" >&2
    cat "$work/out" >&2
    failures=$((failures + 1))
  else
    echo "ok: $what"
  fi
}

expect nonzero "CI is set (CI=true) but no CUDA compiler was found" "setup under CI without nvcc" -- \
  hide CI=true bash "$root/scripts/setup"
expect 0 "the CUDA targets will be skipped" "setup outside CI without nvcc" -- \
  hide CI= bash "$root/scripts/setup"
expect nonzero "ZOE_REQUIRE_CUDA=ON but no CUDA compiler was found" "configure with ZOE_REQUIRE_CUDA=ON without nvcc" -- \
  hide cmake -S "$root" -B "$work/build" -G Ninja -DZOE_REQUIRE_CUDA=ON -DZOE_BUILD_TESTS=OFF -DZOE_BUILD_BENCH=OFF
exit $((failures > 0))
