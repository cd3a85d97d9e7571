"""Paddle's serialized LoDTensor: golden files written by Paddle, byte-identical writing, malformed input."""

from __future__ import annotations

import io
import os
import shutil
import struct
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lodtool import LoDTensor
from lodtool.errors import LodDtypeError, LodError, LodInputError, LodUsageError, LodValidationError
from lodtool.io import pdtensor as pd
from tests.strategies import lod_tensors

GOLDEN = Path(__file__).parent / "data" / "paddle"
EXPECTED = np.load(GOLDEN / "expected.npz")
CASES = sorted({k.split("__")[0] for k in EXPECTED.files})
ALL_DTYPES = ["int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "float16", "float32",
              "float64", "bool", "complex64", "complex128"]


def expected(case: str) -> tuple[np.ndarray, list[np.ndarray]]:
    data = EXPECTED[f"{case}__data"]
    levels = []
    while f"{case}__offsets_{len(levels)}" in EXPECTED.files:
        levels.append(EXPECTED[f"{case}__offsets_{len(levels)}"])
    return data, levels


@pytest.mark.parametrize("case", CASES)
def test_reads_what_paddle_wrote_value_for_value(case):
    data, levels = expected(case)
    t = pd.read_pdtensor(GOLDEN / f"{case}.pdtensor")
    assert t.dtype == data.dtype and t.shape == data.shape
    np.testing.assert_array_equal(t.data, data)
    assert len(t.offsets) == len(levels)
    for got, want in zip(t.offsets, levels):
        assert got.dtype == np.int64 and got.tolist() == want.tolist()


@pytest.mark.parametrize("case", CASES)
def test_writes_byte_identical_files(case):
    data, levels = expected(case)
    buf = io.BytesIO()
    pd.write_pdtensor(LoDTensor(data, levels or None), buf)
    assert buf.getvalue() == (GOLDEN / f"{case}.pdtensor").read_bytes()


def test_combined_pdiparams_reads_every_tensor_in_order():
    from tests.data.paddle.make_pdtensor_golden import COMBINED

    tensors = pd.read_pdtensors(GOLDEN / "combined.pdiparams")
    assert list(tensors) == [f"tensor_{i}" for i in range(len(COMBINED))]
    for t, case in zip(tensors.values(), COMBINED):
        data, levels = expected(case)
        np.testing.assert_array_equal(t.data, data)
        assert t.lod == [lv.tolist() for lv in levels]
    named = pd.read_pdtensors(GOLDEN / "combined.pdiparams", names=COMBINED)
    assert list(named) == COMBINED
    buf = io.BytesIO()
    pd.write_pdtensors(named.values(), buf)
    assert buf.getvalue() == (GOLDEN / "combined.pdiparams").read_bytes()


def test_combined_file_is_refused_where_one_tensor_is_expected():
    with pytest.raises(LodInputError, match=r"combined\.pdiparams: holds 3 tensors .*read_pdtensors"):
        pd.read_pdtensor(GOLDEN / "combined.pdiparams")
    with pytest.raises(LodUsageError, match="holds 3 tensor"):
        pd.read_pdtensors(GOLDEN / "combined.pdiparams", names=["a", "b"])


def test_an_lod_paddle_accepts_only_over_no_rows_is_refused():
    path = GOLDEN / "no_rows_lod_past_end.pdtensor"
    with pytest.raises(LodInputError, match=rf"^{path}: byte 12: tensor 0: invalid LoD: level 0: offset\[1\]=3 "
                                            r"but the data has 0 rows"):
        pd.read_pdtensor(path)


def test_bfloat16_is_refused_by_name():
    with pytest.raises(LodDtypeError, match=r"bf16\.pdtensor: byte \d+: tensor 0 holds BF16"):
        pd.read_pdtensor(GOLDEN / "bf16.pdtensor")


@given(lod_tensors(min_levels=0, max_levels=3, dtypes=ALL_DTYPES), st.integers(1, 64))
def test_round_trip(t, chunk_bytes):
    buf = io.BytesIO()
    pd.write_pdtensor(t, buf)
    back = pd.read_pdtensor(buf.getvalue())
    assert back.equals(t) and back.dtype == t.dtype
    chunks = list(pd.iter_pdtensor([io.BytesIO(buf.getvalue())], chunk_bytes=chunk_bytes))
    assert sum(c.n_rows for c in chunks) == t.n_rows
    if t.lod_level:
        assert sum(len(c) for c in chunks) == len(t)
        np.testing.assert_array_equal(np.concatenate([c.data for c in chunks]), t.data)
        assert [c.lod_level for c in chunks] == [t.lod_level] * len(chunks)


