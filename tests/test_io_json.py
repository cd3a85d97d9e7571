"""JSON / JSON Lines ingest and export: the fast path against the general path, the policies, every error."""

from __future__ import annotations

import io
import json
import math
import re
import subprocess
import sys

import numpy as np
import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from lodtool import LoDTensor, from_nested
from lodtool.errors import LodError, LodInputError, LodUsageError
from lodtool.io import json as jsonio
from lodtool.io.json import iter_json, parse_json, read_json, write_json

from .strategies import lod_tensors

TRICKY_FLOATS = ["0.1", "1e-320", "1.7976931348623157e308", "5e-324", "1E5", "-0.0", "2.2250738585072011e-308",
                 "2.2250738585072014e-308", "2.4703282292062327e-324", "2.4703282292062328e-324", "9007199254740993.0",
                 "1e23", "8.98846567431158e307", "0.30000000000000004", "123456789012345678901234567890",
                 "1.00000000000000011102230246251565404236316680908203125", "4.9406564584124654e-324", "1e-400",
                 "0.000000000000000000000000000000000000000000001e310", "3.0e-0", "1.5E+3"]


def both(text, fmt="json", **kw) -> LoDTensor:
    """Parse with the fast and the general path; they must agree exactly."""
    if isinstance(text, str):
        text = text.encode()
    fast = read_json(text, fmt, fast=True, **kw)
    general = read_json(text, fmt, fast=False, **kw)
    assert fast.equals(general), (fast, general)
    assert fast.dtype == general.dtype
    return fast


def error_of(text, fmt="json", name="docs.json", **kw) -> str:
    """The one-line message both paths give (they must give the same error class)."""
    if isinstance(text, str):
        text = text.encode()
    messages = []
    for fast in (True, False):
        with pytest.raises(LodInputError) as info:
            read_json(text, fmt, fast=fast, name=name, **kw)
        msg = str(info.value)
        assert "\n" not in msg
        messages.append(msg)
    return messages[0]


# -- reading --------------------------------------------------------------------------------------
def test_articles_and_levels():
    t = both("[[[1,2,3],[4,5],[6,7,8,9]],[[10]],[[11,12],[13,14,15]]]")
    assert t.recursive_sequence_lengths == [[3, 1, 2], [3, 2, 4, 1, 2, 3]]
    assert t.dtype == np.int64 and t.data.tolist() == list(range(1, 16))


def test_jsonl_blank_lines_crlf_and_whitespace_are_fine():
    t = both(b"\n  [[1, 2], [3]]\r\n\n\t[ [4] ] \n\n", "jsonl")
    assert t.to_nested() == [[[1, 2], [3]], [[4]]]


def test_lod_level_turns_deeper_lists_into_the_element_shape():
    t = both("[[[1.5, 2], [3, 4]], [[5, 6]]]", lod_level=1)
    assert t.lod == [[0, 2, 3]] and t.shape == (3, 2) and t.dtype == np.float64


def test_lod_level_zero_and_scalar_items():
    t = both("[[1, 2], [3, 4]]", lod_level=0)
    assert t.lod_level == 0 and t.shape == (2, 2)
    assert both("[1, 2, 3]").lod_level == 0
    assert both(b"5\n6\n", "jsonl").data.tolist() == [5, 6]


def test_empty_sequences_and_all_empty_input_match_from_nested():
    for obj in ([[], [[1]]], [[[]]], [[[], []], [[1, 2]]]):
        assert both(json.dumps(obj)).equals(from_nested(obj))


def test_dtype_inference():
    assert both("[[1, 2]]").dtype == np.int64
    assert both("[[1, 2.0]]").dtype == np.float64
    assert both("[[true, false]]").dtype == np.bool_


def test_int_then_float_chunks_promote_like_the_whole_input():
    text = b"".join(orjson.dumps([[i, i + 1]]) + b"\n" for i in range(50)) + b"[[0.5]]\n"
    chunks = list(iter_json(text, "jsonl", chunk_bytes=64))
    assert len(chunks) > 2 and chunks[0].dtype == np.int64 and chunks[-1].dtype == np.float64
    whole = read_json(text, "jsonl", chunk_bytes=64)
    assert whole.equals(from_nested([json.loads(line) for line in text.splitlines()]))


def test_chunks_are_whole_sequences_and_concatenate_to_the_input():
    seqs = [[[j] * (j % 3) for j in range(i % 5)] for i in range(60)]
    text = b"".join(orjson.dumps(s) + b"\n" for s in seqs)
    ref = from_nested(seqs)
    for chunk_bytes in (16, 50, 1000):
        chunks = list(iter_json(text, "jsonl", chunk_bytes=chunk_bytes))
        assert sum(len(c) for c in chunks) == 60
        assert jsonio.concat_chunks(chunks).equals(ref)


