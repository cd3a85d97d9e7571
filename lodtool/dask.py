"""``import lodtool.dask``: the Dask bridge under its documented path (the module is :mod:`lodtool.interop.dask`).

``tests/test_public_imports.py`` imports it as the docs write it.
"""

import sys

from .interop import dask as _dask

sys.modules[__name__] = _dask
