"""Bad JSON / JSON Lines / NPY / NPZ through ``lodtool pack``: a one-line message that says where, no output.

``tests/test_io_json.py`` and ``tests/test_io_npy.py`` check the library's
messages in detail; this is the list of issue 6, end to end at the command
line: each case exits non-zero with one line naming the file and the line and
column (or the array and index), and leaves no output file and no temp file,
whether packing afresh or appending to an existing container (which stays byte
for byte as it was).
"""

from __future__ import annotations

import io
import json
import os
import re
import resource
import subprocess
import sys
import zipfile

import numpy as np
import pytest
from click.testing import CliRunner

from lodtool.cli.main import cli

LONG = os.environ.get("LODTOOL_TEST_PROFILE", "").lower() == "long"
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MARKER = "lodtool-unpickled-me"


class Evil:
    """Unpickling this would create a marker file: the proof that a loader ran pickle."""

    def __init__(self, folder: str):
        self.path = os.path.join(folder, MARKER)

    def __reduce__(self):
        return (open, (self.path, "w"))


def npy(array: np.ndarray, pickle: bool = False) -> bytes:
    buf = io.BytesIO()
    np.save(buf, array, allow_pickle=pickle)
    return buf.getvalue()


def npz(pickle: bool = False, **arrays) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        for name, a in arrays.items():
            z.writestr(f"{name}.npy", a if isinstance(a, bytes) else npy(a, pickle))
    return buf.getvalue()


def evil_objects(folder: str) -> np.ndarray:
    a = np.empty(2, dtype=object)
    a[0], a[1] = Evil(folder), 1
    return a


DEEP = b"[" * 100_000 + b"1" + b"]" * 100_000

