"""``pack_plan``: the RNN packing plan of a LoD level (Paddle's ``SortBySeqLen``, torch's PackedSequence).

An RNN over a batch of variable-length sequences runs time step by time step.
Sorting the sequences by decreasing length makes the batch of each step a
prefix of the sorted order, so step ``t`` holds the ``batch_sizes[t]`` sequences
longer than ``t``.  :func:`pack_plan` computes that plan from the offsets alone;
:func:`to_time_major` lays the rows out step by step (torch's
``PackedSequence.data``) and :func:`from_time_major` restores the original
layout exactly.

The sort is stable (ties keep their input order).  Empty sequences sort last
and appear in no step (torch refuses them).  For a level ``k`` above the last,
a time step is one sequence of level ``k+1``, as in Paddle's ``lod_rank_table``
and DynamicRNN (an outer RNN steps over sentences, not words): the steps move
whole sub-sequences, with everything under them.  A tensor on the GPU (CuPy
data or offsets, or ``device="cuda"``) gets a plan of CuPy arrays, and the
packing runs there too.

The per-step pieces of Paddle's DynamicRNN build on a plan:
:func:`lod_tensor_to_array` (the time steps as a list of LoD tensors) and
:func:`array_to_lod_tensor` (back), :func:`reorder_lod_tensor_by_rank` (a
tensor's top-level sequences in the plan's order) and :func:`shrink_memory`
(the first ``batch_sizes[t]`` sequences of an RNN's state).

>>> import numpy as np
>>> from lodtool import LoDTensor
>>> x = LoDTensor(np.arange(6), recursive_sequence_lengths=[[2, 3, 1]])
>>> plan = pack_plan(x)
>>> plan.sorted_indices.tolist(), plan.batch_sizes.tolist()
([1, 0, 2], [3, 2, 1])
>>> data, batch_sizes = to_time_major(x, plan)
>>> data.tolist()
[2, 0, 5, 3, 1, 4]
>>> from_time_major(data, plan).equals(x)
True
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Any

import numpy as np

from .._device import cupy_module, is_device_array
from .._jit import kernel, kernels_pay, parallel_blocks
from ..errors import LodShapeError, LodUsageError, LodValidationError
from ..lod import validate_lod
from ..tensor import LoDTensor, check_dtype
from . import _cuda
from ._backend import Crossover, get_backend
from ._segments import segment_rows
from ._util import U, as_tensor, as_words, empty_words, level_index, need_lod, row_offsets

OP = "pack_plan"


@dataclass(frozen=True, eq=False)
class PackPlan:
    """How the sequences of one level pack into time steps (all arrays int64, all on one device).

    * ``lengths[i]``: time steps of sequence ``i``, in input order: its rows at the
      last level, its sequences of level ``level + 1`` above it.
    * ``sorted_indices``: the sequences by decreasing length, ties in input order.
    * ``unsorted_indices``: the inverse permutation (``sorted_indices[unsorted_indices[i]] == i``).
    * ``batch_sizes[t]``: how many sequences are longer than ``t`` (one entry per step).
    * ``row_offsets``: where each sequence's rows start in the data (``n + 1`` entries).
    * ``lod``: the source tensor's offsets, so :func:`from_time_major` can rebuild it.
    * ``level``: the planned level (non-negative).
    * ``unit_offsets``: above the last level, where each sequence of level
      ``level + 1`` (one time step of a sequence) starts in the data rows; ``None``
      at the last level, where a time step is one row.
    """

    lengths: np.ndarray
    sorted_indices: np.ndarray
    unsorted_indices: np.ndarray
    batch_sizes: np.ndarray
    row_offsets: np.ndarray
    lod: tuple
    level: int
    unit_offsets: Any = None

    @property
    def num_sequences(self) -> int:
        return len(self.lengths)

    @property
    def num_steps(self) -> int:
        return len(self.batch_sizes)

    @property
    def n_rows(self) -> int:
        return int(self.row_offsets[-1])

    @property
    def device(self) -> str:
        """Where the plan's arrays are: ``"cpu"`` or ``"cuda"``."""
        return "cuda" if is_device_array(self.row_offsets) else "cpu"

    def to(self, device: str) -> "PackPlan":
        """The same plan with its arrays (and ``lod``) on ``device``, ``"cpu"`` or ``"cuda"``.

        >>> import numpy as np
        >>> from lodtool import LoDTensor
        >>> plan = pack_plan(LoDTensor(np.arange(3), [[0, 1, 3]]))
        >>> plan.to("cpu") is plan, plan.device
        (True, 'cpu')
        """
        if device == "cpu":
            move = _cuda.to_host
        elif device == "cuda":
            move = cupy_module().asarray
        else:
            raise LodUsageError(f"unknown device {device!r}; choose cpu or cuda")
        names = [f.name for f in fields(self) if f.name not in ("lod", "level")
                 and getattr(self, f.name) is not None]
        arrays = [getattr(self, name) for name in names]
        if all(is_device_array(a) == (device == "cuda") for a in arrays + list(self.lod)):
            return self
        moved = {name: move(getattr(self, name)) for name in names}
        return replace(self, lod=tuple(move(o) for o in self.lod), **moved)

    def step_offsets(self) -> np.ndarray:
        """Where each time step starts in the time-major data (``num_steps + 1`` entries)."""
        xp = _module_of(self.batch_sizes)
        out = xp.zeros(len(self.batch_sizes) + 1, np.int64)
        xp.cumsum(self.batch_sizes, out=out[1:])
        return out

    def step_row_offsets(self) -> np.ndarray:
        """Where each time step starts in the rows of the time-major data (host int64, ``num_steps + 1``).

        At the last level these are :meth:`step_offsets`; above it, a step's
        rows are those of its sub-sequences.
        """
        steps = _cuda.to_host(self.step_offsets())
        if self.unit_offsets is None:
            return steps
        order = _unit_order(self)
        sizes = np.diff(_cuda.to_host(self.unit_offsets))[order]
        rows = np.zeros(len(sizes) + 1, np.int64)
        np.cumsum(sizes, out=rows[1:])
        return rows[steps]

    def split(self, data: np.ndarray) -> list[np.ndarray]:
        """The time-major ``data`` as one view per step (``batch_sizes[t]`` rows each, at the last level).

        >>> import numpy as np
        >>> from lodtool import LoDTensor
        >>> x = LoDTensor(np.arange(3), recursive_sequence_lengths=[[1, 2]])
        >>> plan = pack_plan(x)
        >>> [s.tolist() for s in plan.split(to_time_major(x, plan)[0])]
        [[1, 0], [2]]
        """
        bounds = self.step_row_offsets().tolist()  # host ints: slicing with device scalars syncs each
        return [data[bounds[t]:bounds[t + 1]] for t in range(len(self.batch_sizes))]


