"""Bridges between LoD tensors and other libraries and engines: one module each, imported lazily.

Each bridge (awkward, arrow, torch, tensorflow, datasets, paddle, dask) is one
module here that imports its library inside its functions, never at import,
and is an optional extra in ``pyproject.toml``.  Bridges sit beside
:mod:`lodtool.tasks`: they may use the container, the io formats and the
operators, and the CLI may use them.

>>> import lodtool.interop
>>> lodtool.interop.__name__
'lodtool.interop'
"""
