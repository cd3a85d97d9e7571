"""Hostile offsets through every operator's public API: a broken LoD never reaches a kernel.

A tensor built with ``validate=False`` is checked at its first use by an operator, and a tensor's offsets
cannot be changed after it was built (they are read-only views the tensor owns).  Before, both ways ended in
a segmentation fault inside the compiled kernels.
"""

from __future__ import annotations

import numpy as np
import pytest

from lodtool import LoDTensor, LodError, ops

#: offsets that break a rule in each way a kernel could trip over: a decrease, past the rows, negative, too short
HOSTILE = {
    "decreasing": [0, 5, 2, 8],
    "past the rows": [0, 3, 1 << 40],
    "negative": [0, -4, 8],
    "first not zero": [3, 5, 8],
}


def _x(offsets, dtype=np.float32, width=None):
    data = np.arange(8).astype(dtype)
    return LoDTensor(data if width is None else np.repeat(data[:, None], width, 1), [offsets], validate=False)


VALID = [0, 3, 8]

#: each operator's public call, given an unchecked tensor made by ``make(offsets)``
CALLS = {
    "sequence_pool": (_x, lambda x: ops.sequence_pool(x, "sum")),
    "sequence_first_step": (_x, ops.sequence_first_step),
    "sequence_last_step": (_x, ops.sequence_last_step),
    "sequence_softmax": (_x, ops.sequence_softmax),
    "sequence_reverse": (_x, ops.sequence_reverse),
    "sequence_pad": (_x, lambda x: ops.sequence_pad(x, 0.0)),
    "sequence_expand (x)": (_x, lambda x: ops.sequence_expand(x, LoDTensor(np.zeros(2), [[0, 1, 2]]))),
    "sequence_expand (y)": (_x, lambda x: ops.sequence_expand(np.arange(2.0), x)),
    "sequence_expand_as": (_x, lambda x: ops.sequence_expand_as(np.arange(2.0), x)),
    "sequence_concat": (_x, lambda x: ops.sequence_concat([x, x])),
    "sequence_enumerate": (lambda o: _x(o, np.int64), lambda x: ops.sequence_enumerate(x, 2)),
    "sequence_erase": (lambda o: _x(o, np.int64), lambda x: ops.sequence_erase(x, [1])),
    "sequence_reshape": (lambda o: _x(o, width=2), lambda x: ops.sequence_reshape(x, 1)),
    "sequence_slice": (_x, lambda x: ops.sequence_slice(x, [0, 0], [1, 1])),
    "sequence_conv": (lambda o: _x(o, width=1), lambda x: ops.sequence_conv(x, np.ones((3, 1), np.float32), 3)),
    "pack_plan": (_x, ops.pack_plan),
    "lod_reset (y)": (_x, lambda x: ops.lod_reset(np.arange(8.0), x)),
    "lod_reset (x)": (_x, lambda x: ops.lod_reset(x, target_lod=[0, 8])),
}


@pytest.mark.parametrize("how", list(HOSTILE))
@pytest.mark.parametrize("name", list(CALLS))
def test_unchecked_offsets_are_refused_before_a_kernel(name, how):
    make, call = CALLS[name]
    call(make(VALID))  # the same call runs its kernels on a sound index
    with pytest.raises(LodError):
        call(make(HOSTILE[how]))


def test_offsets_cannot_be_mutated_after_construction():
    x = LoDTensor(np.arange(8, dtype=np.float32), [[0, 3, 8]])
    with pytest.raises(ValueError, match="read-only"):
        x.offsets[0][1] = 1 << 40
    with pytest.raises(ValueError, match="read-only"):
        np.asarray(x.offsets[0])[2] = -5
    for out in (ops.sequence_pool(x, "sum"), ops.sequence_reverse(x), x.branch(1), x[0:1]):
        assert all(not o.flags.writeable for o in out.offsets)
    assert x.lod == [[0, 3, 8]]


def test_offsets_the_caller_can_still_write_are_checked_at_every_use():
    given = np.array([0, 3, 8])
    x = LoDTensor(np.arange(8, dtype=np.float32), [given], validate=False)  # zero-copy, as a bridge builds it
    assert np.shares_memory(x.offsets[0], given)
    assert ops.sequence_pool(x, "sum").data.tolist() == [3.0, 25.0]
    given[1] = 1 << 40  # the caller changes its array after a first, sound use
    with pytest.raises(LodError):
        ops.sequence_pool(x, "sum")
