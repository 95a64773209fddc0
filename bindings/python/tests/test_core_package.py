"""pip install ./bindings/python into a fresh venv, offline, and the build backend's errors.

The install ships an existing libzoe_c ($ZOE_BUILD_DIR when set, as scripts/test sets it to
build/ci, else the library this session loaded): building libzoe_c from source takes minutes, so
CI tests that path's error message when cmake is missing instead. An installed zoe-c is found
through a stand-in pkg-config: used (and not shipped) at its version, passed over at another."""

import os
import pathlib
import shutil
import subprocess
import sys
import textwrap
import zipfile

import numpy

import zoe

PACKAGE = pathlib.Path(__file__).resolve().parents[1]


def clean_env(**extra):
    env = {k: v for k, v in os.environ.items() if k not in ("ZOE_LIBRARY", "ZOE_BUILD_DIR", "PYTHONPATH")}
    env.update(extra)
    return env


def test_pip_install_into_a_fresh_venv_gives_a_working_package(tmp_path):
    venv = tmp_path / "venv"
    # Without its own pip (ensurepip takes seconds): this session's pip installs into it (--python).
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()
    # numpy from this session's environment, after the venv's own site-packages (offline: no PyPI).
    pathlib.Path(site, "session_numpy.pth").write_text(str(pathlib.Path(numpy.__file__).parents[1]) + "\n")
    if os.environ.get("ZOE_BUILD_DIR"):
        library = {"ZOE_BUILD_DIR": os.environ["ZOE_BUILD_DIR"]}
    else:
        library = {"ZOE_LIBRARY": zoe.library_path()}
    install = subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "--no-index", "--no-deps", "-v", str(PACKAGE)],
        capture_output=True, text=True, env=clean_env(**library), check=False,
    )
    assert install.returncode == 0, install.stdout + install.stderr
    assert "zoe: shipping" in install.stdout + install.stderr
    probe = textwrap.dedent(
        """
        import importlib.metadata, zoe
        meta = importlib.metadata.metadata("zoe")
        print(zoe.version()); print(zoe.__file__); print(zoe.library_path()); print(meta["Version"])
        print(sorted(meta.get_all("Requires-Dist")))
        """
    )
    # Run from tmp_path so that neither the source tree nor PYTHONPATH supplies zoe.
    result = subprocess.run(
        [str(python), "-c", probe], capture_output=True, text=True, env=clean_env(), cwd=tmp_path, check=False
    )
    assert result.returncode == 0, result.stderr
    version, module, library_path, meta_version, requires = result.stdout.splitlines()
    assert version == zoe.version() == meta_version
    assert module.startswith(site)
    assert library_path == os.path.join(site, "zoe", "_lib", "libzoe_c.so")
    assert requires == str(sorted(["numpy", 'torch; extra == "torch"']))


def run_backend(tmp_path, env):
    code = f"import zoe_build_backend as b; print(b.build_wheel({str(tmp_path)!r}))"
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=PACKAGE, check=False)


def test_building_from_source_without_cmake_says_what_is_missing(tmp_path):
    empty_bin = tmp_path / "bin"
    empty_bin.mkdir()
    result = run_backend(tmp_path, clean_env(PATH=str(empty_bin)))
    assert result.returncode != 0
    assert "building libzoe_c from source needs cmake" in result.stderr
    assert "scripts/setup" in result.stderr and "ZOE_BUILD_DIR" in result.stderr
    assert not list(tmp_path.glob("*.whl"))


def test_a_build_dir_without_the_library_is_named(tmp_path):
    result = run_backend(tmp_path, clean_env(ZOE_BUILD_DIR=str(tmp_path)))
    assert result.returncode != 0
    assert f"ZOE_BUILD_DIR is {tmp_path}, which holds no bindings/libzoe_c.so" in result.stderr
    result = run_backend(tmp_path, clean_env(ZOE_LIBRARY=str(tmp_path / "nothing.so")))
    assert f"ZOE_LIBRARY is {tmp_path / 'nothing.so'}, which is not a file" in result.stderr


def fake_pkg_config(folder, version, libdir):
    """A pkg-config on PATH that knows zoe-c at `version` with `libdir`, and nothing else."""
    folder.mkdir()
    script = folder / "pkg-config"
    script.write_text(textwrap.dedent(f"""\
        #!/bin/sh
        case "$*" in
          "--modversion zoe-c") echo {version} ;;
          "--variable=libdir zoe-c") echo {libdir} ;;
          *) exit 1 ;;
        esac
        """))
    script.chmod(0o755)
    return str(folder)


def test_an_installed_zoe_c_of_the_package_version_is_used_not_shipped(tmp_path):
    # Build time: the wheel ships no library. PATH holds the stand-in alone, so no cmake could build one.
    installed = pathlib.Path(zoe.library_path()).parent
    path = fake_pkg_config(tmp_path / "bin", zoe.version(), installed)
    result = run_backend(tmp_path, clean_env(PATH=path))
    assert result.returncode == 0, result.stderr
    assert f"using the installed libzoe_c {zoe.version()} (pkg-config zoe-c); the wheel ships none" in result.stderr
    wheel, = tmp_path.glob("*.whl")
    assert not [n for n in zipfile.ZipFile(wheel).namelist() if "libzoe_c" in n]
    # Run time: a package without its own copy (the sources, less a zoe/_lib/ that pip install -e
    # may have left) and no $ZOE_LIBRARY loads pkg-config's.
    src = tmp_path / "src"
    shutil.copytree(PACKAGE / "src" / "zoe", src / "zoe", ignore=shutil.ignore_patterns("_lib", "__pycache__"))
    probe = "import zoe; print(zoe.library_path()); print(zoe.version())"
    run = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=False, cwd=tmp_path,
                         env=clean_env(PATH=path + os.pathsep + os.environ["PATH"], PYTHONPATH=str(src)))
    assert run.returncode == 0, run.stderr
    assert run.stdout.split() == [str(installed / "libzoe_c.so"), zoe.version()]


def test_an_installed_zoe_c_of_another_version_is_not_used(tmp_path):
    path = fake_pkg_config(tmp_path / "bin", "0.0.1", tmp_path)
    result = run_backend(tmp_path, clean_env(PATH=path))
    version = zoe.version()
    assert f"the installed zoe-c is 0.0.1, not {version}: building libzoe_c {version} instead" in result.stderr
    assert result.returncode != 0 and "building libzoe_c from source needs cmake" in result.stderr
