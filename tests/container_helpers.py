"""Shared helpers of the container tests (tests/test_container_*.py): sample tensors, file names, fixtures."""

from __future__ import annotations

import itertools
import os
import tempfile

import numpy as np
import pytest

from lodtool import LoDTensor
from lodtool.container import writer
from lodtool.errors import LodIndexError, LodValidationError

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ARTICLES = [[3, 1, 2], [3, 2, 4, 1, 2, 3]]


def articles(**kw) -> LoDTensor:
    return LoDTensor(np.arange(1, 16), recursive_sequence_lengths=ARTICLES, **kw)


_TMP = tempfile.TemporaryDirectory(prefix="lodtool-test-")  # removed when the interpreter exits
_COUNT = itertools.count()


def tmpfile(name: str = "t.lod.h5") -> str:
    """A fresh file name (hypothesis tests cannot use pytest's function-scoped tmp_path)."""
    folder = os.path.join(_TMP.name, str(next(_COUNT)))
    os.mkdir(folder)
    return os.path.join(folder, name)


@pytest.fixture
def path(tmp_path) -> str:
    return str(tmp_path / "t.lod.h5")


def same(a: LoDTensor, b: LoDTensor) -> bool:
    return a.equals(b) and a.level_names == b.level_names


def raises_same(fn_a, fn_b):
    """Both calls give equal tensors, or both raise the same error type and message."""
    try:
        a = fn_a()
    except (LodIndexError, LodValidationError) as exc:
        with pytest.raises(type(exc)) as info:
            fn_b()
        assert str(info.value) == str(exc)
        return
    b = fn_b()
    assert same(a, b), (a, b)



@pytest.fixture
def small_chunks(monkeypatch):
    """Chunks of 64 bytes, so a handful of rows spans several chunks and buffer boundaries."""
    monkeypatch.setattr(writer, "STORAGE_CHUNK_BYTES", 64)
    monkeypatch.setattr(writer, "MIN_CHUNK_BYTES", 16)
