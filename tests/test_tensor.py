"""LoDTensor and nested-list conversion."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, strategies as st

import lodtool
from lodtool import LoDTensor, from_nested
from lodtool.errors import LodDtypeError, LodIndexError, LodShapeError, LodUsageError

from .strategies import lod_tensors

ARTICLES = [[[1, 2, 3], [4, 5], [6, 7, 8, 9]], [[10]], [[11, 12], [13, 14, 15]]]


def test_properties_of_the_paddle_doc_example():
    data = np.arange(1, 15).reshape(7, 2)
    t = LoDTensor(data, recursive_sequence_lengths=[[2, 1], [2, 2, 3]])
    assert t.lod == [[0, 2, 3], [0, 2, 4, 7]]
    assert t.recursive_sequence_lengths == [[2, 1], [2, 2, 3]]
    assert t.lod_level == 2 and t.shape == (7, 2) and t.dtype == np.int64 and t.element_shape == (2,)
    assert len(t) == 2
    assert np.asarray(t) is data
    same = LoDTensor(data, lod=[[0, 2, 3], [0, 2, 4, 7]])
    assert same.equals(t)


def test_zero_level_tensor_is_plain():
    t = LoDTensor(np.zeros((5, 3)))
    assert t.lod == [] and t.lod_level == 0 and len(t) == 5
    assert t.head(2).shape == (2, 3)


def test_lod_and_lengths_together_is_an_error():
    with pytest.raises(LodUsageError):
        LoDTensor(np.zeros(3), lod=[[0, 3]], recursive_sequence_lengths=[[3]])


def test_video_batch_element_shape():
    frames = np.zeros((6, 48, 64), np.uint8)
    t = LoDTensor(frames, recursive_sequence_lengths=[[3, 1, 2]])
    assert t.element_shape == (48, 64)
    assert t.branch(2).shape == (2, 48, 64)


def test_refuses_object_and_string_data():
    with pytest.raises(LodDtypeError):
        LoDTensor(np.array(["a", "b"]))
    with pytest.raises(LodDtypeError):
        LoDTensor(np.array([object(), 1], dtype=object))


def test_seed_slices():
    t = from_nested(ARTICLES, level_names=["article", "sentence"])
    two = t.branch(2)
    assert two.lod == [[0, 2, 5]] and two.data.tolist() == [11, 12, 13, 14, 15]
    assert two.level_names == ("sentence",)
    two_zero = t.branch(2, 0)
    assert two_zero.lod_level == 0 and two_zero.data.tolist() == [11, 12]
    assert t[2, 0].equals(two_zero) and t[-1].equals(two)


def test_slice_level():
    t = from_nested(ARTICLES)
    s = t.slice_level(0, 1, 3)
    assert s.to_nested() == ARTICLES[1:]
    s = t.slice_level(1, 2, 4)
    assert s.lod == [[0, 4, 5]] and s.to_nested() == [[6, 7, 8, 9], [10]]
    empty = t.slice_level(1, 4, 4)  # an empty range: zero sequences, a value like any other
    assert empty.lod == [[0]] and empty.shape == (0,) and empty.to_nested() == []
    with pytest.raises(LodIndexError):
        t.slice_level(1, 4, 3)
    with pytest.raises(LodIndexError):
        t.slice_level(2, 0, 1)


def test_empty_value():
    t = LoDTensor(np.zeros((0, 2), np.float32), [[0], [0]])
    assert len(t) == 0 and t.to_nested() == [] and t.head().lod == [[0], [0]] and t.tail().lod == [[0], [0]]
    assert from_nested([], lod_level=1).lod == [[0]]
    with pytest.raises(LodIndexError, match="it is empty"):
        t.branch(0)


def test_head_tail():
    t = from_nested(ARTICLES)
    assert t.head(2).to_nested() == ARTICLES[:2]
    assert t.tail(1).to_nested() == ARTICLES[-1:]
    assert t.tail(99).to_nested() == ARTICLES


def test_branch_errors():
    t = from_nested([[[1], []], [], [[2]]])
    assert t.branch(0, 1).shape == (0,)  # an empty leaf sequence is a 0-row tensor
    with pytest.raises(LodIndexError, match="it is empty"):
        t.branch(1, 0)
    no_sentences = t.branch(1)  # a document with no sentences: zero sequences, an empty tensor
    assert no_sentences.lod == [[0]] and no_sentences.shape == (0,) and no_sentences.to_nested() == []
    with pytest.raises(LodIndexError, match="0-level"):
        LoDTensor(np.zeros(3)).branch(0)
    assert t[1:2].to_nested() == [[]]  # a slice is top-level sequences (here the empty document)
    with pytest.raises(LodIndexError):
        t[::2]


def test_from_nested_depths():
    assert from_nested([1, 2, 3]).lod_level == 0
    t = from_nested([[], [1, 2]])
    assert t.lod == [[0, 0, 2]]
    t = from_nested([[[1.0, 2.0], [3.0, 4.0]], [[5.0, 6.0]]], lod_level=1)
    assert t.lod == [[0, 2, 3]] and t.element_shape == (2,)
    t = from_nested([[[1, 2]], [[3]]], lod_level=2, dtype="int16")
    assert t.dtype == np.int16


@pytest.mark.parametrize("obj, kwargs, error, text", [
    ([[1, [2]]], {}, LodShapeError, "element 1 (branch <0,1>)"),
    ([[[]], [1]], {}, LodShapeError, "inconsistent nesting at <1,0>"),
    ([[[1, 2], [3]]], {"lod_level": 1}, LodShapeError, "element 1 (branch <0,1>) has shape (1,)"),
    ([[1, "a"]], {}, LodDtypeError, "branch <0,1>"),
    ([[1, None]], {}, LodDtypeError, "is None"),
    (5, {}, LodShapeError, "expected a list"),
])
def test_from_nested_errors(obj, kwargs, error, text):
    with pytest.raises(error) as err:
        from_nested(obj, **kwargs)
    assert text in str(err.value)


def test_deep_nesting_does_not_recurse():
    deep: list = []
    cur = deep
    for _ in range(100_000):
        nxt: list = []
        cur.append(nxt)
        cur = nxt
    assert from_nested(deep).lod_level == 100_000


@given(lod_tensors())
def test_nested_round_trip(t):
    back = from_nested(t.to_nested(), lod_level=t.lod_level, dtype=t.dtype)
    assert back.lod == t.lod
    assert np.array_equal(back.data.reshape(t.shape), t.data)


@given(lod_tensors(min_levels=1), st.data())
def test_branch_equals_nested_slicing(t, data):
    nested = t.to_nested()
    path = []
    node = nested
    for _ in range(data.draw(st.integers(1, t.lod_level))):
        if not node:
            break
        i = data.draw(st.integers(-len(node), len(node) - 1))
        path.append(i)
        node = node[i]
    if not path:
        return
    part = t.branch(*path)  # a sub-tree with nothing below is a tensor of zero sequences
    assert part.to_nested() == node


def test_public_api_surface():
    for name in ("LoDTensor", "from_nested", "open", "load", "save", "pack", "unpack", "LodError"):
        assert name in dir(lodtool)


# -- devices (the GPU path itself is tested in test_gpu_sim.py's simulator run and in test_gpu.py) --

class _DeviceLevel:
    """Stands in for a CuPy offsets array: only ``__cuda_array_interface__`` and ``.get()``."""

    __cuda_array_interface__: dict = {}

    def __init__(self, values):
        self.values = np.asarray(values)

    def get(self):
        return self.values.copy()


def test_device_and_to_on_the_host():
    t = LoDTensor(np.arange(3), [[0, 1, 3]])
    assert t.device == "cpu" and t.to("cpu") is t
    with pytest.raises(LodUsageError, match="unknown device 'tpu'"):
        t.to("tpu")


def test_host_data_takes_device_offsets_to_the_host():
    t = LoDTensor(np.arange(3), [_DeviceLevel([0, 1, 3])])
    assert isinstance(t.offsets[0], np.ndarray) and t.lod == [[0, 1, 3]]
    with pytest.raises(lodtool.LodValidationError, match="must not decrease"):
        LoDTensor(np.arange(3), [_DeviceLevel([0, 2, 1, 3])])
    t = LoDTensor(np.arange(3), recursive_sequence_lengths=[_DeviceLevel([1, 2])])
    assert t.lod == [[0, 1, 3]]


def test_to_cuda_needs_only_cupy():
    # no hook to install and no operator module to import: a fresh interpreter reaches CuPy (or says it is missing)
    code = ("import sys, numpy as np, lodtool\n"
            "try:\n"
            "    lodtool.LoDTensor(np.arange(3), [[0, 1, 3]]).to('cuda')\n"
            "except lodtool.LodBackendError as exc:\n"
            "    print('error:', exc)\n"
            "else:\n"
            "    print('moved')\n"
            "print('ops loaded:', 'lodtool.ops' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert "ops loaded: False" in out
    assert "moved" in out or "needs CuPy" in out or "needs a CUDA GPU" in out


def test_offsets_are_read_only_and_owned():
    given = np.array([0, 2, 3])
    t = LoDTensor(np.arange(3), [given])
    with pytest.raises(ValueError, match="read-only"):
        t.offsets[0][1] = 5
    given[1] = 7  # the caller's array is not the tensor's
    assert t.lod == [[0, 2, 3]]
    assert t.branch(1).offsets == () and t.slice_level(0, 0, 1).offsets[0].flags.writeable is False
    frozen = np.array([0, 1, 3])
    frozen.flags.writeable = False  # memory nobody can write (an Arrow buffer, a read-only map) is not copied
    assert np.shares_memory(LoDTensor(np.arange(3), [frozen]).offsets[0], frozen)
    behind = np.array([0, 1, 3])
    view = behind[:]
    view.flags.writeable = False  # but a read-only view of a writable array is
    assert not np.shares_memory(LoDTensor(np.arange(3), [view]).offsets[0], behind)


def test_unchecked_tensor_is_checked_at_first_use():
    t = LoDTensor(np.arange(3), [[0, 3, 1, 3]], validate=False)  # built as asked, not checked yet
    with pytest.raises(lodtool.LodValidationError, match="must not decrease"):
        t.checked()
    good = LoDTensor(np.arange(3), [[0, 1, 3]], validate=False)
    assert good.checked() is good and good.lod == [[0, 1, 3]]
