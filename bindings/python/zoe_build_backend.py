"""The PEP 517 build backend of the zoe Python package (pyproject.toml names it).

It writes the wheel itself (zipfile, METADATA, RECORD), so pip needs nothing from PyPI to build
it, and chooses the libzoe_c the wheel ships (in zoe/_lib/), the first of:
  1. $ZOE_LIBRARY: a built libzoe_c.so, copied in;
  2. $ZOE_BUILD_DIR: a CMake build tree of zoe whose bindings/libzoe_c.so is built (CI points it
     at build/ci, so the package costs no second build);
  3. an installed zoe of the same version (pkg-config zoe-c, or the dynamic linker's zoe_c): the
     wheel ships no library and zoe loads the installed one at run time;
  4. else libzoe_c built from the zoe source tree the package sits in (bindings/python is ../.. of
     it) with CMake, in <tree>/build/python (kept: a second install rebuilds nothing), its output
     shown as it goes (pip shows it with -v; and whenever the build fails).
The run-time choice (ZOE_LIBRARY > the shipped copy > an installed one) is src/zoe/_library.py's.
"""

import base64
import csv
import ctypes.util
import hashlib
import io
import os
import pathlib
import re
import shutil
import subprocess
import sys
import sysconfig
import zipfile

_HERE = pathlib.Path(__file__).resolve().parent
_SOURCE_TREE = _HERE.parent.parent
_PACKAGE = _HERE / "src" / "zoe"


class BuildError(RuntimeError):
    """The package cannot be built; the message says what is missing and what to do."""


def _say(message):
    print(f"zoe: {message}", file=sys.stderr, flush=True)


# ---- metadata -------------------------------------------------------------------------------------


def _toml():
    try:
        import tomllib
    except ModuleNotFoundError:  # Python < 3.11: get_requires_for_build_* asked pip for tomli
        import tomli as tomllib
    return tomllib


def _project():
    with open(_HERE / "pyproject.toml", "rb") as f:
        return _toml().load(f)["project"]


def _version():
    cmake = _SOURCE_TREE / "CMakeLists.txt"
    if cmake.is_file():
        match = re.search(r"project\(\s*zoe\s+VERSION\s+([0-9][0-9.]*)", cmake.read_text(encoding="utf-8"))
        if match:
            return match.group(1)
    raise BuildError(
        f"cannot read zoe's version: {cmake} has no project(zoe VERSION ...); the package is built from "
        "bindings/python inside a zoe source tree"
    )


def _metadata(version):
    project = _project()
    lines = [
        "Metadata-Version: 2.1",
        f"Name: {project['name']}",
        f"Version: {version}",
        f"Summary: {project['description']}",
        f"Requires-Python: {project['requires-python']}",
    ]
    lines += [f"Requires-Dist: {d}" for d in project.get("dependencies", [])]
    for extra, requirements in project.get("optional-dependencies", {}).items():
        lines.append(f"Provides-Extra: {extra}")
        lines += [f'Requires-Dist: {r}; extra == "{extra}"' for r in requirements]
    lines.append("Description-Content-Type: text/markdown")
    return "\n".join(lines) + "\n\n" + (_HERE / project["readme"]).read_text(encoding="utf-8")


# ---- the library ----------------------------------------------------------------------------------


def _built_in(build_dir):
    library = pathlib.Path(build_dir) / "bindings" / "libzoe_c.so"
    if not library.exists():
        raise BuildError(
            f"ZOE_BUILD_DIR is {build_dir}, which holds no bindings/libzoe_c.so: build it first "
            f"(cmake --build {build_dir} --target zoe_c), or unset ZOE_BUILD_DIR to build from source"
        )
    return library


