"""``lodtool.open`` and ``lodtool.load``: every source a reader takes, behind one pair of functions.

A source is a container file (``PATH`` or ``PATH:tensor``) or a sharded
folder; what it opens answers the same questions (``names``, ``tensor()``,
``f[name]``, a context manager) and its tensors are all
:class:`~lodtool.tensor.TensorView` s, so every reading command works on each.

>>> import os, tempfile, numpy as np
>>> import lodtool
>>> p = os.path.join(tempfile.mkdtemp(), "a.lod.h5")
>>> lodtool.save(p, lodtool.LoDTensor(np.arange(3), [[0, 3]]))
>>> with open(p) as f:
...     f.names, f.tensor().branch(0).data.tolist()
(['tensor'], [0, 1, 2])
>>> load(p).lod
[[0, 3]]
"""

from __future__ import annotations

import os

from ..container import shards, spec
from ..tensor import LoDTensor


def open(path: str | os.PathLike, *, max_memory: int | None = None):  # noqa: A001 - lodtool.open, as documented
    """Open a container file, or a sharded folder, for reading: a :class:`~lodtool.container.LodFile` or a
    :class:`~lodtool.container.shards.ShardedFile` (``max_memory`` bounds any single read)."""
    return shards.open_path(path, max_memory=max_memory)


def load(path: str | os.PathLike, name: str | None = None, *, max_memory: int | None = None) -> LoDTensor:
    """Read a whole tensor, validated, from a container file or a sharded folder.

    ``path`` may be ``PATH:tensor``; the claimed size is checked against
    ``max_memory`` before anything is allocated.
    """
    ref, tensor = spec.resolve_tensor_ref(path, name)
    with open(ref, max_memory=max_memory) as f:
        return f.tensor(tensor).read()


__all__ = ["open", "load"]