#: sequences of pack_plan from which the Numba kernel beats the reference (docs/benchmarks.md, crossovers)
NUMBA_FROM = Crossover(cold=1 << 21, warm=1)



def pack_plan(x: LoDTensor, level: int = -1, *, backend: str | None = None, device: str | None = None) -> PackPlan:
    """The packing plan of the sequences of ``level`` (reads the offsets only).

    A sequence's length counts its time steps: rows at the last level, sequences
    of the next level above it (Paddle's ``lod_rank_table``).

    >>> import numpy as np
    >>> from lodtool import LoDTensor
    >>> plan = pack_plan(LoDTensor(np.arange(4), recursive_sequence_lengths=[[1, 0, 3]]))
    >>> plan.sorted_indices.tolist(), plan.unsorted_indices.tolist(), plan.batch_sizes.tolist()
    ([2, 0, 1], [1, 2, 0], [2, 1, 1])
    >>> x = LoDTensor(np.zeros((17, 1)), recursive_sequence_lengths=[[1, 2], [5, 1, 1], [3, 1, 5, 1, 3, 3, 1]])
    >>> plan = pack_plan(x, level=1)  # the issue's example: an outer RNN steps over sentences
    >>> list(zip(plan.sorted_indices.tolist(), plan.lengths[plan.sorted_indices].tolist()))
    [(0, 5), (1, 1), (2, 1)]
    """
    xt = as_tensor(x, "x")
    need_lod(xt, OP)
    lvl = level_index(xt, level, OP)
    be = get_backend((xt.data, *xt.offsets), backend, device, work=_sequences(xt, lvl), crossover=NUMBA_FROM)
    upper = lvl + 1 < xt.lod_level
    if be.name == "cupy":
        # every level is checked on the device before row_offsets indexes with them
        levels = _cuda.validate_offsets(be.xp, xt.offsets, xt.n_rows)
        roff = _cuda.row_offsets(be.xp, levels, lvl)
        units = _cuda.row_offsets(be.xp, levels, lvl + 1) if upper else None
        lengths, sorted_idx, unsorted_idx, batch_sizes = cuda_pack_plan(be.xp, levels[lvl], validated=True)
        return PackPlan(lengths, sorted_idx, unsorted_idx, batch_sizes, roff, tuple(levels), lvl, units)
    roff = row_offsets(xt.offsets, lvl)
    units = row_offsets(xt.offsets, lvl + 1) if upper else None
    steps = xt.offsets[lvl]
    lengths = steps[1:] - steps[:-1]
    if be.name == "numpy":
        sorted_idx, unsorted_idx, batch_sizes = _reference(lengths)
    else:
        n = len(lengths)
        histogram = np.zeros((int(lengths.max()) if n else 0) + 1, np.int64)
        _count_lengths(lengths, histogram)
        starts = first_positions(histogram)
        batch_sizes = starts[:-1].copy()
        unsorted_idx = np.empty(n, np.int64)
        _place(lengths, starts, unsorted_idx)
        sorted_idx = np.empty(n, np.int64)
        sorted_idx[unsorted_idx] = np.arange(n, dtype=np.int64)
    return PackPlan(lengths, sorted_idx, unsorted_idx, batch_sizes, roff, tuple(xt.offsets), lvl, units)