def test_scan_blocks_and_threads_give_the_same_result(monkeypatch):
    seqs = [[[i, i + 1], [i * 0.5]] if i % 7 else [[i]] for i in range(300)]
    text = b"".join(orjson.dumps(s) + b"\n" for s in seqs)
    ref = read_json(text, "jsonl", fast=False)
    monkeypatch.setattr(jsonio, "SCAN_BLOCK", 64)
    for threads in (1, 3):
        monkeypatch.setattr(jsonio, "SCAN_THREADS", threads)
        assert read_json(text, "jsonl", chunk_bytes=2000).equals(ref)
        assert read_json(orjson.dumps(seqs), "json", chunk_bytes=300).equals(ref)


def test_numeric_input_never_takes_the_general_path(monkeypatch):
    def boom(*a, **k):
        raise AssertionError("the general path ran")

    monkeypatch.setattr(jsonio, "_general_jsonl", boom)
    monkeypatch.setattr(jsonio, "_general_document", boom)
    monkeypatch.setattr(jsonio, "FAST_FROM_BYTES", 0)  # however small (small inputs: see test_ops_backend.py)
    text = b"".join(orjson.dumps([[i, -i, i * 1.25], [1e300, -0.0]]) + b"\n" for i in range(200))
    read_json(text + b"[[NaN, Infinity, -Infinity]]\n", "jsonl", chunk_bytes=256)
    read_json(b"[" + text.replace(b"\n", b",") + b"[[1]]]", "json")
    read_json(b"[[true, false], [true]]", "json")


def test_numba_is_imported_lazily():
    code = "import sys, lodtool.io.json; print('numba' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


def test_progress_reports_bytes_read():
    text = b"[[1, 2]]\n" * 100
    seen = []
    list(iter_json(text, "jsonl", chunk_bytes=64, progress=seen.append))
    assert seen == sorted(seen) and seen[-1] == len(text)


def test_stdin(monkeypatch):
    class Stdin:
        buffer = io.BytesIO(b"[[1], [2, 3]]\n")

    monkeypatch.setattr(sys, "stdin", Stdin)
    assert read_json("-", "jsonl").to_nested() == [[[1], [2, 3]]]


def test_paths_and_format_from_extension(tmp_path):
    p = tmp_path / "d.ndjson"
    p.write_bytes(b"[[1]]\n")
    assert read_json(p).to_nested() == [[[1]]]
    with pytest.raises(LodUsageError, match="format"):
        read_json(tmp_path / "x.txt")


# -- floats are exact --------------------------------------------------------------------------------
def test_tricky_floats_equal_python_float():
    text = "[[" + ",".join(TRICKY_FLOATS) + "]]"
    for fast in (True, False):
        got = read_json(text.encode(), "json", fast=fast, dtype="float64").data
        for token, value in zip(TRICKY_FLOATS, got.tolist()):
            assert value == float(token) and math.copysign(1, value) == math.copysign(1, float(token)), token


@given(st.lists(st.floats(allow_nan=False, allow_infinity=False), min_size=1, max_size=30))
def test_repr_floats_round_trip_exactly(values):
    text = ("[[" + ",".join(repr(v) for v in values) + "]]").encode()
    for fast in (True, False):
        got = read_json(text, "json", fast=fast, dtype="float64").data
        assert got.tolist() == values
        assert np.array_equal(np.signbit(got), np.signbit(values))


NUMBER = st.from_regex(r"\A-?(0|[1-9][0-9]{0,25})(\.[0-9]{1,25})?([eE][+-]?[0-9]{1,3})?\Z", fullmatch=True)


@given(st.lists(NUMBER, min_size=1, max_size=20))
def test_decimal_tokens_equal_python_float(tokens):
    text = ("[[" + ",".join(tokens) + "]]").encode()
    for fast in (True, False):
        if any(math.isinf(float(t)) for t in tokens):  # beyond float64: refused, not read as infinity
            with pytest.raises(LodInputError, match="beyond float64's range"):
                read_json(text, "json", fast=fast, dtype="float64")
            continue
        got = read_json(text, "json", fast=fast, dtype="float64").data.tolist()
        assert got == [float(t) for t in tokens]


# -- fast path == general path == from_nested, on random input ----------------------------------------
def _nested(leaf):
    return st.recursive(st.lists(leaf, max_size=4), lambda inner: st.lists(inner, max_size=3), max_leaves=20)


LEAVES = st.one_of(st.integers(-(2 ** 63), 2 ** 63 - 1).map(lambda i: ("int", i)),
                   st.floats(allow_nan=False).map(lambda f: ("float", f)),
                   st.booleans().map(lambda b: ("bool", b)))


@st.composite
def batches(draw):
    kind = draw(st.sampled_from(["int", "float", "bool"]))
    leaf = {"int": st.integers(-(2 ** 63), 2 ** 63 - 1), "float": st.floats(allow_nan=False),
            "bool": st.booleans()}[kind]
    depth = draw(st.integers(1, 3))
    item = leaf
    for _ in range(depth):
        item = st.lists(item, max_size=4)
    return draw(st.lists(item, min_size=1, max_size=6))


