#!/usr/bin/env bash
# libzoe_c.so must export the C API and nothing else: a C++ symbol that leaks (a zoe:: function, a
# std:: template instantiation, a weak inline) becomes ABI that every later build must keep, and can
# collide with the caller's own libstdc++ or TBB. The version script and -fvisibility=hidden are
# what keep them in; this reads what the linked file really exports.
# Usage: c_api_exports_test.sh LIBRARY [--header ZOE_H] [--soname NAME]
#   every symbol of LIBRARY's dynamic table defined in it must start with zoe_ (the version nodes the
#   version script defines, absolute symbols named like ZOE_0.1, are not functions and are skipped);
#   with --header, every function ZOE_H declares with ZOE_API must be exported and nothing else;
#   with --soname, the library's DT_SONAME must be NAME.
# Exit 0: all hold; 1: a check failed (each failure named on stderr); 2: bad usage or tools missing.
set -uo pipefail

usage() {
  echo "usage: $0 LIBRARY [--header ZOE_H] [--soname NAME]" >&2
  exit 2
}
[ $# -ge 1 ] || usage
library=$1
shift
header=""
soname=""
while [ $# -gt 0 ]; do
  case $1 in
    --header) [ $# -ge 2 ] || usage; header=$2; shift 2 ;;
    --soname) [ $# -ge 2 ] || usage; soname=$2; shift 2 ;;
    *) echo "$0: unknown argument '$1'" >&2; usage ;;
  esac
done
for tool in nm readelf c++filt; do
  command -v "$tool" >/dev/null || { echo "$0: $tool not found (Debian package binutils)" >&2; exit 2; }
done
[ -f "$library" ] || { echo "$0: no library at '$library'" >&2; exit 2; }
[ -z "$header" ] || [ -f "$header" ] || { echo "$0: no header at '$header'" >&2; exit 2; }

failures=0
fail() {
  echo "FAIL: $*" >&2
  failures=$((failures + 1))
}

# The version nodes the library defines (readelf -V: "Name: ZOE_0.1"), but the BASE entry, which is
# the SONAME itself.
mapfile -t version_nodes < <(readelf -V --wide "$library" |
  sed -n '/Version definition section/,/^$/{/Flags: BASE/d;s/.*Name: \([^ ]*\).*/\1/p}')
is_version_node() {
  local node
  for node in "${version_nodes[@]}"; do [ "$node" = "$1" ] && return 0; done
  return 1
}

# nm -D --defined-only: "VALUE TYPE NAME[@@VERSION]" per symbol this library defines.
if ! nm_out=$(nm -D --defined-only "$library" 2>&1); then
  echo "$0: nm -D failed on $library: $nm_out" >&2
  exit 2
fi
exported=()
while read -r _ type name; do
  [ -n "${name:-}" ] || continue
  name=${name%%@*}
  if [ "$type" = A ] && is_version_node "$name"; then
    continue
  fi
  if [[ $name != zoe_* ]]; then
    fail "$library exports $name ($(c++filt -- "$name"), nm type $type): only zoe_* may be exported"
    continue
  fi
  exported+=("$name")
done <<<"$nm_out"
[ ${#exported[@]} -gt 0 ] || fail "$library exports no zoe_* symbol at all"

if [ -n "$header" ]; then
  # Every `ZOE_API <type> zoe_name(`; a declaration may wrap, so the header is read whole.
  mapfile -t declared < <(tr '\n' ' ' <"$header" | grep -oE 'ZOE_API[^;(]*[^A-Za-z0-9_]zoe_[A-Za-z0-9_]+ *\(' |
    grep -oE 'zoe_[A-Za-z0-9_]+ *\($' | tr -d ' (' | sort -u)
  [ ${#declared[@]} -gt 0 ] || fail "$header declares no ZOE_API function (has the header's ZOE_API changed?)"
  mapfile -t exported_sorted < <(printf '%s\n' "${exported[@]}" | sort -u)
  while read -r name; do
    fail "$header declares $name but $library does not export it"
  done < <(comm -23 <(printf '%s\n' "${declared[@]}") <(printf '%s\n' "${exported_sorted[@]}"))
  while read -r name; do
    fail "$library exports $name, which $header does not declare"
  done < <(comm -13 <(printf '%s\n' "${declared[@]}") <(printf '%s\n' "${exported_sorted[@]}"))
fi

if [ -n "$soname" ]; then
  actual=$(readelf -d "$library" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
  [ "$actual" = "$soname" ] || fail "$library has SONAME '${actual:-none}', expected '$soname'"
fi

if [ "$failures" -gt 0 ]; then
  echo "$failures failure(s) in the exports of $library" >&2
  exit 1
fi
echo "ok: $library exports ${#exported[@]} zoe_* symbols${header:+, exactly the functions $header declares}${soname:+, SONAME $soname}"
