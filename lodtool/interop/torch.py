"""PyTorch bridge: jagged nested tensors, PackedSequence, cu_seqlens, padded + mask; and back.

* :func:`to_torch` gives ``torch.nested.nested_tensor_from_jagged(values,
  offsets)``, a view of the tensor's own data and offsets (zero-copy).  A
  jagged nested tensor has ONE ragged dimension, so a deeper tensor names a
  ``level`` whose sequences become the batch (or is split into branches).
* :func:`to_packed_sequence` builds an RNN ``PackedSequence`` from lodtool's pack
  plan (:func:`lodtool.ops.pack_plan`), without padding, identical to
  ``pack_padded_sequence(padded, lengths, enforce_sorted=False)``.
* :func:`cu_seqlens` gives the int32 offsets and the longest length that
  variable-length attention kernels (FlashAttention's ``*_varlen``) take.
* :func:`to_padded` gives ``(padded, mask)``.
* :func:`from_torch` takes a jagged nested tensor or a ``PackedSequence`` back.
* ``BatchDataset`` is a container's training batches as an ``IterableDataset``
  (:mod:`lodtool.interop._torch_batch`); :class:`SequenceDataset` is its
  sequences as a map-style dataset, for ``DataLoader(shuffle=True)`` and
  ``DistributedSampler``.

torch is imported on first use (``pip install 'lodtool[torch]'``).  On a
machine without a CUDA GPU, install torch's CPU build first:
``pip install torch --index-url https://download.pytorch.org/whl/cpu``.

>>> import numpy as np
>>> from lodtool import LoDTensor
>>> t = LoDTensor(np.arange(5.0), [[0, 2, 5]])
>>> nt = to_torch(t)
>>> [x.tolist() for x in nt.unbind()]
[[0.0, 1.0], [2.0, 3.0, 4.0]]
>>> from_torch(nt).equals(t)
True
"""

from __future__ import annotations

import os
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import numpy as np

from .._optional import optional_import
from ..errors import LodShapeError, LodUsageError, LodValidationError
from ..tasks._batch import SequenceGather, sequence_rows
from ..tasks._open import open as open_source
from ..tensor import LoDTensor

if TYPE_CHECKING:
    import torch
    from torch.nn.utils.rnn import PackedSequence

LAYOUTS = ("jagged", "strided")


def __getattr__(name: str) -> Any:
    # BatchDataset (a container's training batches, lodtool.interop._torch_batch) derives from torch's
    # IterableDataset, so it is made, and torch imported, on first use
    if name == "BatchDataset":
        _torch()  # a missing torch names its extra here
        from ._torch_batch import BatchDataset

        return BatchDataset
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _torch():
    return optional_import("torch", "torch", "the PyTorch bridge")


def _tensor(a: Any) -> torch.Tensor:
    """A torch tensor sharing ``a``'s memory (NumPy on the CPU, CuPy on the GPU); a copy if not in native byte order."""
    torch = _torch()
    if isinstance(a, np.ndarray):
        return torch.from_numpy(np.asarray(a, a.dtype.newbyteorder("=")))  # torch takes native byte order only
    return torch.as_tensor(a, device="cuda")  # __cuda_array_interface__: a view of the device array


def _numpy(x) -> np.ndarray:
    """A host NumPy view of a torch tensor (a copy only when it is on a device)."""
    x = x.detach()
    if x.device.type != "cpu":
        x = x.cpu()
    return x.numpy()


def _row_offsets(t: LoDTensor, level: int) -> np.ndarray:
    """The data-row offsets of ``level``'s sequences: the level itself if it is the last, else composed."""
    k = t._level(level)
    rows = t.offsets[k]
    for below in t.offsets[k + 1:]:
        rows = below[rows]
    return rows


