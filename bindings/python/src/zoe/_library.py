"""Finds libzoe_c, the C library the package calls through ctypes.

At run time the first of these that exists is loaded:
  1. $ZOE_LIBRARY: the path of a libzoe_c.so (a build tree's, e.g. build/dev/bindings/libzoe_c.so);
  2. the library shipped inside the package (zoe/_lib/, put there when the wheel was built);
  3. an installed zoe: pkg-config's zoe-c libdir, then the dynamic linker's search (ldconfig's
     cache, LD_LIBRARY_PATH) for zoe_c.
How the wheel's copy is chosen at build time is bindings/python/zoe_build_backend.py's business.
"""

import ctypes
import ctypes.util
import os
import pathlib
import subprocess

__all__ = ["load", "LibraryNotFoundError"]

_PACKAGE_LIB_DIR = pathlib.Path(__file__).resolve().parent / "_lib"


class LibraryNotFoundError(OSError):
    """No libzoe_c could be loaded; the message lists every place tried."""


def _shipped():
    if not _PACKAGE_LIB_DIR.is_dir():
        return None
    # The real file (libzoe_c.so.0.1.0) or its link; whichever is there, the shortest name first.
    return min(_PACKAGE_LIB_DIR.glob("libzoe_c.so*"), key=lambda p: len(p.name), default=None)


def _pkg_config():
    try:
        result = subprocess.run(
            ["pkg-config", "--variable=libdir", "zoe-c"], capture_output=True, text=True, check=False, timeout=10
        )
    except (OSError, subprocess.SubprocessError):
        return None
    libdir = result.stdout.strip()
    if result.returncode != 0 or not libdir:
        return None
    path = pathlib.Path(libdir) / "libzoe_c.so"
    return path if path.exists() else None


def candidates():
    """(how it was found, path or name) in the order load() tries them."""
    found = []
    env = os.environ.get("ZOE_LIBRARY")
    if env:
        found.append(("$ZOE_LIBRARY", env))
        # An explicit choice is not second-guessed: a wrong path is an error, not a fall-through.
        return found
    shipped = _shipped()
    if shipped is not None:
        found.append(("the package's own copy", str(shipped)))
    configured = _pkg_config()
    if configured is not None:
        found.append(("pkg-config zoe-c", str(configured)))
    linked = ctypes.util.find_library("zoe_c")
    if linked is not None:
        found.append(("the dynamic linker", linked))
    return found


def load():
    """The loaded libzoe_c (a ctypes.CDLL) and where it came from; LibraryNotFoundError naming
    every place tried when none loads."""
    tried = []
    for how, path in candidates():
        try:
            return ctypes.CDLL(path), path
        except OSError as e:
            tried.append(f"{how} ({path}): {e}")
    if not tried:
        tried.append(
            "$ZOE_LIBRARY is not set, the package ships no library (zoe/_lib/ is empty), "
            "pkg-config knows no zoe-c and the dynamic linker finds no libzoe_c"
        )
    raise LibraryNotFoundError(
        "zoe: cannot load libzoe_c: "
        + "; ".join(tried)
        + ". Set ZOE_LIBRARY to a built libzoe_c.so (cmake --build <build> --target zoe_c), "
        "or install the package with pip so that it ships one."
    )