def _dump(obj, ws: bool) -> bytes:
    text = json.dumps(obj)  # Python's json: Infinity spelled like ours
    return text.encode() if ws else text.replace(" ", "").encode()


@given(batches(), st.booleans(), st.sampled_from([16, 40, 1 << 20]))
def test_fast_and_general_paths_agree_with_from_nested(batch, ws, chunk_bytes):
    try:
        ref = from_nested(batch)
    except LodError:
        ref = None
    jsonl = b"".join(_dump(seq, ws) + b"\n" for seq in batch)
    for fmt, text in (("json", _dump(batch, ws)), ("jsonl", jsonl)):
        results = []
        for fast in (True, False):
            try:
                results.append(read_json(text, fmt, fast=fast, chunk_bytes=chunk_bytes))
            except LodInputError as exc:
                results.append(type(exc))
        if ref is None:
            assert results == [LodInputError, LodInputError]
        else:
            for r in results:
                assert isinstance(r, LoDTensor) and r.equals(ref) and r.dtype == ref.dtype


# -- policies ------------------------------------------------------------------------------------------
def test_nan_and_infinity_are_floats():
    t = both("[[NaN, Infinity, -Infinity, 1e308, 1]]")
    assert t.dtype == np.float64 and np.isnan(t.data[0])
    assert t.data[1:].tolist() == [math.inf, -math.inf, 1e308, 1.0]


def test_booleans_among_numbers_are_an_error():
    msg = error_of("[[1, 2], [true]]")
    assert msg.startswith("docs.json:1:11:") and "booleans and numbers" in msg
    msg = error_of(b"[[true]]\n[[1]]\n", "jsonl", name="d.jsonl")
    assert msg == "d.jsonl:2:3: a number among booleans (booleans and numbers cannot be mixed)"
    msg = error_of(b"[[true]]\n" * 5 + b"[[false, 1]]\n", "jsonl", name="d.jsonl", chunk_bytes=16)
    assert msg == "d.jsonl:6:10: a number among booleans (booleans and numbers cannot be mixed)"
    msg = error_of(b"[[1]]\n" * 5 + b"[[2, false]]\n", "jsonl", name="d.jsonl", chunk_bytes=16)
    assert msg == "d.jsonl:6:6: false among numbers (booleans and numbers cannot be mixed)"


def test_strings_null_and_objects_are_errors_with_a_position():
    assert error_of('[[1, "a"]]').startswith("docs.json:1:6: element 1 (branch <0,1>) is 'a'")
    assert error_of(b'[[1]]\n[[2, null]]\n', "jsonl", name="d.jsonl").startswith("d.jsonl:2:6:")
    assert "{'a': 1}" in error_of(b'[[{"a": 1}]]\n', "jsonl")


def test_integers_beyond_int64():
    big = "18446744073709551615"
    msg = error_of(f"[[1, {big}]]")
    assert msg.startswith("docs.json:1:6: integer 18446744073709551615 does not fit in int64")
    assert both(f"[[1, {big}]]", dtype="uint64").data.tolist() == [1, 2 ** 64 - 1]
    assert both("[[1, 123456789012345678901234]]", dtype="float64").data[1] == 1.2345678901234568e23
    assert "does not fit in uint64" in error_of("[[18446744073709551616]]", dtype="uint64")
    assert "-1" in error_of(f"[[{big}, -1]]", dtype="uint64")
    assert both("[[-9223372036854775808, 9223372036854775807]]").dtype == np.int64


def test_explicit_dtype_must_hold_every_value():
    assert both("[[1, 2]]", dtype="int8").dtype == np.int8
    msg = error_of(b"[[1]]\n[[2, 300]]\n", "jsonl", name="d.jsonl", dtype="uint8")
    assert msg == "d.jsonl:2: at branch <1,0,1>: value 300 does not fit in uint8"
    assert both("[[1.0, 2.0]]", dtype="int32").data.tolist() == [1, 2]
    assert "not a whole number" in error_of("[[1.5]]", dtype="int32")
    assert both("[[0, 1]]", dtype="bool").dtype == np.bool_
    assert "neither 0 nor 1" in error_of("[[2]]", dtype="bool")
    assert "overflows float32" in error_of("[[1e300]]", dtype="float32")
    assert both("[[true]]", dtype="uint8").data.tolist() == [1]
    with pytest.raises(LodUsageError):
        parse_json("[[1]]", dtype="nonsense")


# -- every error: one line, naming the place -----------------------------------------------------------
def test_syntax_error_names_file_line_and_column():
    text = b"[[1, 2]]\n[[3]]\n[[4, 5], [6 7]]\n"
    assert error_of(text, "jsonl", name="docs.jsonl") == "docs.jsonl:3:13: expected ',' or ']'"
    assert error_of(b"[[1,,2]]") == "docs.json:1:5: expected a number, true, false or '[' (found ',')"
    assert error_of(b"[[1, 2,]]") == "docs.json:1:8: expected a value (a trailing comma?)"


