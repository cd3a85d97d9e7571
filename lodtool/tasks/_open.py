"""``lodtool.open`` and ``lodtool.load``: every source a reader takes, behind one pair of functions.

A source is a container file (``PATH`` or ``PATH:tensor``), a sharded
folder, or a token dataset of LLM training read in place (Megatron-Core or
fairseq ``.bin/.idx``, datatrove ``.ds``, OLMo/dolma token arrays: see
:mod:`lodtool.io.token_datasets`); what it opens answers the same questions (``names``, ``tensor()``,
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

from typing import Any, Mapping

from .. import storage
from ..container import shards, spec
from ..io import token_datasets
from ..tensor import LoDTensor


def open(path: str | os.PathLike, *, max_memory: int | None = None,  # noqa: A001 - lodtool.open, as documented
         token_dtype: Any = None, eos_token_id: int | None = None, storage_options: Mapping[str, Any] | None = None):
    """Open a container file, a sharded folder or a token dataset for reading: a
    :class:`~lodtool.container.LodFile`, a :class:`~lodtool.container.shards.ShardedFile` or a
    :class:`~lodtool.io._tokens.TokenFile` (``max_memory`` bounds any single read of a container;
    ``token_dtype`` and ``eos_token_id`` are what a token format cannot say itself: dolma's dtype and
    document ends, fairseq's ambiguous dtype codes).

    A URL (``s3://bucket/corpus.lod.h5``, ``https://...``, a sharded folder's
    ``s3://bucket/corpus/``) opens a container in object storage through fsspec
    (``pip install 'lodtool[remote]'``); ``storage_options`` (credentials,
    ``endpoint_url``, ``timeout`` ...) go to fsspec, on top of what
    :func:`lodtool.storage.options` set and what the environment says
    (see ``docs/remote.md``).  A Megatron or fairseq dataset there (its prefix, ``.idx`` or ``.bin``) is
    read in place too: its ``.idx`` whole, its tokens by ranged requests; so is a datatrove file (its
    ``.ds.index`` whole); dolma files are read from local files.
    """
    with storage.options(storage_options):
        if token_datasets.format_of(path) is not None:
            return token_datasets.open_dataset(path, token_dtype=token_dtype, eos_token_id=eos_token_id,
                                               max_memory=max_memory)
        return shards.open_path(path, max_memory=max_memory)


def load(path: str | os.PathLike, name: str | None = None, *, max_memory: int | None = None,
         storage_options: Mapping[str, Any] | None = None) -> LoDTensor:
    """Read a whole tensor, validated, from a container file or a sharded folder (local, or a URL as for
    :func:`open`, with its ``storage_options``).

    ``path`` may be ``PATH:tensor``; the claimed size is checked against
    ``max_memory`` before anything is allocated.
    """
    ref, tensor = spec.resolve_tensor_ref(path, name)
    with open(ref, max_memory=max_memory, storage_options=storage_options) as f:
        return f.tensor(tensor).read()


__all__ = ["open", "load"]
