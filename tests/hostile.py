"""Hostile containers: valid base files, corrupted variants of them, and a driver that runs the CLI over them.

The corrupted-container suite (``tests/test_hostile.py``) and the long fuzzing
run both use this module:

* :func:`make_bases` writes a few valid containers (0, 1 and 2 LoD levels,
  element shapes, shared offsets, compressed and not, with and without fletcher32);
* :data:`MUTATORS` turn a base file into a variant of one *class* (bit flips in
  data, offsets or attributes, truncation, bad offsets, missing or extra members,
  lying attributes, foreign files, ...);
* :func:`run_matrix` runs every command over every variant.  Each run is a real
  process: a driver (``python -m tests.hostile drive``) imports lodtool once and
  forks one child per command line, with ``NUMBA_BOUNDSCHECK=1``, an address-space
  limit and a timeout, and records the exit status, signal, peak RSS and output;
* :func:`check` lists every run that broke a promise, :func:`summary` counts
  outcomes per class.

The long run and its table (used for ``docs/reliability.md``)::

    python -m tests.hostile report --per-class 40 --seed 2 --inputs 2000
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass, field

import h5py
import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

#: address-space limit of each command (the driver's own imports take about 0.8 GiB of it)
ADDRESS_SPACE = 3 << 30
#: a run whose peak RSS is above this is a memory blow-up (the largest base file is a few KiB)
RSS_LIMIT = 1 << 30
TIMEOUT = 30.0

#: every command, as the argument list after ``lodtool``; see :func:`command_args`
COMMANDS = ("inspect", "validate", "verify", "tree", "slice", "head", "unpack", "expand", "pool", "pad",
            "softmax", "reverse", "append", "validate-isolate", "verify-isolate", "inspect-isolate")
#: commands that check the whole LoD of the tensor they read, so must refuse an invalid one
WHOLE_READERS = frozenset({"inspect", "validate", "unpack", "expand", "pool", "pad", "softmax", "reverse", "append",
                           "validate-isolate", "inspect-isolate"})
#: commands that open the tensor, so must refuse a broken layout or header
TENSOR_READERS = WHOLE_READERS | {"tree", "slice", "head"}
VERIFIERS = frozenset({"verify", "verify-isolate"})
#: commands that need the named tensor to exist (validate and inspect are fine with a file of no tensors)
NEEDS_TENSOR = frozenset({"tree", "slice", "head", "unpack", "expand", "pool", "pad", "softmax", "reverse"})
EVERYTHING = frozenset(COMMANDS)
#: commands whose output is values; exit 0 with values unlike the base's must be caught by verify
VALUE_COMMANDS = ("slice", "head", "unpack", "expand", "pool", "pad", "softmax", "reverse")


# -- base files ------------------------------------------------------------------------------------------
@dataclass
class Base:
    """A valid container the variants start from."""

    name: str
    path: str
    tensor: str  # the tensor the commands work on
    multi: bool  # several tensors: commands need --name
    lod_level: int
    dtype: str
    append_input: str  # a JSON Lines file `pack --append` adds to the tensor


def make_bases(folder: str) -> dict[str, Base]:
    """Write the base containers into ``folder`` (the zstd one only where hdf5plugin is installed)."""
    from lodtool import LoDTensor
    from lodtool.container import filters
    from lodtool.container import save
    from lodtool.tasks import export

    rng = np.random.default_rng(0)
    art = [[3, 1, 2], [3, 2, 4, 1, 2, 3]]
    specs = {
        # name: (tensors, options, tensor used by the commands)
        "plain": ({"tensor": LoDTensor(rng.standard_normal((40, 3)).astype(np.float32))},
                  {"compression": "lzf"}, "tensor"),
        "one": ({"tensor": LoDTensor(np.arange(300, dtype=np.int64),
                                     recursive_sequence_lengths=[[5, 0, 100, 3, 0, 192]])},
                {"compression": "none", "fletcher32": False}, "tensor"),
        "two": ({"tensor": LoDTensor(np.arange(1, 16), recursive_sequence_lengths=art,
                                     level_names=["article", "sentence"])},
                {"compression": "gzip"}, "tensor"),
        "frames": ({"tensor": LoDTensor(rng.standard_normal((15, 2, 2)), recursive_sequence_lengths=art)},
                   {"compression": "none"}, "tensor"),
        "shared": ({"tokens": LoDTensor(np.arange(15), recursive_sequence_lengths=art),
                    "labels": LoDTensor(np.arange(15, dtype=np.float32).reshape(15, 1) / 7,
                                        recursive_sequence_lengths=art)},
                   {"compression": "lzf"}, "labels"),
        "zstd": ({"tensor": LoDTensor(np.arange(2000, dtype=np.float32).reshape(2000, 1),
                                      recursive_sequence_lengths=[[700, 0, 1300]])},
                 {"compression": "zstd"}, "tensor"),
    }
    try:
        filters.dataset_options("zstd", 3)
    except Exception:  # no hdf5plugin: no plugin-compressed base
        del specs["zstd"]
    out = {}
    for name, (tensors, options, main) in specs.items():
        path = os.path.join(folder, f"{name}.lod.h5")
        save(path, tensors, **options)
        t = tensors[main]
        append_input = os.path.join(folder, f"{name}.append.jsonl")
        part = t.slice_level(0, 0, 1) if t.lod_level else LoDTensor(t.data[:2])
        export(part, append_input, to="jsonl")
        out[name] = Base(name, path, main, len(tensors) > 1, t.lod_level, str(t.dtype), append_input)
    return out


def command_args(command: str, base: Base, path: str, append_target: str) -> list[str]:
    """The ``lodtool`` arguments of ``command`` on the file ``path`` (a variant of ``base``)."""
    name = ["--name", base.tensor] if base.multi else []
    ref = f"{path}:{base.tensor}" if base.multi else path
    return {
        "inspect": ["inspect", path, "--json"],
        "validate": ["validate", path],
        "verify": ["verify", path],
        "tree": ["tree", path, *name, "--depth", "3"],
        "slice": ["slice", path, "-1", *name, "--to", "json"],
        "head": ["head", path, "-n", "2", *name, "--to", "jsonl"],
        "unpack": ["unpack", path, *name, "--to", "json"],
        "expand": ["expand", ref, ref, "-o", "out.lod.h5"],
        "pool": ["pool", path, *name, "-o", "out.lod.h5"],
        "pad": ["pad", path, *name, "-o", "out.npz"],
        "softmax": ["softmax", path, *name, "-o", "out.lod.h5"],
        "reverse": ["reverse", path, *name, "-o", "out.lod.h5"],
        "append": ["pack", base.append_input, "--format", "jsonl", "--lod-level", str(base.lod_level),
                   "--dtype", base.dtype, "--name", base.tensor, "--append", "-o", append_target],
        "validate-isolate": ["validate", "--isolate", "--timeout", "20", path],
        "verify-isolate": ["verify", "--isolate", "--timeout", "20", path],
        "inspect-isolate": ["inspect", "--isolate", "--timeout", "20", path, "--json"],
    }[command]


# -- variants --------------------------------------------------------------------------------------------
@dataclass
class Variant:
    """A corrupted copy of a base file, and what its corruption obliges the commands to notice."""

    name: str
    klass: str
    base: str
    path: str
    must_fail: frozenset = frozenset()  # commands that must exit non-zero
    rehashed: bool = False  # checksums were recorded again after the change: verify may pass


class Mutation:
    """What a mutator did: the commands that must now fail, and whether checksums were recorded again."""

    def __init__(self, must_fail=frozenset(), rehashed: bool = False):
        self.must_fail = frozenset(must_fail)
        self.rehashed = rehashed


def _rehash(ds: h5py.Dataset) -> None:
    from lodtool.container import checksum

    ds.attrs["checksum"] = checksum.format_digest(checksum.hash_dataset(ds))


def _chunk_ranges(path: str, member: str | None = None) -> list[tuple[int, int]]:
    """``(byte offset, size)`` of every stored chunk of every dataset (or of ``member``)."""
    out = []
    with h5py.File(path, "r") as f:
        names = []
        f.visititems(lambda n, obj: names.append(n) if isinstance(obj, h5py.Dataset) else None)
        for n in names:
            if member is not None and n != member:
                continue
            ds = f[n]
            if ds.chunks:
                raw = ds.id.get_create_plist().get_nfilters() == 0 and tuple(ds.chunks[1:]) == ds.shape[1:]
                row_bytes = ds.dtype.itemsize * int(np.prod(ds.shape[1:], dtype=np.int64))
                for i in range(ds.id.get_num_chunks()):
                    info = ds.id.get_chunk_info(i)
                    size = info.size
                    if raw:  # an unfiltered chunk past the dataset's end holds bytes nobody reads
                        size = min(size, (ds.shape[0] - info.chunk_offset[0]) * row_bytes)
                    out.append((info.byte_offset, size))
            elif ds.id.get_offset() is not None:
                out.append((ds.id.get_offset(), ds.id.get_storage_size()))
    return sorted(set(out))


def _flip_bits(path: str, positions: list[int], rng: random.Random) -> None:
    with open(path, "r+b") as f:
        for pos in positions:
            f.seek(pos)
            byte = f.read(1)[0]
            f.seek(pos)
            f.write(bytes([byte ^ (1 << rng.randrange(8))]))


def _lod_paths(base: Base) -> list[str]:
    return [f"{base.tensor}/lod/{k}" for k in range(base.lod_level)]


def flip_data(rng, base, path):
    ranges = _chunk_ranges(path, f"{base.tensor}/data")
    positions = [_pick(rng, ranges) for _ in range(rng.choice([1, 1, 2, 8]))]
    _flip_bits(path, positions, rng)
    return Mutation({"verify", "verify-isolate", "append"})


def flip_offsets(rng, base, path):
    ranges = [r for p in _lod_paths(base) for r in _chunk_ranges(path, p)]
    if not ranges:  # a 0-level tensor: flip the data instead
        return flip_data(rng, base, path)
    positions = [_pick(rng, ranges) for _ in range(rng.choice([1, 1, 2, 8]))]
    _flip_bits(path, positions, rng)
    return Mutation({"verify", "verify-isolate", "append"})


ATTRIBUTE_MARKS = (b"lodtool_format_version", b"lodtool_format", b"lodtool_checksum", b"lodtool_created_by",
                   b"lod_level", b"level_names", b"dtype", b"compression", b"checksum", b"GCOL", b"xxh3_64:")


def flip_attributes(rng, base, path):
    """Flip bits in and around attribute messages and the global heap holding their strings."""
    blob = open(path, "rb").read()
    spots = [i for mark in ATTRIBUTE_MARKS for i in _find_all(blob, mark)]
    positions = []
    for _ in range(rng.choice([1, 1, 2, 4])):
        at = rng.choice(spots)
        positions.append(min(max(at + rng.randrange(-40, 80), 0), len(blob) - 1))
    _flip_bits(path, positions, rng)
    return Mutation()


def flip_metadata(rng, base, path):
    """Flip bits anywhere outside the chunks: superblock, object headers, B-trees, heaps."""
    size = os.path.getsize(path)
    ranges = _chunk_ranges(path)
    positions = []
    while len(positions) < rng.choice([1, 1, 2, 4]):
        pos = rng.randrange(size)
        if not any(start <= pos < start + n for start, n in ranges):
            positions.append(pos)
    _flip_bits(path, positions, rng)
    return Mutation()


def smash_metadata(rng, base, path):
    """Overwrite a run of bytes outside the chunks (headers, B-trees, heaps) with random ones."""
    size = os.path.getsize(path)
    ranges = _chunk_ranges(path)
    while True:
        start = rng.randrange(size)
        if not any(s <= start < s + n for s, n in ranges):
            break
    run = min(rng.choice([2, 4, 8, 16, 64]), size - start)
    with open(path, "r+b") as f:
        f.seek(start)
        f.write(bytes(rng.randrange(256) for _ in range(run)))
    return Mutation()


def truncate(rng, base, path):
    size = os.path.getsize(path)
    cut = rng.choice([rng.randrange(size), rng.randrange(min(size, 4096)), size - rng.randrange(1, 64)])
    with open(path, "r+b") as f:
        f.truncate(max(cut, 0))
    return Mutation()


def _pick(rng, ranges: list[tuple[int, int]]) -> int:
    start, n = rng.choice(ranges)
    return start + rng.randrange(max(n, 1))


def _find_all(blob: bytes, mark: bytes) -> list[int]:
    out, at = [], blob.find(mark)
    while at >= 0:
        out.append(at)
        at = blob.find(mark, at + 1)
    return out


def _edit_offsets(fn):
    """A mutator that changes one offsets level's values (checksums recorded again or not, at random)."""

    def mutator(rng, base, path):
        rehash = rng.random() < 0.5
        with h5py.File(path, "r+") as f:
            if not base.lod_level:
                return _resize_data(f, base, rng)
            k = rng.randrange(base.lod_level)
            ds = f[f"{base.tensor}/lod/{k}"]
            values = ds[...]
            fn(rng, values)
            ds[...] = values
            if rehash:
                _rehash(ds)
        return Mutation(WHOLE_READERS | (set() if rehash else VERIFIERS), rehash)

    mutator.__name__ = fn.__name__
    return mutator