def test_trailing_garbage():
    assert error_of(b"[[1]] x") == "docs.json:1:7: unexpected data after the document"
    assert error_of(b"[[1]] [[2]]\n", "jsonl", name="d.jsonl").startswith("d.jsonl:1:7: unexpected data after")


def test_truncated_input():
    assert error_of(b"[[1, 2], [3") == "docs.json:1:12: unexpected end of input (is it truncated?)"
    msg = error_of(b"[[1]]\n[[2, 3\n", "jsonl", name="d.jsonl")
    assert msg.startswith("d.jsonl:2:") and "unexpected end of line" in msg


def test_empty_input():
    for text, fmt in ((b"", "json"), (b"  \n", "json"), (b"", "jsonl"), (b"\n \n", "jsonl"), (b"[]", "json")):
        assert "empty input" in error_of(text, fmt)  # read_json has no tensor to return
        for fast in (True, False):
            assert list(iter_json(text, fmt, fast=fast)) == []  # pack turns this into an empty tensor


def test_deep_nesting_is_an_error_not_a_crash():
    deep = b"[" * 100_000 + b"1" + b"]" * 100_000
    msg = error_of(deep + b"\n", "jsonl", name="d.jsonl")
    assert msg == f"d.jsonl:1:{jsonio.MAX_LEVELS + 1}: lists nest deeper than {jsonio.MAX_LEVELS} levels"
    assert error_of(b"[" + deep + b"]").startswith("docs.json:1:")
    ok = b"[" * 200 + b"1" + b"]" * 200  # deep, but within the limit
    assert both(b"[" + ok + b"]").lod_level == 200


def test_ragged_elements_name_the_branch_and_line():
    msg = error_of(b"[[[1, 2]]]\n[[[3, 4], [5]]]\n", "jsonl", name="d.jsonl", lod_level=1)
    assert msg.startswith("d.jsonl:2: ragged elements: the list at branch <1,0> has 2 items, but 1 elsewhere")
    msg = error_of(b"[[[1,2]]]\n[[[1,2,3]]]\n", "jsonl", name="d.jsonl", lod_level=1, chunk_bytes=16)
    assert msg.startswith("d.jsonl:2: element shape (1, 3) at branch <1,0>, but (1, 2) before")


def test_inconsistent_nesting_names_the_line():
    msg = error_of(b"[[1, 2]]\n[[3]]\n[[[4]]]\n", "jsonl", name="d.jsonl")
    assert msg.startswith("d.jsonl:3:")
    msg = error_of(b"[[1, 2]]\n" * 10 + b"[3]\n", "jsonl", name="d.jsonl", chunk_bytes=32)
    assert msg.startswith("d.jsonl:11:")
    assert "only 2 level(s) deep" in error_of("[[[1]]]", lod_level=3)


def test_invalid_utf8_and_bom():
    assert error_of(b'[["\xff"]]') == "docs.json:1:4: invalid UTF-8 (byte 0xff)"
    assert "byte order mark" in error_of(b"\xef\xbb\xbf[[1]]")


def test_a_line_much_longer_than_a_chunk_streams(tmp_path):
    line = b"[" + b",".join(b"[%d,%d]" % (i, i) for i in range(50_000)) + b"]\n"
    p = tmp_path / "long.jsonl"
    p.write_bytes(b"[[1,1]]\n" + line + b"[[2,2]]\n")
    chunks = list(iter_json(p, chunk_bytes=1024))
    assert sum(len(c) for c in chunks) == 3 and sum(c.n_rows for c in chunks) == 100_004


@pytest.mark.slow
def test_a_huge_single_line(tmp_path):
    p = tmp_path / "huge.jsonl"
    with open(p, "wb") as f:  # one line of ~256 MB
        f.write(b"[" + b"1," * (128 << 20) + b"1]\n")
    (t,) = list(iter_json(p, chunk_bytes=1 << 20))
    assert t.n_rows == (128 << 20) + 1


# -- writing ----------------------------------------------------------------------------------------
def test_write_json_formats_and_streams_chunks():
    t = parse_json("[[[1, 2], [3]], [[4]]]")
    out = io.BytesIO()
    write_json(iter([t.slice_level(0, 0, 1), t.slice_level(0, 1, 2)]), out, "json")
    assert out.getvalue() == b"[[[1,2],[3]],[[4]]]\n"
    out = io.BytesIO()
    write_json(t, out, "jsonl")
    assert out.getvalue() == b"[[1,2],[3]]\n[[4]]\n"


