"""Compression filters of the container: names, HDF5 dataset options, and plugin handling.

``deflate`` (the default), ``gzip``, ``lzf`` and ``none`` work with plain h5py;
``deflate`` and ``gzip`` are HDF5's built-in shuffle + deflate filters, which
every HDF5 reader has (lzf is h5py's own).  ``zstd``, ``blosc`` and
``lz4`` come from ``hdf5plugin``'s shared libraries, and only those three are
registered (hdf5plugin itself is never imported: its import registers a dozen
more C/C++ codecs, which a crafted chunk can crash).  A file that needs any other
filter is refused by name before a chunk is decoded, unless the user opts in
with ``LODTOOL_FILTER_PLUGINS`` (see :func:`allowed_filters`); the CLI then
decodes in an isolated child process (see :class:`~lodtool.errors.LodIsolationRequired`).

>>> normalize_compression(None, None)
('deflate', 1)
>>> sorted(dataset_options("gzip", 1))
['compression', 'compression_opts', 'shuffle']
"""

from __future__ import annotations

from typing import Any

import ctypes
import glob
import importlib.util
import os

import h5py

from ..errors import LodFormatError, LodIsolationRequired, LodUsageError

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

#: filters libhdf5 and h5py decode themselves (no plugin): gzip, shuffle, fletcher32, szip, nbit,
#: scaleoffset, lzf
BUILTIN_FILTERS = frozenset({1, 2, 3, 4, 5, 6, 32000})
#: what readers decode without asking: the built-ins and the plugins lodtool writes
DEFAULT_FILTERS = BUILTIN_FILTERS | frozenset(PLUGIN_FILTERS.values())
#: the environment variable that opts in to other plugin filters: names or ids, comma-separated, or ``all``
PLUGINS_ENV = "LODTOOL_FILTER_PLUGINS"
#: "1" (set by the CLI): opted-in plugin decoding must run in an isolated child; "child": this is it;
#: "0" or unset: decode in this process
ISOLATION_ENV = "LODTOOL_PLUGIN_ISOLATION"
_NAME_IDS = {name: code for code, name in FILTER_NAMES.items()}


def allowed_filters(env: dict | None = None) -> frozenset[int] | None:
    """The filter ids readers may decode: :data:`DEFAULT_FILTERS` plus those opted in; ``None``: any.

    >>> sorted(allowed_filters({}) - BUILTIN_FILTERS)
    [32001, 32004, 32015]
    >>> 32024 in allowed_filters({"LODTOOL_FILTER_PLUGINS": "sz3"}), allowed_filters({"LODTOOL_FILTER_PLUGINS": "all"})
    (True, None)
    """
    text = (os.environ if env is None else env).get(PLUGINS_ENV, "").strip().lower()
    if text == "all":
        return None
    extra = set()
    for item in filter(None, (part.strip() for part in text.split(","))):
        if item.isdigit():
            extra.add(int(item))
        elif item in _NAME_IDS:
            extra.add(_NAME_IDS[item])
        else:
            raise LodUsageError(f"{PLUGINS_ENV}: unknown filter {item!r}; give names ({', '.join(sorted(_NAME_IDS))}), "
                                "HDF5 filter ids, or all")
    return DEFAULT_FILTERS | extra


def _register_from_hdf5plugin(name: str) -> bool:
    """Register one of hdf5plugin's filters from its shared library, without importing hdf5plugin.

    Mirrors ``hdf5plugin.register_filter`` for one name; ``False`` where hdf5plugin or the library is missing.
    """
    spec = importlib.util.find_spec("hdf5plugin")
    if spec is None or not spec.submodule_search_locations:
        return False
    folder = os.path.join(list(spec.submodule_search_locations)[0], "plugins")
    candidates = [f for f in glob.glob(os.path.join(folder, f"libh5{name}*"))
                  if not os.path.basename(f).startswith(("libh5blosc2", "libh5sz3") if name in ("blosc", "sz") else "~")]
    if not candidates:
        return False
    try:
        lib = ctypes.CDLL(candidates[0])
    except OSError:
        return False
    init = getattr(lib, "init_filter", None)
    if init is not None:
        init.argtypes = [ctypes.c_char_p]
        init.restype = ctypes.c_int
        if init(h5py.h5z.__file__.encode()) < 0:
            return False
    lib.H5PLget_plugin_info.restype = ctypes.c_void_p
    h5py.h5z.register_filter(lib.H5PLget_plugin_info())
    return True