def _resize_data(f, base, rng):
    """For a 0-level tensor, an offsets edit becomes a data dataset that claims more rows than it stores."""
    ds = f[f"{base.tensor}/data"]
    ds.resize(ds.shape[0] + rng.choice([1 << 20, 1 << 40]), axis=0)
    return Mutation(EVERYTHING - {"tree", "slice", "head", "inspect", "inspect-isolate"})


@_edit_offsets
def offsets_negative(rng, values):
    values[rng.randrange(len(values))] = -rng.choice([1, 5, 1 << 40, 1 << 62])


@_edit_offsets
def offsets_decreasing(rng, values):
    j = rng.randrange(1, len(values))
    values[j] = values[j - 1] - rng.choice([1, 2, 1000])


@_edit_offsets
def offsets_enormous(rng, values):
    j = rng.choice([len(values) - 1, rng.randrange(len(values))])
    values[j:] = 1 << 62 if rng.random() < 0.5 else values[j:] + (1 << 62)


@_edit_offsets
def offsets_first_not_zero(rng, values):
    values[0] = rng.choice([1, 2, -1])
    if values[0] > values[1]:
        values[1:] += values[0]


@_edit_offsets
def offsets_wrong_end(rng, values):
    values[-1] += rng.choice([1, -1, 1000])


