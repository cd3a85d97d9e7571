"""Compression filters of the container: names, HDF5 dataset options, and plugin handling.

``deflate`` (the default), ``gzip``, ``lzf`` and ``none`` work with plain h5py;
``deflate`` and ``gzip`` are HDF5's built-in shuffle + deflate filters, which
every HDF5 reader has (lzf is h5py's own).  ``zstd``, ``blosc`` and
``lz4`` come from ``hdf5plugin``, imported only when such a filter is asked for
(writing) or found (reading); a file that needs a missing plugin gives a
:class:`LodFormatError` saying what to install.

>>> normalize_compression(None, None)
('deflate', 1)
>>> sorted(dataset_options("gzip", 1))
['compression', 'compression_opts', 'shuffle']
"""

from __future__ import annotations

from typing import Any

import h5py

from ..errors import LodFormatError, LodUsageError

#: what ``compression=None`` means: shuffle + deflate level 1, which every HDF5 reader decodes with its
#: built-in filters; the writer encodes it on every core (see ._deflate and docs/format.md, "Compression")
DEFAULT_COMPRESSION = "deflate"

#: every compression name lodtool accepts
COMPRESSIONS = ("deflate", "lzf", "gzip", "none", "zstd", "blosc", "lz4")
#: the names that need hdf5plugin, with their registered HDF5 filter ids
PLUGIN_FILTERS = {"zstd": 32015, "blosc": 32001, "lz4": 32004}

#: the HDF5 filter ids of the fletcher32 chunk checksum, byte shuffle and deflate
FLETCHER32 = 3
SHUFFLE = 2
DEFLATE = 1

#: HDF5 filter ids -> names, for messages about files written by anyone
FILTER_NAMES = {1: "gzip", 2: "shuffle", 3: "fletcher32", 4: "szip", 5: "nbit", 6: "scaleoffset",
                307: "bzip2", 32000: "lzf", 32001: "blosc", 32004: "lz4", 32008: "bitshuffle",
                32013: "zfp", 32015: "zstd", 32017: "sz", 32024: "sz3", 32026: "blosc2"}

_LEVELS = {"deflate": (0, 9, 1), "gzip": (0, 9, 4), "zstd": (1, 22, 3), "blosc": (0, 9, 5)}


def normalize_compression(compression: str | None, level: int | None) -> tuple[str, int | None]:
    """Check a compression name and level; ``None`` is :data:`DEFAULT_COMPRESSION`.

    >>> normalize_compression("gzip", None)
    ('gzip', 4)
    >>> normalize_compression("lzf", 3)
    Traceback (most recent call last):
    ...
    lodtool.errors.LodUsageError: compression 'lzf' takes no level (got 3)
    """
    name = DEFAULT_COMPRESSION if compression is None else str(compression).lower()
    if name not in COMPRESSIONS:
        raise LodUsageError(f"unknown compression {compression!r}; choose one of {', '.join(COMPRESSIONS)}")
    if name in _LEVELS:
        lo, hi, default = _LEVELS[name]
        if level is None:
            level = default
        elif isinstance(level, bool) or not isinstance(level, int) or not lo <= level <= hi:
            raise LodUsageError(f"compression {name!r} takes a level {lo}..{hi}, got {level!r}")
        return name, int(level)
    if level is not None:
        raise LodUsageError(f"compression {name!r} takes no level (got {level!r})")
    return name, None


def _plugin(purpose: str):
    try:
        import hdf5plugin
    except ImportError:
        raise LodUsageError(f"{purpose} needs hdf5plugin; pip install hdf5plugin") from None
    return hdf5plugin


def dataset_options(name: str, level: int | None) -> dict[str, Any]:
    """``h5py.create_dataset`` keyword arguments for a (normalized) compression.

    Byte shuffle goes in front of every codec except blosc (which shuffles itself):
    it groups the bytes of each significance together, which helps integers most.

    >>> dataset_options("none", None)
    {}
    """
    if name == "none":
        return {}
    if name == "lzf":
        return {"compression": "lzf", "shuffle": True}
    if name in ("gzip", "deflate"):  # one pipeline; "deflate" only defaults to the fast level 1
        return {"compression": "gzip", "compression_opts": level, "shuffle": True}
    hdf5plugin = _plugin(f"compression {name!r}")
    if name == "zstd":
        return {**hdf5plugin.Zstd(clevel=level), "shuffle": True}
    if name == "blosc":
        return dict(hdf5plugin.Blosc(cname="lz4", clevel=level, shuffle=hdf5plugin.Blosc.SHUFFLE))
    if name == "lz4":
        return {**hdf5plugin.LZ4(), "shuffle": True}
    raise LodUsageError(f"unknown compression {name!r}")  # pragma: no cover - normalized before


def offsets_options(name: str, level: int | None) -> dict[str, Any]:
    """Options for offsets datasets: the data's codec if plain h5py has it, else the default.

    Offsets never need a plugin, so ``inspect``, ``validate`` and branch
    resolution work on any file with plain h5py.

    >>> offsets_options("zstd", 3) == dataset_options("deflate", 1)
    True
    """
    if name in PLUGIN_FILTERS:
        return dataset_options(*normalize_compression(DEFAULT_COMPRESSION, None))
    return dataset_options(name, level)


def filter_ids(dataset: h5py.Dataset) -> list[int]:
    """The HDF5 filter ids of a dataset's pipeline, in order."""
    plist = dataset.id.get_create_plist()
    return [int(plist.get_filter(i)[0]) for i in range(plist.get_nfilters())]


def filter_available(code: int) -> bool:
    """Whether libhdf5 can run filter ``code`` now (builtin or registered)."""
    return bool(h5py.h5z.filter_avail(code))


def ensure_readable(dataset: h5py.Dataset, path: str, what: str) -> None:
    """Raise :class:`LodFormatError` naming the filter and the fix if ``dataset`` cannot be decoded.

    A missing filter makes this import hdf5plugin (which registers its filters)
    and look again, so files compressed with zstd/blosc/lz4 read transparently
    wherever hdf5plugin is installed.
    """
    missing = [code for code in filter_ids(dataset) if not filter_available(code)]
    if missing:
        try:
            import hdf5plugin  # noqa: F401  (registers its filters on import)
        except ImportError:
            pass
        missing = [code for code in missing if not filter_available(code)]
    if missing:
        names = ", ".join(FILTER_NAMES.get(code, f"HDF5 filter {code}") for code in missing)
        hint = "pip install hdf5plugin" if all(code in FILTER_NAMES and code > 300 for code in missing) else \
            "this HDF5 installation lacks the filter"
        raise LodFormatError(f"{path}: {what} is compressed with {names}; {hint}")


def describe(dataset: h5py.Dataset) -> str:
    """The compression of a dataset, from its filter pipeline: ``"lzf"``, ``"zstd"``, ``"none"``, ...

    Shuffle and fletcher32 are not compression and are left out.
    """
    names = [FILTER_NAMES.get(code, f"filter-{code}") for code in filter_ids(dataset) if code not in (2, 3)]
    return "+".join(names) if names else "none"


__all__ = ["DEFAULT_COMPRESSION", "COMPRESSIONS", "PLUGIN_FILTERS", "normalize_compression", "dataset_options",
           "offsets_options", "ensure_readable", "describe", "filter_ids", "filter_available"]
