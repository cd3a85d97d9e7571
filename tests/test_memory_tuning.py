"""lodtool._memory: the lodtool command (never the library) asks glibc to unmap freed chunk buffers."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

CODE = ("from lodtool._memory import keep_large_buffers_unpooled as k\n"
        "print(k(), k())\n")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_the_threshold_is_set_once_per_process():
    env = {k: v for k, v in os.environ.items() if k != "MALLOC_MMAP_THRESHOLD_"}
    out = subprocess.run([sys.executable, "-c", CODE], capture_output=True, text=True, env=env, check=True).stdout
    assert out.split() == ["True", "True"]


def test_an_explicit_environment_setting_wins():
    env = dict(os.environ, MALLOC_MMAP_THRESHOLD_="4194304")
    out = subprocess.run([sys.executable, "-c", CODE], capture_output=True, text=True, env=env, check=True).stdout
    assert out.split() == ["False", "False"]


def test_the_library_leaves_it_to_the_process(tmp_path):  # the lodtool command sets it (cli/main.py), a library never
    code = ("import numpy as np, lodtool, lodtool._memory as m\n"
            "from lodtool.tasks import softmax\n"
            f"p = {str(tmp_path / 'x.lod.h5')!r}\n"
            "lodtool.save(p, lodtool.LoDTensor(np.ones(4, np.float32), [[0, 1, 4]]))\n"
            "assert not m._done\n"
            f"softmax(p, {str(tmp_path / 'y.lod.h5')!r})\n"
            "print(m._done)\n")
    env = {k: v for k, v in os.environ.items() if k != "MALLOC_MMAP_THRESHOLD_"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True).stdout
    assert out.strip() == "False"
