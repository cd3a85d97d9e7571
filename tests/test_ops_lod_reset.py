"""lod_reset / lod_append against golden cases computed by PaddlePaddle 3.3.1, and lodtool's rules."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from lodtool import LoDTensor
from lodtool.errors import LodError, LodUsageError, LodValidationError
from lodtool.ops import lod_append, lod_reset

GOLDENS = Path(__file__).parent / "data" / "paddle_ops" / "goldens_lod_reset.npz"


def load_cases():
    with np.load(GOLDENS) as z:
        g = {k: z[k] for k in z.files}
    cases = []
    for k in range(int(g["count"])):
        p = f"c{k}."
        case = {key[len(p):]: value for key, value in g.items() if key.startswith(p)}
        case["x_lod"] = [case[f"x_lod{lv}"] for lv in range(int(case["x_levels"]))]
        if "y_levels" in case:
            case["y_lod"] = [case[f"y_lod{lv}"] for lv in range(int(case["y_levels"]))]
        if bool(case["ok"]):
            case["out_lod"] = [case[f"out_lod{lv}"].tolist() for lv in range(int(case["out_levels"]))]
        cases.append(pytest.param(case, id=f"c{k}-{case['mode']}{'-append' if case['append'] else ''}"))
    return cases


def run(case):
    x = LoDTensor(case["x"], case["x_lod"] or None)
    append = bool(case["append"])
    mode = str(case["mode"])
    if mode == "attr":
        return lod_reset(x, target_lod=case["target"].tolist(), append=append)
    if mode == "ydata":
        return lod_reset(x, case["target"], append=append)
    y = LoDTensor(np.zeros(int(case["y_lod"][-1][-1])), case["y_lod"])
    return lod_reset(x, y, append=append)


def fits(lod) -> bool:
    """Whether a LoD is valid by Paddle's (and lodtool's) rules."""
    return all(lod[k][-1] == len(lod[k + 1]) - 1 for k in range(len(lod) - 1))


@pytest.mark.parametrize("case", load_cases())
def test_matches_paddle(case):
    if not bool(case["ok"]):  # Paddle refuses: so does lodtool
        with pytest.raises(LodValidationError):
            run(case)
        return
    if not fits(case["out_lod"]):  # Paddle appends a level that does not fit; lodtool refuses (docs/paddle.md)
        with pytest.raises(LodValidationError, match="appended level does not fit"):
            run(case)
        return
    out = run(case)
    assert out.lod == case["out_lod"]
    assert out.data is case["x"] or np.array_equal(out.data, case["out"])
    assert np.array_equal(out.data, case["out"])


def test_goldens_cover_every_path():
    cases = [c.values[0] for c in load_cases()]
    modes = {(str(c["mode"]), bool(c["append"]), bool(c["ok"])) for c in cases}
    assert {("attr", False, True), ("attr", True, True), ("ydata", False, True), ("ydata", True, True),
            ("ylod", False, True), ("ylod", True, True), ("attr", False, False), ("ylod", False, False)} <= modes
    assert any(c["ok"] and not fits(c["out_lod"]) for c in cases)


def test_data_is_shared_not_copied():
    x = LoDTensor(np.arange(4.0), [[0, 4]])
    assert lod_reset(x, target_lod=[0, 1, 4]).data is x.data


def test_lod_append_forms():
    x = LoDTensor(np.arange(3), [[0, 2, 3]], level_names=["sentences"])
    out = lod_append(x, [0, 1, 1, 3])
    assert out.lod == [[0, 2, 3], [0, 1, 1, 3]] and out.level_names is None
    assert lod_append(x, np.array([0, 1, 1, 3], np.int32)).lod == out.lod
    assert lod_append(np.arange(3), [0, 3]).lod == [[0, 3]]
    # a LoD tensor gives its LoD, as Paddle's Y input does (append ignored)
    assert lod_append(x, LoDTensor(np.zeros(3), [[0, 1, 3]])).lod == [[0, 1, 3]]


def test_y_keeps_its_level_names():
    y = LoDTensor(np.zeros(3), [[0, 1, 3]], level_names=["words"])
    assert lod_reset(np.arange(3), y).level_names == ("words",)


@pytest.mark.parametrize("kwargs,error,match", [
    ({}, LodUsageError, "give the new level"),
    ({"target_lod": [0, 2]}, LodValidationError, "the data has 3 rows"),
    ({"target_lod": [[0, 3]]}, LodValidationError, "1-D"),
    ({"target_lod": [0]}, LodValidationError, "new level is not valid"),
    ({"target_lod": [0.0, 3.0]}, LodValidationError, "integers"),
    ({"target_lod": [0, 3], "append": True}, LodValidationError, "appended level does not fit"),
])
def test_errors(kwargs, error, match):
    x = LoDTensor(np.arange(3), [[0, 1, 3]])
    with pytest.raises(error, match=match):
        lod_reset(x, **kwargs)
    with pytest.raises(LodError):
        lod_reset(x, **kwargs)
