"""Doctests of the optional bridges run only where their library is installed.

The bridges import torch, tensorflow, datasets, dask, pyarrow or awkward
lazily, inside their functions, so their modules import everywhere; their
examples need the library itself.  A plain ``pip install '.[test]'`` has no
torch, tensorflow or datasets: those examples are skipped there, with the reason.
"""

from __future__ import annotations

import importlib.util

import pytest

#: lodtool/dask.py replaces itself with lodtool.interop.dask on import (the documented path ``import lodtool.dask``):
#: its doctests are that module's, collected there
collect_ignore = ["lodtool/dask.py"]

#: module whose doctests need a library -> that library's import name
NEEDS = {
    "lodtool.interop.torch": "torch",
    "lodtool.interop._torch_batch": "torch",
    "lodtool.interop.tf": "tensorflow",
    "lodtool.interop.hf": "datasets",
    "lodtool.interop.dask": "distributed",
    "lodtool.interop.awkward": "awkward",
    "lodtool.interop.arrow": "pyarrow",
    "lodtool.io.arrow": "pyarrow",
    "lodtool.io.parquet": "pyarrow",
    "lodtool.text": "tokenizers",
    "lodtool.io.text": "tokenizers",
}


def pytest_collection_modifyitems(config, items):
    for item in items:
        if not isinstance(item, pytest.DoctestItem):
            continue
        for prefix, library in NEEDS.items():
            if item.name.startswith(prefix + ".") or item.name == prefix:
                if importlib.util.find_spec(library) is None:
                    item.add_marker(pytest.mark.skip(reason=f"needs {library} (an optional extra)"))
                break