def _installed(version):
    """Where an installed libzoe_c of `version` is, or None (also when its version differs: a
    package newer than the library would call functions it lacks)."""
    if shutil.which("pkg-config"):
        found = subprocess.run(["pkg-config", "--modversion", "zoe-c"], capture_output=True, text=True, check=False)
        if found.returncode == 0:
            installed = found.stdout.strip()
            if installed == version:
                return "pkg-config zoe-c"
            _say(f"the installed zoe-c is {installed}, not {version}: building libzoe_c {version} instead")
            return None
    name = ctypes.util.find_library("zoe_c")
    if name is not None:
        # The soname carries major.minor while the version is 0.x (libzoe_c.so.0.1).
        if name.startswith("libzoe_c.so." + ".".join(version.split(".")[:2])):
            return f"the dynamic linker ({name})"
        _say(f"the dynamic linker finds {name}, not of version {version}: building libzoe_c {version} instead")
    return None


def _run(command, what):
    _say("$ " + " ".join(command))
    result = subprocess.run(command, check=False)
    if result.returncode != 0:
        raise BuildError(
            f"{what} failed (exit {result.returncode}); CMake's messages above name what is missing. "
            f"scripts/setup in {_SOURCE_TREE} installs every package zoe builds with; or set ZOE_LIBRARY "
            "(a built libzoe_c.so) or ZOE_BUILD_DIR (a zoe build tree) to use a library built already"
        )


def _build_from_source():
    if not (_SOURCE_TREE / "CMakeLists.txt").is_file() or not (_SOURCE_TREE / "bindings/include/zoe/zoe.h").is_file():
        raise BuildError(
            f"no libzoe_c to ship: ZOE_LIBRARY and ZOE_BUILD_DIR are not set, no installed zoe-c was found, and "
            f"{_SOURCE_TREE} is not a zoe source tree to build one in (bindings/python must be built where it "
            "sits in zoe's sources)"
        )
    missing = [] if shutil.which("cmake") else ["cmake"]
    compilers = [os.environ.get("CXX"), "c++", "g++", "clang++"]
    if not any(c and shutil.which(c) for c in compilers):
        missing.append("a C++ compiler (c++, g++ or clang++; or $CXX)")
    if missing:
        raise BuildError(
            "building libzoe_c from source needs " + " and ".join(missing) + ", not found on PATH. "
            f"Run {_SOURCE_TREE}/scripts/setup (it installs cmake, ninja-build, a compiler and the libraries zoe "
            "needs), or set ZOE_LIBRARY (a built libzoe_c.so) or ZOE_BUILD_DIR (a zoe build tree)"
        )
    build_dir = _SOURCE_TREE / "build" / "python"
    jobs = os.environ.get("ZOE_JOBS") or str(os.cpu_count() or 1)
    _say(f"building libzoe_c from source in {build_dir} with {jobs} jobs (several minutes the first time)")
    configure = ["cmake", "-S", str(_SOURCE_TREE), "-B", str(build_dir), "-DCMAKE_BUILD_TYPE=Release"]
    configure += ["-DZOE_BUILD_TESTS=OFF", "-DZOE_BUILD_BENCH=OFF"]
    if shutil.which("ninja") and not (build_dir / "CMakeCache.txt").exists():
        configure += ["-G", "Ninja"]
    _run(configure, "configuring libzoe_c (cmake)")
    _run(["cmake", "--build", str(build_dir), "--target", "zoe_c", "-j", jobs], "building libzoe_c (cmake --build)")
    return _built_in(build_dir)


def _library_to_ship(version):
    """The libzoe_c file to put in the wheel, or None when an installed one is used."""
    if os.environ.get("ZOE_LIBRARY"):
        library = pathlib.Path(os.environ["ZOE_LIBRARY"])
        if not library.is_file():
            raise BuildError(f"ZOE_LIBRARY is {library}, which is not a file (a built libzoe_c.so)")
        _say(f"shipping $ZOE_LIBRARY ({library})")
        return library
    if os.environ.get("ZOE_BUILD_DIR"):
        library = _built_in(os.environ["ZOE_BUILD_DIR"])
        _say(f"shipping {library} ($ZOE_BUILD_DIR)")
        return library
    installed = _installed(version)
    if installed is not None:
        _say(f"using the installed libzoe_c {version} ({installed}); the wheel ships none")
        return None
    return _build_from_source()


# ---- the wheel ------------------------------------------------------------------------------------