def to_torch(t: LoDTensor, layout: str = "jagged", *, level: int | None = None) -> torch.Tensor:
    """``t`` as a torch nested tensor with the jagged layout (``layout="strided"``: a 0-level tensor's rows).

    Zero-copy: the nested tensor's ``values()`` are ``t.data`` and its
    ``offsets()`` are the last level's offsets (data in non-native byte order,
    big-endian on a little-endian machine, is copied into native order, which
    torch needs).  A tensor of several levels
    needs ``level``: its sequences become the batch, each holding all the rows
    under it (the offsets are then composed: one small copy, the data is still
    shared).  Alternatively convert branches, ``to_torch(t.branch(i))``.

    >>> import numpy as np, torch
    >>> from lodtool import LoDTensor
    >>> t = LoDTensor(np.zeros((3, 4), np.float32), [[0, 1, 3]])
    >>> nt = to_torch(t)
    >>> nt.is_nested, nt.size(0), nt.size(2), np.shares_memory(nt.values().numpy(), t.data)
    (True, 2, 4, True)
    >>> to_torch(LoDTensor(np.arange(3), [[0, 1, 2], [0, 1, 3]]))
    Traceback (most recent call last):
    ...
    lodtool.errors.LodShapeError: a jagged nested tensor has one ragged dimension, but this tensor has 2 LoD levels: \
pass level=0..1 (that level's sequences become the batch) or convert branches (to_torch(t.branch(i)))
    """
    torch = _torch()
    if layout not in LAYOUTS:
        raise LodUsageError(f"unknown layout {layout!r}; choose one of {', '.join(LAYOUTS)}")
    data = t.data if t.device == "cuda" else np.asarray(t.data)
    if layout == "strided":
        if t.lod_level:
            raise LodShapeError(f"a strided tensor has no sequences, but this tensor has {t.lod_level} LoD level(s): "
                                "use layout='jagged', to_padded or to_packed_sequence")
        return _tensor(data)
    if not t.lod_level:
        raise LodShapeError("a 0-level tensor has no sequences to make jagged: use layout='strided'")
    if level is None:
        if t.lod_level > 1:
            raise LodShapeError(f"a jagged nested tensor has one ragged dimension, but this tensor has {t.lod_level} "
                                f"LoD levels: pass level=0..{t.lod_level - 1} (that level's sequences become the "
                                "batch) or convert branches (to_torch(t.branch(i)))")
        level = 0
    values, offsets = _tensor(data), _tensor(_row_offsets(t, level))
    if offsets.device != values.device:  # device data with host offsets: torch wants both on one device
        offsets = offsets.to(values.device)
    return torch.nested.nested_tensor_from_jagged(values, offsets)


def _plan(t: LoDTensor, level: int):
    from ..ops.pack_plan import pack_plan

    if not t.lod_level:
        raise LodShapeError("a 0-level tensor has no sequences to pack")
    return pack_plan(t, level)


def to_packed_sequence(t: LoDTensor, level: int = -1) -> PackedSequence:
    """An RNN ``PackedSequence`` of the sequences of ``level``, built from the pack plan without padding.

    It is identical (data, batch_sizes, sorted_indices, unsorted_indices) to
    ``pack_padded_sequence(padded, lengths, batch_first=True,
    enforce_sorted=False)`` of the padded form: ties between equal lengths are
    ordered as torch's own sort orders them.  The data is gathered once, time
    step by time step.  torch refuses empty sequences, and so does this.

    >>> import numpy as np
    >>> from lodtool import LoDTensor
    >>> p = to_packed_sequence(LoDTensor(np.array([1, 2, 3, 4, 5, 6]), [[0, 2, 3, 6]]))
    >>> p.data.tolist(), p.batch_sizes.tolist(), p.sorted_indices.tolist()
    ([4, 1, 3, 5, 2, 6], [3, 2, 1], [2, 0, 1])
    """
    torch = _torch()
    from ..ops.pack_plan import to_time_major

    t = t.to("cpu")
    if t.lod_level > 1:
        # a PackedSequence steps over rows; the pack plan above the last level steps over sub-sequences (Paddle's
        # unit), so plan a one-level view of the rows under each of the level's sequences
        t = LoDTensor(t.data, [_row_offsets(t, level)], validate=False)
        level = 0
    plan = _plan(t, level)
    lengths = plan.lengths
    if lengths.size and int(lengths.min()) == 0:
        empty = int(np.argmin(lengths))
        raise LodValidationError(f"sequence {empty} of level {plan.level} is empty; a PackedSequence cannot hold "
                                 "empty sequences (torch refuses them too)")
    # torch's own (unstable) sort decides the order of ties, as in pack_padded_sequence
    order = torch.sort(torch.from_numpy(lengths), descending=True)[1].numpy()
    inverse = np.empty_like(order)
    inverse[order] = np.arange(len(order), dtype=order.dtype)
    plan = replace(plan, sorted_indices=order, unsorted_indices=inverse)
    data, batch_sizes = to_time_major(t, plan)
    return torch.nn.utils.rnn.PackedSequence(_tensor(data), torch.from_numpy(batch_sizes.copy()),
                                             torch.from_numpy(order), torch.from_numpy(inverse))