def test_write_json_values():
    out = io.BytesIO()
    t = LoDTensor(np.array([0.1, np.nan, np.inf, -np.inf, -0.0]), [[0, 5]])
    write_json(t, out, "jsonl")
    assert out.getvalue() == b"[0.1,NaN,Infinity,-Infinity,-0.0]\n"
    assert both(out.getvalue(), "jsonl").equals(t)
    out = io.BytesIO()
    write_json(LoDTensor(np.array([0.1, 1 / 3], dtype=np.float32), [[0, 2]]), out, "jsonl")
    assert out.getvalue() == b"[0.1,0.33333334]\n"
    out = io.BytesIO()
    write_json(LoDTensor(np.array([True, False]), [[0, 1, 2]]), out, "json")
    assert out.getvalue() == b"[[true],[false]]\n"
    with pytest.raises(LodError, match="complex"):
        write_json(LoDTensor(np.ones(1, np.complex64), [[0, 1]]), io.BytesIO(), "json")


@given(lod_tensors(dtypes=["int8", "int32", "int64", "uint64", "float16", "float32", "float64", "bool"]))
def test_write_then_read_round_trips(t):
    if t.n_rows == 0 and t.element_shape:  # the JSON of no rows cannot carry an element shape
        return
    for fmt in ("json", "jsonl"):
        out = io.BytesIO()
        write_json(t, out, fmt)
        back = read_json(out.getvalue(), fmt, lod_level=t.lod_level, dtype=t.dtype)
        assert back.equals(t)


def test_branch_regex_matches_from_nested_paths():
    assert re.search(jsonio._BRANCH, "inconsistent nesting at <2,1,0>: x").group(1) == "2"


# -- syntax errors of long texts, located without building objects ----------------------------------
def _full_parse_error(text: bytes, line: int | None, name: str = "big.json") -> str | None:
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(jsonio, "_LOCATE_MIN", 1 << 62)  # the reference: parse it all
        try:
            jsonio._load_json(text, name, line)
        except LodInputError as exc:
            return str(exc)
    return None


_mutations = st.tuples(st.sampled_from(["delete", "insert", "truncate", "replace"]), st.floats(0, 1),
                       st.sampled_from(list(b"[],0123456789.eE+- \nxtfnNI\"{")))


@given(st.recursive(st.lists(st.integers(-10**6, 10**6) | st.floats(allow_nan=False, allow_infinity=False)),
                    lambda inner: st.lists(inner, max_size=4), max_leaves=30),
       _mutations, st.sampled_from([None, 3]))
def test_long_text_syntax_errors_match_a_full_parse(value, mutation, line):
    # the located message must be the one a full parse gives, wherever the damage is
    text = bytearray(json.dumps(value).encode())
    kind, where, byte = mutation
    k = min(int(where * len(text)), len(text) - 1)
    if kind == "delete":
        del text[k]
    elif kind == "insert":
        text.insert(k, byte)
    elif kind == "truncate":
        del text[k:]
    else:
        text[k] = byte
    text = bytes(text)
    expected = _full_parse_error(text, line)
    located = jsonio._located_syntax_error(text, "big.json", line)
    if located is not None:
        assert str(located) == expected
    elif expected is not None:
        # not a syntax error of the fast grammar's JSON: the full parse words it (strings, objects, ...)
        assert jsonio._scanner().first_syntax_problem(np.frombuffer(text, np.uint8))[0] == -1 or \
            not re.search(r":\d+:\d+: (unexpected end|expected|unexpected data)", expected)


@pytest.mark.parametrize("tail, message", [
    (b"", "big.jsonl:1:{col}: unexpected end of line (is it truncated, or does a sequence span lines?)"),
    (b",]", "big.jsonl:1:{col1}: expected a value (a trailing comma?)"),
    (b" 7]", "big.jsonl:1:{col1}: expected ',' or ']'"),
])
def test_a_long_bad_line_is_located_in_bounded_memory(tail, message):
    body = b"[" + b",".join(b"[%d,%d]" % (i, i) for i in range(200_000))  # ~3 MB, lacks its "]"
    text = body + tail
    located = jsonio._located_syntax_error(text, "big.jsonl", 1)
    assert str(located) == message.format(col=len(text) + 1, col1=len(body) + 2)
    assert str(located) == _full_parse_error(text, 1, "big.jsonl")  # what the full parse says too


def test_a_long_valid_text_is_left_to_the_parsers():
    text = b"[" + b",".join(b"[%d,\"s\"]" % i for i in range(200_000)) + b"]"
    assert jsonio._located_syntax_error(text, "big.json", None) is None


def test_the_scan_pool_keeps_to_lodtools_thread_limit(monkeypatch):
    monkeypatch.setattr(jsonio, "SCAN_THREADS", None)
    monkeypatch.setenv("LODTOOL_NUM_THREADS", "1")
    assert jsonio._scan_threads() == 1  # a single-thread Dask worker parses on its one core
    monkeypatch.setattr(jsonio, "SCAN_THREADS", 3)
    assert jsonio._scan_threads() == 3


