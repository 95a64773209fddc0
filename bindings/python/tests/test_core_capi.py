"""zoe/_capi.py against zoe.h: a prototype for every function, and every struct laid out as the C
compiler lays it out (field names, offsets and sizes)."""

import ctypes
import pathlib
import re
import shutil
import subprocess

import pytest

from zoe import _capi, _host_comm

INCLUDE = pathlib.Path(__file__).resolve().parents[2] / "include"
HEADER = INCLUDE / "zoe" / "zoe.h"

# zoe.h's structs and their ctypes classes.
STRUCTS = {
    "zoe_device_options": _capi.DeviceOptions,
    "zoe_parameter_desc": _capi.ParameterDesc,
    "zoe_engine_desc": _capi.EngineDesc,
    "zoe_footprint": _capi.Footprint,
    "zoe_batch_sizes": _capi.BatchSizes,
    "zoe_ranks": _capi.Ranks,
    "zoe_comm_traffic": _capi.CommTraffic,
    "zoe_step_result": _capi.StepResult,
    "zoe_group_hyper": _capi.GroupHyper,
    "zoe_stage_times": _capi.StageTimes,
    "zoe_host_comm": _host_comm.HostCommStruct,
}


def header_without_comments():
    text = HEADER.read_text()
    return re.sub(r"//[^\n]*", "", re.sub(r"/\*.*?\*/", "", text, flags=re.S))


def header_structs():
    """{struct name: [field names in order]}."""
    structs = {}
    for name, body in re.findall(r"typedef struct (zoe_\w+) \{(.*?)\} \1;", header_without_comments(), flags=re.S):
        fields = []
        for declaration in body.split(";"):
            declaration = " ".join(declaration.split())
            if not declaration:
                continue
            pointer = re.search(r"\(\s*\*\s*(\w+)\s*\)", declaration)
            fields.append(pointer.group(1) if pointer else re.findall(r"\w+", declaration)[-1])
        structs[name] = fields
    return structs


def test_every_function_of_the_header_has_a_prototype():
    declared = set(re.findall(r"ZOE_API[^;(]*?\b(zoe_\w+)\s*\(", header_without_comments()))
    assert len(declared) > 40
    assert declared == set(_capi.PROTOTYPES)


def test_every_struct_has_the_header_fields_in_order():
    structs = header_structs()
    assert set(structs) == set(STRUCTS)
    for name, cls in STRUCTS.items():
        assert [field for field, _ in cls._fields_] == structs[name], name


@pytest.mark.skipif(shutil.which("cc") is None, reason="needs a C compiler (scripts/setup installs one)")
def test_every_struct_has_the_c_compilers_offsets_and_size(tmp_path):
    structs = header_structs()
    lines = ["#include <stddef.h>", "#include <stdio.h>", "#include <zoe/zoe.h>", "int main(void) {"]
    for name in STRUCTS:
        lines.append(f'  printf("{name} size %zu\\n", sizeof({name}));')
        for field in structs[name]:
            lines.append(f'  printf("{name} {field} %zu\\n", offsetof({name}, {field}));')
    lines += ["  return 0;", "}"]
    source = tmp_path / "layout.c"
    source.write_text("\n".join(lines) + "\n")
    program = tmp_path / "layout"
    subprocess.run(["cc", "-std=c99", "-I", str(INCLUDE), str(source), "-o", str(program)], check=True)
    measured = {}
    for line in subprocess.run([str(program)], capture_output=True, text=True, check=True).stdout.splitlines():
        name, field, value = line.split()
        measured[(name, field)] = int(value)
    for name, cls in STRUCTS.items():
        assert ctypes.sizeof(cls) == measured[(name, "size")], name
        for field, _ in cls._fields_:
            assert getattr(cls, field).offset == measured[(name, field)], f"{name}.{field}"

