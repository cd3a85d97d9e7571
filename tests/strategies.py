"""Hypothesis strategies for random LoD tensors and nested lists."""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from lodtool import LoDTensor

ELEMENT_SHAPES = [(), (1,), (3,), (2, 2)]
DTYPES = ["int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
          "float16", "float32", "float64", "bool"]


@st.composite
def lod_lengths(draw, min_levels: int = 1, max_levels: int = 3, max_seqs: int = 6, max_len: int = 5,
                allow_empty: bool = True):
    """A ``recursive_sequence_lengths`` table (each level's count matches the sum above)."""
    n_levels = draw(st.integers(min_levels, max_levels))
    lo = 0 if allow_empty else 1
    count = draw(st.integers(1, max_seqs))
    table = []
    for level in range(n_levels):
        lengths = draw(st.lists(st.integers(lo, max_len), min_size=count, max_size=count))
        if level + 1 < n_levels and sum(lengths) == 0:
            lengths[-1] = 1  # Paddle: every level holds at least one sequence
        table.append(lengths)
        count = sum(lengths)
    return table


@st.composite
def lod_tensors(draw, min_levels: int = 1, max_levels: int = 3, dtypes=None, element_shapes=None,
                allow_empty: bool = True):
    """A valid LoDTensor with random LoD, dtype and element shape."""
    table = draw(lod_lengths(min_levels, max_levels, allow_empty=allow_empty))
    n_rows = sum(table[-1]) if table else draw(st.integers(1, 8))
    dtype = np.dtype(draw(st.sampled_from(dtypes or DTYPES)))
    shape = draw(st.sampled_from(element_shapes or ELEMENT_SHAPES))
    size = n_rows * int(np.prod(shape, dtype=np.int64))
    raw = draw(st.lists(st.integers(0, 100), min_size=size, max_size=size))
    data = np.array(raw, dtype=np.int64).astype(dtype).reshape((n_rows,) + shape)
    return LoDTensor(data, recursive_sequence_lengths=table or None)