def test_small_bad_input_is_parsed_once(tmp_path, monkeypatch):
    from lodtool.io import json as json_io

    src = tmp_path / "bad.jsonl"
    src.write_bytes(b"[1, 2]\n[3,, 4]\n")
    passes = []
    real = json_io._iter_json_inputs
    monkeypatch.setattr(json_io, "_iter_json_inputs", lambda *a, **k: passes.append(k["fast"]) or real(*a, **k))
    with pytest.raises(LodInputError, match=r"bad\.jsonl:2:4: expected a number"):
        list(json_io.iter_json(str(src)))
    assert passes == [False]  # the general path found it, and said so


def test_document_errors_name_the_line_of_the_item(tmp_path):
    src = tmp_path / "d.json"
    src.write_bytes(b"[[1, 2],\n [3, NaN]]\n")
    with pytest.raises(LodInputError, match=r"d\.json:2: at branch <1,1>: value nan"):
        list(iter_json(str(src), dtype="int32", fast=False))


@pytest.mark.parametrize("fast", [False, True], ids=["general", "scanner"])
@pytest.mark.parametrize("fmt, text, place", [
    ("jsonl", b"[1.5, 2]\n[3, 1e400]\n", "x:2:5"),
    ("json", b"[[1.5, 2],\n [3, -1E+999]]", "x:2:6"),
    ("jsonl", b"[1, 2]\n[" + b"9" * 400 + b".5]\n", "x:2:2"),
])
def test_a_float_beyond_float64_is_refused_where_it_stands(fmt, text, place, fast):
    with pytest.raises(LodInputError, match=re.escape(place) + r": \S+ is beyond float64's range .* write Infinity"):
        parse_json(text, fmt, fast=fast, name="x")
    # an explicit dtype changes nothing: the literal has no float64 value to store
    with pytest.raises(LodInputError, match="beyond float64's range"):
        parse_json(text, fmt, fast=fast, name="x", dtype="float32")


def test_infinity_written_as_such_still_reads():
    assert parse_json(b"[[Infinity, -Infinity, 1e308]]").data.tolist() == [math.inf, -math.inf, 1e308]


@pytest.mark.parametrize("fmt, head, tail, limit", [
    ("jsonl", b"[[1, 2]]\n[[1,", b"2], [3]]\n[[4]]\n", 16 << 20),
    ("json", b"[[[1, 2]], [[1,", b"2], [3]], [[4]]]", 40 << 20),
])
def test_a_line_padded_with_blanks_is_read_in_bounded_memory(fmt, head, tail, limit, tmp_path):
    import tracemalloc

    src = tmp_path / f"wide.{fmt}"
    with open(src, "wb") as f:  # 48 MB of blanks inside one item, read 1 MB at a time
        f.write(head)
        for _ in range(48):
            f.write(b" \t" * (1 << 19))
        f.write(tail)
    list(iter_json(b"[[1]]", "json", fast=True))  # the scanner's kernels load outside the measurement
    tracemalloc.start()
    try:
        chunks = list(iter_json(str(src), fast=True, chunk_bytes=1 << 20))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert [c.to_nested() for c in chunks] in ([[[[1, 2]]], [[[1, 2], [3]], [[4]]]], [[[[1, 2]], [[1, 2], [3]], [[4]]]])
    assert peak < limit, peak


@pytest.mark.parametrize("line", [
    b"[1," + b" " * 20000 + b"2,, 3]",
    b"[1," + b" " * 9000 + b"2, " + b"\t" * 9000 + b"x]",
    b"[1.5," + b" " * 9000 + b"1e400]",
    b"[1," + b" " * 90000 + b"99999999999999999999999]",
    b"[1," + b" " * 90000 + b"2," + b" " * 5000,
])
def test_errors_after_squeezed_blanks_keep_their_columns(line):
    text = b"[1, 2]\n" + line + b"\n"
    with pytest.raises(LodInputError) as whole:
        list(iter_json(text, "jsonl", name="x", fast=False))
    with pytest.raises(LodInputError) as squeezed:  # 8 KB reads: the blanks are squeezed before the line ends
        list(iter_json(text, "jsonl", name="x", fast=True, chunk_bytes=8192))
    assert str(squeezed.value) == str(whole.value)


@pytest.mark.parametrize("token, value", [
    (b"1." + b"3" * 3_000_000, float("1." + "3" * 30)),
    (b"9007199254740993" + b"0" * 3_000_000 + b"1e-3000001", 9007199254740994.0),  # just above a tie: rounds up
    (b"9007199254740993" + b"0" * 3_000_000 + b"e-3000000", 9007199254740992.0),  # the tie itself: to even
    (b"-0." + b"0" * 3_000_000 + b"25e3000001", -2.5),
])
def test_a_float_literal_of_millions_of_digits_keeps_only_what_decides_its_value(token, value, tmp_path,
                                                                                  monkeypatch):
    import tracemalloc

    from lodtool.io import _jsonscan

    monkeypatch.setattr(_jsonscan, "_COUNT_ABOVE", 1 << 16)  # scratch sized by the line's lists, not its bytes
    monkeypatch.setattr(jsonio, "_load_json", lambda *a: pytest.fail("the general path parsed the line whole"))
    src = tmp_path / "long.jsonl"
    src.write_bytes(b"[[" + token + b", 0.5]]\n")
    assert float(token) == value
    list(iter_json(b"[[1]]", "json", fast=True))  # the scanner's kernels load outside the measurement
    tracemalloc.start()
    try:
        [t] = list(iter_json(str(src), fast=True, chunk_bytes=1 << 20))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert t.data.tolist() == [value, 0.5]
    assert peak < 5 * len(token), peak  # the buffer holding the line (it doubles as it grows), no copy of the token


