"""Training batches of a container as a torch ``IterableDataset`` (the planning and reading: lodtool.tasks._batch).

torch is imported when a :class:`BatchDataset` is made, never when this module is.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import numpy as np

from .._optional import optional_import
from ..errors import LodInputError, LodUsageError
from ..container.reader import DECODED_CACHE_BYTES
from ..tasks._batch import BatchPlan, BatchReader, as_plan

TORCH_OUTPUTS = ("padded", "jagged", "packed", "varlen")
#: what BatchReader reads for each torch output
_READ_AS = {"padded": "padded", "jagged": "jagged-numpy", "packed": "padded", "varlen": "varlen"}


def _torch():
    return optional_import("torch", "torch", "BatchDataset")


class _BatchDatasetMixin:
    """A torch ``IterableDataset`` of a container's training batches, planned from its offsets.

    ``plan`` is a :class:`~lodtool.tasks.BatchPlan`, a saved plan's path,
    or ``None`` with the options of :func:`lodtool.tasks.batch_plan`
    (``max_tokens``, ``mode``, ``num_replicas``, ``rank``, ...; a plan is per rank).
    Each item is one batch, a dict of tensors:

    * ``padded``: ``values [B, T, ...]``, ``mask [B, T]`` (bool), ``lengths``;
    * ``jagged``: ``values``, a nested jagged tensor (``torch.nested``, ``layout=torch.jagged``);
    * ``packed``: ``values``, a ``PackedSequence`` (batch-first input, sorted by torch);
    * ``varlen``: flat ``values``, int32 ``cu_seqlens``, ``position_ids``, ``max_seqlen``,

    plus ``indices`` (the source sequences) and ``repeat`` (a batch repeated to
    even out the replicas).  Use it with ``DataLoader(ds, batch_size=None)``.
    An empty sequence is a row of padding, or a zero-length component or
    segment; ``packed`` refuses a plan that holds one when the dataset is made
    (a ``PackedSequence`` cannot hold it).

    With ``num_workers > 0`` each worker opens the file itself, on its first
    batch (the dataset pickles without an open handle), and takes every
    ``num_workers``-th batch of the plan.  In the main process the tensors
    share the reader's reused buffers, so **a batch is valid until the next
    one** (``reuse_buffers=False`` gives fresh tensors instead); a worker's
    batches cross to the main process as copies anyway.  :meth:`set_epoch`
    re-plans for the next epoch, as ``DistributedSampler.set_epoch`` does; the
    epoch is kept in shared memory, so that workers a ``DataLoader`` keeps
    (``persistent_workers=True``) re-plan too.

    >>> import os, tempfile, numpy as np, lodtool
    >>> p = os.path.join(tempfile.mkdtemp(), "c.lod.h5")
    >>> lodtool.save(p, lodtool.LoDTensor(np.arange(1, 10), recursive_sequence_lengths=[[3, 1, 4, 1]]))
    >>> from lodtool.interop.torch import BatchDataset
    >>> ds = BatchDataset(p, max_tokens=8, mode="pack", output="varlen")
    >>> [b["cu_seqlens"].tolist() for b in ds]
    [[0, 4, 7, 8], [0, 1]]
    >>> b = next(iter(BatchDataset(p, max_sequences=2, mode="sorted", output="padded")))
    >>> b["values"].shape, b["mask"].dtype
    (torch.Size([2, 1]), torch.bool)
    """

    def __init__(self, path, plan: BatchPlan | str | os.PathLike | None = None, *, output: str = "padded",
                 truncate: str | None = None, pad_value=0, tensor: str | None = None,
                 cache_bytes: int = DECODED_CACHE_BYTES, reuse_buffers: bool = True, **plan_options: Any):
        if output not in TORCH_OUTPUTS:
            raise LodUsageError(f"output {output!r} is not one of {', '.join(TORCH_OUTPUTS)}")
        self.path = os.fspath(path)
        self.output = output
        self._plan_options = dict(plan_options, tensor=tensor) if plan is None else None  # to re-plan from
        self._read_options = {"output": _READ_AS[output], "truncate": truncate, "pad_value": pad_value,
                              "tensor": tensor, "cache_bytes": cache_bytes, "reuse_buffers": reuse_buffers}
        self._use(as_plan(plan, self.path, tensor=tensor, **plan_options))
        # the epoch every process re-plans for: set in the main process, read by each worker
        self._epoch = _torch().tensor(self.plan.options.get("epoch", 0)).share_memory_()

    def _use(self, plan: BatchPlan) -> None:
        if self.output == "packed":
            lens = plan.lengths[plan.indices]
            if not lens.all():
                first = int(plan.indices[lens == 0].min())
                raise LodInputError(f"{self.path}: sequence {first} is empty; a PackedSequence cannot hold one "
                                    "(use output='padded' or 'varlen')")
        self.plan = plan
        self._reader = BatchReader(self.path, plan, **self._read_options)

    def set_epoch(self, epoch: int) -> None:
        """Plan the batches of ``epoch`` (as ``DistributedSampler.set_epoch``); call it before each epoch's loop.

        Only a dataset planned from options can re-plan; one made from a fixed plan raises
        :class:`~lodtool.errors.LodUsageError`.
        """
        if self._plan_options is None:
            raise LodUsageError("this BatchDataset was given a fixed plan; make it from plan options to set_epoch")
        self._replan(epoch)
        self._epoch.fill_(int(epoch))

    def _replan(self, epoch: int) -> None:
        plan = as_plan(None, self.path, **{**self._plan_options, "epoch": epoch})
        self._reader.close()
        self._use(plan)

    def __len__(self) -> int:
        return len(self.plan)

    def __getstate__(self) -> dict:
        return dict(self.__dict__)  # the reader drops its open file when pickled

    def __iter__(self) -> Iterator[dict]:
        torch = _torch()
        epoch = int(self._epoch)
        if self._plan_options is not None and epoch != self.plan.options.get("epoch", 0):
            self._replan(epoch)  # a worker kept since an earlier epoch
        info = torch.utils.data.get_worker_info()
        ids = range(len(self.plan))
        in_worker = info is not None
        if in_worker:
            ids = ids[info.id::info.num_workers]
        for b in self._reader.iter_batches(ids):
            yield self._convert(torch, b, copy=in_worker)

    def _convert(self, torch, b: dict, copy: bool) -> dict:
        def tensor(a: np.ndarray):
            t = torch.from_numpy(a)
            return t.clone() if copy else t

        out = {"indices": torch.from_numpy(b["indices"].copy()), "repeat": b["repeat"]}
        if self.output in ("padded", "packed"):
            values, lengths = tensor(b["values"]), tensor(b["lengths"])
            if self.output == "packed":
                out["values"] = torch.nn.utils.rnn.pack_padded_sequence(values, lengths, batch_first=True,
                                                                        enforce_sorted=False)
            else:
                out.update(values=values, mask=tensor(b["mask"]))
            out["lengths"] = lengths
            return out
        if self.output == "jagged":
            offsets = torch.from_numpy(b["offsets"].copy())
            out["values"] = torch.nested.nested_tensor_from_jagged(tensor(b["values"]), offsets)
            out["lengths"] = tensor(b["lengths"])
            return out
        out.update(values=tensor(b["values"]), cu_seqlens=tensor(b["cu_seqlens"]),
                   position_ids=tensor(b["position_ids"]), max_seqlen=b["max_seqlen"], lengths=tensor(b["lengths"]))
        return out


def _make_batch_dataset():
    torch = _torch()

    class BatchDataset(_BatchDatasetMixin, torch.utils.data.IterableDataset):
        __doc__ = _BatchDatasetMixin.__doc__

    BatchDataset.__module__ = __name__
    BatchDataset.__qualname__ = "BatchDataset"
    return BatchDataset


def __getattr__(name: str):
    # the class derives from torch's IterableDataset: it is made (and torch imported) on first use, and
    # cached here, so pickling finds it by name (DataLoader workers started with "spawn")
    if name == "BatchDataset":
        cls = globals()["BatchDataset"] = _make_batch_dataset()
        return cls
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["BatchDataset", "TORCH_OUTPUTS"]  # noqa: F822 (BatchDataset is made on first use, by __getattr__)
