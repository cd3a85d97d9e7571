"""Old import paths (lodtool.format.*, lodtool.pipeline) still work, warn, and give the new objects."""

from __future__ import annotations

import importlib
import warnings

import pytest

import lodtool

OLD_TO_NEW = [
    ("lodtool.format", "save", "lodtool.container.writer", "save"),
    ("lodtool.format", "FORMAT_VERSION", "lodtool.container.spec", "FORMAT_VERSION"),
    ("lodtool.format", "atomic_path", "lodtool.atomic", "atomic_path"),
    ("lodtool.format.container", "open_file", "lodtool.container.reader", "open_file"),
    ("lodtool.format.container", "load", "lodtool.container.reader", "load"),
    ("lodtool.format.container", "LodWriter", "lodtool.container.writer", "LodWriter"),
    ("lodtool.format.container", "validate_file", "lodtool.container.checks", "validate_file"),
    ("lodtool.format.container", "FileReport", "lodtool.container.checks", "FileReport"),
    ("lodtool.format.lazy", "LazyTensor", "lodtool.container.reader", "LazyTensor"),
    ("lodtool.format.writer", "TensorWriter", "lodtool.container.writer", "TensorWriter"),
    ("lodtool.format.spec", "FORMAT_VERSION", "lodtool.container.spec", "FORMAT_VERSION"),
    ("lodtool.format.checksum", "hash_dataset", "lodtool.container.checksum", "hash_dataset"),
    ("lodtool.format.filters", "COMPRESSIONS", "lodtool.container.filters", "COMPRESSIONS"),
    ("lodtool.format.limits", "default_max_memory", "lodtool.container.limits", "default_max_memory"),
    ("lodtool.format.isolate", "run_isolated", "lodtool.container.isolate", "run_isolated"),
    ("lodtool.format.atomic", "atomic_open", "lodtool.atomic", "atomic_open"),
    ("lodtool.format.checks", "validate_files", "lodtool.tasks", "validate"),
    ("lodtool.format.checks", "inspect_one", "lodtool.tasks", "inspect"),
    ("lodtool.format.checks", "verify_files", "lodtool.tasks", "verify"),
    ("lodtool.format.checks", "FileValidation", "lodtool.container.checks", "FileReport"),
    ("lodtool.format.pack", "pack", "lodtool.tasks", "pack"),
    ("lodtool.format.unpack", "unpack", "lodtool.tasks", "unpack"),
    ("lodtool.format.export", "write_tensor", "lodtool.tasks", "export"),
    ("lodtool.format.jsonio", "parse_json", "lodtool.io.json", "parse_json"),
    ("lodtool.format.jsonio", "resolve_dtype", "lodtool.io._values", "resolve_dtype"),
    ("lodtool.format.npyio", "read_npz", "lodtool.io.npy", "read_npz"),
    ("lodtool.pipeline", "pool_file", "lodtool.tasks", "pool"),
    ("lodtool.pipeline", "expand_file", "lodtool.tasks", "expand"),
    ("lodtool.pipeline", "pack_plan_file", "lodtool.tasks", "pack_plan"),
    ("lodtool.pipeline", "OpResult", "lodtool.tasks", "OpResult"),
]


@pytest.mark.parametrize("old, name, new, new_name", OLD_TO_NEW, ids=lambda v: str(v))
def test_an_old_path_warns_and_gives_the_new_object(old, name, new, new_name):
    module = importlib.import_module(old)
    with pytest.warns(DeprecationWarning, match=f"{old}.{name} moved to .*; the old path goes in 0.2"):
        value = getattr(module, name)
    assert value is getattr(importlib.import_module(new), new_name)


def test_from_imports_of_old_paths_work():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(DeprecationWarning):
            from lodtool.format.container import save  # noqa: F401
    with pytest.warns(DeprecationWarning):
        from lodtool.format import jsonio
        assert jsonio.write_json is importlib.import_module("lodtool.io.json").write_json


def test_unknown_names_are_attribute_errors():
    import lodtool.format.container as old

    with pytest.raises(AttributeError, match="has no attribute 'frobnicate'"):
        old.frobnicate  # noqa: B018


def test_every_public_name_still_works():
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the public API uses no deprecated path
        for name in lodtool.__all__:
            assert getattr(lodtool, name) is not None, name