def test_an_integer_literal_too_long_for_any_dtype_still_gets_its_one_line_error():
    text = b"[[1, 2]]\n[[3, 1" + b"7" * 5000 + b"]]\n"
    for fast in (True, False):
        with pytest.raises(LodInputError, match=r"^x:2:6: an integer of 5,001 digits; no dtype holds it"):
            list(iter_json(text, "jsonl", name="x", fast=fast))


# -- lines and items far longer than the read buffer ---------------------------------------------------------
_BUFFER = 1 << 16


def _peak(source, **kw):
    """The chunks read from ``source`` with a 64 KiB buffer, and the peak of Python's allocations meanwhile."""
    import tracemalloc

    list(iter_json(b"[[1]]", "json", fast=True))  # the scanner's kernels load outside the measurement
    tracemalloc.start()
    try:
        chunks = list(iter_json(str(source), fast=True, chunk_bytes=_BUFFER, **kw))
        return chunks, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize("fmt, head, pad, tail, values", [
    ("jsonl", b"[1.", b"0", b", 2, 3]\n", [1.0, 2.0, 3.0]),  # one number of 100 buffers of digits
    ("jsonl", b"[-1e", b"0", b"1, 2, 3]\n", [-10.0, 2.0, 3.0]),  # its exponent
    ("jsonl", b"[[1,2],[0.", b"0", b"5]]\n", [1, 2, 0.0]),
    ("json", b"[[1, 2], [1,", b"\n\t", b"2], [3]]", [1, 2, 1, 2, 3]),  # newlines are never squeezed
    ("json", b"[[0.", b"0", b"25e6553600, 2], [3]]", [0.25, 2, 3]),
])
def test_a_line_of_few_values_far_longer_than_the_buffer_is_read_in_bounded_memory(fmt, head, pad, tail, values,
                                                                                   tmp_path):
    src = tmp_path / f"long.{fmt}"
    src.write_bytes(head + pad * (100 * _BUFFER // len(pad)) + tail)
    chunks, peak = _peak(src)
    assert sum((c.data.tolist() for c in chunks), []) == values
    assert peak < 32 * _BUFFER, peak  # the buffer and the scanner's scratch (21 bytes a buffer byte), not the line


@pytest.mark.parametrize("fmt", ["jsonl", "json"])
def test_a_line_of_many_values_far_longer_than_the_buffer_holds_its_values_not_its_text(fmt, tmp_path):
    n = 100 * _BUFFER // 6
    line = b"[" + b",".join(b"%5d" % (i % 100_000) for i in range(n)) + b"]"
    src = tmp_path / f"many.{fmt}"
    src.write_bytes(b"[1, 2]\n" + line + b"\n[3]\n" if fmt == "jsonl" else b"[[1, 2]," + line + b",[3]]")
    chunks, peak = _peak(src)
    t = LoDTensor(np.concatenate([c.data for c in chunks]), [[0, 2, n + 2, n + 3]])
    assert sum((c.recursive_sequence_lengths[0] for c in chunks), []) == [2, n, 1]
    assert t.data[2:-1].tolist() == [i % 100_000 for i in range(n)]
    assert peak < 2 * 8 * n + 32 * _BUFFER, peak  # the values (and their copy into one array), not the text


def test_a_number_too_long_for_any_dtype_is_refused_in_bounded_memory(tmp_path):
    src = tmp_path / "absurd.jsonl"
    src.write_bytes(b"[1, 2]\n[3, 1" + b"7" * (100 * _BUFFER) + b"]\n")
    import tracemalloc

    tracemalloc.start()
    try:
        with pytest.raises(LodInputError) as info:
            list(iter_json(str(src), fast=True, chunk_bytes=_BUFFER))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert str(info.value) == (f"{src}:2:5: an integer of {100 * _BUFFER + 1:,} digits; no dtype holds it (int64 and "
                               "uint64 end at 20 digits, float64 at 309): shorten it, or write it as a float literal "
                               "below 1.8e308 (or Infinity)")
    assert peak < 32 * _BUFFER, peak


_PAD = b" 1," * 40  # 120 bytes: lines many times a 16-byte buffer


@pytest.mark.parametrize("line", [
    b"[1," + _PAD + b"2,, 3]", b"[1," + _PAD + b" x]", b"[1.5," + _PAD + b"1e400]",
    b"[1," + _PAD + b"99999999999999999999999]", b"[1," + _PAD + b"2,", b"[1," + _PAD + b"true]",
    b"[1," + _PAD + b"2] x", b"[1," + _PAD + b"2] [3]", b"[1," + _PAD + b"1" + b"2" * 5000 + b"]",
    b"[1," + _PAD + b"0123]", b"[1," + _PAD + b"1.e5]", b"[1," + _PAD + b"12345678901234567890123.x]",
    b"[0.5," + _PAD + b"9007199254740993]", b"[9007199254740993," + _PAD + b"0.5]", b"[1," + _PAD + b"-]",
    b"[1," + _PAD + b"2]   ,",
])
def test_errors_in_a_line_longer_than_the_buffer_are_the_general_paths(line):
    text = b"[1, 2]\n" + line + b"\n[3]\n"
    with pytest.raises(LodInputError) as whole:
        list(iter_json(text, "jsonl", name="x", fast=False))
    for chunk_bytes in (16, 50):  # the line's start is read and dropped before its error
        with pytest.raises(LodInputError) as long:
            list(iter_json(text, "jsonl", name="x", fast=True, chunk_bytes=chunk_bytes))
        assert str(long.value) == str(whole.value)


@pytest.mark.parametrize("first, line, message", [
    (b"[1]", b"[1," + _PAD + b'"a"]', "x:2:124: a string where a number, true, false or '[' must be"),
    (b"[[1]]", b"[[1]," + _PAD.replace(b" 1", b"[1]") + b"[[2]]]",
     "x:2:167: this list nests deeper than the values before (2 list(s) deep)"),
    (b"[[1]]", b"[[1]," + _PAD.replace(b" 1", b"[1]") + b"3]", "x:2:166: the value here sits 1 list(s) deep, but 2 before"),
])
def test_other_errors_in_a_line_longer_than_the_buffer_name_their_place(first, line, message):
    text = first + b"\n" + line + b"\n"
    with pytest.raises(LodInputError, match="^x:2"):  # the general path words them by branch
        list(iter_json(text, "jsonl", name="x", fast=False))
    with pytest.raises(LodInputError, match=re.escape(message)):
        list(iter_json(text, "jsonl", name="x", fast=True, chunk_bytes=16))


@pytest.mark.parametrize("after", [b"[  NaN,0\n", b"[1,, 2]\n", b'[1, "a"]\n', b"[1e400]\n"])
def test_an_error_on_a_line_after_one_longer_than_the_buffer_names_its_own_line(after):
    text = b"[1," + _PAD + b"2]\n" + after + b"[3]\n"
    with pytest.raises(LodInputError) as whole:
        list(iter_json(text, "jsonl", name="x", fast=False))
    assert str(whole.value).startswith("x:2:")
    for chunk_bytes in (16, 50):
        with pytest.raises(LodInputError) as long:
            list(iter_json(text, "jsonl", name="x", fast=True, chunk_bytes=chunk_bytes))
        if b'"' in after:  # from_nested counts elements from where its text starts: only the place is the same
            assert str(long.value).split(": ")[0] == str(whole.value).split(": ")[0]
        else:
            assert str(long.value) == str(whole.value)


def test_an_integer_past_int64_is_refused_in_the_librarys_words(tmp_path):
    from lodtool.tasks import pack

    src = tmp_path / "u.jsonl"
    src.write_text("[[18446744073709551615]]\n")
    with pytest.raises(LodInputError, match=r"read it as uint64 \(0\.\.2\*\*64-1; dtype=uint64\) or as a float "
                                            r"\(dtype=float64\)$"):
        pack([str(src)], str(tmp_path / "u.lod.h5"))
    assert not (tmp_path / "u.lod.h5").exists()


@pytest.mark.skipif(not hasattr(__import__("os"), "mkfifo"), reason="named pipes are POSIX")
def test_a_json_document_on_a_named_pipe_is_spooled_for_the_general_path(tmp_path):
    # the general path read the path again, and a named pipe read twice is empty the second time
    import os
    import threading

    fifo = tmp_path / "in.json"
    os.mkfifo(fifo)

    def write():
        with open(fifo, "wb") as f:
            f.write(b'[[1, 2], ["a"]]')

    def read():
        try:
            read_json(str(fifo), "json", fast=True)
        except LodInputError as exc:
            errors.append(str(exc))

    errors: list[str] = []
    threads = [threading.Thread(target=f, daemon=True) for f in (write, read)]
    for t in threads:
        t.start()
    threads[1].join(60)  # reading the pipe again would wait for a writer that never comes
    assert not threads[1].is_alive() and len(errors) == 1
    assert re.search(r"in\.json:1:11: element 2 \(branch <1,0>\) is 'a', not a number$", errors[0]), errors
