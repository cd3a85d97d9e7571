"""Bridges between LoD tensors and other libraries and engines: one module each, imported lazily.

:mod:`~lodtool.interop.awkward`, :mod:`~lodtool.interop.arrow` (pyarrow),
:mod:`~lodtool.interop.torch`, :mod:`~lodtool.interop.tf` (TensorFlow),
:mod:`~lodtool.interop.hf` (HuggingFace ``datasets``) and
:mod:`~lodtool.interop.dask` (also ``lodtool.dask``).  Each imports its
library inside its functions, never at import, and each library is an
optional extra in ``pyproject.toml`` (a missing one is an error naming its
extra).  Paddle's serialized LoDTensor files are a file format, so they live
in :mod:`lodtool.io.pdtensor`.  Bridges sit beside :mod:`lodtool.tasks`: they
may use the container, the io formats and the operators, and the CLI may use
them.

>>> import lodtool.interop.torch
>>> lodtool.interop.torch.__name__
'lodtool.interop.torch'
"""
