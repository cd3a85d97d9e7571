"""Awkward Array bridge: LoD tensors as ``var * var * ... * D * dtype`` arrays, zero-copy both ways.

A LoD tensor maps onto awkward's layout one to one: one ``ListOffsetArray``
(int64 offsets) per LoD level, outermost first, over a ``NumpyArray`` of the
flat data, with one ``RegularArray`` per element dimension.  Neither direction
copies the data or the offsets of a packed array.  awkward is imported on first
use (``pip install 'lodtool[awkward]'``).

>>> import numpy as np
>>> from lodtool import LoDTensor
>>> t = LoDTensor(np.arange(5), [[0, 2, 3], [0, 1, 3, 5]])
>>> a = to_awkward(t)
>>> a.tolist(), str(a.type)
([[[0], [1, 2]], [[3, 4]]], '2 * var * var * int64')
>>> from_awkward(a).lod
[[0, 2, 3], [0, 1, 3, 5]]

:func:`awkward_buffers` hands a tensor of a container to ``ak.from_buffers``
with lazy callables, so awkward users read lodtool files without loading them.
"""

from __future__ import annotations

import json
import os
from typing import TYPE_CHECKING, Any, Callable

import numpy as np

from .._optional import optional_import
from ..errors import LodDtypeError, LodShapeError
from ..tensor import LoDTensor, check_dtype

if TYPE_CHECKING:
    import awkward as ak


def _ak():
    return optional_import("awkward", "awkward", "the awkward bridge")


# -- lodtool -> awkward -------------------------------------------------------------------------------
def to_layout(t: LoDTensor) -> ak.contents.Content:
    """The awkward layout (``ak.contents.Content``) of ``t``, sharing its memory (a copy if not in native byte order).

    >>> import numpy as np
    >>> from lodtool import LoDTensor
    >>> type(to_layout(LoDTensor(np.arange(3), [[0, 1, 3]]))).__name__
    'ListOffsetArray'
    """
    ak = _ak()
    data = np.asarray(t.to("cpu").data if t.device != "cpu" else t.data)
    data = np.asarray(data, data.dtype.newbyteorder("="))  # awkward takes native byte order only: then one copy
    n = data.shape[0]
    elem = data.shape[1:]
    content = ak.contents.NumpyArray(data.reshape(-1) if elem else data)
    # one RegularArray per element dimension, innermost first; zeros_length keeps the length when a size is 0
    for j in reversed(range(len(elem))):
        length = n * int(np.prod(elem[:j], dtype=np.int64))
        content = ak.contents.RegularArray(content, int(elem[j]), zeros_length=length)
    for offsets in reversed(t.offsets):
        content = ak.contents.ListOffsetArray(ak.index.Index64(np.asarray(offsets)), content)
    return content


def to_awkward(t: LoDTensor) -> ak.Array:
    """``t`` as an ``ak.Array``: zero-copy (the array's buffers are the tensor's data and offsets).

    One ``ListOffsetArray(Index64(offsets))`` per level over a ``NumpyArray``
    with a ``RegularArray`` per element dimension.  Level names, if any, are
    kept in ``a.attrs["level_names"]``.  A tensor on the GPU is copied to the
    host first, and data in non-native byte order (big-endian on a
    little-endian machine) is copied into native order, which awkward needs.

    >>> import numpy as np
    >>> from lodtool import LoDTensor
    >>> t = LoDTensor(np.zeros((3, 2), np.float32), [[0, 1, 3]], level_names=["sentence"])
    >>> a = to_awkward(t)
    >>> str(a.type), a.attrs["level_names"]
    ('2 * var * 2 * float32', ('sentence',))
    >>> np.shares_memory(a.layout.content.content.data, t.data)
    True
    """
    ak = _ak()
    attrs = {"level_names": tuple(t.level_names)} if t.level_names else None
    return ak.Array(to_layout(t), attrs=attrs)


