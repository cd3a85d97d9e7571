"""``lod_reset`` and ``lod_append``: give a tensor's rows a new LoD, or one more level.

As Paddle's ``lod_reset`` op (``append=False``) and its ``append=True`` form
that ``lod_append`` uses; checked against PaddlePaddle 3.3.1, which still runs
the op, with golden cases (``tests/data/paddle_ops/goldens_lod_reset.npz``).
The new level comes from, in Paddle's order:

1. ``y``, a :class:`~lodtool.LoDTensor` with a LoD: the output takes all of
   ``y``'s levels (``append`` is then ignored, as in Paddle); its last offset
   must equal ``x``'s rows;
2. ``y``, an integer array (or a LoD-less tensor): its values, flattened, are
   the offsets of the new level (Paddle's ``Y`` input);
3. ``target_lod``, a list of offsets (Paddle's ``target_lod`` attribute; it
   is offsets, not lengths, in spite of the old Python docs).

The new level must have at least 2 offsets, start at 0, never decrease and end
at ``x``'s rows.  ``append=False`` replaces the whole LoD with that one level;
``append=True`` adds it below ``x``'s levels.  The data is unchanged, and not
copied (Paddle copies it).

Where lodtool differs from Paddle: an appended level must fit the levels above
(the old last level must end at the new level's number of sequences).  Paddle
does not check this and returns a LoD its own ``set_lod`` refuses (``[[0, 2, 5],
[0, 1, 2, 3, 5]]``, say); lodtool raises :class:`~lodtool.errors.LodValidationError`.

There is no compiled kernel here: no data moves, and the one new level is
checked by :func:`lodtool.lod.validate_lod` (compiled for long levels), or on
the device by :func:`lodtool.ops._cuda.validate_offsets` for CuPy inputs.

>>> import numpy as np
>>> from lodtool import LoDTensor
>>> x = LoDTensor(np.arange(10.0), recursive_sequence_lengths=[[3, 2, 5]])
>>> lod_reset(x, target_lod=[0, 7, 10]).lod
[[0, 7, 10]]
>>> lod_append(x, list(range(11))).recursive_sequence_lengths
[[3, 2, 5], [1, 1, 1, 1, 1, 1, 1, 1, 1, 1]]
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import LodUsageError, LodValidationError
from ..lod import as_index_array, validate_lod
from ..tensor import LoDTensor
from . import _cuda
from ._backend import get_backend
from ._util import as_tensor

OP = "lod_reset"


def lod_reset(x: Any, y: Any = None, target_lod: Any = None, *, append: bool = False,
              device: str | None = None) -> LoDTensor:
    """``x``'s data with a new LoD (Paddle's ``lod_reset``); see the module docstring for the rules.

    ``y`` wins over ``target_lod`` when both are given, as in Paddle.  With CuPy
    inputs (or ``device="cuda"``) the new offsets are checked and kept on the
    device.  Raises :class:`~lodtool.errors.LodValidationError` for a level that
    breaks a rule (or does not fit, when appended) and
    :class:`~lodtool.errors.LodUsageError` when neither ``y`` nor ``target_lod``
    is given.

    >>> import numpy as np
    >>> from lodtool import LoDTensor
    >>> x = LoDTensor(np.arange(10.0), [[0, 3, 5, 10]])
    >>> lod_reset(x, np.array([0, 4, 7, 10], np.int32)).recursive_sequence_lengths
    [[4, 3, 3]]
    >>> lod_reset(x, LoDTensor(np.zeros(10), [[0, 4, 10]])).lod
    [[0, 4, 10]]
    """
    xt = as_tensor(x, "x")
    y_tensor = isinstance(y, LoDTensor)
    parts = (xt.data, *xt.offsets)
    if y_tensor:
        parts += tuple(y.offsets) if y.lod_level else (y.data,)
    elif y is not None and hasattr(y, "__cuda_array_interface__"):
        parts += (y,)
    on_gpu = any(hasattr(a, "__cuda_array_interface__") for a in parts)
    # no kernel runs on the host: NumPy's backend, so that Numba is not even imported
    be = get_backend(parts, None if device == "cuda" or on_gpu else "numpy", device)
    xp = be.xp
    data = _cuda.on_device(xp, xt.data) if be.name == "cupy" else xt.data
    if y_tensor and y.lod_level:
        levels = _levels_of(xp, be.name, y.offsets, y.n_rows)
        end = int(_cuda.to_host(levels[-1][-1:])[0])
        if end != xt.n_rows:
            raise LodValidationError(f"{OP}: y's last level ends at {end} but x has {xt.n_rows} rows; as in "
                                     "Paddle, the last offset of y's LoD must equal x's rows")
        return LoDTensor._trusted(data, levels, y.level_names)
    if y is not None:
        level = _flat_offsets(y.data if y_tensor else y, "y")
    elif target_lod is not None:
        level = as_index_array(target_lod, what=f"{OP}: target_lod")
    else:
        raise LodUsageError(f"{OP}: give the new level as y or as target_lod")
    try:  # Paddle's checks of the level itself first, then (appending) whether it fits under x's levels
        (level,) = _levels_of(xp, be.name, (level,), xt.n_rows)
    except LodValidationError as exc:
        raise LodValidationError(f"{OP}: the new level is not valid: {exc}") from None
    if not append:
        return LoDTensor._trusted(data, (level,))
    try:
        levels = _levels_of(xp, be.name, tuple(xt.offsets) + (level,), xt.n_rows)
    except LodValidationError as exc:
        raise LodValidationError(f"{OP}: the appended level does not fit: {exc}") from None
    return LoDTensor._trusted(data, levels)


def lod_append(x: Any, level: Any, *, device: str | None = None) -> LoDTensor:
    """``x`` with one more LoD level below its own: ``lod_reset(x, ..., append=True)`` (Paddle's ``lod_append``).

    ``level`` is the new level's offsets (a list or an integer array); a
    :class:`~lodtool.LoDTensor` with a LoD gives its LoD instead, as Paddle's
    ``Y`` input does.  The appended level must end at ``x``'s rows and have as
    many sequences as ``x``'s last level ends at.

    >>> import numpy as np
    >>> from lodtool import LoDTensor
    >>> x = LoDTensor(np.arange(3), [[0, 2, 3]])
    >>> lod_append(x, [0, 1, 1, 3]).lod
    [[0, 2, 3], [0, 1, 1, 3]]
    """
    if isinstance(level, LoDTensor) or hasattr(level, "__cuda_array_interface__") or isinstance(level, np.ndarray):
        return lod_reset(x, level, append=True, device=device)
    return lod_reset(x, target_lod=level, append=True, device=device)


def _flat_offsets(values: Any, what: str):
    """The new level's offsets, flattened (Paddle reads Y's data whatever its shape)."""
    if hasattr(values, "__cuda_array_interface__"):
        if values.dtype.kind not in "iu":
            raise LodValidationError(f"{OP}: {what} must hold integer offsets, got dtype {values.dtype}")
        return values.reshape(-1)
    arr = np.asarray(values)
    if arr.dtype == object:
        raise LodValidationError(f"{OP}: {what} must be a flat list of integer offsets")
    return as_index_array(arr.reshape(-1), what=f"{OP}: {what}")


def _levels_of(xp, how: str, levels, n_rows: int) -> tuple:
    if how == "cupy":
        return tuple(_cuda.validate_offsets(xp, list(levels), n_rows))
    levels = tuple(as_index_array(lv) for lv in levels)
    validate_lod(levels, n_rows)
    return levels


__all__ = ["lod_append", "lod_reset"]
