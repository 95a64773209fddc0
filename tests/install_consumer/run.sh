#!/usr/bin/env bash
# Builds and runs every consumer of an installed zoe, as its users would build them:
#   - main.cpp, the C++ libraries' consumer: through find_package(zoe) and through pkg-config (zoe);
#   - c_api/consumer.c, C99 on the C API: through find_package(zoe COMPONENTS c) and through
#     pkg-config (zoe-c), linked with -lzoe_c alone;
#   - c_api/consumer.cpp, C++ on the C API: through find_package(zoe COMPONENTS c);
#   - the installed zoe-train-mlp's --help, which must find libzoe_c.so through its install RPATH.
# Nothing runs with LD_LIBRARY_PATH: a program that finds libzoe_c.so only through it would fail
# for users. Usage: tests/install_consumer/run.sh PREFIX   (after cmake --install BUILD --prefix PREFIX)
set -euo pipefail
[ $# -eq 1 ] || { echo "usage: $0 PREFIX" >&2; exit 2; }
prefix=$(cd "$1" && pwd)
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
run() { echo "+ $*" >&2; env -u LD_LIBRARY_PATH "$@"; }

# GNUInstallDirs puts the libraries in lib/ or lib/<multiarch>/ depending on the prefix.
zoe_pc_file=$(find "$prefix" -path '*/pkgconfig/zoe.pc' -print -quit)
[ -n "$zoe_pc_file" ] || { echo "$0: no pkgconfig/zoe.pc under $prefix: is zoe installed there?" >&2; exit 1; }
zoe_pc() { PKG_CONFIG_PATH=$(dirname "$zoe_pc_file") pkg-config "$@"; }

echo "== the C++ libraries through find_package(zoe)" >&2
cmake -S "$here" -B "$work/cxx" -G Ninja -DCMAKE_PREFIX_PATH="$prefix" >/dev/null
cmake --build "$work/cxx"
run "$work/cxx/consumer"

echo "== the C++ libraries through pkg-config (zoe)" >&2
zoe_pc --exists --print-errors zoe
# zoe's C++ libraries are static: this link fails unless zoe.pc names every library they need.
# shellcheck disable=SC2046  # the flags are words
c++ -std=c++20 "$here/main.cpp" -o "$work/pkg-config-consumer" $(zoe_pc --cflags --libs zoe)
run "$work/pkg-config-consumer"

echo "== the C API through find_package(zoe COMPONENTS c), in C and in C++" >&2
cmake -S "$here/c_api" -B "$work/c_api" -G Ninja -DCMAKE_PREFIX_PATH="$prefix" >/dev/null
cmake --build "$work/c_api"
run "$work/c_api/c_consumer"
run "$work/c_api/cxx_consumer"

echo "== the C API through pkg-config (zoe-c), in C" >&2
zoe_pc --exists --print-errors zoe-c
libdir=$(zoe_pc --variable=libdir zoe-c)
# libzoe_c.so carries zoe's C++ libraries and names its own dependencies: -lzoe_c is all the C
# program links. A prefix off the loader's path needs an RPATH (or LD_LIBRARY_PATH): zoe-c.pc gives
# the folder.
# shellcheck disable=SC2046  # the flags are words
cc -std=c99 -Wall -Wextra -Wpedantic -Werror "$here/c_api/consumer.c" -o "$work/pkg-config-c-consumer" \
  $(zoe_pc --cflags --libs zoe-c) -Wl,-rpath,"$libdir"
run "$work/pkg-config-c-consumer"

echo "== the installed zoe-train-mlp finds libzoe_c.so through its RPATH" >&2
run "$prefix/bin/zoe-train-mlp" --help >/dev/null
echo "install consumers: all built and passed" >&2