def _replace_offsets(rng, base, path, make):
    """Replace one offsets dataset by ``make(values)`` (a new dataset; its checksum recorded again)."""
    with h5py.File(path, "r+") as f:
        if not base.lod_level:
            return _resize_data(f, base, rng)
        k = rng.randrange(base.lod_level)
        group = f[f"{base.tensor}/lod"]
        values = group[str(k)][...]
        del group[str(k)]
        if base.multi:  # other tensors share this dataset: replace it there too
            for name in f:
                other = f[name].get("lod")
                if isinstance(other, h5py.Group) and str(k) in other:
                    del other[str(k)]
        ds = group.create_dataset(str(k), data=make(values))
        _rehash(ds)
        if base.multi:
            for name in f:
                other = f[name].get("lod")
                if isinstance(other, h5py.Group) and str(k) not in other:
                    other[str(k)] = ds
    return Mutation(TENSOR_READERS, True)


def offsets_float(rng, base, path):
    return _replace_offsets(rng, base, path, lambda v: v.astype(rng.choice([np.float64, np.float32])))


def offsets_bool(rng, base, path):
    return _replace_offsets(rng, base, path, lambda v: v.astype(bool))


def offsets_int8(rng, base, path):
    """int8 offsets: a valid file where every value fits; where they wrap, the plain LoD rules decide."""
    from .test_lod import plain_rule_problems

    mutation = _replace_offsets(rng, base, path, lambda v: v.astype(np.int8))
    if not base.lod_level:  # it became a data-claim variant
        return mutation
    with h5py.File(path, "r") as f:
        lod = [f[p][...].astype(np.int64).tolist() for p in _lod_paths(base)]
        n_rows = f[f"{base.tensor}/data"].shape[0]
    mutation.must_fail = WHOLE_READERS if plain_rule_problems(lod, n_rows) else frozenset()
    return mutation


def offsets_uint64_beyond_int64(rng, base, path):
    def make(v):
        out = v.astype(np.uint64)
        out[rng.randrange(len(out))] = (1 << 63) + rng.randrange(1 << 20)
        return out
    mutation = _replace_offsets(rng, base, path, make)
    mutation.must_fail = WHOLE_READERS if base.lod_level else mutation.must_fail
    return mutation


def offsets_wrong_rank(rng, base, path):
    shape = rng.choice(["column", "row", "scalar", "cube"])

    def make(v):
        return {"column": v.reshape(-1, 1), "row": v.reshape(1, -1), "scalar": np.array(v[0]),
                "cube": np.zeros((2, 2, 2), np.int64)}[shape]
    return _replace_offsets(rng, base, path, make)


def offsets_empty(rng, base, path):
    return _replace_offsets(rng, base, path, lambda v: v[: rng.choice([0, 1])])


