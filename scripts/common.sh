# Sourced by the other scripts: repository root, CUDA on PATH, parallelism, compiler cache.
set -euo pipefail
ZOE_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
export ZOE_ROOT

# The CUDA toolkit installs outside PATH (NVIDIA's packages put it in /usr/local/cuda); CMake finds
# nvcc through PATH, so put the toolkit's bin there when PATH lacks nvcc. CUDA_HOME (or CUDA_PATH)
# names another toolkit folder.
zoe_cuda_home=${CUDA_HOME:-${CUDA_PATH:-/usr/local/cuda}}
if ! command -v nvcc >/dev/null 2>&1 && [ -x "$zoe_cuda_home/bin/nvcc" ]; then
  export PATH="$zoe_cuda_home/bin:$PATH"
fi
ZOE_JOBS=${ZOE_JOBS:-$(nproc)}
export ZOE_JOBS

# CI (GitHub, GitLab and most others set CI=true) must build the CUDA targets, never skip them.
zoe_in_ci() { [ -n "${CI:-}" ] && [ "${CI}" != "false" ] && [ "${CI}" != "0" ]; }

# A compiler cache makes repeated builds fast; CMake takes its launcher from these variables.
if command -v ccache >/dev/null 2>&1; then
  : "${CMAKE_C_COMPILER_LAUNCHER:=ccache}" "${CMAKE_CXX_COMPILER_LAUNCHER:=ccache}" "${CMAKE_CUDA_COMPILER_LAUNCHER:=ccache}"
  export CMAKE_C_COMPILER_LAUNCHER CMAKE_CXX_COMPILER_LAUNCHER CMAKE_CUDA_COMPILER_LAUNCHER
fi

# The Python venv scripts/setup makes and the package's tests run in.
zoe_venv() { echo "${ZOE_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/zoe/venv}"; }

step() { printf '\n==> %s  [%s UTC]\n' "$*" "$(date -u +%H:%M:%S)" >&2; }

# Every tracked C, C++ and CUDA source and header (the .inl files are C++ included textually).
zoe_cxx_files() {
  git -C "$ZOE_ROOT" ls-files -- '*.c' '*.h' '*.cpp' '*.hpp' '*.inl' '*.cu' '*.cuh'
}