def test_big_endian_data_is_written_little_endian():
    t = LoDTensor(np.array([1, 2, 3], ">i4"), [[0, 3]])
    buf = io.BytesIO()
    pd.write_pdtensor(t, buf)
    back = pd.read_pdtensor(buf.getvalue())
    assert back.data.tolist() == [1, 2, 3] and back.dtype == np.dtype("int32")


def test_writing_refuses_an_lod_paddle_refuses():
    bad = LoDTensor(np.arange(3), [[0, 2, 1]], validate=False)
    with pytest.raises(LodValidationError, match="Paddle would refuse this LoD: level 0: offset"):
        pd.write_pdtensor(bad, io.BytesIO())
    with pytest.raises(LodDtypeError, match="Paddle has no data type for float128|longdouble"):
        pd.write_pdtensor(LoDTensor(np.zeros(2, np.longdouble)), io.BytesIO())


def test_write_to_path_is_atomic(tmp_path):
    target = tmp_path / "x.pdtensor"
    pd.write_pdtensor(LoDTensor(np.arange(2)), target)
    before = target.read_bytes()
    with pytest.raises(LodValidationError):
        pd.write_pdtensor(LoDTensor(np.arange(3), [[0, 5, 3]], validate=False), target)
    assert target.read_bytes() == before and os.listdir(tmp_path) == ["x.pdtensor"]


# -- malformed input: one-line errors naming the file and the byte ----------------------------------
def golden_bytes(case="tokens_int64_lod2") -> bytes:
    return (GOLDEN / f"{case}.pdtensor").read_bytes()


def test_every_truncation_is_a_located_error(tmp_path):
    raw = golden_bytes()
    path = tmp_path / "cut.pdtensor"
    for n in range(len(raw)):
        path.write_bytes(raw[:n])
        with pytest.raises(LodInputError) as info:
            pd.read_pdtensor(path)
        message = str(info.value)
        assert message.startswith(f"{path}: ") and "\n" not in message
        if n:
            assert "byte " in message and "truncated" in message


@pytest.mark.parametrize("patch, match", [
    (lambda b: struct.pack("<I", 1) + b[4:], r"byte 0: tensor 0: LoD version 1"),
    (lambda b: b[:4] + struct.pack("<Q", 1 << 40) + b[12:],
     r"byte 4: tensor 0: truncated or corrupt: lod_level 1,099,511,627,776 needs"),
    (lambda b: b[:12] + struct.pack("<Q", 23) + b[20:], r"byte 12: tensor 0: level 0 has 23 bytes"),
    (lambda b: b[:20] + struct.pack("<Q", 5) + b[28:], r"tensor 0: invalid LoD: level 0: offset\[0\]=5"),
    (lambda b: b[:20] + struct.pack("<Q", 1 << 63) + b[28:],
     r"byte 20: tensor 0: level 0 holds an offset above 2\*\*63"),
])
def test_bad_headers(tmp_path, patch, match):
    path = tmp_path / "bad.pdtensor"
    path.write_bytes(patch(golden_bytes()))
    with pytest.raises(LodInputError, match=rf"^{path}: .*{match}"):
        pd.read_pdtensor(path)


def blob(desc: bytes, data: bytes = b"") -> bytes:
    return struct.pack("<IQIi", 0, 0, 0, len(desc)) + desc + data


@pytest.mark.parametrize("raw, error, match", [
    (blob(b"\x08\x63\x10\x01", b"\x00"), LodInputError, r"byte 20: tensor 0: unknown Paddle data_type 99"),
    (blob(b"\x08\x05"), LodInputError, r"tensor 0: is 0-dimensional"),
    (blob(b"\x08\x05\x10\xff\xff"), LodInputError, r"ends inside a varint"),
    (blob(b"\x10\x01", b"\x00"), LodInputError, r"has no data_type"),
    (blob(b"\x08\x05\x10\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01"), LodInputError, r"negative dims \[-1\]"),
    (blob(b"\x08\x05\x10\x02", b"\x00" * 4), LodInputError, r"truncated: tensor 0: data of shape \(2,\) float32"),
    (blob(b"\x08\x16\x10\x01", b"\x00\x00"), LodDtypeError, r"BF16"),
    (blob(b"\x08\x03\x17"), LodInputError, r"wire type 7"),
    (struct.pack("<IQIi", 0, 0, 0, -4), LodInputError, r"byte 16: tensor 0: negative descriptor size -4"),
    (b"", LodInputError, r"is empty"),
])
def test_bad_descriptors(tmp_path, raw, error, match):
    path = tmp_path / "bad.pdtensor"
    path.write_bytes(raw)
    with pytest.raises(error, match=rf"^{path}: .*{match}"):
        pd.read_pdtensor(path)