#: name -> (files {name: bytes or callable(folder) -> bytes}, extra pack arguments, the message, as a regex)
CASES = {
    "json truncated": ({"d.json": b"[[1, 2], [3"}, [], r"d\.json:1:12: unexpected end of input"),
    "jsonl truncated": ({"d.jsonl": b"[[1]]\n[[2, 3\n"}, [], r"d\.jsonl:2:7: unexpected end of line"),
    "json trailing garbage": ({"d.json": b"[[1]] x"}, [], r"d\.json:1:7: unexpected data after the document"),
    "jsonl trailing garbage": ({"d.jsonl": b"[[1]] [[2]]\n"}, [], r"d\.jsonl:1:7: unexpected data after"),
    "nan into an integer dtype": ({"d.json": b"[[1, NaN]]"}, ["--dtype", "int32"], r"d\.json:1: at branch <0,1>: "
                                                                                   r"value nan is not a whole number"),
    "infinity into an integer dtype": ({"d.jsonl": b"[[1]]\n[[-Infinity]]\n"}, ["--dtype", "int64"],
                                       r"d\.jsonl:2: at branch <1,0,0>: value -inf is not a whole number"),
    "lowercase nan": ({"d.json": b"[[nan]]"}, [], r"d\.json:1:3: expected a number"),
    "string among numbers": ({"d.json": b'[[1, "a"]]'}, [], r"d\.json:1:6: element 1 \(branch <0,1>\) is 'a'"),
    "bool among numbers": ({"d.json": b"[[1, true]]"}, [], r"d\.json:1:6: true among numbers"),
    "number among bools": ({"d.jsonl": b"[[true]]\n[[1]]\n"}, [], r"d\.jsonl:2:3: a number among booleans"),
    "null among numbers": ({"d.jsonl": b"[[1]]\n[[2, null]]\n"}, [], r"d\.jsonl:2:6: element 2 .* is None"),
    "object among numbers": ({"d.json": b'[[{"a": 1}]]'}, [], r"d\.json:1:3: element 0 .* is \{'a': 1\}"),
    "integer above int64": ({"d.json": b"[[1, 9223372036854775808]]"}, [],
                            r"d\.json:1:6: integer 9223372036854775808 does not fit in int64"),
    "integer above uint64": ({"d.json": b"[[18446744073709551616]]"}, ["--dtype", "uint64"],
                             r"d\.json:1:3: .*does not fit in uint64"),
    "100,000 levels of nesting (json)": ({"d.json": b"[" + DEEP + b"]"}, [], r"d\.json:1:\d+: lists nest deeper"),
    "100,000 levels of nesting (jsonl)": ({"d.jsonl": DEEP + b"\n"}, [], r"d\.jsonl:1:\d+: lists nest deeper"),
    "inconsistent depth": ({"d.jsonl": b"[[1, 2]]\n[[3]]\n[[[4]]]\n"}, [], r"d\.jsonl:3: element 3 \(branch "
                                                                           r"<2,0,0>\) has shape \(1,\)"),
    "ragged elements": ({"d.jsonl": b"[[[1, 2]]]\n[[[3, 4], [5]]]\n"}, ["--lod-level", "1"],
                        r"d\.jsonl:2: ragged elements: the list at branch <1,0> has 2 items"),
    "invalid utf-8": ({"d.json": b'[["\xff"]]'}, [], r"d\.json:1:4: invalid UTF-8"),
    "byte order mark": ({"d.json": b"\xef\xbb\xbf[[1]]"}, [], r"d\.json:1:1: .*byte order mark"),
    "error at the end of a long line": ({"d.jsonl": b"[" + b"[1,2]," * 200_000 + b"[3,]]\n"}, [],
                                        r"d\.jsonl:1:1200005: expected a value"),
    "object .npy, never unpickled": ({"a.npy": lambda d: npy(evil_objects(d), pickle=True)}, [],
                                     r"a\.npy: holds Python objects \(dtype object\); lodtool never unpickles"),
    "object .npy after a good one": ({"a.npy": npy(np.arange(3)), "b.npy": lambda d: npy(evil_objects(d), True)},
                                     [], r"b\.npy: holds Python objects"),
    "object array in an .npz": ({"a.npz": lambda d: npz(True, data=evil_objects(d), offsets_0=np.array([0, 2]))},
                                [], r"a\.npz: array 'data' holds Python objects"),
    "string .npy": ({"a.npy": npy(np.array(["x", "y"]))}, [], r"a\.npy: has dtype <U1"),
    "truncated .npy": ({"a.npy": npy(np.arange(50))[:-9]}, [], r"a\.npy: the header claims shape \(50,\)"),
    ".npy header claiming 2**40 rows": ({"a.npy": npy(np.arange(4)).replace(b"'shape': (4,)",
                                                                            b"'shape': (1099511627776,)")},
                                        [], r"a\.npy: the header claims shape \(1099511627776,\)"),
    "damaged .npy header": ({"a.npy": npy(np.arange(4)).replace(b"'descr'", b"'descr\"")}, [],
                            r"a\.npy: not a readable \.npy file"),
    "element shapes differ across .npy": ({"a.npy": npy(np.zeros((2, 3))), "b.npy": npy(np.zeros((2, 4)))}, [],
                                          r"b\.npy: element shape \(4,\)"),
    "npz offsets past the data": ({"a.npz": npz(data=np.arange(5), offsets_0=np.array([0, 2, 7]))}, [],
                                  r"a\.npz: offsets_0: offset\[2\]=7 but the data has 5 rows"),
    "npz lengths that do not add up": ({"a.npz": npz(data=np.arange(5), lengths_0=np.array([2, 2]))}, [],
                                       r"a\.npz: lengths_0 \(as offsets\): offset\[2\]=4 but the data has 5 rows"),
    "npz levels that do not fit": ({"a.npz": npz(data=np.arange(5), offsets_0=np.array([0, 1, 3]),
                                                 offsets_1=np.array([0, 5]))}, [],
                                   r"a\.npz: .*level 1 has 1 sequence "),
    "npz decreasing offsets": ({"a.npz": npz(data=np.arange(5), offsets_0=np.array([0, 3, 2, 5]))}, [],
                               r"a\.npz: offsets_0: offset\[2\]=2 < offset\[1\]=3"),
    "npz float offsets": ({"a.npz": npz(data=np.arange(5), offsets_0=np.array([0.0, 5.0]))}, [],
                          r"a\.npz: offsets_0 must be integers"),
    "npz without data": ({"a.npz": npz(offsets_0=np.array([0, 2]))}, [], r"a\.npz: no array named 'data'"),
    "npz member that is not .npy": ({"a.npz": npz(data=b"not an array", offsets_0=np.array([0, 2]))}, [],
                                    r"a\.npz: member 'data' is not a \.npy array"),
    "npz that is not a zip": ({"a.npz": b"PK\x03\x04 and then nothing"}, [], r"a\.npz: not a readable \.npz"),
}


def materialize(case: str, folder: str) -> list[str]:
    files, _, _ = CASES[case]
    paths = []
    for name, content in files.items():
        path = os.path.join(folder, name)
        with open(path, "wb") as f:
            f.write(content(folder) if callable(content) else content)
        paths.append(name)
    return paths