class _Wheel:
    def __init__(self, path):
        self._zip = zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED)
        self._records = []

    def add(self, name, data, executable=False):
        info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
        info.compress_type = zipfile.ZIP_DEFLATED
        info.external_attr = (0o755 if executable else 0o644) << 16
        self._zip.writestr(info, data)
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode("ascii")
        self._records.append((name, f"sha256={digest}", str(len(data))))

    def close(self, record_name):
        out = io.StringIO()
        writer = csv.writer(out, lineterminator="\n")
        writer.writerows(self._records)
        writer.writerow((record_name, "", ""))
        self._zip.writestr(zipfile.ZipInfo(record_name, date_time=(1980, 1, 1, 0, 0, 0)), out.getvalue())
        self._zip.close()


def _tag():
    # ctypes, no extension module: any Python 3, this platform (libzoe_c is native code).
    return "py3-none-" + sysconfig.get_platform().replace("-", "_").replace(".", "_")


def _wheel_file(tag):
    return f"Wheel-Version: 1.0\nGenerator: zoe_build_backend\nRoot-Is-Purelib: false\nTag: {tag}\n"


def _write_wheel(wheel_directory, version, files):
    """files: (name in the wheel, bytes, executable); returns the wheel's file name."""
    tag = _tag()
    name = f"zoe-{version}-{tag}.whl"
    dist_info = f"zoe-{version}.dist-info"
    wheel = _Wheel(pathlib.Path(wheel_directory) / name)
    for path, data, executable in files:
        wheel.add(path, data, executable)
    wheel.add(f"{dist_info}/METADATA", _metadata(version).encode("utf-8"))
    wheel.add(f"{dist_info}/WHEEL", _wheel_file(tag).encode("ascii"))
    wheel.add(f"{dist_info}/top_level.txt", b"zoe\n")
    wheel.close(f"{dist_info}/RECORD")
    return name


def _sources():
    for path in sorted(_PACKAGE.rglob("*.py")):
        relative = path.relative_to(_PACKAGE.parent)
        if "__pycache__" not in relative.parts and "_lib" not in relative.parts:
            yield relative.as_posix(), path.read_bytes()


# ---- PEP 517 / PEP 660 ----------------------------------------------------------------------------


def _requires(config_settings=None):
    return [] if sys.version_info >= (3, 11) else ["tomli"]


get_requires_for_build_wheel = _requires
get_requires_for_build_editable = _requires
get_requires_for_build_sdist = _requires


def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
    # Without it pip would run build_wheel for the metadata too: a second library build.
    version = _version()
    dist_info = pathlib.Path(metadata_directory) / f"zoe-{version}.dist-info"
    dist_info.mkdir(parents=True, exist_ok=True)
    (dist_info / "METADATA").write_text(_metadata(version), encoding="utf-8")
    (dist_info / "WHEEL").write_text(_wheel_file(_tag()), encoding="ascii")
    return dist_info.name


prepare_metadata_for_build_editable = prepare_metadata_for_build_wheel


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    version = _version()
    files = [(name, data, False) for name, data in _sources()]
    library = _library_to_ship(version)
    if library is not None:
        files.append(("zoe/_lib/libzoe_c.so", pathlib.Path(library).resolve().read_bytes(), True))
    return _write_wheel(wheel_directory, version, files)


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    """pip install -e: a .pth pointing at src/, and the library (if one is shipped) in src/zoe/_lib/
    where _library.py looks for the package's copy."""
    version = _version()
    library = _library_to_ship(version)
    lib_dir = _PACKAGE / "_lib"
    shutil.rmtree(lib_dir, ignore_errors=True)
    if library is not None:
        lib_dir.mkdir()
        shutil.copyfile(pathlib.Path(library).resolve(), lib_dir / "libzoe_c.so")
    pth = (str(_PACKAGE.parent) + "\n").encode("utf-8")
    return _write_wheel(wheel_directory, version, [("zoe_editable.pth", pth, False)])


def build_sdist(sdist_directory, config_settings=None):
    raise BuildError(
        "zoe's Python package has no sdist: it is built from bindings/python inside zoe's source tree "
        "(pip install ./bindings/python), whose CMake build makes libzoe_c"
    )