def cu_seqlens(t: LoDTensor, level: int = -1) -> tuple[torch.Tensor, int]:
    """``(cu_seqlens, max_seqlen)`` of ``level``: int32 row offsets and the longest length, for varlen attention.

    The values to pass with them are ``t.data`` (the rows, all sequences back to
    back).  More than 2**31 - 1 rows do not fit int32 and are refused.

    >>> import numpy as np
    >>> from lodtool import LoDTensor
    >>> cu, longest = cu_seqlens(LoDTensor(np.zeros((6, 8)), [[0, 2, 2, 6]]))
    >>> cu.tolist(), str(cu.dtype), longest
    ([0, 2, 2, 6], 'torch.int32', 4)
    """
    if not t.lod_level:
        raise LodShapeError("a 0-level tensor has no sequences")
    rows = _row_offsets(t.to("cpu"), level)
    if int(rows[-1]) > np.iinfo(np.int32).max:
        raise LodShapeError(f"{int(rows[-1]):,} rows do not fit cu_seqlens' int32")
    lengths = np.diff(rows)
    return _tensor(rows.astype(np.int32)), int(lengths.max()) if lengths.size else 0


def to_padded(t: LoDTensor, pad_value: Any = 0, *, level: int = -1, maxlen: int | None = None,
              ) -> tuple[torch.Tensor, torch.Tensor]:
    """``(padded, mask)``: the sequences of ``level`` padded to ``(sequences, maxlen, *element)``, and a bool mask.

    ``mask[i, j]`` is True where ``padded[i, j]`` is a real row.  Uses
    :func:`lodtool.ops.sequence_pad` (one copy into the padded array).

    >>> import numpy as np
    >>> from lodtool import LoDTensor
    >>> padded, mask = to_padded(LoDTensor(np.array([1, 2, 3]), [[0, 1, 3]]))
    >>> padded.tolist(), mask.tolist()
    ([[1, 0], [2, 3]], [[True, False], [True, True]])
    """
    from ..ops.pad import sequence_mask, sequence_pad

    if not t.lod_level:
        raise LodShapeError("a 0-level tensor has no sequences to pad")
    padded, lengths = sequence_pad(t, pad_value, maxlen, level)
    mask = sequence_mask(lengths, padded.shape[1])
    return _tensor(padded), _tensor(mask)


def from_torch(x: Any, *, validate: bool = True) -> LoDTensor:
    """A LoD tensor from a jagged nested tensor, a ``PackedSequence``, or a plain tensor (0 levels).

    A jagged nested tensor whose offsets start at 0 comes back zero-copy (its
    values and offsets are viewed; a CUDA tensor is copied to the host first).
    Non-contiguous nested tensors (with ``lengths``) are gathered (one copy).
    A ``PackedSequence`` is unpacked from time-major order (one copy), in the
    order of its ``unsorted_indices``.

    >>> import torch
    >>> from torch.nn.utils.rnn import pack_sequence
    >>> t = from_torch(pack_sequence([torch.tensor([1, 2]), torch.tensor([3])]))
    >>> t.lod, t.data.tolist()
    ([[0, 2, 3]], [1, 2, 3])
    """
    torch = _torch()
    if isinstance(x, torch.nn.utils.rnn.PackedSequence):
        return _from_packed(x)
    if not isinstance(x, torch.Tensor):
        raise LodUsageError(f"from_torch takes a torch tensor or a PackedSequence, got {type(x).__name__}")
    if not x.is_nested:
        return LoDTensor(_numpy(x))
    if x.layout != torch.jagged:
        raise LodShapeError("a strided-layout nested tensor: convert it with "
                            "torch.nested.nested_tensor(list(x.unbind()), layout=torch.jagged) first")
    if getattr(x, "_ragged_idx", 1) != 1:
        raise LodShapeError(f"the ragged dimension is dim {x._ragged_idx}; lodtool's sequences run along dim 1")
    values = _numpy(x.values())
    offsets = _numpy(x.offsets()).astype(np.int64, copy=False)
    lengths = x.lengths()
    if lengths is not None:  # holes between the sequences: gather them (one copy)
        lens = _numpy(lengths).astype(np.int64)
        starts = offsets[:-1]
        new = np.zeros(len(lens) + 1, np.int64)
        np.cumsum(lens, out=new[1:])
        index = np.repeat(starts - new[:-1], lens) + np.arange(new[-1])
        values, offsets = values[index], new
    elif len(offsets) and (offsets[0] != 0 or offsets[-1] != len(values)):
        values = values[offsets[0]:offsets[-1]]
        offsets = offsets - offsets[0]
    return LoDTensor(values, lod=[offsets], validate=validate)