@pytest.mark.parametrize("append", [False, True], ids=["new", "append"])
@pytest.mark.parametrize("case", list(CASES))
def test_bad_input_is_one_line_with_its_place_and_writes_nothing(case, append, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    inputs = materialize(case, str(tmp_path))
    _, extra, message = CASES[case]
    target = tmp_path / "out.lod.h5"
    if append:
        (tmp_path / "ok.json").write_text(json.dumps([[1, 2], [3]]))
        assert CliRunner().invoke(cli, ["pack", "ok.json", "-o", str(target)]).exit_code == 0
        before = target.read_bytes()
    result = CliRunner().invoke(cli, ["pack", *inputs, *extra, "-o", str(target), *(["--append"] if append else [])])
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.exit_code == 1 and len(lines) == 1, result.stderr
    assert re.match(r"lodtool: error: " + message, lines[0]), lines[0]
    assert "Traceback" not in result.stderr and "internal error" not in result.stderr
    assert not (tmp_path / MARKER).exists(), "a loader unpickled the input"
    leftovers = sorted(n for n in os.listdir(tmp_path) if ".lodtmp-" in n or n.endswith(".lod.h5"))
    if append:
        assert leftovers == ["out.lod.h5"] and target.read_bytes() == before
    else:
        assert leftovers == []


def test_bad_jsonl_on_stdin_names_stdin(tmp_path):
    result = CliRunner().invoke(cli, ["pack", "-", "--format", "jsonl", "-o", str(tmp_path / "o.lod.h5")],
                                input=b"[[1]]\n[[2, null]]\n")
    assert result.exit_code == 1 and result.stderr.startswith("lodtool: error: <stdin>:2:6:")
    assert os.listdir(tmp_path) == []


def test_nan_and_infinity_policy(tmp_path):
    """NaN, Infinity and -Infinity (Python's json spellings) are float64 values, and unpack writes them back; a
    literal beyond float64 (1e999) is refused where it stands, not stored as infinity."""
    src = tmp_path / "f.json"
    src.write_text("[[NaN, Infinity, -Infinity, 2]]")
    out = tmp_path / "f.lod.h5"
    assert CliRunner().invoke(cli, ["pack", str(src), "-o", str(out)]).exit_code == 0
    back = CliRunner().invoke(cli, ["unpack", str(out), "--to", "json"]).stdout
    assert back.strip() == "[[NaN,Infinity,-Infinity,2.0]]"
    src.write_text("[[NaN, 1e999, 2]]")
    refused = CliRunner().invoke(cli, ["pack", str(src), "-o", str(tmp_path / "g.lod.h5")])
    assert refused.exit_code == 1 and "1e999" in refused.stderr and not (tmp_path / "g.lod.h5").exists()


def _pack_in_a_child(args: list[str], cwd: str, address_space: int) -> tuple[int, str, str, int]:
    """Run ``lodtool pack`` with an address-space limit: exit code, stdout, stderr, peak RSS in bytes."""
    def limit():
        resource.setrlimit(resource.RLIMIT_AS, (address_space, address_space))

    with open(os.path.join(cwd, "stdout"), "w+") as out, open(os.path.join(cwd, "stderr"), "w+") as err:
        proc = subprocess.Popen([sys.executable, "-m", "lodtool", "pack", *args], cwd=cwd, stdout=out, stderr=err,
                                preexec_fn=limit)
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        return proc.returncode, out.read(), err.read(), usage.ru_maxrss * 1024


def _write_gigabyte_line(path: str, tail: bytes) -> int:
    """One line of about 1 GiB: a JSON list of 3-element lists, then ``tail``; returns the sequences written."""
    seq = b"[" + b",".join(b"[%d,%d,%d]" % (i, i + 1, i + 2) for i in range(1000)) + b"]"
    n = (1 << 30) // (len(seq) + 1) + 1
    with open(path, "wb") as f:
        f.write(b"[")
        for i in range(n):
            f.write(seq + (b"," if i < n - 1 else b""))
        f.write(tail)
    return n


@pytest.mark.slow
def test_a_gigabyte_single_line_packs_in_bounded_memory(tmp_path):
    n = _write_gigabyte_line(str(tmp_path / "huge.json"), b"]")
    code, stdout, stderr, peak = _pack_in_a_child(["huge.json", "-o", "huge.lod.h5", "--json"], str(tmp_path),
                                                  4 << 30)
    assert code == 0, stderr
    assert json.loads(stdout)["sequences"] == n
    assert peak < 1 << 30  # the input is never held whole
    (tmp_path / "huge.json").unlink()


@pytest.mark.slow
def test_a_gigabyte_single_line_with_an_error_at_its_end(tmp_path):
    _write_gigabyte_line(str(tmp_path / "huge.jsonl"), b"\n")  # the line lacks its closing bracket
    code, _, stderr, peak = _pack_in_a_child(["huge.jsonl", "-o", "huge.lod.h5"], str(tmp_path), 6 << 30)
    (tmp_path / "huge.jsonl").unlink()
    assert code == 1 and re.match(r"lodtool: error: huge\.jsonl:1:\d+: unexpected end of line", stderr), stderr
    assert peak < 4 << 30  # the line itself needs 1 GiB, and its buffer up to twice that
    assert not (tmp_path / "huge.lod.h5").exists()