# -- awkward -> lodtool -------------------------------------------------------------------------------
def from_awkward(a: Any, *, validate: bool = True) -> LoDTensor:
    """A LoD tensor from an awkward array (or layout) of nested lists of numbers.

    Every variable-length dimension (``var``) becomes a LoD level, and the
    regular dimensions below the last one become the element shape (a regular
    dimension *above* a ``var`` one becomes a level of equal lengths).

    Copies: a packed array (``ListOffsetArray`` with offsets starting at 0 over
    exactly its content, as :func:`to_awkward` and ``ak.to_packed`` make) is
    taken without copying data or int64 offsets.  A sliced array, or offsets
    that do not start at 0, costs one copy of the offsets only (the data is
    viewed).  A ``ListArray`` (from fancy indexing or filtering) or an
    ``IndexedArray`` costs one copy of what lies under it; int32 offsets are
    widened (one copy of the offsets).  An option type that holds no missing
    value (what Parquet readers give for nullable list items) is taken as its
    content; missing values, records and unions have no LoD form and raise
    :class:`~lodtool.errors.LodDtypeError` naming the type and the way out.  ``validate=False`` skips the LoD check
    (for arrays known to be valid; awkward itself does not check monotonicity).

    >>> import awkward as ak
    >>> t = from_awkward(ak.Array([[[1, 2], []], [[3]]])[1:])
    >>> t.lod, t.data.tolist()
    ([[0, 1], [0, 1]], [3])
    """
    ak = _ak()
    layout = ak.to_layout(a, allow_record=False)
    names = None
    attrs = getattr(a, "attrs", None)
    if attrs and "level_names" in attrs:
        names = list(attrs["level_names"])
    levels: list[np.ndarray] = []
    node = _plain(layout, ak, depth=1)
    while _is_list(node, ak) and (not isinstance(node, ak.contents.RegularArray) or _has_var_below(node, ak)):
        depth = len(levels) + 1
        if isinstance(node, ak.contents.RegularArray):
            offsets = np.arange(node.length + 1, dtype=np.int64) * node.size
            content = node.content
        else:
            if isinstance(node, ak.contents.ListArray):
                node = node.to_ListOffsetArray64(start_at_zero=True)
            offsets = np.asarray(node.offsets.data)
            if offsets.dtype != np.int64:
                offsets = offsets.astype(np.int64)
            content = node.content
        start, stop = int(offsets[0]), int(offsets[-1])
        if start != 0:
            offsets = offsets - start
        if start != 0 or stop != content.length:
            content = content[start:stop]
        levels.append(offsets)
        node = _plain(content, ak, depth=depth + 1)
    data = _element_data(node, ak, depth=len(levels) + 1)
    if names is not None and len(names) != len(levels):
        names = None
    return LoDTensor(data, lod=levels, level_names=names, validate=validate)


def _type_at(node, ak) -> str:
    try:
        return str(node.form.type)
    except Exception:  # pragma: no cover - a form awkward cannot print
        return type(node).__name__


def _plain(node, ak, depth: int):
    """``node`` with index layers resolved (one copy) and types lodtool cannot hold refused."""
    c = ak.contents
    if node.parameter("__array__") in ("string", "bytestring", "char", "byte"):
        raise LodDtypeError(f"awkward array: depth {depth} holds strings ({_type_at(node, ak)}); lodtool stores "
                            "numbers and bools only (encode the strings as token ids first)")
    if node.is_option:  # nullable but holding no None (Parquet marks list items nullable): its content as it is
        if isinstance(node, c.UnmaskedArray):
            return _plain(node.content, ak, depth)
        if not np.asarray(node.mask_as_bool(valid_when=False)).any():
            return _plain(node.project(), ak, depth)
        raise LodDtypeError(f"awkward array: depth {depth} holds missing values ({_type_at(node, ak)}); a LoD "
                            "tensor has none: fill them (ak.fill_none) or drop them (ak.drop_none) first")
    if node.is_record:
        raise LodDtypeError(f"awkward array: depth {depth} holds records ({_type_at(node, ak)}); convert one field "
                            "at a time (a['field'])")
    if node.is_union:
        raise LodDtypeError(f"awkward array: depth {depth} holds a union of types ({_type_at(node, ak)}); a LoD "
                            "tensor has one type: make them agree (ak.values_astype, or select by type) first")
    if isinstance(node, c.IndexedArray):
        return _plain(node.project(), ak, depth)
    if isinstance(node, c.EmptyArray):
        return node.to_NumpyArray(np.dtype(np.float64))
    return node


def _is_list(node, ak) -> bool:
    return isinstance(node, (ak.contents.ListOffsetArray, ak.contents.ListArray, ak.contents.RegularArray))


def _has_var_below(node, ak) -> bool:
    """Whether a variable-length list lies under this regular one (then it is a LoD level)."""
    form = node.form
    while True:
        form = getattr(form, "content", None)
        if form is None:
            return False
        if type(form).__name__ in ("ListOffsetForm", "ListForm"):
            return True