def _from_packed(p) -> LoDTensor:
    from ..ops.pack_plan import from_time_major, pack_plan

    batch_sizes = _numpy(p.batch_sizes).astype(np.int64)
    data = _numpy(p.data)
    n = int(batch_sizes[0]) if batch_sizes.size else 0
    if batch_sizes.size and bool(np.any(batch_sizes[1:] > batch_sizes[:-1])):
        raise LodValidationError("the PackedSequence's batch_sizes increase; they must not")
    # the r-th longest sequence has as many steps as there are steps holding more than r sequences: a prefix,
    # as batch_sizes never increases
    sorted_lengths = np.searchsorted(-batch_sizes, -np.arange(n), side="left").astype(np.int64)
    order = np.arange(n) if p.sorted_indices is None else _numpy(p.sorted_indices).astype(np.int64)
    lengths = np.empty(n, np.int64)
    lengths[order] = sorted_lengths
    offsets = np.zeros(n + 1, np.int64)
    np.cumsum(lengths, out=offsets[1:])
    if offsets[-1] != len(data):
        raise LodShapeError(f"the PackedSequence's batch_sizes cover {int(offsets[-1])} rows, its data has {len(data)}")
    shell = LoDTensor(np.empty((len(data),) + data.shape[1:], data.dtype), lod=[offsets])
    plan = pack_plan(shell)
    inverse = np.empty_like(order)
    inverse[order] = np.arange(n)
    plan = replace(plan, sorted_indices=order, unsorted_indices=inverse)
    return from_time_major(data, plan)