def offsets_huge_claim(rng, base, path):
    """An offsets dataset resized to claim 2**40 entries (its chunks are not stored)."""
    with h5py.File(path, "r+") as f:
        if not base.lod_level:
            return _resize_data(f, base, rng)
        ds = f[rng.choice(_lod_paths(base))]
        ds.resize(rng.choice([1 << 30, 1 << 40, (1 << 62) // 8]), axis=0)
    return Mutation(TENSOR_READERS | VERIFIERS)


def data_huge_claim(rng, base, path):
    with h5py.File(path, "r+") as f:
        return _resize_data(f, base, rng)


def data_fewer_rows(rng, base, path):
    """The data shrunk by some rows, checksum recorded again: the LoD now points past the end."""
    with h5py.File(path, "r+") as f:
        ds = f[f"{base.tensor}/data"]
        ds.resize(max(ds.shape[0] - rng.choice([1, 2, ds.shape[0]]), 0), axis=0)
        _rehash(ds)
    return Mutation(WHOLE_READERS - {"inspect", "inspect-isolate"} if base.lod_level else frozenset(), True)


def _structure(edit):
    """A mutator from an edit of the open file that returns the commands that must fail."""
    def mutator(rng, base, path):
        with h5py.File(path, "r+") as f:
            return Mutation(edit(rng, base, f))
    mutator.__name__ = edit.__name__
    return mutator


def missing_member(rng, base, f):
    choices = ["data", "tensor"] + ([f"lod/{k}" for k in range(base.lod_level)] + ["lod"] if base.lod_level else [])
    what = rng.choice(choices)
    if what == "tensor":
        del f[base.tensor]
        return NEEDS_TENSOR
    target = f"{base.tensor}/{what}"
    del f[target]
    if base.multi and what.startswith("lod"):  # the link of the other tensor keeps the dataset alive
        return TENSOR_READERS | {"validate"}
    return TENSOR_READERS | VERIFIERS | {"validate"}


def extra_member(rng, base, f):
    what = rng.choice(["root-reserved", "root-tensor", "tensor-member", "lod-member", "lod-extra-level"])
    if what == "root-reserved":
        f.create_dataset("_future_index", data=np.arange(3))
        return frozenset()
    if what == "root-tensor":  # a group without the tensor attributes
        f.create_group("stray").create_dataset("x", data=[1, 2])
        return {"validate", "validate-isolate", "inspect", "inspect-isolate"} | (
            set() if base.multi else TENSOR_READERS - {"append"})
    if what == "tensor-member":
        f[base.tensor].create_dataset("notes", data=np.arange(4))
        return frozenset()
    if not base.lod_level:  # offsets beside a 0-level tensor: its lod_level lies, or they are stray
        f[base.tensor].create_group("lod").create_dataset("0", data=np.array([0, 1]))
        return TENSOR_READERS
    f[f"{base.tensor}/lod"].create_dataset(str(base.lod_level + rng.randrange(2)), data=np.array([0, 1, 2]))
    return {"validate", "validate-isolate"} | TENSOR_READERS


def group_for_dataset(rng, base, f):
    """A group where a dataset should be, or a dataset where a group should be."""
    what = rng.choice(["data", "lod-k", "lod", "tensor"])
    if what == "tensor":
        del f[base.tensor]
        f.create_dataset(base.tensor, data=np.arange(4))
        return NEEDS_TENSOR
    if what == "data" or not base.lod_level:
        del f[f"{base.tensor}/data"]
        f[base.tensor].create_group("data").create_dataset("0", data=np.arange(4))
        return TENSOR_READERS | VERIFIERS
    if what == "lod":
        del f[f"{base.tensor}/lod"]
        f[base.tensor].create_dataset("lod", data=np.array([0, 3]))
        return TENSOR_READERS | (set() if base.multi else VERIFIERS)
    k = rng.randrange(base.lod_level)
    del f[f"{base.tensor}/lod/{k}"]
    f[f"{base.tensor}/lod"].create_group(str(k))
    return TENSOR_READERS | (set() if base.multi else VERIFIERS)


def links(rng, base, f):
    """Soft and external links where lodtool writes only hard links (refused, never followed)."""
    what = rng.choice(["soft-data", "external-data", "external-tensor", "dangling", "self-loop"])
    if what == "self-loop":  # a hard link cycle: the tensor group contains the root
        f[base.tensor]["loop"] = f["/"]
        return frozenset()
    target = f"{base.tensor}/data"
    if what == "external-tensor":
        del f[base.tensor]
        f[base.tensor] = h5py.ExternalLink("/etc/passwd", "/")
        return NEEDS_TENSOR
    del f[target]
    if what == "soft-data":
        f[target] = h5py.SoftLink(f"/{base.tensor}/lod/0" if base.lod_level else "/nowhere")
    elif what == "external-data":
        f[target] = h5py.ExternalLink(os.path.abspath(f.filename), f"/{base.tensor}/data")
    else:
        f[target] = h5py.SoftLink("/does/not/exist")
    return TENSOR_READERS | VERIFIERS


def version(rng, base, f):
    value = rng.choice(["2.0", "0.9", "1.0.0", "", "1.x", "01.0", np.bytes_(b"1.0\x00x"), b"\xff\xfe", 1, 1.0,
                        np.array(["1.0", "1.0"]), None])
    if value is None:
        del f.attrs["lodtool_format_version"]
    else:
        f.attrs["lodtool_format_version"] = value
    return EVERYTHING


def foreign_format(rng, base, f):
    what = rng.choice(["name", "missing", "bytes"])
    if what == "missing":
        del f.attrs["lodtool_format"]
    else:
        f.attrs["lodtool_format"] = "zarr" if what == "name" else np.frombuffer(b"lodtool\x00", np.uint8)
    return EVERYTHING


def lying_attributes(rng, base, f):
    """Tensor and root attributes that contradict the datasets."""
    group = f[base.tensor]
    what = rng.choice(["lod_level+1", "lod_level-1", "lod_level-huge", "lod_level-negative", "lod_level-float",
                       "lod_level-string", "lod_level-missing", "dtype", "level_names-count", "level_names-type",
                       "compression", "compression_level", "checksum-malformed", "checksum-algorithm",
                       "root-checksum"])
    if what == "lod_level+1":
        group.attrs["lod_level"] = base.lod_level + 1
        return TENSOR_READERS
    if what == "lod_level-1":
        if not base.lod_level:
            group.attrs["lod_level"] = -1
        else:
            group.attrs["lod_level"] = base.lod_level - 1
        return TENSOR_READERS
    if what == "lod_level-huge":
        group.attrs["lod_level"] = rng.choice([65, 1 << 40, (1 << 63) - 1])
        return TENSOR_READERS
    if what == "lod_level-negative":
        group.attrs["lod_level"] = -rng.choice([1, 1 << 62])
        return TENSOR_READERS
    if what == "lod_level-float":
        group.attrs["lod_level"] = float(base.lod_level) + 0.5
        return TENSOR_READERS
    if what == "lod_level-string":
        group.attrs["lod_level"] = str(base.lod_level)
        return TENSOR_READERS
    if what == "lod_level-missing":
        del group.attrs["lod_level"]
        return TENSOR_READERS
    if what == "dtype":
        group.attrs["dtype"] = rng.choice(["<f8", "|b1", "<i2", "not a dtype", "O"])
        return TENSOR_READERS
    if what == "level_names-count":
        group.attrs["level_names"] = np.array(["a"] * (base.lod_level + 1), dtype=h5py.string_dtype())
        return TENSOR_READERS
    if what == "level_names-type":
        group.attrs["level_names"] = np.arange(base.lod_level + 1)
        return TENSOR_READERS
    if what == "compression":
        group.attrs["compression"] = rng.choice(["zstd", "bogus", ""])
        return frozenset()
    if what == "compression_level":
        group.attrs["compression_level"] = rng.choice([-5, 1 << 40, "nine"])
        return frozenset()
    ds = group["data"]
    if what == "checksum-malformed":
        ds.attrs["checksum"] = rng.choice(["xxh3_64:zz", "xxh3_64:", "xxh3_64:" + "0" * 16, "", "crc32c:00000000"])
        return VERIFIERS | {"append"}
    if what == "checksum-algorithm":
        ds.attrs["checksum"] = np.arange(3)
        return VERIFIERS | {"append"}
    f.attrs["lodtool_checksum"] = rng.choice(["md5", "", "xxh3_128"])
    return VERIFIERS | {"append"}


def bad_data(rng, base, f):
    """A data dataset of a kind lodtool does not store: scalar, strings, vlen, compound, object references."""
    what = rng.choice(["scalar", "strings", "vlen", "compound", "reference", "empty-shape"])
    del f[f"{base.tensor}/data"]
    group = f[base.tensor]
    if what == "scalar":
        group.create_dataset("data", data=np.int64(3))
    elif what == "strings":
        group.create_dataset("data", data=np.array([b"ab"] * 15))
    elif what == "vlen":
        group.create_dataset("data", (15,), dtype=h5py.vlen_dtype(np.int64))
    elif what == "compound":
        group.create_dataset("data", data=np.zeros(15, dtype=[("a", "<i4"), ("b", "<f8")]))
    elif what == "reference":
        group.create_dataset("data", (15,), dtype=h5py.ref_dtype)
    else:
        group.create_dataset("data", shape=(0, 0), dtype="f8")
        # no rows for the LoD to point into (partial reads may stop before they notice); no checksum either
        return (WHOLE_READERS if base.lod_level else {"validate", "validate-isolate"}) | VERIFIERS
    return TENSOR_READERS | VERIFIERS


def _whole_file(fn):
    def mutator(rng, base, path):
        with open(path, "wb") as f:
            f.write(fn(rng, base))
        return Mutation(EVERYTHING)
    mutator.__name__ = fn.__name__
    return mutator


@_whole_file
def empty_file(rng, base):
    return b""


@_whole_file
def random_bytes(rng, base):
    return bytes(rng.randrange(256) for _ in range(rng.choice([1, 8, 512, 4096, 70_000])))


@_whole_file
def hdf5_signature_then_garbage(rng, base):
    return b"\x89HDF\r\n\x1a\n" + bytes(rng.randrange(256) for _ in range(rng.choice([8, 100, 3000])))


@_whole_file
def text_file(rng, base):
    return rng.choice([b"[[1, 2], [3]]\n", b"not a container\n", b"\x00" * 4096])


def foreign_hdf5(rng, base, path):
    os.unlink(path)
    with h5py.File(path, "w") as f:
        f.create_dataset("data", data=np.arange(10))
        f.create_group(base.tensor).create_dataset("data", data=np.arange(10))
    return Mutation(EVERYTHING)


#: class -> mutator(rng, base, path) -> Mutation; the path holds a copy of the base file
MUTATORS = {
    "flip-data": flip_data,
    "flip-offsets": flip_offsets,
    "flip-attributes": flip_attributes,
    "flip-metadata": flip_metadata,
    "smash-metadata": smash_metadata,
    "truncate": truncate,
    "offsets-negative": offsets_negative,
    "offsets-decreasing": offsets_decreasing,
    "offsets-2**62": offsets_enormous,
    "offsets-first-not-0": offsets_first_not_zero,
    "offsets-wrong-end": offsets_wrong_end,
    "offsets-float": offsets_float,
    "offsets-bool": offsets_bool,
    "offsets-int8": offsets_int8,
    "offsets-uint64": offsets_uint64_beyond_int64,
    "offsets-wrong-rank": offsets_wrong_rank,
    "offsets-empty": offsets_empty,
    "offsets-claim-2**40": offsets_huge_claim,
    "data-claim-2**40": data_huge_claim,
    "data-fewer-rows": data_fewer_rows,
    "missing-member": _structure(missing_member),
    "extra-member": _structure(extra_member),
    "group-for-dataset": _structure(group_for_dataset),
    "links": _structure(links),
    "version": _structure(version),
    "not-lodtool": _structure(foreign_format),
    "lying-attributes": _structure(lying_attributes),
    "bad-data-kind": _structure(bad_data),
    "foreign-hdf5": foreign_hdf5,
    "empty-file": empty_file,
    "random-bytes": random_bytes,
    "hdf5-signature+garbage": hdf5_signature_then_garbage,
    "text-file": text_file,
}


def make_variants(bases: dict[str, Base], folder: str, per_class: int | dict[str, int], seed: int,
                  classes: list[str] | None = None) -> list[Variant]:
    """``per_class`` variants of each class, on bases taken in turn, reproducible from ``seed``."""
    out = []
    names = sorted(bases)
    for klass in classes or list(MUTATORS):
        count = per_class.get(klass, 0) if isinstance(per_class, dict) else per_class
        for i in range(count):
            rng = random.Random(f"{seed}/{klass}/{i}")
            base = bases[names[(i + rng.randrange(len(names))) % len(names)]]
            path = os.path.join(folder, f"{klass.replace('*', 'x')}.{i}.{base.name}.lod.h5")
            shutil.copyfile(base.path, path)
            mutation = MUTATORS[klass](rng, base, path)
            out.append(Variant(f"{klass}/{i}/{base.name}", klass, base.name, path, mutation.must_fail,
                               mutation.rehashed))
    return out


# -- mangled ingest inputs -------------------------------------------------------------------------------
#: bytes that mean something to a JSON or NPY parser, for insertions
_TOKENS = [b"[", b"]", b",", b'"', b"-", b"e", b".", b"9", b"\n", b"\x00", b"\xff", b" ", b"{", b"true", b"null",
           b"NaN", b"1e999", b"99999999999999999999", b"[" * 300]


def _seed_inputs(folder: str) -> dict[str, list[str]]:
    """Valid inputs of each ingest format: name -> the files ``pack`` reads together."""
    os.makedirs(folder, exist_ok=True)
    rng = np.random.default_rng(7)
    out = {}
    docs = [[[int(v) for v in rng.integers(-50, 50, rng.integers(0, 5))] for _ in range(rng.integers(1, 4))]
            for _ in range(12)]
    path = os.path.join(folder, "seed.json")
    with open(path, "w") as f:
        json.dump(docs, f)
    out["json"] = [path]
    path = os.path.join(folder, "seed.jsonl")
    with open(path, "w") as f:
        for doc in docs:
            f.write(json.dumps([[v + 0.5 for v in seq] for seq in doc]) + "\n")
    out["jsonl"] = [path]
    out["npy"] = []
    for i, shape in enumerate([(3, 2), (0, 2), (5, 2)]):
        path = os.path.join(folder, f"seed{i}.npy")
        np.save(path, rng.standard_normal(shape).astype(np.float32))
        out["npy"].append(path)
    path = os.path.join(folder, "seed.npz")
    np.savez(path, data=np.arange(9), offsets_0=np.array([0, 2, 3]), offsets_1=np.array([0, 4, 4, 9]))
    out["npz"] = [path]
    return out


def _mangle(rng: random.Random, blob: bytes) -> bytes:
    data = bytearray(blob)
    for _ in range(rng.choice([1, 1, 2, 5])):
        how = rng.choice(["flip", "truncate", "insert", "delete", "duplicate"])
        at = rng.randrange(max(len(data), 1))
        if how == "flip" and data:
            data[at] ^= 1 << rng.randrange(8)
        elif how == "truncate":
            del data[at:]
        elif how == "insert":
            data[at:at] = rng.choice(_TOKENS)
        elif how == "delete":
            del data[at:at + rng.randrange(1, 16)]
        else:
            data[at:at] = data[at:at + rng.randrange(1, 64)]
    return bytes(data)


def make_input_variants(folder: str, count: int, seed: int) -> list[tuple[str, list[str]]]:
    """``count`` mangled ingest inputs (JSON, JSON Lines, NPY, NPZ in turn): ``(name, pack arguments)``."""
    seeds = _seed_inputs(folder)
    out = []
    formats = sorted(seeds)
    for i in range(count):
        rng = random.Random(f"{seed}/input/{i}")
        fmt = formats[i % len(formats)]
        files = []
        victim = rng.randrange(len(seeds[fmt]))
        for j, src in enumerate(seeds[fmt]):
            dst = os.path.join(folder, f"input{i}.{j}.{fmt}")
            with open(src, "rb") as f:
                blob = f.read()
            with open(dst, "wb") as f:
                f.write(_mangle(rng, blob) if j == victim else blob)
            files.append(dst)
        extra = ["--lod-level", "1"] if fmt == "json" and rng.random() < 0.3 else []
        out.append((f"{fmt}/{i}", ["pack", *files, "--format", fmt, *extra, "-o", "out.lod.h5"]))
    return out


def run_input_variants(variants: list[tuple[str, list[str]]], folder: str, cache_dir: str) -> list[tuple[str, dict]]:
    """``pack`` each mangled input; a successful pack's output is then validated and verified."""
    jobs = []
    for i, (_, argv) in enumerate(variants):
        run_folder = os.path.join(folder, f"pack{i}")
        out = os.path.join(run_folder, "out.lod.h5")
        jobs.append(job(argv, run_folder, after=[["validate", out], ["verify", out]]))
    return [(name, r) for (name, _), r in zip(variants, run_jobs(jobs, folder, cache_dir))]


def input_summary(results: list[tuple[str, dict]]) -> list[dict]:
    rows = defaultdict(Counter)
    for name, r in results:
        klass = f"mangled {name.split('/')[0]} input"
        rows[klass][outcome(r)] += 1
        rows[klass]["runs"] += 1
        rows[klass]["variants"] += 1
    return [{"class": k, **v} for k, v in sorted(rows.items())]


def check_pack_runs(results: list[tuple[str, dict]]) -> list[str]:
    """Broken promises of ``pack`` over mangled inputs: a bad outcome, or an output that is not valid."""
    problems = []
    for name, r in results:
        what = outcome(r)
        if what in BAD_OUTCOMES:
            problems.append(f"{name}: {what} (exit {r['exit']}, signal {r['signal']}): {r['stderr'].strip()[-600:]}")
        elif r["exit"] == 0 and any(a["exit"] != 0 for a in r["after"]):
            problems.append(f"{name}: pack succeeded but its output fails validate/verify")
        elif r["leftovers"]:
            problems.append(f"{name}: left {r['leftovers']} behind")
    return problems


# -- running ---------------------------------------------------------------------------------------------
@dataclass
class Run:
    """One command over one file, as the driver saw it."""

    variant: str
    klass: str
    base: str
    command: str
    argv: list
    exit: int | None = None
    signal: int | None = None
    timed_out: bool = False
    seconds: float = 0.0
    max_rss: int = 0
    stderr: str = ""
    stdout_digest: str = ""
    output_digest: str | None = None  # the file the command wrote, as values
    leftovers: list = field(default_factory=list)  # temp files, or the output of a failed run
    libhdf5: bool = False  # a bad outcome that plain h5py reproduces on the same file: libhdf5's, not lodtool's
    after: list = field(default_factory=list)  # follow-up runs (append: validate and verify the result)


def _digest_output(folder: str) -> str | None:
    """A digest of the values an operator wrote (out.lod.h5 or out.npz), or None if nothing was written."""
    h5, npz = os.path.join(folder, "out.lod.h5"), os.path.join(folder, "out.npz")
    hasher = hashlib.sha256()
    if os.path.exists(h5):
        from lodtool.container import load

        t = load(h5)
        hasher.update(json.dumps([str(t.dtype), t.lod, list(t.shape)]).encode())
        hasher.update(np.ascontiguousarray(t.data).tobytes())
    elif os.path.exists(npz):
        with np.load(npz, allow_pickle=False) as z:
            for key in sorted(z.files):
                hasher.update(key.encode() + str(z[key].dtype).encode() + np.ascontiguousarray(z[key]).tobytes())
    else:
        return None
    return hasher.hexdigest()


def _child(argv: list[str], folder: str, address_space: int) -> None:  # pragma: no cover - runs in the child
    import resource
    import traceback

    os.setpgid(0, 0)
    os.chdir(folder)
    resource.setrlimit(resource.RLIMIT_AS, (address_space, address_space))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    for fd, name, mode in ((0, os.devnull, os.O_RDONLY), (1, "stdout", os.O_WRONLY | os.O_CREAT),
                           (2, "stderr", os.O_WRONLY | os.O_CREAT)):
        new = os.open(name, mode, 0o644)
        os.dup2(new, fd)
        os.close(new)
    code = 1
    try:
        if argv[:1] == ["__canary__"]:  # a known failure, to prove the judge notices it
            _canary(argv[1])
        if argv[:1] == ["__probe__"]:  # plain h5py, no lodtool: does libhdf5 itself break on the file?
            _probe(argv[1])
            sys.exit(0)
        from lodtool.cli.main import main

        sys.argv = ["lodtool", *argv]
        main(argv)
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:  # what the interpreter would do: print the traceback, exit 1
        traceback.print_exc()
        code = 1
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:
                pass
        os._exit(code)


def _canary(kind: str) -> None:  # pragma: no cover - runs in the child
    if kind == "segfault":
        import ctypes

        ctypes.string_at(0)
    elif kind == "hang":
        time.sleep(3600)
    elif kind == "traceback":
        raise RuntimeError("a bug")
    elif kind == "two-lines":
        print("lodtool: error: one\nlodtool: error: two", file=sys.stderr)
        sys.exit(1)
    elif kind == "exit-3":
        sys.exit(3)


def _probe(path: str) -> None:  # pragma: no cover - runs in the child
    """Read every attribute and dataset of ``path`` with plain h5py, ignoring the errors it raises."""
    def read(obj) -> None:
        for key in list(obj.attrs.keys()):
            try:
                obj.attrs[key]
            except Exception:
                pass
        if isinstance(obj, h5py.Dataset):
            try:
                obj[:64] if obj.ndim else obj[()]
            except Exception:
                pass

    try:
        with h5py.File(path, "r", locking=False) as f:
            read(f)
            f.visititems(lambda name, obj: read(obj))
    except Exception:
        pass


def _fork_run(argv: list[str], folder: str, timeout: float, address_space: int) -> dict:
    os.makedirs(folder, exist_ok=True)
    sys.stdout.flush()
    sys.stderr.flush()
    start = time.monotonic()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        _child(argv, folder, address_space)
    deadline = start + timeout
    timed_out = False
    while True:
        done, status, usage = os.wait4(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() > deadline:
            timed_out = True
            with _suppress():
                os.killpg(pid, signal.SIGKILL)
            _, status, usage = os.wait4(pid, 0)
            break
        time.sleep(0.002)
    with _suppress():  # grandchildren (--isolate) left behind
        os.killpg(pid, signal.SIGKILL)
    out = {"seconds": round(time.monotonic() - start, 3), "timed_out": timed_out,
           "max_rss": usage.ru_maxrss * 1024,
           "exit": os.WEXITSTATUS(status) if os.WIFEXITED(status) else None,
           "signal": os.WTERMSIG(status) if os.WIFSIGNALED(status) and not timed_out else None}
    with open(os.path.join(folder, "stderr"), "rb") as f:
        out["stderr"] = f.read(8192).decode("utf-8", "replace")
    with open(os.path.join(folder, "stdout"), "rb") as f:
        out["stdout_digest"] = hashlib.sha256(f.read()).hexdigest()
    return out


class _suppress:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return exc[0] is not None and issubclass(exc[0], (ProcessLookupError, PermissionError, OSError))


def drive(jobs_path: str, results_path: str) -> None:
    """The driver: import lodtool once, then fork one child per job (run with NUMBA_BOUNDSCHECK=1)."""
    import lodtool.cli.main  # noqa: F401 - everything a child needs, imported once
    from lodtool.cli import inspect, ops, pack, slice, tree, unpack, validate, verify  # noqa: F401
    from lodtool.container import checks, reader  # noqa: F401
    from lodtool.io.json import parse_json
    from lodtool import _jit

    _jit.numba_module()
    # load the JSON scanner's kernels once (single-threaded: safe to fork after); the operators' kernels
    # are parallel, and a threading layer started before fork() is unsafe in the children, so they load there
    parse_json("[[1, 2.5]]")
    parse_json(b"[[1]]\n[[2]]\n", "jsonl")
    with open(jobs_path) as f:
        jobs = json.load(f)
    with open(results_path, "w") as out:
        for job in jobs:
            result = _fork_run(job["argv"], job["folder"], job["timeout"], job["address_space"])
            if result["exit"] == 0 and job.get("digest_output"):
                result["output_digest"] = _digest_output(job["folder"])
            # what a failed write must not leave: its output, or any temp file
            result["leftovers"] = sorted(n for n in os.listdir(job["folder"]) if ".lodtmp-" in n or (
                result["exit"] != 0 and n.startswith("out.")))
            result["after"] = []
            if result["exit"] == 0:
                for i, argv in enumerate(job.get("after", [])):
                    result["after"].append(_fork_run(argv, os.path.join(job["folder"], f"after{i}"), job["timeout"],
                                                     job["address_space"]))
            out.write(json.dumps({"id": job["id"], **result}) + "\n")
            out.flush()


def driver_env(cache_dir: str) -> dict:
    """The environment of the driver: bounds-checked Numba, compiled into a cache of its own.

    Numba's cache key does not include the bounds-check flag, so kernels cached by
    normal runs would be loaded without bounds checks; a separate cache dir
    keeps the bounds-checked builds apart (and reused between runs).
    """
    env = dict(os.environ)
    env.update({"NUMBA_BOUNDSCHECK": "1", "NUMBA_CACHE_DIR": cache_dir, "PYTHONPATH": ROOT,
                "NO_COLOR": "1", "COLUMNS": "100", "PYTHONFAULTHANDLER": "", "LODTOOL_TEST_PROFILE": ""})
    env.pop("PYTHONFAULTHANDLER")
    return env


def run_matrix(bases: dict[str, Base], variants: list[Variant], commands, folder: str, *,
               cache_dir: str, timeout: float = TIMEOUT, address_space: int = ADDRESS_SPACE,
               include_bases: bool = True) -> list[Run]:
    """Run ``commands`` (names, or a function variant -> names) over the bases and every variant."""
    targets = []
    if include_bases:
        targets += [Variant(f"base/{b.name}", "base", b.name, b.path) for b in bases.values()]
    targets += variants
    jobs, runs = [], []
    for v in targets:
        base = bases[v.base]
        for command in (commands(v) if callable(commands) else commands):
            job_folder = os.path.join(folder, f"run{len(jobs)}")
            os.makedirs(job_folder)
            append_target = os.path.join(job_folder, "appended.lod.h5")
            after = []
            if command == "append":
                shutil.copyfile(v.path, append_target) if os.path.exists(v.path) else None
                after = [["validate", append_target], ["verify", append_target]]
            argv = command_args(command, base, v.path, append_target)
            jobs.append(job(argv, job_folder, timeout=timeout, address_space=address_space, after=after,
                            digest_output=command in VALUE_COMMANDS))
            runs.append(Run(v.name, v.klass, v.base, command, argv))
    for run, result in zip(runs, run_jobs(jobs, folder, cache_dir)):
        for key, value in result.items():
            setattr(run, key, value)
    attribute_to_libhdf5(runs, {v.name: v.path for v in targets}, folder, cache_dir, timeout, address_space)
    return runs


#: outcomes libhdf5 itself can cause on a crafted file (a crash, a hang, a huge transient allocation)
LIBHDF5_OUTCOMES = ("signal", "hang", "memory", "out-of-memory")


def attribute_to_libhdf5(runs: list[Run], paths: dict[str, str], folder: str, cache_dir: str, timeout: float,
                         address_space: int) -> None:
    """Mark the bad runs whose file also breaks plain h5py (a probe that reads every attribute and dataset)."""
    suspects = sorted({r.variant for r in runs if outcome(r) in LIBHDF5_OUTCOMES})
    if not suspects:
        return
    jobs = [job(["__probe__", paths[name]], os.path.join(folder, "probes", str(i)), timeout=timeout,
                address_space=address_space) for i, name in enumerate(suspects)]
    probes = dict(zip(suspects, run_jobs(jobs, os.path.join(folder, "probes"), cache_dir)))
    for r in runs:
        what = outcome(r)
        if what in LIBHDF5_OUTCOMES and r.variant in probes:
            probe = outcome(probes[r.variant])
            # the probe ends with exit 0 unless libhdf5 crashed, hung or blew up on its own
            r.libhdf5 = probe in LIBHDF5_OUTCOMES and (probe == what or what == "out-of-memory")


def job(argv: list[str], folder: str, *, timeout: float = TIMEOUT, address_space: int = ADDRESS_SPACE,
        after: list | None = None, digest_output: bool = False) -> dict:
    """One command line for the driver: run in ``folder`` (created), its outputs compared if ``digest_output``."""
    os.makedirs(folder, exist_ok=True)
    return {"argv": argv, "folder": folder, "timeout": timeout, "address_space": address_space,
            "after": after or [], "digest_output": digest_output}


def run_jobs(jobs: list[dict], folder: str, cache_dir: str) -> list[dict]:
    """Run the jobs in one driver process (one forked child each); their results, in order."""
    os.makedirs(folder, exist_ok=True)
    jobs = [{**j, "id": i} for i, j in enumerate(jobs)]
    jobs_path = os.path.join(folder, "jobs.json")
    results_path = os.path.join(folder, "results.jsonl")
    with open(jobs_path, "w") as f:
        json.dump(jobs, f)
    proc = subprocess.run([sys.executable, "-m", "tests.hostile", "drive", jobs_path, results_path],
                          cwd=ROOT, env=driver_env(cache_dir), capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"the driver failed ({proc.returncode}): {proc.stderr[-3000:]}")
    results = [None] * len(jobs)
    with open(results_path) as f:
        for line in f:
            result = json.loads(line)
            results[result.pop("id")] = result
    return results


# -- judging ---------------------------------------------------------------------------------------------
def outcome(run: Run | dict) -> str:
    """The one word for how a run ended; anything but ok/error/usage breaks a promise."""
    r = run if isinstance(run, dict) else asdict(run)
    lines = [line for line in r["stderr"].splitlines() if line.strip()]
    if r["timed_out"]:
        return "hang"
    if r["signal"] is not None:
        return "signal"
    if "Traceback" in r["stderr"]:
        return "traceback"
    if "internal error" in r["stderr"]:
        return "internal-error"
    if r["max_rss"] > RSS_LIMIT:
        return "memory"
    if r["exit"] not in (0, 1, 2):
        return "bad-exit"
    if len(lines) > 1:
        return "multi-line-error"
    if "out of memory" in r["stderr"]:
        return "out-of-memory"
    return {0: "ok", 1: "error", 2: "usage"}[r["exit"]]


BAD_OUTCOMES = ("hang", "signal", "traceback", "internal-error", "memory", "bad-exit", "multi-line-error",
                "out-of-memory")


def check(runs: list[Run], variants: list[Variant]) -> list[str]:
    """Every broken promise, one line each (empty: all good)."""
    by_name = {v.name: v for v in variants}
    table = {(r.variant, r.command): r for r in runs}
    problems = []
    for r in runs:
        what = outcome(r)
        where = f"{r.variant} {r.command}: lodtool {' '.join(r.argv)}"
        if r.libhdf5:  # listed by known_limits, not a broken promise of lodtool's
            continue
        if what in BAD_OUTCOMES:
            problems.append(f"{where}: {what} (exit {r.exit}, signal {r.signal}): {r.stderr.strip()[-600:]}")
            continue
        if r.leftovers:
            problems.append(f"{where}: left {r.leftovers} behind")
        if r.klass == "base":
            if r.command in ("inspect", "validate", "verify", "unpack", "head", "tree", "append") and r.exit != 0:
                problems.append(f"{where}: a valid base file failed: {r.stderr.strip()}")
            continue
        v = by_name[r.variant]
        if r.exit == 0 and r.command in v.must_fail:
            problems.append(f"{where}: exit 0, but this corruption must be noticed")
        # a command that succeeds with values unlike the base's: verify must have caught the damage
        base_run = table.get((f"base/{r.base}", r.command))
        verify = table.get((r.variant, "verify"))
        if (r.exit == 0 and r.command in VALUE_COMMANDS and base_run is not None and base_run.exit == 0
                and not v.rehashed and verify is not None and verify.exit == 0
                and (r.stdout_digest, r.output_digest) != (base_run.stdout_digest, base_run.output_digest)):
            problems.append(f"{where}: exit 0 with values unlike the base's, and verify passed (silent corruption)")
        for after in r.after:
            if outcome(after) in BAD_OUTCOMES:
                problems.append(f"{where}: the follow-up check broke: {outcome(after)} {after['stderr'].strip()}")
        if r.command == "append" and r.exit == 0:
            validate, verify_ = table.get((r.variant, "validate")), table.get((r.variant, "verify"))
            new_validate, new_verify = (a["exit"] for a in r.after)
            if new_validate != 0 and validate is not None and validate.exit == 0:
                problems.append(f"{where}: the appended file is invalid: {r.after[0]['stderr'].strip()}")
            if new_verify != 0 and verify_ is not None and verify_.exit == 0:
                problems.append(f"{where}: the appended file fails verify: {r.after[1]['stderr'].strip()}")
    return problems


def known_limits(runs: list[Run]) -> list[str]:
    """The runs whose bad outcome plain h5py reproduces (libhdf5's limits, documented, not lodtool bugs)."""
    return [f"{r.variant} {r.command}: {outcome(r)} (peak RSS {r.max_rss >> 20} MiB, exit {r.exit}, signal "
            f"{r.signal}); plain h5py does the same on this file" for r in runs if r.libhdf5]


def summary(runs: list[Run], variants: list[Variant]) -> list[dict]:
    """Per class: variants, runs, and how the runs ended."""
    rows = defaultdict(Counter)
    names = defaultdict(set)
    for r in runs:
        rows[r.klass]["libhdf5" if r.libhdf5 else outcome(r)] += 1
        rows[r.klass]["runs"] += 1
        names[r.klass].add(r.variant)
    out = []
    for klass in ["base", *MUTATORS]:
        if klass in rows:
            out.append({"class": klass, "variants": len(names[klass]), **rows[klass]})
    return out


def format_table(rows: list[dict], problems: list[str]) -> str:
    cols = ["class", "variants", "runs", "ok", "error", "usage", *BAD_OUTCOMES, "libhdf5"]
    header = "| " + " | ".join(cols) + " |\n|" + "|".join(["---"] + ["---:"] * (len(cols) - 1)) + "|\n"
    body = ""
    total = Counter()
    for row in rows:
        body += "| " + " | ".join(str(row.get(c, 0)) for c in cols) + " |\n"
        for c in cols[1:]:
            total[c] += row.get(c, 0)
    body += "| **total** | " + " | ".join(str(total[c]) for c in cols[1:]) + " |\n"
    return header + body + f"\nbroken promises: {len(problems)}\n"


# -- the command line ------------------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.hostile", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="mode", required=True)
    d = sub.add_parser("drive", help="(internal) run a job list")
    d.add_argument("jobs")
    d.add_argument("results")
    r = sub.add_parser("report", help="run the long fuzz and print the table of outcomes per class")
    r.add_argument("--per-class", type=int, default=40)
    r.add_argument("--seed", type=int, default=1)
    r.add_argument("--classes", default=None, help="comma-separated classes (default: all)")
    r.add_argument("--commands", default=",".join(COMMANDS))
    r.add_argument("--inputs", type=int, default=400, help="mangled JSON/JSONL/NPY/NPZ inputs to pack")
    r.add_argument("--keep", default=None, help="keep the files in this folder")
    r.add_argument("--json", default=None, help="also write every run to this JSON Lines file")
    args = parser.parse_args(argv)
    if args.mode == "drive":
        drive(args.jobs, args.results)
        return 0
    folder = args.keep or tempfile.mkdtemp(prefix="lodtool-hostile-")
    os.makedirs(folder, exist_ok=True)
    started = time.monotonic()
    bases = make_bases(folder)
    variants = make_variants(bases, folder, args.per_class, args.seed,
                             args.classes.split(",") if args.classes else None)
    commands = args.commands.split(",")
    cache_dir = os.path.join(tempfile.gettempdir(), "lodtool-numba-boundscheck")
    runs = run_matrix(bases, variants, commands, os.path.join(folder, "runs"), cache_dir=cache_dir)
    problems = check(runs, variants)
    inputs = run_input_variants(make_input_variants(os.path.join(folder, "inputs"), args.inputs, args.seed),
                                os.path.join(folder, "packs"), cache_dir) if args.inputs else []
    problems += check_pack_runs(inputs)
    if args.json:
        with open(args.json, "w") as f:
            for run in runs:
                f.write(json.dumps({**asdict(run), "outcome": outcome(run)}) + "\n")
    print(format_table(summary(runs, variants) + input_summary(inputs), problems))
    for p in problems:
        print("  " + p)
    limits = known_limits(runs)
    print(f"known libhdf5 limits (plain h5py breaks the same way): {len(limits)}")
    for line in limits:
        print("  " + line)
    print(f"\n{len(variants)} container variants, {len(runs)} runs, {len(inputs)} mangled inputs packed, "
          f"in {time.monotonic() - started:.0f} s "
          f"(seed {args.seed}, {args.per_class} per class); files in {folder}")
    if not args.keep:
        shutil.rmtree(folder, ignore_errors=True)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
