"""Reading containers: the lazy file handle, lazy tensors, and checks of the file's layout.

Everything read from a file is untrusted.  Opening a tensor checks its layout
(attributes, dataset kinds, ranks, dtypes) without reading any values;
partial reads (:meth:`LazyTensor.branch`, :meth:`~LazyTensor.slice_level`,
:meth:`~LazyTensor.head`, :meth:`~LazyTensor.tail`) check every offsets window
they read and fetch one contiguous data hyperslab; full reads check the
claimed size against the memory limit and validate the whole LoD first.

>>> import os, tempfile, numpy as np
>>> from lodtool import LoDTensor
>>> from lodtool.container import save
>>> path = os.path.join(tempfile.mkdtemp(), "a.lod.h5")
>>> save(path, LoDTensor(np.arange(1, 16), recursive_sequence_lengths=[[3, 1, 2], [3, 2, 4, 1, 2, 3]]))
>>> with open_file(path) as f:
...     t = f.tensor()
...     t.branch(2).to_nested(), t.level_sizes
([[11, 12], [13, 14, 15]], [4, 7])
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from typing import Iterator

import h5py
import numpy as np

from .. import lod as _lod
from .. import storage
from ..errors import LodError, LodFileNotFoundError, LodFormatError, LodUsageError, LodValidationError
from ..tensor import RESIDENT_AFTER, LoDTensor, TensorSource, TensorView, bytes_per_row, check_dtype
from ..tokens import MAX_TOKENIZER_BYTES, TokenInfo
from . import filters, spec
from ._h5 import (H5_ERRORS, READ_CACHE, chunk_layout_problem, chunk_nbytes, domain_error, foreign_storage, hard_member,
                  member_links, object_key, open_h5, read_rows, remote_source, storage_gap, translate)
from ..limits import check_memory, resolve_max_memory
from ._mmap import mapping

#: a level's offsets up to this size are read whole on first use and kept: a training loop reads a few of them per
#: sequence, which libhdf5 would decode again each time (offsets stored plain are read from the file's map instead)
RESIDENT_OFFSETS_BYTES = 256 << 20

#: bytes of decoded chunks a tensor of an open file keeps for its short reads (:meth:`LazyTensor.decoded_chunks`)
DECODED_CACHE_BYTES = 256 << 20
#: reads that span fewer chunks than this go through the cache of decoded chunks; longer ones decode directly
CACHED_READ_CHUNKS = 16

#: offsets are read for validation and statistics in blocks of this many entries
OFFSET_BLOCK = 1 << 20

_INT_KINDS = "iu"


# -- layout --------------------------------------------------------------------------------------
@dataclass
class Layout:
    """The checked layout of one tensor group (no values read)."""

    name: str
    group: h5py.Group
    data: h5py.Dataset
    lod: list
    lod_level: int
    level_names: tuple | None
    compression: str
    compression_level: int | None
    #: the names of the group's attributes, listed once (token metadata is read from those present; None: not listed)
    attribute_names: frozenset | None = None
    #: the group's members' link types (:func:`~lodtool.container._h5.member_links`), listed once (None: not listed)
    members: dict | None = None

    @property
    def level_sizes(self) -> list[int]:
        return [int(ds.shape[0]) for ds in self.lod]


def _int_attr(value) -> int | None:
    if isinstance(value, (bool, np.bool_)):
        return None
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, np.ndarray) and value.shape in ((), (1,)) and value.dtype.kind in _INT_KINDS:
        return int(value.reshape(-1)[0])
    return None


def declared_lod_level(attrs) -> int | None:
    """The ``lod_level`` attribute as validate and verify both read it: ``0..MAX_LOD_LEVEL``, else ``None``.

    A scalar or a one-element integer array counts; anything else (missing, a bool, a float, a list)
    is ``None``.

    >>> declared_lod_level({"lod_level": np.array([2])}), declared_lod_level({"lod_level": 2.0})
    (2, None)
    """
    value = _int_attr(attrs.get(spec.ATTR_LOD_LEVEL))
    return value if value is not None and 0 <= value <= spec.MAX_LOD_LEVEL else None


def attribute_names(obj: h5py.HLObject) -> frozenset:
    """The names of ``obj``'s attributes, in one libhdf5 call (h5py's ``attrs.keys()`` makes several per object,
    which a file of tens of thousands of tensors pays per tensor).

    >>> import os, tempfile
    >>> with h5py.File(os.path.join(tempfile.mkdtemp(), "x.h5"), "w") as h5:
    ...     h5.attrs["b"], h5.attrs["a"] = 1, "x"
    ...     sorted(attribute_names(h5))
    ['a', 'b']
    """
    names: list = []
    h5py.h5a.iterate(obj.id, lambda name, *_: names.append(name))
    return frozenset(name.decode("utf-8", "surrogateescape") for name in names)


def read_attribute(obj: h5py.HLObject, name: str):
    """``obj.attrs[name]``, the same value, in fewer calls for the two kinds a layout holds: a scalar integer and a
    scalar variable-length UTF-8 string (h5py builds a memory type and converts for every read, about 2.5 times
    the libhdf5 work, which a file of tens of thousands of tensors paid per attribute); any other kind is h5py's.

    >>> import os, tempfile
    >>> with h5py.File(os.path.join(tempfile.mkdtemp(), "x.h5"), "w") as h5:
    ...     h5.attrs.update({"n": 3, "s": "deflate", "a": [1, 2]})
    ...     [(read_attribute(h5, k), h5.attrs[k]) for k in ("n", "s")], read_attribute(h5, "a").tolist()
    ([(np.int64(3), np.int64(3)), ('deflate', 'deflate')], [1, 2])
    """
    aid = h5py.h5a.open(obj.id, name.encode())
    if aid.get_space().get_simple_extent_type() == h5py.h5s.SCALAR:
        tid = aid.get_type()
        kind = tid.get_class()
        if kind == h5py.h5t.INTEGER and tid.get_size() in (1, 2, 4, 8):
            value = np.empty((), dtype=tid.dtype)
            aid.read(value, mtype=tid)  # the file's own type: nothing to convert
            return value[()]
        if kind == h5py.h5t.STRING and tid.is_variable_str() and tid.get_cset() == h5py.h5t.CSET_UTF8:
            value = np.empty((), dtype=_VLEN_TEXT)
            aid.read(value, mtype=_VLEN_TEXT_TYPE)
            text = value[()]
            if isinstance(text, bytes):  # as h5py decodes it
                return text.decode("utf-8", "surrogateescape")
    return obj.attrs[name]


_VLEN_TEXT = h5py.string_dtype("utf-8")
_VLEN_TEXT_TYPE = h5py.h5t.py_create(_VLEN_TEXT)


#: the tensor group attributes the layout is read from (token metadata is read only when asked for)
_LAYOUT_ATTRS = (spec.ATTR_LOD_LEVEL, spec.ATTR_LEVEL_NAMES, spec.ATTR_DTYPE, spec.ATTR_COMPRESSION,
                 spec.ATTR_COMPRESSION_LEVEL)


def _names_attr(value) -> list[str] | None:
    items = value.tolist() if isinstance(value, np.ndarray) and value.ndim == 1 else value
    if not isinstance(items, (list, tuple)):
        return None
    out = []
    for item in items:
        text = spec.text_attr(item)
        if text is None:
            return None
        out.append(text)
    return out


def describe_tensor(group: h5py.Group, path: str, name: str) -> tuple[Layout | None, list[tuple[int | None, str]]]:
    """Check a tensor group's layout; return it (or ``None``) and the ``(level, message)`` issues found.

    Reads attributes and dataset metadata only.  Issues are layout problems a
    reader cannot work around: a missing or mistyped member, offsets that are
    not integers, a data dtype lodtool does not store, ...
    """
    issues: list[tuple[int | None, str]] = []
    with translate(path, f"cannot read the layout of tensor {name!r}"):
        present = attribute_names(group)  # one listing, then each attribute the layout needs read once
        attrs = {key: read_attribute(group, key) for key in _LAYOUT_ATTRS if key in present}
        lod_level = declared_lod_level(attrs)
        if spec.ATTR_LOD_LEVEL not in present:
            issues.append((None, f"attribute {spec.ATTR_LOD_LEVEL!r} is missing"))
        elif lod_level is None:
            issues.append((None, f"attribute {spec.ATTR_LOD_LEVEL!r} is {attrs.get(spec.ATTR_LOD_LEVEL)!r}; "
                                 f"expected an integer 0..{spec.MAX_LOD_LEVEL}"))
        level_names = None
        if spec.ATTR_LEVEL_NAMES in present:
            names = _names_attr(attrs[spec.ATTR_LEVEL_NAMES])
            if names is None:
                issues.append((None, f"attribute {spec.ATTR_LEVEL_NAMES!r} is not a list of strings"))
            elif lod_level is not None and len(names) != lod_level:
                issues.append((None, f"{len(names)} level name(s) for {lod_level} LoD level(s)"))
            else:
                level_names = tuple(names) if names else None
        members = member_links(group)  # one listing answers every member lookup below
        data = hard_member(group, spec.DATA, members)
        if not isinstance(data, h5py.Dataset):
            issues.append((None, f"{spec.DATA!r} is missing or not a dataset"))
            data = None
        elif foreign_storage(data):
            issues.append((None, f"{spec.DATA!r} {foreign_storage(data)}"))
        elif chunk_layout_problem(data):
            issues.append((None, f"{spec.DATA!r} {chunk_layout_problem(data)}"))
        else:
            if data.ndim < 1:
                issues.append((None, f"{spec.DATA!r} is a scalar; it needs at least one dimension (its rows)"))
            try:
                check_dtype(data.dtype, f"{spec.DATA!r}")
            except (LodUsageError, ValueError, TypeError) as exc:
                issues.append((None, str(exc)))
            declared = attrs.get(spec.ATTR_DTYPE)
            if declared is not None:
                text = spec.text_attr(declared)
                try:
                    ok = text is not None and np.dtype(text).newbyteorder("=") == data.dtype.newbyteorder("=")
                except (TypeError, ValueError):
                    ok = False
                if not ok:
                    issues.append((None, f"attribute {spec.ATTR_DTYPE!r} is {declared!r} but {spec.DATA!r} "
                                         f"has dtype {data.dtype}"))
        lod_sets: list = []
        if lod_level == 0 and spec.LOD.encode() in members:  # offsets a 0-level tensor would ignore: a lying lod_level
            issues.append((None, f"{spec.ATTR_LOD_LEVEL!r} is 0 but the tensor has a {spec.LOD!r} member"))
        if lod_level:
            lod_group = hard_member(group, spec.LOD, members)
            if not isinstance(lod_group, h5py.Group):
                issues.append((None, f"{spec.LOD!r} is missing or not a group ({lod_level} LoD level(s) declared)"))
            else:
                levels = member_links(lod_group)
                expected = {str(k) for k in range(lod_level)}
                extra = sorted({name.decode("utf-8", "surrogateescape") for name in levels} - expected)
                if extra:
                    issues.append((None, f"{spec.LOD!r} has unexpected member(s) {', '.join(extra)}"))
                for k in range(lod_level):
                    ds = hard_member(lod_group, str(k), levels)  # None where missing
                    if not isinstance(ds, h5py.Dataset):
                        issues.append((k, f"offsets dataset '{spec.LOD}/{k}' is missing or not a dataset"))
                        continue
                    if foreign_storage(ds):
                        issues.append((k, f"offsets dataset '{spec.LOD}/{k}' {foreign_storage(ds)}"))
                    elif chunk_layout_problem(ds):
                        issues.append((k, f"offsets dataset '{spec.LOD}/{k}' {chunk_layout_problem(ds)}"))
                    elif ds.ndim != 1:
                        issues.append((k, f"offsets have shape {ds.shape}; offsets must be 1-D"))
                    elif ds.dtype.kind not in _INT_KINDS:
                        issues.append((k, f"offsets have dtype {ds.dtype}; offsets must be integers"))
                    elif storage_gap(ds):
                        issues.append((k, f"offsets dataset {storage_gap(ds)}"))
                    else:
                        lod_sets.append(ds)
        compression = spec.text_attr(attrs.get(spec.ATTR_COMPRESSION)) if spec.ATTR_COMPRESSION in present else None
        if compression is None and data is not None:
            compression = filters.describe(data)
        level = _int_attr(attrs.get(spec.ATTR_COMPRESSION_LEVEL)) if spec.ATTR_COMPRESSION_LEVEL in present else None
    if issues or data is None or lod_level is None:
        return None, issues
    return Layout(name, group, data, lod_sets, lod_level, level_names, compression or "none", level,
                  present, members), issues


def read_token_info(group: h5py.Group, path: str, present: frozenset | None = None,
                    members: dict | None = None) -> TokenInfo | None:
    """The token metadata of a tensor group (``docs/format.md``, *Token metadata*), or None where it has none.

    ``present``: the group's attribute names where already listed (:attr:`Layout.attribute_names`); ``members``: its
    members' link types, likewise (:attr:`Layout.members`).

    Attributes of the wrong type, a special id past the vocabulary, or a stored
    tokenizer that is not a 1-D uint8 dataset matching ``tokenizer_hash`` are
    :class:`~lodtool.errors.LodFormatError` naming the file and the tensor.

    >>> import os, tempfile
    >>> from lodtool.container.writer import LodWriter
    >>> p = os.path.join(tempfile.mkdtemp(), "ids.lod.h5")
    >>> with LodWriter(p) as w:
    ...     _ = w.add_tensor("ids", dtype="uint8", lod_level=1, tokens=TokenInfo(vocab_size=9, eos_id=8))
    >>> with open_file(p) as f:
    ...     read_token_info(f.h5["ids"], p).eos_id, f["ids"].tokens.vocab_size
    (8, 9)
    """
    name = group.name.lstrip("/")
    with translate(path, f"cannot read the token metadata of tensor {name!r}"):
        if present is None:  # one listing instead of an HDF5 existence check per attribute
            present = attribute_names(group)
        given = {}
        for key in spec.TOKEN_ATTRS:
            if key not in present:
                continue
            value = raw = read_attribute(group, key)
            if key.startswith("tokenizer_"):
                value = spec.text_attr(value)
            else:
                value = _int_attr(value)
            if value is None:
                raise LodFormatError(f"{path}: tensor {name!r}: attribute {key!r} is {raw!r}; expected "
                                     f"{'a string' if key.startswith('tokenizer_') else 'an integer'}")
            given[key] = value
        stored = hard_member(group, spec.TOKENIZER, members)  # None where missing or not hard-linked
        if stored is not None:
            if not isinstance(stored, h5py.Dataset) or stored.ndim != 1 or stored.dtype != np.uint8 \
                    or foreign_storage(stored):
                raise LodFormatError(f"{path}: tensor {name!r}: {spec.TOKENIZER!r} is not a 1-D uint8 dataset "
                                     "stored in the file")
            if stored.shape[0] > MAX_TOKENIZER_BYTES:
                raise LodFormatError(f"{path}: tensor {name!r}: the stored tokenizer claims {stored.shape[0]:,} "
                                     f"bytes; at most {MAX_TOKENIZER_BYTES:,} are read")
            given["tokenizer_json"] = stored[()].tobytes()
    if not given:
        return None
    try:
        return TokenInfo(**given)
    except LodUsageError as exc:
        raise LodFormatError(f"{path}: tensor {name!r}: token metadata: {exc}") from None


#: libhdf5's metadata cache during a pass over every object of a file (each object header is read once, so a larger
#: cache only holds headers never read again; its default grows to 32 MiB, several times that in resident memory)
WALK_METADATA_CACHE = 1 << 20


@contextlib.contextmanager
def bounded_metadata_cache(h5: h5py.File, nbytes: int = WALK_METADATA_CACHE) -> Iterator[None]:
    """Inside the block, libhdf5 caches at most ``nbytes`` of ``h5``'s metadata; after it, the cache may grow as before.

    A pass over tens of thousands of tensors then runs in flat memory, and no slower.

    >>> import os, tempfile
    >>> with h5py.File(os.path.join(tempfile.mkdtemp(), "x.h5"), "w") as h5:
    ...     with bounded_metadata_cache(h5):
    ...         inside = h5.id.get_mdc_config().max_size
    ...     inside == WALK_METADATA_CACHE, h5.id.get_mdc_config().max_size > WALK_METADATA_CACHE
    (True, True)
    """
    original = h5.id.get_mdc_config()
    config = h5.id.get_mdc_config()
    config.set_initial_size = True
    config.initial_size = min(config.initial_size, nbytes)
    config.min_size = min(config.min_size, nbytes)
    config.max_size = nbytes
    h5.id.set_mdc_config(config)
    try:
        yield
    finally:
        if h5.id.valid:
            h5.id.set_mdc_config(original)


def tensor_names(h5: h5py.File) -> list[str]:
    """Names of the tensor groups at the root, in creation order (``_``-prefixed names are reserved)."""
    gid = h5.id
    # the root group's own creation properties (the file's id answers with the file's)
    tracked = h5py.h5g.open(gid, b"/").get_create_plist().get_link_creation_order() & h5py.h5p.CRT_ORDER_TRACKED
    links: list = []  # (name, link type) of every root member, in one libhdf5 call (the order of h5.keys())
    gid.links.iterate(lambda name, info: links.append((name, info.type)), info=True,
                      idx_type=h5py.h5.INDEX_CRT_ORDER if tracked else h5py.h5.INDEX_NAME)
    out = []
    for raw, kind in links:
        try:
            name = raw.decode("utf-8")
        except UnicodeDecodeError:  # as h5py names it
            name = raw
        if spec.is_tensor_name(name) and kind == h5py.h5l.TYPE_HARD \
                and h5py.h5o.get_info(gid, raw).type == h5py.h5o.TYPE_GROUP:
            out.append(name)
    return out


# -- decoded chunks ---------------------------------------------------------------------------------
def words_of(a: np.ndarray, word: int | None = None) -> np.ndarray:
    """``a``'s bytes as a flat array of unsigned integers of ``word`` bytes (default ``min(itemsize, 8)``): what
    a compiled gather (:func:`lodtool.ops.batching.gather_batch`) copies.

    >>> words_of(np.zeros(3, np.complex128)).dtype, words_of(np.zeros(3, np.int16)).shape
    (dtype('uint64'), (3,))
    """
    return a.reshape(-1).view(f"u{word or min(a.dtype.itemsize, 8)}")


class DecodedChunks:
    """Decoded blocks of a tensor's rows, in slots reused first in, first out, within ``budget_bytes``.

    ``fill(begin, end)`` decodes rows (a block is ``block`` rows: a stored
    chunk, so a read decodes whole chunks; consecutive missing blocks are read
    in one call).  A tensor of an open file keeps one for every read path
    (:meth:`LazyTensor.decoded_chunks`: branches, slices, heads, tails,
    ``read_rows`` and the batch reader), so a chunk read again is not decoded
    again.  ``table[b]`` is the byte where block ``b`` starts in :attr:`rows`
    (-1: not cached), the chunk table a compiled gather reads.  The blocks
    being read are never evicted; a read that needs more blocks than the cache
    holds grows it (within the memory ``limit``).  :attr:`decodes` counts the
    blocks decoded.

    >>> cache = DecodedChunks(lambda a, b: np.arange(a, b), 10, np.dtype(np.int64), (), 4, 64, 1 << 20, "x")
    >>> cache.rows(3, 6).tolist(), cache.rows(4, 5).tolist(), cache.decodes
    ([3, 4, 5], [4], 2)
    """

    def __init__(self, fill, n_rows: int, dtype: np.dtype, element_shape: tuple, block: int, budget_bytes: int,
                 limit: int, where: str):
        self.fill, self.n_rows, self.dtype, self.element_shape = fill, n_rows, dtype, tuple(element_shape)
        self.limit, self.where = limit, where
        self.row_bytes = max(bytes_per_row(dtype, self.element_shape), 1)
        self.block = self.chunk_rows = max(int(block), 1)
        self.n_blocks = -(-n_rows // self.block)
        self.slots = max(min(self.n_blocks, budget_bytes // (self.block * self.row_bytes)), 1)
        self.table = np.full(max(self.n_blocks, 1), -1, dtype=np.int64)
        self.block_of_slot = np.full(self.slots, -1, dtype=np.int64)
        self.next_slot = 0
        self.cached: np.ndarray | None = None  # the slots' rows, allocated on the first read
        self.words = words_of(np.zeros(0, dtype))
        self.decodes = 0

    def check_unchanged(self) -> None:
        """Nothing to check: the cache holds copies."""

    def pending(self) -> bool:
        """Whether a block may be missing (always: a cache rarely holds them all)."""
        return True

    def rows(self, begin: int, end: int) -> np.ndarray:
        """Rows ``begin..end``, a new array (a slot's rows change when it is reused)."""
        block = self.block
        first, last = begin // block, max(end - 1, begin) // block
        self.prepare(np.arange(first, last + 1, dtype=np.int64))
        out = np.empty((end - begin,) + self.element_shape, self.dtype)
        for b in range(first, last + 1):
            lo, hi = max(begin, b * block), min(end, (b + 1) * block)
            at = int(self.table[b]) // self.row_bytes + lo - b * block
            out[lo - begin:hi - begin] = self.cached[at:at + hi - lo]
        return out

    def prepare(self, blocks: np.ndarray) -> None:
        """Decode the blocks of ``blocks`` (one read's, sorted) that are not cached, never evicting one of them."""
        missing = blocks[self.table[blocks] < 0]
        if not missing.size:
            return
        if blocks.shape[0] > self.slots:  # one read needs more blocks than the cache holds: grow it
            self._allocate(min(max(blocks.shape[0], 2 * self.slots), self.n_blocks))
        elif self.cached is None:
            self._allocate(self.slots)
        pinned = set(blocks.tolist())
        slots = np.empty(missing.shape[0], dtype=np.int64)
        taken: set[int] = set()
        for k in range(missing.shape[0]):  # first in, first out, never a block this read needs
            while True:
                s = self.next_slot
                self.next_slot = (s + 1) % self.slots
                old = int(self.block_of_slot[s])
                if s not in taken and (old < 0 or old not in pinned):
                    break
            taken.add(s)
            if old >= 0:
                self.table[old] = -1
            slots[k] = s
        block = self.block
        breaks = np.flatnonzero(np.diff(missing) != 1) + 1
        for run_blocks, run_slots in zip(np.split(missing, breaks), np.split(slots, breaks)):
            begin = int(run_blocks[0]) * block
            rows = self.fill(begin, min((int(run_blocks[-1]) + 1) * block, self.n_rows))
            self.decodes += run_blocks.shape[0]
            for k, (b, s) in enumerate(zip(run_blocks.tolist(), run_slots.tolist())):
                part = rows[k * block:(k + 1) * block]
                self.cached[s * block:s * block + part.shape[0]] = part
                self.table[b] = s * block * self.row_bytes
                self.block_of_slot[s] = b

    def _allocate(self, slots: int) -> None:
        check_memory(slots * self.block * self.row_bytes, self.limit, self.where, f"{slots:,} chunks of the data")
        cached = np.empty((slots * self.block,) + self.element_shape, dtype=self.dtype)
        if self.cached is not None:
            cached[:self.cached.shape[0]] = self.cached
        self.block_of_slot = np.concatenate([self.block_of_slot, np.full(slots - self.slots, -1, dtype=np.int64)])
        self.cached, self.slots = cached, slots
        self.words = words_of(cached)


# -- the lazy tensor --------------------------------------------------------------------------------
class LazyTensor(TensorView):
    """One tensor of an open container; reads only what each call needs.

    Sizes, dtype and dataset handles are read once, when the tensor is opened.
    It is a :class:`~lodtool.tensor.TensorView`: ``branch``, ``slice_level``,
    ``head``, ``tail``, ``read_rows`` and ``iter_chunks`` are the in-memory
    tensor's own, read through this handle's windows of the file.

    >>> import os, tempfile, numpy as np
    >>> from lodtool import LoDTensor
    >>> from lodtool.container import save, open_file
    >>> path = os.path.join(tempfile.mkdtemp(), "a.lod.h5")
    >>> save(path, {"x": LoDTensor(np.arange(7.0), recursive_sequence_lengths=[[2, 1], [2, 2, 3]])})
    >>> with open_file(path) as f:
    ...     x = f["x"]
    ...     (len(x), x.shape, x.dtype, x.level_sizes), x.slice_level(1, 1, 3).lod
    ((2, (7,), dtype('float64'), [3, 4]), [[0, 2, 5]])
    """

    def __init__(self, file: "LodFile", layout: Layout):
        self._file = file
        self._path = file.path
        self._layout = layout
        self.name = layout.name
        self._data = layout.data
        self._lod = list(layout.lod)
        self._sizes = layout.level_sizes
        self._n_rows = int(layout.data.shape[0])
        self._element_shape = tuple(int(d) for d in layout.data.shape[1:])
        self._dtype = np.dtype(layout.data.dtype.newbyteorder("=").str)  # native order, as every read returns it
        self._row_bytes = self._dtype.itemsize * int(np.prod(self._element_shape, dtype=np.int64))
        # size checks count rows too: a zero-width row is free in numpy but not in anything made from it
        # (a nested list, a JSON line, a padded mask); a file claiming 2**40 of them must not pass as 0 bytes
        self._row_cost = max(self._row_bytes, 1)
        self._limit = file.max_memory
        self._readable = False
        self._mapped = False  # the data's MappedRows (or None), looked up on the first read
        self._decoded: DecodedChunks | None = None
        self._resident: list[np.ndarray | bool | None] = [None] * len(self._lod)
        self._checked: tuple | bool | None = None  # every level resident and validated (see _checked_levels)
        self._window_reads = 0
        self._source = remote_source(file.h5)  # the object-storage reader, or None for a local file
        self._what = f"tensor {self.name!r}"
        self._tokens: TokenInfo | None | bool = False  # not read yet
        if not self._row_bytes:  # rows that store nothing: only their count bounds what a reader makes of them
            check_memory(self._n_rows, self._limit, self._path,
                         f"{self._what}: {self._n_rows:,} rows of zero width (counted at a byte each)")
        for k, ds in enumerate(self._lod):  # offsets lodtool writes never need a plugin; foreign ones might
            filters.ensure_readable(ds, self._path, f"{self._what} level {k} offsets")
            _check_chunk_memory(ds, self._limit, self._path, f"one chunk of {self._what} level {k} offsets")

    # -- metadata ----------------------------------------------------------------------------------
    @property
    def lod_level(self) -> int:
        return self._layout.lod_level

    @property
    def level_names(self) -> tuple[str, ...] | None:
        return self._layout.level_names

    @property
    def tokens(self) -> TokenInfo | None:
        """The tensor's token metadata (vocabulary, special ids, tokenizer), or None (read once, then held)."""
        if self._tokens is False:
            self._tokens = read_token_info(self._layout.group, self._path, self._layout.attribute_names,
                                           self._layout.members)
        return self._tokens

    @property
    def dtype(self) -> np.dtype:
        return self._dtype

    @property
    def element_shape(self) -> tuple[int, ...]:
        return self._element_shape

    @property
    def n_rows(self) -> int:
        return self._n_rows

    @property
    def level_sizes(self) -> list[int]:
        """Entries of each offsets dataset (sequences of level ``k`` + 1)."""
        return list(self._sizes)

    @property
    def compression(self) -> str:
        return self._layout.compression

    @property
    def compression_level(self) -> int | None:
        return self._layout.compression_level

    @property
    def chunk_rows(self) -> int:
        """Rows of the data per stored chunk (a contiguous dataset is one chunk of every row)."""
        chunks = self._data.chunks
        return int(chunks[0]) if chunks else max(self._n_rows, 1)

    @property
    def mappable(self) -> bool:
        """Whether the data is read from a memory map of the file (stored without a compression filter, in a
        file open for reading): random reads then cost about what a raw ``np.memmap`` costs."""
        return mapping(self._data) is not None

    def mapped_rows(self):
        """The data's memory map (a :class:`~lodtool.container._mmap.MappedRows`: a compiled gather reads its
        chunk table), or ``None`` where the data is read through libhdf5."""
        return mapping(self._data)

    @property
    def nbytes(self) -> int:
        """Logical bytes of the data plus the offsets (shared offsets count for each tensor)."""
        return self._n_rows * self._row_bytes + 8 * sum(self._sizes)

    @property
    def storage_size(self) -> int:
        """Bytes the data and offsets take in the file."""
        with translate(self._path, f"cannot read the storage size of {self._what}"):
            return int(self._data.id.get_storage_size()) + sum(int(ds.id.get_storage_size()) for ds in self._lod)

    def __repr__(self) -> str:
        return (f"<LazyTensor {self.name!r} shape={self.shape} dtype={self._dtype} lod_level={self.lod_level} "
                f"file={self._path!r}>")

    # -- raw reads ------------------------------------------------------------------------------------
    def _window(self, level: int, start: int, stop: int) -> np.ndarray:
        """A :data:`lodtool.lod.WindowReader` over the file (unchecked; lod checks what it gets)."""
        resident = self._resident[level]
        if resident is None:
            self._window_reads += 1
            if self._window_reads > RESIDENT_AFTER and self._held_whole_for_free(level):
                resident = self._resident[level] = self._resident_level(level)
        if resident is not None and resident is not False:
            return resident[start:stop]
        if 8 * (stop - start) > self._limit:
            check_memory(8 * (stop - start), self._limit, self._path, f"{self._what} level {level} offsets")
        try:
            return read_rows(self._lod[level], start, stop, self._limit)
        except LodError:  # a chunk refused before it was decoded
            raise
        except H5_ERRORS as exc:
            raise domain_error(exc, self._path, f"cannot read {self._what} level {level} offsets") from None

    def _too_large_to_hold(self, level: int) -> bool:
        """Whether level ``level``'s offsets are above :data:`RESIDENT_OFFSETS_BYTES` or the memory limit."""
        return 8 * self._sizes[level] > min(RESIDENT_OFFSETS_BYTES, self._limit)

    def _held_whole_for_free(self, level: int) -> bool:
        """Whether making level ``level`` resident reads nothing more than its windows would: always for a local
        file; in object storage only once every chunk of it is here (read ahead, or read by earlier windows),
        since each chunk still missing would cost a request where a window costs one for its chunk."""
        if self._source is None or self._too_large_to_hold(level):
            return True
        with translate(self._path, f"cannot locate the chunks of {self._what} level {level} offsets"):
            return self._source.holds(self._lod[level])

    def _resident_level(self, level: int) -> np.ndarray | bool:
        """Level ``level``'s offsets read whole and kept (read-only), or ``False`` where windows are read as asked
        (a level above :data:`RESIDENT_OFFSETS_BYTES` or the memory limit: from the file's map where the offsets
        are stored plain, else through libhdf5)."""
        size = self._sizes[level]
        if self._too_large_to_hold(level):
            return False
        self._resident[level] = False  # read once through the file, as any window
        whole = self._window(level, 0, size)
        whole.flags.writeable = False
        return whole

    def _checked_levels(self) -> tuple | None:
        if self._checked is None and self._window_reads > RESIDENT_AFTER and all(
                self._resident[k] is not None or self._held_whole_for_free(k) for k in range(self.lod_level)):
            levels = [self._resident[k] if self._resident[k] is not None else self._resident_level(k)
                      for k in range(self.lod_level)]
            self._resident = list(levels)
            sound = all(level is not False for level in levels) and not _lod.find_lod_problems(
                [_lod.as_index_array(o, level=k) for k, o in enumerate(levels)], self._n_rows, max_problems=1)
            self._checked = tuple(levels) if sound else False
        return self._checked or None

    def _rows(self, begin: int, end: int) -> np.ndarray:
        if (end - begin) * self._row_cost > self._limit:
            check_memory((end - begin) * self._row_cost, self._limit, self._path,
                         f"{end - begin:,} rows of {self._what}")
        mapped = self._mapped
        if mapped is False:
            mapped = self._mapped = mapping(self._data)
        if mapped is not None and end > begin:  # plain bytes, every chunk stored: straight from the map
            rows = mapped.rows(begin, end)
            if rows is not None:
                return rows
        elif end > begin and self._data.chunks and (end - 1) // self._data.chunks[0] - begin // self._data.chunks[
                0] < CACHED_READ_CHUNKS:  # a short read of decoded chunks: through the cache they stay in
            return self.decoded_chunks().rows(begin, end)
        return self._decode(begin, end)

    def decoded_chunks(self, budget_bytes: int = DECODED_CACHE_BYTES) -> DecodedChunks:
        """The cache of this tensor's decoded chunks that every short read shares (made on first use, of
        ``budget_bytes``: the first caller's)."""
        if self._decoded is None:  # a block is a stored chunk (of a contiguous dataset: about READ_CACHE bytes)
            block = self.chunk_rows if self._data.chunks else max(READ_CACHE // self._row_cost, 1)
            self._decoded = DecodedChunks(self._decode, self._n_rows, self._dtype, self._element_shape, block,
                                          budget_bytes, self._limit, self._path)
        return self._decoded

    def _decode(self, begin: int, end: int) -> np.ndarray:
        """Rows ``begin..end`` read through libhdf5 (or the map), checked, decoded and never cached."""
        if not self._readable:
            filters.ensure_readable(self._data, self._path, self._what)
            with translate(self._path, f"cannot read the data of {self._what}"):
                gap = storage_gap(self._data)
            if gap:  # chunks that are not stored would read as zeros: a crafted or damaged size
                raise LodFormatError(f"{self._path}: {self._what}: the data {gap}")
            _check_chunk_memory(self._data, self._limit, self._path, f"one chunk of the data of {self._what}")
            self._readable = True
        try:
            return read_rows(self._data, begin, end, self._limit)
        except LodError:  # a chunk refused before it was decoded
            raise
        except H5_ERRORS as exc:
            raise domain_error(exc, self._path, f"cannot read the data of {self._what}") from None

    def _blocks(self, level: int, block: int = OFFSET_BLOCK) -> Iterator[np.ndarray]:
        size = self._sizes[level]
        for start in range(0, size, block):
            yield self._window(level, start, min(start + block, size))

    # -- whole reads -------------------------------------------------------------------------------------
    def read(self) -> LoDTensor:
        """The whole tensor, validated; its size is checked against the memory limit first.

        >>> import os, tempfile, numpy as np
        >>> from lodtool import LoDTensor
        >>> from lodtool.container import save, open_file
        >>> p = os.path.join(tempfile.mkdtemp(), "a.lod.h5")
        >>> save(p, LoDTensor(np.arange(3), [[0, 2, 3]]))
        >>> with open_file(p) as f:
        ...     f.tensor().read().lod
        [[0, 2, 3]]
        """
        check_memory(self._n_rows * self._row_cost + 8 * sum(self._sizes), self._limit, self._path, self._what)
        with translate(self._path, f"cannot read the data of {self._what}"):
            gap = storage_gap(self._data)
        if gap:
            raise LodFormatError(f"{self._path}: {self._what}: the data {gap}")
        offsets = [self.read_offsets(k) for k in range(self.lod_level)]
        try:
            problems = _lod.find_lod_problems(offsets, self._n_rows, max_problems=1)
        except LodValidationError as exc:
            raise self._problem_error(exc) from None
        if problems:
            raise self._problem_error(problems[0])
        return LoDTensor._trusted(self._rows(0, self._n_rows), offsets, self.level_names)

    def validate(self, max_problems: int = 20) -> list[_lod.LodProblem]:
        """Every broken LoD rule, reading the offsets block by block (never the data).

        >>> import os, tempfile, numpy as np
        >>> from lodtool import LoDTensor
        >>> from lodtool.container import save, open_file
        >>> p = os.path.join(tempfile.mkdtemp(), "a.lod.h5")
        >>> save(p, LoDTensor(np.arange(3), [[0, 2, 3]]))
        >>> with open_file(p) as f:
        ...     f.tensor().validate()
        []
        """
        levels = [self._checked_blocks(k) for k in range(self.lod_level)]
        try:
            return _lod.find_lod_problems(levels, self._n_rows, level_sizes=self._sizes, max_problems=max_problems)
        except LodValidationError as exc:  # offsets that do not fit in int64
            level = getattr(exc, "level", 0)
            return [_lod.LodProblem(level, None, str(exc).removeprefix(f"level {level}: "))]

    def _checked_blocks(self, level: int) -> Iterator[np.ndarray]:
        for block in self._blocks(level):
            try:
                yield _lod.as_index_array(block, level=level)
            except LodValidationError as exc:
                exc.level = level
                raise

    def _problem_blocks(self, level: int) -> Iterator[np.ndarray]:
        """:meth:`_checked_blocks`, with offsets that are not int64 integers as this tensor's error."""
        try:
            yield from self._checked_blocks(level)
        except LodValidationError as exc:
            raise self._problem_error(exc) from None

    # -- statistics --------------------------------------------------------------------------------------
    def checked_level_stats(self) -> list[dict]:
        """:meth:`level_stats` of every level, validating the whole LoD on the same single read.

        Statistics of an invalid LoD would be nonsense (negative lengths, counts
        that do not add up), so the first broken rule raises
        :class:`~lodtool.errors.LodValidationError` instead.

        >>> import os, tempfile, numpy as np
        >>> from lodtool import LoDTensor
        >>> from lodtool.container import save, open_file
        >>> p = os.path.join(tempfile.mkdtemp(), "a.lod.h5")
        >>> save(p, LoDTensor(np.arange(6), recursive_sequence_lengths=[[2, 1], [3, 0, 3]]))
        >>> with open_file(p) as f:
        ...     [s["max"] for s in f.tensor().checked_level_stats()]
        [2, 3]
        """
        stats, ends = [], []
        for level in range(self.lod_level):
            checker = _lod.LevelChecker(level)

            def checked(level: int = level, checker=checker) -> Iterator[np.ndarray]:
                for block in self._problem_blocks(level):
                    checker.feed(block)
                    if checker.problems:  # before the statistics see a bad block
                        raise self._problem_error(checker.problems[0])
                    yield block

            stats.append(_lod.length_stats(checked(), self._limit, self._path, f"{self._what} level {level} lengths"))
            checker.finish()
            if checker.problems:
                raise self._problem_error(checker.problems[0])
            ends.append(checker.last)
        problems = _lod.cross_level_problems(ends, self._sizes, self._n_rows)
        if problems:
            raise self._problem_error(problems[0])
        return stats

    def level_stats(self, level: int) -> dict:
        """Length statistics of one level, from its offsets alone (read block by block).

        Returns ``count`` (sequences), ``min``, ``median``, ``mean``, ``max`` of
        their lengths and ``empty`` (how many have length 0); the statistics are
        ``None`` for a level without sequences.

        >>> import os, tempfile, numpy as np
        >>> from lodtool import LoDTensor
        >>> from lodtool.container import save, open_file
        >>> p = os.path.join(tempfile.mkdtemp(), "a.lod.h5")
        >>> save(p, LoDTensor(np.arange(6), recursive_sequence_lengths=[[3, 0, 1, 2]]))
        >>> with open_file(p) as f:
        ...     f.tensor().level_stats(0)
        {'count': 4, 'min': 0, 'median': 1.5, 'mean': 1.5, 'max': 3, 'empty': 1}
        """
        level = self._level(level)
        return _lod.length_stats(self._checked_blocks(level), self._limit, self._path,
                             f"{self._what} level {level} lengths")


def _check_chunk_memory(ds: h5py.Dataset, limit: int, path: str, what: str) -> None:
    """Any read decodes whole chunks: one above the chunk cache must fit in the memory limit before the first read.

    Chunks up to :data:`READ_CACHE` are the cache's fixed cost, not a claim of the file.
    """
    nbytes = chunk_nbytes(ds)
    if nbytes > READ_CACHE:
        check_memory(nbytes, limit, path, what)




# -- the file handle ---------------------------------------------------------------------------------
class LodFile(TensorSource):
    """An open container: names, lazy tensors by name, and the format version.

    Use it as a context manager (or call :meth:`close`); tensors read through
    it are valid only while it is open.

    >>> import os, tempfile, numpy as np
    >>> from lodtool import LoDTensor
    >>> from lodtool.container import save, open_file
    >>> p = os.path.join(tempfile.mkdtemp(), "a.lod.h5")
    >>> save(p, {"a": LoDTensor(np.arange(3), [[0, 3]]), "b": LoDTensor(np.ones(2), [[0, 1, 2]])})
    >>> with open_file(p) as f:
    ...     f.names, f.format_version, "a" in f, len(f["b"])
    (['a', 'b'], '1.0', True, 2)
    """

    def __init__(self, path: str, h5: h5py.File, *, max_memory: int | None = None, default_name: str | None = None):
        self.path = path
        #: the tensor :meth:`tensor` returns without a name (from ``FILE:tensor``)
        self.default_name = default_name
        self._h5 = h5
        self.max_memory = resolve_max_memory(max_memory)
        with translate(path, "damaged HDF5 file: cannot read the root attributes"):
            self.format_version = spec.check_version(h5.attrs, path)
        with translate(path, "cannot list the tensors"), bounded_metadata_cache(h5):
            self._readonly = h5.id.get_intent() == h5py.h5f.ACC_RDONLY
            self.names = tensor_names(h5)
            self._name_set = frozenset(self.names)  # membership per lookup, not a scan of the list
            created = h5.attrs.get(spec.ATTR_CREATED_BY)
            self.created_by = spec.text_attr(created) if created is not None else None
            algorithm = h5.attrs.get(spec.ATTR_CHECKSUM)
            self.checksum_algorithm = spec.text_attr(algorithm) if algorithm is not None else None
        self._tensors: dict[str, LazyTensor] = {}
        self._lod_keys: dict = {}  # tensor name -> what names its first offsets dataset (None: it has none)
        self._lod_holders: dict | None = None  # that -> the tensors that hold it

    @property
    def h5(self) -> h5py.File:
        """The underlying h5py file (read-only)."""
        return self._h5

    def _group(self, name: str) -> h5py.Group:
        if name not in self._name_set:
            listing = ", ".join(repr(n) for n in self.names) or "none"
            raise LodFileNotFoundError(f"{self.path}: no tensor named {name!r} (tensors: {listing})")
        with translate(self.path, f"cannot open tensor {name!r}"):
            # a hard-linked group at the root (tensor_names), opened directly: h5py's h5[name] resolves a path
            group = h5py.Group(h5py.h5o.open(self._h5.id, name.encode() if isinstance(name, str) else name))
        group.__dict__["_lodtool_readonly"] = self._readonly  # what hard_member would ask the file for, per member
        return group

    def describe(self, name: str) -> tuple[Layout | None, list[tuple[int | None, str]]]:
        """The layout of tensor ``name`` and the layout issues found (see :func:`describe_tensor`)."""
        return describe_tensor(self._group(name), self.path, name)

    def __getitem__(self, name: str) -> LazyTensor:
        if name not in self._tensors:
            layout, issues = self.describe(name)
            if layout is None:
                level, message = issues[0] if issues else (None, "unreadable layout")
                where = f"level {level}: " if level is not None else ""
                raise LodFormatError(f"{self.path}: tensor {name!r}: {where}{message}")
            return self.open_layout(layout)
        return self._tensors[name]

    def open_layout(self, layout: Layout) -> LazyTensor:
        """The tensor of a layout :meth:`describe` found sound (what ``f[name]`` then returns), without describing it
        again: a check that reports the layout's issues itself opens each tensor once."""
        tensor = self._tensors[layout.name] = LazyTensor(self, layout)
        self._note_lod(layout.name, layout)
        return tensor

    def _note_lod(self, name: str, layout: Layout | None) -> None:
        with translate(self.path, "cannot compare offsets datasets"):
            self._lod_keys[name] = object_key(layout.lod[0]) if layout is not None and layout.lod else None

    def tensor(self, name: str | None = None) -> LazyTensor:
        """Tensor ``name``; with ``None``, the one named by ``FILE:tensor``, else the only tensor of the file."""
        name = name if name is not None else self.default_name
        if name is not None:
            return self[name]
        if len(self.names) == 1:
            return self[self.names[0]]
        if not self.names:
            raise LodFormatError(f"{self.path}: the container holds no tensors")
        raise LodUsageError(f"{self.path} holds {len(self.names)} tensors ({', '.join(self.names)}); "
                            f"name one as {self.path}:{self.names[0]} or with name='{self.names[0]}'")

    def shared_lod_with(self, name: str) -> list[str]:
        """Other tensors whose offsets are the same HDF5 datasets as ``name``'s (hard links)."""
        if name not in self._lod_keys:
            self[name]
        if self._lod_keys[name] is None:
            return []
        return [other for other in self._holders()[self._lod_keys[name]] if other != name]

    def lod_groups(self) -> dict[str, tuple[str, ...]]:
        """Each tensor whose offsets another tensor shares -> every tensor holding them, itself included, in file
        order (one tuple per group, so a file of many tensors sharing one set of offsets holds it once).

        >>> import os, tempfile, numpy as np
        >>> from lodtool import LoDTensor
        >>> from lodtool.container import save
        >>> p = os.path.join(tempfile.mkdtemp(), "a.lod.h5")
        >>> t = LoDTensor(np.arange(3), [[0, 3]])
        >>> save(p, {"a": t, "b": LoDTensor(np.ones(3), t.lod), "c": LoDTensor(np.arange(2), [[0, 2]])})
        >>> with open_file(p) as f:
        ...     f.lod_groups()
        {'a': ('a', 'b'), 'b': ('a', 'b')}
        """
        groups = {}
        for names in self._holders().values():
            if len(names) > 1:
                group = tuple(names)
                groups.update(dict.fromkeys(group, group))
        return groups

    def _holders(self) -> dict:
        """What names each offsets dataset -> the tensors that hold it, grouped once (so asking for every tensor of
        the file is linear), from what opening each tensor noted; a tensor never opened is described for it."""
        if self._lod_holders is None:
            holders: dict = {}
            for other in self.names:  # keyed by what names each dataset, so none is held open
                if other not in self._lod_keys:  # (a broken layout holds no offsets to share)
                    self._note_lod(other, self.describe(other)[0])
                if self._lod_keys[other] is not None:
                    holders.setdefault(self._lod_keys[other], []).append(other)
            self._lod_holders = holders
        return self._lod_holders

    def release(self, name: str) -> None:
        """Forget the handle of tensor ``name`` (its HDF5 objects close once nothing else holds them), so a pass
        over many tensors holds one at a time; the next ``f[name]`` opens it again."""
        self._tensors.pop(name, None)

    def close(self) -> None:
        """Close the file (tensors opened through it stop working)."""
        self._tensors.clear()
        try:
            self._h5.close()
        except Exception:  # pragma: no cover - closing a broken file
            pass

    def __repr__(self) -> str:
        return f"<LodFile {self.path!r} v{self.format_version} tensors={self.names}>"


def open_file(path: str | os.PathLike, *, max_memory: int | None = None) -> LodFile:
    """Open a container lazily (nothing but the root attributes is read yet).

    ``path`` may be ``FILE:tensor``: :meth:`LodFile.tensor` then returns that
    tensor by default (a file whose real name contains ``:`` still opens).

    A missing file is :class:`~lodtool.errors.LodFileNotFoundError`; anything
    that is not a readable lodtool container is :class:`~lodtool.errors.LodFormatError`
    (:class:`~lodtool.errors.LodVersionError` for an unsupported format version).
    ``max_memory`` bounds any single read (default: ``min(available RAM / 2, 4 GiB)``).

    >>> import os, tempfile, numpy as np
    >>> from lodtool import LoDTensor
    >>> from lodtool.container import save
    >>> p = os.path.join(tempfile.mkdtemp(), "a.lod.h5")
    >>> save(p, LoDTensor(np.arange(3), [[0, 3]]), name="x")
    >>> with open_file(p) as f:
    ...     f.names
    ['x']
    """
    path, name = spec.split_tensor_ref(storage.local_path(os.fspath(path)))
    h5 = open_h5(path, "r")  # a URL: through fsspec, named in messages without its credentials
    try:
        f = LodFile(storage.redact(path) if storage.is_url(path) else path, h5, max_memory=max_memory,
                    default_name=name)
        if name is not None:
            f[name]  # a missing tensor fails here, naming the file
        return f
    except BaseException:
        h5.close()
        raise


def load(path: str | os.PathLike, name: str | None = None, *, max_memory: int | None = None) -> LoDTensor:
    """Read a whole tensor, validated (``name=None``: the only tensor of the file).

    ``path`` may be ``FILE:tensor`` (then ``name``, if given, must agree).

    The claimed size is checked against ``max_memory`` (default
    ``min(available RAM / 2, 4 GiB)``) before anything is allocated.

    >>> import os, tempfile, numpy as np
    >>> from lodtool import LoDTensor
    >>> from lodtool.container import save
    >>> p = os.path.join(tempfile.mkdtemp(), "x.lod.h5")
    >>> save(p, LoDTensor(np.arange(3), [[0, 2, 3]]))
    >>> load(p).to_nested()
    [[0, 1], [2]]
    """
    path, name = spec.resolve_tensor_ref(path, name)
    with open_file(path, max_memory=max_memory) as f:
        return f.tensor(name).read()


__all__ = ["LodFile", "LazyTensor", "open_file", "load", "describe_tensor", "declared_lod_level", "tensor_names",
           "read_token_info", "attribute_names", "read_attribute", "bounded_metadata_cache", "Layout", "DecodedChunks",
           "words_of", "DECODED_CACHE_BYTES"]