def _reference(lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The plain NumPy plan: a stable argsort by decreasing length and a histogram."""
    n = len(lengths)
    sorted_idx = np.argsort(-lengths, kind="stable").astype(np.int64, copy=False)
    unsorted_idx = np.empty(n, np.int64)
    unsorted_idx[sorted_idx] = np.arange(n, dtype=np.int64)
    maxlen = int(lengths.max()) if n else 0
    at_most = np.cumsum(np.bincount(lengths, minlength=maxlen + 1))[:maxlen]
    return sorted_idx, unsorted_idx, (n - at_most).astype(np.int64)


def count_lengths(lengths: np.ndarray, histogram: np.ndarray) -> None:
    """Add how many of ``lengths`` have each length into ``histogram`` (one entry per length ``0..maxlen``).

    A plan built piece by piece (:func:`place_by_length`) counts every piece first.

    >>> h = np.zeros(4, np.int64)
    >>> count_lengths(np.array([3, 0, 3]), h); count_lengths(np.array([1]), h)
    >>> h.tolist()
    [1, 1, 0, 2]
    """
    if kernels_pay(len(lengths), NUMBA_FROM.cold, NUMBA_FROM.warm):
        _count_lengths(lengths, histogram)
    else:
        values, counts = np.unique(lengths, return_counts=True)
        histogram[values] += counts


def first_positions(histogram: np.ndarray) -> np.ndarray:
    """Where the first sequence of each length goes in the plan's order: ``[L]`` counts the longer ones.

    Its first ``maxlen`` entries are the plan's batch sizes (step ``t`` holds the sequences longer than ``t``).

    >>> first_positions(np.array([1, 1, 0, 2])).tolist()
    [3, 2, 2, 0]
    """
    longer = np.zeros(len(histogram), np.int64)
    np.cumsum(histogram[:0:-1], out=longer[-2::-1])
    return longer


def place_by_length(lengths: np.ndarray, next_position: np.ndarray) -> np.ndarray:
    """The plan position of each of ``lengths`` (sequences in input order), taking ``next_position[L]`` for the
    next sequence of length ``L`` and moving it on: the stable counting sort by decreasing length, one piece of
    the sequences at a time, started from :func:`first_positions`.

    >>> starts = first_positions(np.array([1, 1, 0, 2]))
    >>> place_by_length(np.array([3, 0]), starts).tolist(), place_by_length(np.array([3, 1]), starts).tolist()
    ([0, 3], [1, 2])
    """
    out = np.empty(len(lengths), np.int64)
    if kernels_pay(len(lengths), NUMBA_FROM.cold, NUMBA_FROM.warm):
        _place(lengths, next_position, out)
        return out
    order = np.argsort(lengths, kind="stable")
    ordered = lengths[order]
    firsts = np.flatnonzero(np.concatenate(([True], ordered[1:] != ordered[:-1])))
    counts = np.diff(np.append(firsts, len(lengths)))
    rank = np.arange(len(lengths), dtype=np.int64) - np.repeat(firsts, counts)
    out[order] = next_position[ordered] + rank
    next_position[ordered[firsts]] += counts
    return out


@kernel
def _count_lengths(lengths, histogram):  # pragma: no cover - compiled by Numba
    for i in range(lengths.shape[0]):
        histogram[lengths[i]] += 1


@kernel
def _place(lengths, next_position, out):  # pragma: no cover - compiled by Numba
    """A stable counting sort by decreasing length: ``out[i]`` is sequence ``i``'s place in the plan."""
    for i in range(lengths.shape[0]):
        p = next_position[lengths[i]]
        out[i] = p
        next_position[lengths[i]] = p + 1


def _sequences(xt: LoDTensor, level: int) -> int:
    return int(xt.offsets[level].shape[0]) - 1


def _module_of(a: Any):
    return cupy_module() if is_device_array(a) else np


def _check_plan(plan: PackPlan, op: str) -> None:
    """Refuse a plan whose arrays do not fit together (a hand-made one could send a kernel out of bounds).

    O(sequences + steps), on the plan's device: cheap next to moving the rows.
    """
    if not isinstance(plan, PackPlan):
        raise LodUsageError(f"{op}: plan must be a PackPlan from pack_plan(), got {type(plan).__name__}")
    lengths, order, inverse = plan.lengths, plan.sorted_indices, plan.unsorted_indices
    arrays = (lengths, order, inverse, plan.batch_sizes, plan.row_offsets)
    on_gpu = [is_device_array(a) for a in arrays]
    if any(on_gpu) and not all(on_gpu):
        raise LodValidationError(f"{op}: the plan's arrays must all be on one device")
    xp = cupy_module() if all(on_gpu) else np
    n = len(lengths)
    if any(not isinstance(a, xp.ndarray) or a.dtype != np.int64 or a.ndim != 1 for a in arrays):
        raise LodValidationError(f"{op}: the plan's arrays must be 1-D int64 arrays")
    if len(order) != n or len(inverse) != n or len(plan.row_offsets) != n + 1:
        raise LodValidationError(f"{op}: the plan's arrays have inconsistent lengths")
    if xp is np:
        validate_lod([plan.row_offsets], int(plan.row_offsets[-1]))
    else:
        _cuda.validate_offsets(xp, [plan.row_offsets], None)
    if plan.unit_offsets is None:
        steps = plan.row_offsets
    else:  # above the last level: the steps are sequences of the next level, each spanning unit_offsets rows
        units = plan.unit_offsets
        if not isinstance(units, xp.ndarray) or units.dtype != np.int64 or units.ndim != 1 or \
                not 0 <= plan.level < len(plan.lod):
            raise LodValidationError(f"{op}: the plan's unit offsets must be a 1-D int64 array")
        steps = xp.asarray(plan.lod[plan.level])
        if xp is np:
            validate_lod([units], plan.n_rows)
            validate_lod([steps], len(units) - 1)
        else:
            _cuda.validate_offsets(xp, [steps, units], plan.n_rows)
        if len(steps) != n + 1 or not bool(xp.array_equal(units[steps], plan.row_offsets)):
            raise LodValidationError(f"{op}: the plan's unit offsets do not match its row offsets")
    if not bool(xp.array_equal(steps[1:] - steps[:-1], lengths)):
        raise LodValidationError(f"{op}: the plan's lengths do not match its row offsets")
    # both in range, and order[inverse] == 0..n-1: inverse permutations (checked before indexing with them)
    if n and (int(order.min()) < 0 or int(order.max()) >= n or int(inverse.min()) < 0 or int(inverse.max()) >= n
              or not bool(xp.array_equal(order[inverse], xp.arange(n, dtype=np.int64)))):
        raise LodValidationError(f"{op}: the plan's sorted/unsorted indices are not inverse permutations")
    ranked = lengths[order]
    if n and bool(xp.any(ranked[1:] > ranked[:-1])):
        raise LodValidationError(f"{op}: the plan's sorted_indices are not in decreasing length order")
    longest = int(ranked[0]) if n else 0
    expected = n - xp.cumsum(xp.bincount(lengths, minlength=longest + 1))[:longest]
    if len(plan.batch_sizes) != longest or not bool(xp.array_equal(plan.batch_sizes, expected)):
        raise LodValidationError(f"{op}: the plan's batch_sizes do not match its lengths")


def _same_level(a: Any, b: Any) -> bool:
    if a is b:
        return True
    if len(a) != len(b):
        return False
    if is_device_array(a) or is_device_array(b):
        xp = cupy_module()
        return bool(xp.array_equal(xp.asarray(a), xp.asarray(b)))
    return bool(np.array_equal(a, b))


def _source_rows(x: Any, plan: PackPlan, op: str):
    _check_plan(plan, op)
    if isinstance(x, LoDTensor):
        if len(x.offsets) != len(plan.lod) or not all(_same_level(a, b) for a, b in zip(x.offsets, plan.lod)):
            raise LodShapeError(f"{op}: x's LoD is not the one the plan was made for")
        data = x.data
    else:
        data = as_tensor(x, "x").data
    if not is_device_array(data):
        data = np.asarray(data)
    if data.shape[0] != plan.n_rows:
        raise LodShapeError(f"{op}: x has {data.shape[0]} rows but the plan covers {plan.n_rows}")
    return data


def to_time_major(x: Any, plan: PackPlan, *, backend: str | None = None,
                  device: str | None = None) -> tuple[np.ndarray, np.ndarray]:
    """``(data, batch_sizes)``: the rows step by step, as torch's ``PackedSequence``.

    ``data[step_offsets[t] + r]`` is time step ``t`` of the ``r``-th longest
    sequence.  ``x`` is the planned tensor (its LoD must match) or its data array.

    >>> import numpy as np
    >>> from lodtool import LoDTensor
    >>> x = LoDTensor(np.array([1, 2, 3]), recursive_sequence_lengths=[[1, 2]])
    >>> data, batch_sizes = to_time_major(x, pack_plan(x))
    >>> data.tolist(), batch_sizes.tolist()
    ([2, 1, 3], [2, 1])
    """
    data = _source_rows(x, plan, "to_time_major")
    be = get_backend((data, plan.row_offsets), backend, device)
    if plan.unit_offsets is not None:  # whole sub-sequences move: a gather of row ranges
        return _take_units(be.xp, data, plan.unit_offsets, _unit_order(plan)), plan.batch_sizes
    if be.name == "cupy":
        out = cuda_to_time_major(be.xp, data, plan.row_offsets, plan.sorted_indices, plan.batch_sizes)
        return out, plan.batch_sizes
    if be.name == "numpy":
        src, pos = _time_major_index(plan, plan.row_offsets)
        out = np.empty_like(data)
        out[pos] = data[src]
        return out, plan.batch_sizes
    xw, k = as_words(data)
    out, outw = empty_words(len(data), data, xw.dtype)
    if k:
        _steps(plan.num_sequences, xw, U(k), plan.row_offsets.view(np.uint64),
               plan.sorted_indices.view(np.uint64), plan.step_offsets().view(np.uint64), True, outw)
    return out, plan.batch_sizes


def from_time_major(steps: Any, plan: PackPlan, *, backend: str | None = None,
                    device: str | None = None) -> LoDTensor:
    """Undo :func:`to_time_major`: the rows back in sequence order, with the planned LoD.

    ``steps`` is the time-major data (one array) or the list of per-step arrays.

    >>> import numpy as np
    >>> from lodtool import LoDTensor
    >>> x = LoDTensor(np.array([1, 2, 3]), recursive_sequence_lengths=[[1, 2]])
    >>> plan = pack_plan(x)
    >>> from_time_major([np.array([2, 1]), np.array([3])], plan).data.tolist()
    [1, 2, 3]
    """
    data = _steps_array(steps, plan)
    be = get_backend((data, plan.row_offsets), backend, device)
    if plan.unit_offsets is not None:
        order = _unit_order(plan)
        sizes = np.diff(_cuda.to_host(plan.unit_offsets))
        at = np.zeros(len(order) + 1, np.int64)
        np.cumsum(sizes[order], out=at[1:])  # the sub-sequences' rows in the time-major data
        where = np.empty_like(order)
        where[order] = np.arange(len(order), dtype=np.int64)
        out = _take_units(be.xp, data, at, where)
        return LoDTensor._trusted(out, plan.lod)
    if be.name == "cupy":
        out = cuda_from_time_major(be.xp, data, plan.row_offsets, plan.unsorted_indices, plan.batch_sizes)
        return LoDTensor._trusted(out, plan.lod)
    if be.name == "numpy":
        src, pos = _time_major_index(plan, plan.row_offsets)
        out = np.empty_like(data)
        out[src] = data[pos]
    else:
        xw, k = as_words(data)
        out, outw = empty_words(len(data), data, xw.dtype)
        if k:
            _steps(plan.num_sequences, xw, U(k), plan.row_offsets.view(np.uint64),
                   plan.sorted_indices.view(np.uint64), plan.step_offsets().view(np.uint64), False, outw)
    return LoDTensor._trusted(out, plan.lod)


def _unit_order(plan: PackPlan) -> np.ndarray:
    """Above the last level: the sub-sequences (indices into level ``level + 1``) in time-major order (host)."""
    src, pos = _time_major_index(plan, plan.lod[plan.level])
    out = np.empty(len(src), np.int64)
    out[pos] = src
    return out


def _take_units(xp, data, unit_offsets, order: np.ndarray):
    """The rows of units ``order`` (row ranges ``unit_offsets[u]..unit_offsets[u+1]``), back to back."""
    off = _cuda.to_host(unit_offsets)
    index = segment_rows(off[:-1][order], np.diff(off)[order])
    return data[xp.asarray(index)] if xp is not np else np.asarray(data)[index]


def _array_module(arrays: tuple, device: str | None):
    """NumPy, or CuPy for device arrays or ``device="cuda"`` (these steps gather with the array module alone)."""
    on_gpu = any(is_device_array(a) for a in arrays)
    return get_backend(arrays, None if (on_gpu or device == "cuda") else "numpy", device).xp


def _take_sequences(x: LoDTensor, level: int, indices: np.ndarray, xp) -> LoDTensor:
    """Sequences ``indices`` of ``level`` (in that order) with everything under them: a tensor of their own."""
    current = np.asarray(indices, np.int64)
    levels = []
    for o in x.offsets[level:]:
        o = _cuda.to_host(o)
        starts, sizes = o[:-1][current], np.diff(o)[current]
        off = np.zeros(len(current) + 1, np.int64)
        np.cumsum(sizes, out=off[1:])
        levels.append(off)
        current = segment_rows(starts, sizes)
    data = x.data[xp.asarray(current)] if xp is not np else np.asarray(x.data)[current]
    names = x.level_names[level:] if x.level_names else None
    if xp is not np:
        levels = [xp.asarray(o) for o in levels]
    return LoDTensor._trusted(data, tuple(levels), names)


def lod_tensor_to_array(x: LoDTensor, plan: PackPlan, *, device: str | None = None) -> list[LoDTensor]:
    """The time steps of ``x`` as a list of tensors (Paddle's ``lod_tensor_to_array`` over a rank table).

    Step ``t`` holds the ``t``-th item of every sequence longer than ``t``, in the
    plan's order (longest first): ``batch_sizes[t]`` rows at the last level, as a
    0-level tensor; above it, ``batch_sizes[t]`` sub-sequences with everything
    under them (``x.lod_level - plan.level - 1`` levels).

    >>> import numpy as np
    >>> from lodtool import LoDTensor
    >>> x = LoDTensor(np.arange(6), recursive_sequence_lengths=[[1, 2], [2, 3, 1]])
    >>> steps = lod_tensor_to_array(x, pack_plan(x, level=0))  # an outer RNN: one sentence a step
    >>> [(s.data.tolist(), s.lod) for s in steps]
    [([2, 3, 4, 0, 1], [[0, 3, 5]]), ([5], [[0, 1]])]
    """
    xt = as_tensor(x, "x")
    _source_rows(xt, plan, "lod_tensor_to_array")
    xp = _array_module((xt.data, plan.row_offsets), device)
    steps = _cuda.to_host(plan.step_offsets()).tolist()
    if plan.unit_offsets is None:
        data, _ = to_time_major(xt, plan, device=device)
        return [LoDTensor._trusted(part, ()) for part in plan.split(data)]
    order = _unit_order(plan)
    return [_take_sequences(xt, plan.level + 1, order[steps[t]:steps[t + 1]], xp) for t in range(len(steps) - 1)]


def array_to_lod_tensor(steps: list, plan: PackPlan, *, device: str | None = None) -> LoDTensor:
    """Undo :func:`lod_tensor_to_array`: the steps back into one tensor with the planned LoD.

    >>> import numpy as np
    >>> from lodtool import LoDTensor
    >>> x = LoDTensor(np.arange(6), recursive_sequence_lengths=[[1, 2], [2, 3, 1]])
    >>> plan = pack_plan(x, level=0)
    >>> array_to_lod_tensor(lod_tensor_to_array(x, plan), plan).equals(x)
    True
    """
    _check_plan(plan, "array_to_lod_tensor")
    if len(steps) != plan.num_steps:
        raise LodShapeError(f"array_to_lod_tensor: {len(steps)} steps given, the plan has {plan.num_steps}")
    parts = [s.data if isinstance(s, LoDTensor) else s for s in steps]
    if plan.unit_offsets is None:
        return from_time_major(parts, plan, device=device) if parts else \
            from_time_major(np.zeros((0,)), plan, device=device)
    batch = _cuda.to_host(plan.batch_sizes).tolist()
    for t, s in enumerate(steps):
        if not isinstance(s, LoDTensor) or s.lod_level != len(plan.lod) - plan.level - 1 or len(s) != batch[t]:
            raise LodShapeError(f"array_to_lod_tensor: step {t} must be a tensor of {batch[t]} sequences with "
                                f"{len(plan.lod) - plan.level - 1} LoD level(s)")
    if not parts:
        raise LodShapeError("array_to_lod_tensor: the plan has no time steps; nothing to rebuild")
    xp = cupy_module() if any(is_device_array(p) for p in parts) else np
    return from_time_major(xp.concatenate([xp.asarray(p) for p in parts], axis=0), plan, device=device)


def reorder_lod_tensor_by_rank(x: Any, plan: PackPlan, *, device: str | None = None) -> LoDTensor:
    """``x``'s top-level sequences (rows, for a 0-level ``x``) in the plan's order (Paddle's op of that name).

    ``x`` has one top-level sequence (or row) per planned sequence, such as an
    RNN's initial state; the result lines up with the sorted batch.

    >>> import numpy as np
    >>> from lodtool import LoDTensor
    >>> plan = pack_plan(LoDTensor(np.arange(4), recursive_sequence_lengths=[[1, 3]]))
    >>> reorder_lod_tensor_by_rank(np.array([[10], [20]]), plan).data.tolist()
    [[20], [10]]
    """
    _check_plan(plan, "reorder_lod_tensor_by_rank")
    xt = as_tensor(x, "x")
    count = len(xt) if xt.lod_level else xt.n_rows
    if count != plan.num_sequences:
        raise LodShapeError(f"reorder_lod_tensor_by_rank: x has {count} {'sequences' if xt.lod_level else 'rows'}, "
                            f"the plan ranks {plan.num_sequences}")
    xp = _array_module((xt.data, plan.sorted_indices), device)
    order = _cuda.to_host(plan.sorted_indices)
    if not xt.lod_level:
        return LoDTensor._trusted(xt.data[xp.asarray(order)] if xp is not np else np.asarray(xt.data)[order], ())
    return _take_sequences(xt, 0, order, xp)


def shrink_memory(x: Any, step: int, plan: PackPlan, *, device: str | None = None) -> LoDTensor:
    """The first ``batch_sizes[step]`` sequences (or rows) of ``x``: an RNN's state at ``step`` (``shrink_memory``).

    ``x`` is in the plan's order (see :func:`reorder_lod_tensor_by_rank`), so the
    sequences still running at ``step`` come first.

    >>> import numpy as np
    >>> from lodtool import LoDTensor
    >>> plan = pack_plan(LoDTensor(np.arange(4), recursive_sequence_lengths=[[1, 3]]))
    >>> shrink_memory(np.array([[20], [10]]), 1, plan).data.tolist()
    [[20]]
    """
    _check_plan(plan, "shrink_memory")
    if isinstance(step, (bool, np.bool_)) or not isinstance(step, (int, np.integer)) or \
            not 0 <= step < plan.num_steps:
        raise LodUsageError(f"shrink_memory: step must be an integer in [0, {plan.num_steps}), got {step!r}")
    keep = int(_cuda.to_host(plan.batch_sizes[step:step + 1])[0])
    xt = as_tensor(x, "x")
    xp = _array_module((xt.data,), device)
    if xp is not np and not is_device_array(xt.data):
        xt = xt.to("cuda")
    count = len(xt) if xt.lod_level else xt.n_rows
    if count < keep:
        raise LodShapeError(f"shrink_memory: x has {count} {'sequences' if xt.lod_level else 'rows'}; step {step} "
                            f"keeps {keep}")
    if not xt.lod_level:
        return LoDTensor._trusted(xt.data[:keep], ())
    return xt.slice_level(0, 0, keep)


def _steps_array(steps: Any, plan: PackPlan):
    _check_plan(plan, "from_time_major")
    if isinstance(steps, (list, tuple)):
        if len(steps) != plan.num_steps:
            raise LodShapeError(f"from_time_major: {len(steps)} steps given, the plan has {plan.num_steps}")
        xp = cupy_module() if any(is_device_array(s) for s in steps) else np
        arrays = [xp.asarray(s) for s in steps]
        bounds = plan.step_row_offsets().tolist()  # rows per step: batch_sizes[t] at the last level
        for t, s in enumerate(arrays):
            b = bounds[t + 1] - bounds[t]
            if s.ndim == 0 or s.shape[0] != b:
                raise LodShapeError(f"from_time_major: step {t} has shape {s.shape}; the plan says {b} rows")
        if not arrays:
            raise LodShapeError("from_time_major: the plan has no time steps; pass the (empty) data array")
        data = xp.concatenate(arrays, axis=0)
    else:
        data = steps if is_device_array(steps) else np.asarray(steps)
    check_dtype(data.dtype, "steps")
    if data.ndim == 0 or data.shape[0] != plan.n_rows:
        raise LodShapeError(f"from_time_major: the steps hold {data.shape[0] if data.ndim else 0} rows, "
                            f"the plan covers {plan.n_rows}")
    return data


def _time_major_index(plan: PackPlan, starts) -> tuple[np.ndarray, np.ndarray]:
    """``(src, pos)`` on the host: unit ``src[q]`` (step ``t`` of a sequence that starts at unit ``starts[s]``)
    goes to time-major position ``pos[q]``."""
    order = _cuda.to_host(plan.sorted_indices)
    lens = _cuda.to_host(plan.lengths)[order]
    rank = np.repeat(np.arange(len(lens), dtype=np.int64), lens)
    t = segment_rows(np.zeros(len(lens), np.int64), lens)
    return _cuda.to_host(starts)[:-1][order][rank] + t, _cuda.to_host(plan.step_offsets())[t] + rank


@parallel_blocks
def _steps(lo, hi, blk, xw, k, roff, sorted_idx, step_start, to_steps, outw):  # pragma: no cover - compiled by Numba
    """Row ``t`` of the ``r``-th longest sequence to time-major row ``step_start[t] + r`` (``to_steps``), or back."""
    one = U(1)
    for r in range(lo, hi):
        s = sorted_idx[r]
        a = roff[s]
        row = a * k
        for t in range(roff[s + one] - a):
            step = (step_start[t] + r) * k
            src, dst = (row, step) if to_steps else (step, row)
            for j in range(k):
                outw[dst + j] = xw[src + j]
            row += k


# -- the CUDA launchers (lodtool.ops._cuda holds the shared device primitives) -------------------------------
def cuda_pack_plan(xp, row_offsets: Any, *, validated: bool = False):
    """The RNN packing plan on the device: ``(lengths, sorted_indices, unsorted_indices, batch_sizes)``.

    A stable sort by decreasing length (ties keep their input order): the sort
    key ``(maxlen - length) * n + i`` is unique, so any sort is stable; a
    lexsort where that key would overflow.  ``batch_sizes[t]`` counts the
    sequences longer than ``t``.

    >>> import cupy as cp  # doctest: +SKIP
    >>> [a.tolist() for a in cuda_pack_plan(cp, [0, 1, 1, 4])[1:]]  # doctest: +SKIP
    [[2, 0, 1], [1, 2, 0], [2, 1, 1]]
    """
    roff = _cuda.level_offsets(xp, row_offsets, None, validated)
    lengths = roff[1:] - roff[:-1]
    n = int(lengths.shape[0])
    maxlen = int(_cuda.to_host(lengths.max())) if n else 0
    idx = xp.arange(n, dtype=_cuda.I64)
    if (maxlen + 1) * max(n, 1) < 2 ** 62:
        sorted_idx = xp.argsort((maxlen - lengths) * n + idx).astype(_cuda.I64, copy=False)
    else:  # pragma: no cover - needs more than 2**31 rows
        sorted_idx = xp.lexsort(xp.stack([idx, -lengths])).astype(_cuda.I64, copy=False)
    unsorted_idx = xp.empty(n, _cuda.I64)
    unsorted_idx[sorted_idx] = idx
    at_most = xp.cumsum(xp.bincount(lengths, minlength=maxlen + 1))[:maxlen]
    batch_sizes = (n - at_most).astype(_cuda.I64)
    return lengths, sorted_idx, unsorted_idx, batch_sizes


def _cuda_step_offsets(xp, batch_sizes):
    out = xp.zeros(int(batch_sizes.shape[0]) + 1, _cuda.I64)
    if batch_sizes.shape[0]:
        xp.cumsum(batch_sizes, out=out[1:])
    return out


def cuda_to_time_major(xp, data: Any, row_offsets: Any, sorted_idx: Any, batch_sizes: Any):
    """Rows step by step (torch's ``PackedSequence.data``) from a :func:`pack_plan` plan.

    ``row_offsets`` must be the validated offsets the plan was made from.

    >>> import cupy as cp  # doctest: +SKIP
    >>> _, s, u, b = cuda_pack_plan(cp, [0, 1, 3])  # doctest: +SKIP
    >>> cuda_to_time_major(cp, cp.array([1, 2, 3]), [0, 1, 3], s, b).tolist()  # doctest: +SKIP
    [2, 1, 3]
    """
    return _cuda_steps(xp, data, row_offsets, sorted_idx, batch_sizes, True)


def cuda_from_time_major(xp, steps_data: Any, row_offsets: Any, unsorted_idx: Any, batch_sizes: Any):
    """Undo :func:`to_time_major`: the rows back in sequence order.

    >>> import cupy as cp  # doctest: +SKIP
    >>> _, s, u, b = cuda_pack_plan(cp, [0, 1, 3])  # doctest: +SKIP
    >>> cuda_from_time_major(cp, cp.array([2, 1, 3]), [0, 1, 3], u, b).tolist()  # doctest: +SKIP
    [1, 2, 3]
    """
    return _cuda_steps(xp, steps_data, row_offsets, unsorted_idx, batch_sizes, False)


def _cuda_steps(xp, data: Any, row_offsets: Any, order: Any, batch_sizes: Any, to_steps: bool):
    """The rows into time-major order (``order``: the plan's sorted indices) or back (its unsorted indices)."""
    data = _cuda.on_device(xp, data)
    roff = _cuda.as_offsets(xp, row_offsets)
    steps = _cuda_step_offsets(xp, _cuda.as_offsets(xp, batch_sizes, what="batch_sizes"))
    xw, k = _cuda.device_words(xp, data)
    out = xp.empty(data.shape, data.dtype)
    outw, _ = _cuda.device_words(xp, out, xw.dtype)
    off, base = (steps, roff) if to_steps else (roff, steps)
    _cuda.gather_rows(xp, xw, k, off, int(off.shape[0]) - 1, int(data.shape[0]), outw,
                      mode=_cuda.MODE_TO_STEPS if to_steps else _cuda.MODE_FROM_STEPS, base=base,
                      aux=_cuda.as_offsets(xp, order, what="sorted_indices" if to_steps else "unsorted_indices"))
    return out


__all__ = ["PackPlan", "pack_plan", "count_lengths", "first_positions", "place_by_length", "to_time_major",
           "from_time_major", "cuda_pack_plan", "cuda_to_time_major",
           "cuda_from_time_major", "lod_tensor_to_array", "array_to_lod_tensor", "reorder_lod_tensor_by_rank",
           "shrink_memory"]
