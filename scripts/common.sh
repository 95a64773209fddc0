# Sourced by the other scripts: repository root, CUDA on PATH, parallelism.
set -euo pipefail
ZOE_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
export ZOE_ROOT
# The CUDA toolkit installs outside PATH on some images; CMake finds nvcc through PATH.
if ! command -v nvcc >/dev/null 2>&1 && [ -x /usr/local/cuda/bin/nvcc ]; then
  export PATH="/usr/local/cuda/bin:$PATH"
fi
ZOE_JOBS=${ZOE_JOBS:-$(nproc)}
export ZOE_JOBS

step() { printf '\n==> %s\n' "$*" >&2; }