def _element_data(node, ak, depth: int) -> np.ndarray:
    """The flat data under the last LoD level: regular dimensions over a NumpyArray, as one array view."""
    shape: list[int] = []
    length = node.length
    while isinstance(node, ak.contents.RegularArray):
        shape.append(node.size)
        node = _plain(node.content, ak, depth + len(shape))
    if not isinstance(node, ak.contents.NumpyArray):
        raise LodShapeError(f"awkward array: depth {depth + len(shape)} is {type(node).__name__} "
                            f"({_type_at(node, ak)}), not numbers")
    data = np.asarray(node.data)
    check_dtype(data.dtype, f"awkward array at depth {depth + len(shape)}")
    inner = data.shape[1:]
    size = length * int(np.prod(shape, dtype=np.int64))
    if data.shape[0] != size:
        data = data[:size]
    return data.reshape((length, *shape, *inner)) if shape else data


# -- the to_buffers / from_buffers form of a container's tensor ----------------------------------------
def form_json(lod_level: int, dtype: np.dtype, element_shape: tuple[int, ...] = ()) -> str:
    """The awkward Form of a tensor's layout as awkward's JSON, built without importing awkward.

    Keys are ``node0`` .. ``node{L-1}`` for the levels' offsets, then one per
    element dimension, then the data; ``ak.from_buffers`` reads buffers named
    ``node{k}-offsets`` and ``node{n}-data``.  Everything in it follows from a
    stored tensor's attributes, so the container does not store it.

    >>> json.loads(form_json(1, np.dtype("float32"), (2,)))["content"]["class"]
    'RegularArray'
    """
    dtype = np.dtype(dtype)
    k = lod_level + len(element_shape)
    form: dict = {"class": "NumpyArray", "primitive": dtype.name, "form_key": f"node{k}"}
    for j, size in enumerate(reversed(element_shape)):
        form = {"class": "RegularArray", "size": int(size), "content": form, "form_key": f"node{k - 1 - j}"}
    for level in reversed(range(lod_level)):
        form = {"class": "ListOffsetArray", "offsets": "i64", "content": form, "form_key": f"node{level}"}
    return json.dumps(form, separators=(",", ":"))


def form_of(lod_level: int, dtype: np.dtype, element_shape: tuple[int, ...] = ()) -> ak.forms.Form:
    """:func:`form_json` as an ``ak.forms.Form``.

    >>> str(form_of(2, np.dtype("int32"), (3,)).type)
    'var * var * 3 * int32'
    """
    return _ak().forms.from_json(form_json(lod_level, dtype, element_shape))


def awkward_buffers(path: str | os.PathLike, name: str | None = None,
                    ) -> tuple[ak.forms.Form, int, dict[str, Callable[[], np.ndarray]]]:
    """``(form, length, container)`` for ``ak.from_buffers``: tensor ``name`` of a container, read lazily.

    The container's values are zero-argument callables; awkward calls one only
    when its buffer is needed (awkward >= 2.8), and each call opens the file,
    reads one dataset and closes it, so nothing stays open and the triple can
    be pickled to workers.

    >>> import os, tempfile, numpy as np, awkward as ak
    >>> from lodtool import LoDTensor, save
    >>> p = os.path.join(tempfile.mkdtemp(), "t.lod.h5")
    >>> save(p, LoDTensor(np.arange(5), [[0, 2, 3], [0, 1, 3, 5]]))
    >>> a = ak.from_buffers(*awkward_buffers(p))
    >>> a.tolist()
    [[[0], [1, 2]], [[3, 4]]]
    """
    from functools import partial

    info = _tensor_info(path, name)
    form = form_of(info["lod_level"], info["dtype"], info["element_shape"])
    container: dict[str, Callable] = {}
    for k in range(info["lod_level"]):
        container[f"node{k}-offsets"] = partial(_read_offsets, os.fspath(path), info["name"], k)
    k = info["lod_level"] + len(info["element_shape"])
    container[f"node{k}-data"] = partial(_read_flat_data, os.fspath(path), info["name"])
    length = info["level_sizes"][0] - 1 if info["lod_level"] else info["n_rows"]
    return form, length, container


# The container is reached through these three functions only (one place to re-point).
def _tensor_info(path, name) -> dict:
    from ..container.reader import open_file

    with open_file(path) as f:
        t = f.tensor(name)
        return {"name": t.name, "lod_level": t.lod_level, "dtype": t.dtype, "element_shape": t.element_shape,
                "level_sizes": list(t.level_sizes), "n_rows": t.n_rows}


def _read_offsets(path: str, name: str, level: int) -> np.ndarray:
    from ..container.reader import open_file

    with open_file(path) as f:
        return f.tensor(name).read_offsets(level)


def _read_flat_data(path: str, name: str) -> np.ndarray:
    from ..container.reader import open_file

    with open_file(path) as f:
        t = f.tensor(name)
        return np.ascontiguousarray(t.read_rows(0, t.n_rows)).reshape(-1)


__all__ = ["to_awkward", "from_awkward", "to_layout", "form_of", "form_json", "awkward_buffers"]
