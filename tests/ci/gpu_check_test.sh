#!/usr/bin/env bash
# scripts/gpu-check refuses clearly, before building anything, on a machine with no usable GPU:
# without nvidia-smi on PATH (no driver), and with an nvidia-smi that fails (a driver that cannot
# reach its GPU). Exit 2 and a message naming the cause, in both cases. Also: --help, a bad flag.
# Usage: gpu_check_test.sh REPO_ROOT
set -u
root=$1
check=$root/scripts/gpu-check
fail() { echo "FAIL: $*" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# expect RC PATTERN -- command...: runs it, checks its exit status and that stderr matches PATTERN.
expect() {
  local want_rc=$1 pattern=$2 rc=0
  shift 3
  "$@" >"$work/out" 2>"$work/err" || rc=$?
  [ "$rc" = "$want_rc" ] || fail "'$*' exited $rc, expected $want_rc; stderr: $(cat "$work/err")"
  grep -qE "$pattern" "$work/err" "$work/out" || fail "'$*' did not say /$pattern/; it said: $(cat "$work/err" "$work/out")"
  ! grep -q '==> setup\|==> configure\|==> build' "$work/err" || fail "'$*' started to build before refusing"
}

# No driver: a PATH that holds everything the script needs but nvidia-smi.
mkdir -p "$work/bin"
for tool in bash dirname cat sed grep date mktemp realpath awk tr cut head wc nproc; do
  ln -s "$(command -v "$tool")" "$work/bin/$tool"
done
expect 2 'no GPU here: nvidia-smi is not on PATH' -- env PATH="$work/bin" bash "$check"

# A driver that answers with an error.
cat >"$work/bin/nvidia-smi" <<'SMI'
#!/bin/sh
echo "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver." >&2
exit 9
SMI
chmod +x "$work/bin/nvidia-smi"
expect 2 "no usable GPU here: nvidia-smi says: NVIDIA-SMI has failed because it couldn't communicate" -- \
  env PATH="$work/bin" bash "$check"

expect 0 'one-command GPU check' -- bash "$check" --help
expect 2 "unknown flag '--frobnicate'" -- bash "$check" --frobnicate
echo "gpu-check refuses without a GPU: ok"
