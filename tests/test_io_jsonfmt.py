"""The compiled JSON formatter writes integer and bool tensors byte for byte as orjson does."""

from __future__ import annotations

import io

import numpy as np
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lodtool import LoDTensor
from lodtool.io import json as json_io
from lodtool.io._jsonfmt import encode_lines

DTYPES = ["int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "bool"]


@st.composite
def tensors(draw):
    dtype = np.dtype(draw(st.sampled_from(DTYPES)))
    top = draw(st.lists(st.lists(st.integers(0, 4), max_size=4), min_size=1, max_size=6))
    lens0 = [len(t) for t in top]
    lens1 = [n for t in top for n in t]
    two = draw(st.booleans()) and len(lens1) > 0  # a level needs a sequence
    n = sum(lens1) if two else sum(lens0)
    shape = draw(st.sampled_from([(), (2,), (1, 3), (0,)]))
    if dtype.kind == "b":
        data = np.array(draw(st.lists(st.booleans(), min_size=n * int(np.prod(shape)),
                                      max_size=n * int(np.prod(shape)))), bool)
    else:
        info = np.iinfo(dtype)
        edge = st.sampled_from([int(info.min), int(info.max), 0, -1 if info.min < 0 else 1, 9, 10, 99, 100])
        data = np.array(draw(st.lists(st.one_of(st.integers(int(info.min), int(info.max)), edge),
                                      min_size=n * int(np.prod(shape)), max_size=n * int(np.prod(shape)))),
                        dtype)
    data = data.reshape((n,) + shape)
    return LoDTensor(data, recursive_sequence_lengths=[lens0, lens1] if two else [lens0])


def _orjson_lines(t: LoDTensor) -> bytes:
    return b"".join(orjson.dumps(seq) + b"\n" for seq in t.to_nested())


@settings(max_examples=150, deadline=None)
@given(t=tensors())
def test_the_formatter_writes_orjsons_bytes(t):
    assert encode_lines(t.data, t.offsets, t.element_shape).tobytes() == _orjson_lines(t)


@pytest.mark.parametrize("fmt", ["json", "jsonl"])
@settings(max_examples=40, deadline=None)
@given(t=tensors())
def test_write_json_is_the_same_across_the_tier_boundary(fmt, t):
    with pytest.MonkeyPatch.context() as m:
        outs = []
        for crossover in ((1 << 62, 1 << 62), (0, 0)):
            m.setattr(json_io, "FORMAT_FROM_VALUES", crossover)
            buf = io.BytesIO()
            json_io.write_json([t, t], buf, fmt)  # two chunks: the separators between them too
            outs.append(buf.getvalue())
    assert outs[0] == outs[1]
    expected = _orjson_lines(t) * 2 if fmt == "jsonl" else orjson.dumps(t.to_nested() * 2) + b"\n"
    assert outs[1] == expected