class SequenceDataset:
    """A container's sequences at one level as a map-style dataset: ``ds[i]`` is sequence ``i``'s rows.

    ``DataLoader(ds, shuffle=True, num_workers=...)`` and ``DistributedSampler``
    take it as it is: it has a length, it pickles without an open file, and each
    process (a worker, a rank) opens the file itself on its first item.  An item
    is a torch tensor of every data row under the sequence (a copy: the batch
    collation owns it); :meth:`collate` pads a list of items into
    ``(values [B, T, ...], lengths [B])``.  A ``DataLoader`` that batches
    fetches a batch's items with one call (:meth:`__getitems__`): they are
    gathered in one compiled pass into one new array, each item a view of its
    rows there.  A container stored without a
    compression filter reads each item from the file's memory map.  The
    sequences' row offsets are read and validated once, when the dataset is
    made, and held (a forked worker shares them) where they fit the memory
    limit (``max_memory``, the default one when ``None``); an item is then one
    read of its rows.  Past the limit, each item reads its own offsets.

    >>> import os, tempfile, numpy as np, lodtool
    >>> p = os.path.join(tempfile.mkdtemp(), "c.lod.h5")
    >>> lodtool.save(p, lodtool.LoDTensor(np.arange(1, 8), recursive_sequence_lengths=[[2, 1], [3, 1, 3]]))
    >>> ds = SequenceDataset(p, level=1)
    >>> len(ds), ds[0].tolist(), ds[-1].tolist()
    (3, [1, 2, 3], [5, 6, 7])
    >>> values, lengths = SequenceDataset.collate([ds[1], ds[2]])
    >>> values.tolist(), lengths.tolist()
    ([[4, 0, 0], [5, 6, 7]], [1, 3])
    >>> SequenceDataset(p, level=0)[0].tolist()  # a document: every token under it
    [1, 2, 3, 4]
    >>> [x.tolist() for x in ds.__getitems__([2, 0])]
    [[5, 6, 7], [1, 2, 3]]
    """

    def __init__(self, path: str | os.PathLike, level: int = 0, *, tensor: str | None = None,
                 max_memory: int | None = None):
        self.path = os.fspath(path)
        self.tensor = tensor
        self.max_memory = max_memory
        with open_source(self.path, max_memory=max_memory) as f:
            t = f.tensor(tensor)
            self.level = t._level(level) if t.lod_level else 0
            self._len = t.num_sequences(self.level)
            # every level's offsets are read to validate them and map the level down to rows (twice: read and made)
            held = 16 * sum(t.num_sequences(k) + 1 for k in range(t.lod_level))
            self._rows = sequence_rows(t, self.level, self.path) if t.lod_level and held <= f.max_memory else None
        self._view = None
        self._file = None
        self._pid = None
        self._from_numpy = None
        self._gather = None

    def __len__(self) -> int:
        return self._len

    def _out_of_range(self, i):
        from ..errors import LodIndexError

        return LodIndexError(f"{self.path}: sequence {i} is out of range for {self._len} sequences of level "
                             f"{self.level}")

    def __getitem__(self, i: int) -> torch.Tensor:
        n = self._len
        if not isinstance(i, (int, np.integer)) or not -n <= i < n:
            raise self._out_of_range(i)
        i = int(i) + n if i < 0 else int(i)
        t = self._open()
        held = self._rows
        if held is not None:
            rows = t.read_rows(held.item(i), held.item(i + 1))
        else:
            rows = t.read_rows(i, i + 1) if not t.lod_level else t.slice_level(self.level, i, i + 1).data
        # a copy the collation owns, in native byte order (what torch takes)
        return self._from_numpy(rows.copy() if rows.dtype.isnative else rows.astype(rows.dtype.newbyteorder("=")))

    def __getitems__(self, indices) -> list:
        """Items ``indices`` (what a batching ``DataLoader`` asks for at once), each as ``ds[i]`` gives it: their
        rows gathered in one compiled pass into one new array (no other item or read shares it), each item a view
        of its part.  Offsets that are not held, or a non-native byte order, read item by item."""
        self._open()
        indices = indices if isinstance(indices, np.ndarray) else list(indices)
        seqs = np.asarray(indices).reshape(-1)
        if self._gather is None or seqs.dtype.kind not in "iu":  # read, or refused, as ds[i] reads each
            return [self[i] for i in indices]
        n = self._len
        outside = (seqs < -n) | (seqs >= n)
        if outside.any():
            raise self._out_of_range(seqs[np.argmax(outside)])
        values, offsets = self._gather.read(seqs.astype(np.int64) % max(n, 1))
        bounds, from_numpy = offsets.tolist(), self._from_numpy  # a tensor of a NumPy view: cheaper than torch's split
        return [from_numpy(values[a:b]) for a, b in zip(bounds, bounds[1:])]

    def _open(self):
        if self._view is None or self._pid != os.getpid():  # a worker process opens its own handle
            self._file = open_source(self.path, max_memory=self.max_memory)
            self._view = self._file.tensor(self.tensor)
            self._pid = os.getpid()
            self._from_numpy = _torch().from_numpy
            t = self._view
            items = int(np.prod(t.element_shape))
            # a batch of items in one gather where the offsets are held and torch takes the rows as stored
            self._gather = SequenceGather(t, self._rows, self.path, max_memory=self.max_memory) \
                if self._rows is not None and t.dtype.isnative and items else None
        return self._view

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state.update(_view=None, _file=None, _pid=None, _from_numpy=None, _gather=None)
        return state

    @staticmethod
    def collate(items: list, pad_value: Any = 0) -> tuple:
        """Items padded to the longest: ``(values [B, T, ...], lengths [B] int64)`` (a ``DataLoader``'s
        ``collate_fn``; ``functools.partial(SequenceDataset.collate, pad_value=...)`` for another pad)."""
        torch = _torch()
        lengths = torch.tensor([len(x) for x in items], dtype=torch.int64)
        return torch.nn.utils.rnn.pad_sequence(items, batch_first=True, padding_value=pad_value), lengths


__all__ = ["to_torch", "to_packed_sequence", "cu_seqlens", "to_padded", "from_torch", "LAYOUTS", "SequenceDataset",
           "BatchDataset"]  # noqa: F822 (BatchDataset is imported on first use, by __getattr__)
