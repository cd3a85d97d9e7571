"""The byte scanner itself: an item scanned in two parts, cut anywhere, gives what one scan gives; numbers read in
pieces (NumberText) give what the whole token gives."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from lodtool.io import _jsonscan as js

NUMBER = st.from_regex(r"\A-?(0|[1-9][0-9]{0,40})(\.[0-9]{1,40})?([eE][+-]?[0-9]{1,4})?\Z", fullmatch=True)
BLANKS = st.text(" \t\r", max_size=3)


def _scan(scanner: js.Scanner, text: bytes, final: bool, resume: bool):
    buf = np.frombuffer(bytearray(text), dtype=np.uint8)
    status = scanner.scan(buf, 0, len(buf), final=final, resume=resume)
    if status == js.FALLBACK:
        return status, None
    lengths, depths = scanner.lengths()
    return status, (scanner.values(), lengths.copy(), depths.copy(), int(scanner.state[js.ITEMS]))


def _in_two(text: bytes, cut: int, jsonl: bool):
    """Scan ``text[:cut]`` leaving an item open where it ends, then the rest from where the scan stopped, as a
    reader does when it drops what was scanned and reads on; the outputs of both, joined."""
    scanner = js.Scanner(jsonl)
    status, first = _scan(scanner, text[:cut], final=False, resume=True)
    if first is None:
        return None
    rest = text[int(scanner.state[js.POS]):]
    status, second = _scan(scanner, rest, final=True, resume=False)
    if second is None:
        return None
    values = np.concatenate([first[0], second[0]]) if first[0].size else second[0]
    return (values, np.concatenate([first[1], second[1]]), np.concatenate([first[2], second[2]]),
            first[3] + second[3])


@st.composite
def texts(draw):
    """JSON Lines or a JSON document of lists of numbers (or booleans), with blanks between the tokens."""
    kind = draw(st.sampled_from(["number", "bool", "string"]))
    leaf = {"number": NUMBER, "bool": st.sampled_from(["true", "false"]),
            "string": st.text(max_size=4).map(json.dumps)}[kind]  # escapes and all: refused however cut
    depth = draw(st.integers(1, 3))
    n_items = draw(st.integers(1, 3))

    def value(d):
        if d == 0:
            return draw(leaf)
        items = [value(d - 1) for _ in range(draw(st.integers(0, 3)))]
        return "[" + ",".join(draw(BLANKS) + x + draw(BLANKS) for x in items) + "]"

    items = [value(depth) for _ in range(n_items)]
    if draw(st.booleans()):
        return True, "".join(draw(BLANKS) + x + draw(BLANKS) + "\n" for x in items).encode()
    return False, ("[" + ",\n".join(items) + "]").encode()


@given(texts(), st.data())
def test_an_item_cut_anywhere_scans_as_if_whole(case, data):
    jsonl, text = case
    cut = data.draw(st.integers(0, len(text)))
    whole = js.scan_bytes(text, jsonl=jsonl)
    parts = _in_two(text, cut, jsonl)
    if whole.status == js.FALLBACK:  # a string, or a float beyond float64: refused either way
        assert parts is None
        return
    assert parts is not None, (text, cut)
    values, lengths, depths, items = parts
    assert values.dtype == whole.values().dtype or values.dtype == np.float64
    assert values.tolist() == whole.values().tolist()
    assert np.array_equal(np.signbit(values), np.signbit(whole.values()))
    assert lengths.tolist() == whole.lengths.tolist() and depths.tolist() == whole.depths.tolist()
    assert items == len(whole.item_newlines)


def test_a_cut_between_an_item_and_its_newline_still_refuses_what_follows_on_the_line():
    scanner = js.Scanner(True)
    assert _scan(scanner, b"[1, 2]  ", final=False, resume=True)[0] == js.DONE
    assert scanner.state[js.TAIL]
    assert _scan(scanner, b" [3]\n", final=True, resume=False)[0] == js.FALLBACK
    assert scanner.state[js.ERRCODE] == js.E_SYNTAX


def test_an_open_item_keeps_its_float_mode_and_its_nesting():
    scanner = js.Scanner(True)
    status, (values, *_rest) = _scan(scanner, b"[[1.5], [", final=False, resume=True)
    assert status == js.NEED_MORE and scanner.is_open and values.tolist() == [1.5]
    status, (values, lengths, depths, items) = _scan(scanner, b"2]]\n", final=True, resume=False)
    assert status == js.DONE and values.dtype == np.float64 and values.tolist() == [2.0]
    assert lengths.tolist() == [1, 2] and depths.tolist() == [2, 1] and items == 1  # [2], then the line
    scanner = js.Scanner(True)
    _scan(scanner, b"[[1], ", final=False, resume=True)
    assert _scan(scanner, b"[[2]]]\n", final=True, resume=False)[0] == js.FALLBACK  # nests deeper than before
    assert scanner.state[js.ERRCODE] == js.E_NEST


@given(NUMBER, st.data())
def test_a_number_read_in_pieces_reads_as_whole(token, data):
    raw = token.encode()
    cuts = sorted(data.draw(st.lists(st.integers(0, len(raw)), max_size=3)))
    number = js.NumberText()
    bounds = [0] + cuts + [len(raw)]
    for a, b in zip(bounds, bounds[1:]):
        assert number.feed(raw[a:b]) == -1
    assert number.feed(b",") == 0
    assert number.length == number.valid == len(raw)
    assert number.is_integer == (not any(c in token for c in ".eE"))
    assert float(number.text()) == float(token) or (float(token) != float(token))


@given(st.text("0123456789.eE+-", min_size=1, max_size=12))
def test_a_numbers_valid_prefix_is_what_json_reads(token):
    number = js.NumberText()
    number.feed(token.encode() + b"]")
    prefix = token[:number.valid]
    try:
        json.loads(prefix)
        valid = bool(prefix)
    except json.JSONDecodeError:
        valid = False
    assert valid == bool(number.valid)
    for longer in range(number.valid + 1, len(token) + 1):  # nothing longer is a number
        with pytest.raises(json.JSONDecodeError):
            json.loads(token[:longer])
