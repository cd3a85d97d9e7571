"""Sequence operators on LoD tensors: Paddle's sequence_* family, plus RNN packing.

One operator per module, each with a plain NumPy reference and a Numba kernel
(``backend="numpy"`` or ``"numba"``; the default picks Numba).  Importing this
package imports neither Numba nor CuPy: kernels compile on their first call
(and are cached on disk, see :mod:`lodtool._jit`), and :mod:`lodtool._device` is
the only module that may touch CuPy.

Every operator also runs on a CUDA GPU (``pip install 'lodtool[gpu]'``): give it
a tensor on the device (``x.to("cuda")``, or CuPy arrays) or pass
``device="cuda"``, and the results stay on the device (``.to("cpu")`` brings
them back).  Each operator's module holds its CUDA launcher too; the shared device
primitives are in :mod:`lodtool.ops._cuda`.

>>> import numpy as np
>>> from lodtool import LoDTensor
>>> from lodtool import ops
>>> x = LoDTensor(np.arange(5.0), recursive_sequence_lengths=[[2, 3]])
>>> ops.sequence_pool(x, "average").data.tolist()
[0.5, 3.0]
>>> ops.sequence_reverse(x).data.tolist()
[1.0, 0.0, 4.0, 3.0, 2.0]
"""

from __future__ import annotations

from ._backend import BACKENDS, DEVICES, get_backend
from .concat import sequence_concat
from .enumerate import sequence_enumerate
from .erase import sequence_erase
from .expand import sequence_expand
from .expand_as import sequence_expand_as
from .lod_reset import lod_append, lod_reset
from .pack_plan import PackPlan, from_time_major, pack_plan, to_time_major
from .pad import sequence_mask, sequence_pad, sequence_unpad
from .pool import POOL_TYPES, pool_dtypes, sequence_first_step, sequence_last_step, sequence_pool
from .reshape import sequence_reshape
from .reverse import sequence_reverse
from .seq_slice import sequence_slice
from .softmax import sequence_softmax, softmax_dtype
from .scatter import sequence_scatter
from .conv import sequence_conv
from .topk_avg_pool import sequence_topk_avg_pooling
from .im2sequence import im2sequence
from .pack_plan import array_to_lod_tensor, lod_tensor_to_array, reorder_lod_tensor_by_rank, shrink_memory

__all__ = [
    "sequence_expand", "sequence_pool", "sequence_first_step", "sequence_last_step", "POOL_TYPES", "pool_dtypes",
    "sequence_softmax", "softmax_dtype", "sequence_pad", "sequence_unpad", "sequence_mask", "sequence_reverse",
    "PackPlan", "pack_plan", "to_time_major", "from_time_major", "get_backend", "BACKENDS", "DEVICES",
]
__all__ += ["lod_append", "lod_reset", "sequence_concat", "sequence_enumerate", "sequence_erase", "sequence_expand_as",
            "sequence_reshape", "sequence_slice"]
__all__ += ["sequence_scatter", "sequence_conv", "sequence_topk_avg_pooling", "im2sequence"]
__all__ += ["lod_tensor_to_array", "array_to_lod_tensor", "reorder_lod_tensor_by_rank", "shrink_memory"]