def register_own_plugins() -> None:
    """Make zstd, blosc and lz4 decodable (lodtool writes them), and nothing else."""
    for name, code in PLUGIN_FILTERS.items():
        if not filter_available(code):
            _register_from_hdf5plugin(name)


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


def _plugin(purpose: str, code: int) -> None:
    register_own_plugins()
    if not filter_available(code):
        raise LodUsageError(f"{purpose} needs hdf5plugin; pip install hdf5plugin")


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
    _plugin(f"compression {name!r}", PLUGIN_FILTERS[name])
    # hdf5plugin's Zstd(clevel), Blosc(cname="lz4", clevel, SHUFFLE) and LZ4() options, spelled out
    if name == "zstd":
        return {"compression": 32015, "compression_opts": (level,), "shuffle": True}
    if name == "blosc":
        return {"compression": 32001, "compression_opts": (0, 0, 0, 0, level, 1, 1)}
    return {"compression": 32004, "compression_opts": (0,), "shuffle": True}  # lz4 (names were normalized)


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


def foreign_filter_names(dataset: h5py.Dataset) -> str | None:
    """The filters of ``dataset`` outside :func:`allowed_filters`, as names (``None``: none)."""
    return _names(_foreign(filter_ids(dataset))) or None


def _foreign(codes: list[int]) -> list[int]:
    allowed = allowed_filters()
    return [code for code in codes if allowed is not None and code not in allowed]


def _names(codes: list[int]) -> str:
    return ", ".join(FILTER_NAMES.get(code, f"HDF5 filter {code}") for code in codes)


def ensure_readable(dataset: h5py.Dataset, path: str, what: str) -> None:
    """Refuse, naming the filter and the fix, a dataset this process must not or cannot decode.

    A filter outside :func:`allowed_filters` (a codec lodtool does not write) is
    refused before any chunk is decoded: a crafted chunk can crash a native
    decoder.  An opted-in one raises :class:`~lodtool.errors.LodIsolationRequired`
    where the CLI asked for isolation.  A missing zstd/blosc/lz4 is registered
    from hdf5plugin's library (only those three).
    """
    codes = filter_ids(dataset)
    foreign = _foreign(codes)
    if foreign:
        raise LodFormatError(f"{path}: {what} is compressed with {_names(foreign)}, a filter lodtool does not decode "
                             f"unless asked ({PLUGINS_ENV}={FILTER_NAMES.get(foreign[0], foreign[0])} allows it, "
                             "decoded in an isolated process)")
    plugins = [code for code in codes if code not in DEFAULT_FILTERS]
    if plugins and os.environ.get(ISOLATION_ENV) == "1":
        raise LodIsolationRequired(f"{path}: {what} needs the opted-in plugin filter(s) "
                                   f"{_names(plugins)}")
    missing = [code for code in codes if not filter_available(code)]
    if missing:
        register_own_plugins()
        if plugins:  # opted in: the user asked for hdf5plugin's other codecs
            try:
                import hdf5plugin  # noqa: F401  (registers all of its filters on import)
            except ImportError:
                pass
        missing = [code for code in missing if not filter_available(code)]
    if missing:
        hint = "pip install hdf5plugin" if all(code in FILTER_NAMES and code > 300 for code in missing) else \
            "this HDF5 installation lacks the filter"
        raise LodFormatError(f"{path}: {what} is compressed with {_names(missing)}; {hint}")


def describe(dataset: h5py.Dataset) -> str:
    """The compression of a dataset, from its filter pipeline: ``"lzf"``, ``"zstd"``, ``"none"``, ...

    Shuffle and fletcher32 are not compression and are left out.
    """
    names = [FILTER_NAMES.get(code, f"filter-{code}") for code in filter_ids(dataset) if code not in (2, 3)]
    return "+".join(names) if names else "none"


__all__ = ["DEFAULT_COMPRESSION", "COMPRESSIONS", "PLUGIN_FILTERS", "DEFAULT_FILTERS", "allowed_filters",
           "register_own_plugins", "foreign_filter_names", "normalize_compression", "dataset_options",
           "offsets_options", "ensure_readable", "describe", "filter_ids", "filter_available"]
