"""The lodtool container: the versioned HDF5 format of LoD tensors (specified in ``docs/format.md``).

* :mod:`.spec` the names and versions of the format; :mod:`.reader` the lazy
  handle (:func:`open_file`, :func:`load`); :mod:`.writer` :func:`save` and
  :class:`LodWriter`; :mod:`.checks` validate / inspect / verify one file;
  :mod:`.planner` the chunk planner (ranges of whole top-level sequences).
* :mod:`.checksum`, :mod:`.filters`, :mod:`.isolate` and the
  private ``_h5``, ``_fletcher``, ``_writeback`` serve those.

The public names are re-exported here and imported on first use, so reading
commands never load the writer (or xxhash, or numba).

>>> import lodtool.container as container
>>> container.FORMAT_VERSION
'1.0'
>>> callable(container.save) and callable(container.open_file)
True
"""

from __future__ import annotations

from .._lazy import lazy_exports

#: public name -> module (inside lodtool.container) that defines it
_LAZY = {
    **{name: "reader" for name in ("load", "open_file", "LodFile", "LazyTensor")},
    **{name: "writer" for name in ("save", "LodWriter", "TensorWriter", "AUTO")},
    **{name: "checks" for name in ("validate_file", "inspect_file", "verify_file", "FileReport", "Problem",
                                   "ChecksumMismatch")},
    **{name: "spec" for name in ("FORMAT_NAME", "FORMAT_VERSION", "SUPPORTED_MAJORS", "parse_version",
                                 "check_version")},
    **{name: "filters" for name in ("DEFAULT_COMPRESSION", "COMPRESSIONS")},

}


__getattr__, __dir__ = lazy_exports(__name__, _LAZY, globals())

__all__ = sorted(_LAZY)  # noqa: PLE0605 (a list, built from the table above)