def test_packed_dims_are_read_too():
    raw = blob(b"\x08\x02\x12\x02\x02\x01", np.array([[4], [5]], "<i4").tobytes())
    assert pd.read_pdtensor(raw).data.tolist() == [[4], [5]]


def test_missing_file():
    with pytest.raises(LodError, match="no such file"):
        pd.read_pdtensor("/nonexistent/x.pdtensor")


def test_sources_must_agree(tmp_path):
    a, b = tmp_path / "a.pdtensor", tmp_path / "b.pdtensor"
    pd.write_pdtensor(LoDTensor(np.arange(2), [[0, 2]]), a)
    pd.write_pdtensor(LoDTensor(np.arange(2.0), [[0, 2]]), b)
    with pytest.raises(LodInputError, match=rf"{b}: holds 1 LoD level\(s\) of float64"):
        list(pd.iter_pdtensor([a, b]))


# -- against real Paddle, where a Python with paddle is at hand ---------------------------------------
def _paddle_python() -> str | None:
    named = os.environ.get("LODTOOL_PADDLE_PYTHON")
    if named:
        return named
    try:
        import importlib.util

        if importlib.util.find_spec("paddle") is not None:
            return sys.executable
    except (ImportError, ValueError):
        pass
    return None


@pytest.mark.paddle
def test_round_trip_through_real_paddle(tmp_path):
    python = _paddle_python()
    if python is None or shutil.which(python) is None and not os.path.exists(python):
        pytest.skip("no Python with paddle (set LODTOOL_PADDLE_PYTHON to one)")
    t = LoDTensor(np.arange(12, dtype=np.float32).reshape(6, 2), [[0, 2, 3], [0, 1, 1, 6]])
    ours, theirs = tmp_path / "ours.pdtensor", tmp_path / "theirs.pdtensor"
    pd.write_pdtensor(t, ours)
    script = textwrap.dedent(f"""
        import numpy as np
        from paddle.base import core
        t = core.DenseTensor()
        core.load_dense_tensor(t, {str(ours)!r})
        assert t.lod() == [[0, 2, 3], [0, 1, 1, 6]], t.lod()
        a = np.array(t)
        assert a.dtype == np.float32 and a.tolist() == np.arange(12, dtype=np.float32).reshape(6, 2).tolist()
        t.set(a * 2 + 1, core.CPUPlace())
        t.set_lod([[0, 1, 3], [0, 4, 5, 6]])
        core.save_dense_tensor(t, {str(theirs)!r})
    """)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run([python, "-c", script], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    back = pd.read_pdtensor(theirs)
    assert back.lod == [[0, 1, 3], [0, 4, 5, 6]]
    np.testing.assert_array_equal(back.data, t.data * 2 + 1)


# -- the CLI: pack Paddle's files, unpack to them --------------------------------------------------------
def cli(*args):
    from click.testing import CliRunner

    from lodtool.cli.main import cli as main

    return CliRunner().invoke(main, [str(a) for a in args])


@pytest.mark.parametrize("case", CASES)
def test_cli_round_trip_is_byte_identical(tmp_path, case):
    golden = GOLDEN / f"{case}.pdtensor"
    r = cli("pack", golden, "-o", tmp_path / "t.lod.h5")
    assert r.exit_code == 0, r.output
    r = cli("unpack", tmp_path / "t.lod.h5", "-o", tmp_path / "back.pdtensor")
    assert r.exit_code == 0, r.output
    assert (tmp_path / "back.pdtensor").read_bytes() == golden.read_bytes()


def test_cli_errors_are_one_line(tmp_path):
    bad = tmp_path / "cut.pdtensor"
    bad.write_bytes(golden_bytes()[:40])
    for src, expected in [(bad, f"{bad}: byte "), (GOLDEN / "combined.pdiparams", "holds 3 tensors"),
                          (GOLDEN / "bf16.pdtensor", "holds BF16")]:
        r = cli("pack", src, "-o", tmp_path / "x.lod.h5")
        lines = [line for line in r.output.splitlines() if line.strip()]
        assert r.exit_code == 1 and len(lines) == 1 and expected in lines[0], r.output
        assert not (tmp_path / "x.lod.h5").exists()


@settings(max_examples=200)
@given(st.sampled_from(CASES + ["combined"]), st.lists(st.tuples(st.integers(0, 400), st.integers(0, 255)),
                                                       min_size=1, max_size=4))
def test_damaged_files_are_read_or_refused_never_crash(case, flips):
    path = GOLDEN / (f"{case}.pdtensor" if case != "combined" else "combined.pdiparams")
    raw = bytearray(path.read_bytes())
    for pos, value in flips:
        raw[pos % len(raw)] = value
    try:
        tensors = pd.read_pdtensors(bytes(raw))
    except LodError as exc:
        assert "\n" not in str(exc) and str(exc).startswith("<bytes>: ")
    else:
        for t in tensors.values():
            assert t.n_rows == t.shape[0]


# -- hostile headers, levels Paddle refuses, and pickles ------------------------------------------------------------
@pytest.mark.parametrize("dims, says", [
    ([1] * 100_001, r"\(100,001 dims\) \(maximum supported dimension"),
    ([1] * 65, r"\(65 dims\)"),
    ([0, 1 << 62, 1 << 62], r"\[0, 4611686018427387904, 4611686018427387904\] \(array is too big\)"),
    ([0, 1 << 31, 1 << 31], r"\(array is too big\)"),
])
def test_dims_numpy_cannot_hold_are_one_line_errors(tmp_path, dims, says):
    from tests.hostile_io import pdtensor_bytes

    path = tmp_path / "dims.pdtensor"
    path.write_bytes(pdtensor_bytes(dims, data=b"\0" * 4))
    with pytest.raises(LodInputError, match=rf"^{path}: byte 20: tensor 0: NumPy cannot hold an array of dims .*"
                                            rf"{says}"):
        pd.read_pdtensor(path)
    r = cli("pack", path, "-o", tmp_path / "x.lod.h5")
    lines = [line for line in r.output.splitlines() if line.strip()]
    assert r.exit_code == 1 and len(lines) == 1 and "internal error" not in r.output, r.output
    assert len(lines[0]) < 400 and not (tmp_path / "x.lod.h5").exists()


def test_a_level_of_zero_sequences_is_never_written_for_paddle(tmp_path):
    """lodtool allows offsets [0]; Paddle's set_lod refuses them, so neither writer hands Paddle one."""
    from lodtool import save
    from tests.hostile_io import pdtensor_bytes

    empty = LoDTensor(np.zeros((0, 3), np.float32), [[0]])
    with pytest.raises(LodValidationError, match=r"^Paddle would refuse this LoD: level 0: has 1 offset\(s\); a level "
                                                 r"needs at least 2 \(one sequence\)"):
        pd.write_pdtensor(empty, io.BytesIO())
    nested = LoDTensor(np.zeros(0, np.int64), [[0, 0], [0]])  # one document, no sentence
    with pytest.raises(LodValidationError, match="level 1: has 1 offset"):
        pd.write_pdtensor(nested, io.BytesIO())
    save(tmp_path / "e.lod.h5", empty)
    r = cli("unpack", tmp_path / "e.lod.h5", "--to", "pdtensor", "-o", tmp_path / "e.pdtensor")
    lines = [line for line in r.output.splitlines() if line.strip()]
    assert r.exit_code == 1 and len(lines) == 1 and "Paddle would refuse this LoD" in lines[0], r.output
    assert not (tmp_path / "e.pdtensor").exists()
    # a file holding such a level (Paddle's loader checks nothing) is still read, by lodtool's rule
    back = pd.read_pdtensor(pdtensor_bytes([0, 3], lod=[[0]]))
    assert back.lod == [[0]] and back.shape == (0, 3)


class _Planted:
    """Unpickling this would create ``path``: a pickle must never be loaded."""

    def __init__(self, path):
        self.path = str(path)

    def __reduce__(self):
        return os.mkdir, (self.path,)


@pytest.mark.parametrize("protocol", [2, 3, 4, 5])
def test_a_pickle_from_paddle_save_is_named_never_unpickled(tmp_path, protocol):
    import pickle

    marker = tmp_path / "unpickled"
    path = tmp_path / "x.pdtensor"
    path.write_bytes(pickle.dumps({"value": np.arange(3), "planted": _Planted(marker)}, protocol=protocol))
    with pytest.raises(LodInputError, match=rf"^{path}: is a Python pickle \(protocol {protocol}: what paddle.save "
                                            r"writes\), not Paddle's binary tensor format.*save_dense_tensor"):
        pd.read_pdtensor(path)
    r = cli("pack", path, "-o", tmp_path / "x.lod.h5")
    lines = [line for line in r.output.splitlines() if line.strip()]
    assert r.exit_code == 1 and len(lines) == 1 and "is a Python pickle" in lines[0], r.output
    assert not marker.exists()
    # anything else with a wrong version is still a located version error
    bad = tmp_path / "v.pdtensor"
    bad.write_bytes(b"\x07\x00\x00\x00" + bytes(20))
    with pytest.raises(LodInputError, match=rf"^{bad}: byte 0: tensor 0: LoD version 7"):
        pd.read_pdtensor(bad)
