"""sequence_pool: Paddle's results, dtype rules, errors, and kernel == reference."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from lodtool import LoDTensor
from lodtool.errors import LodDtypeError, LodShapeError, LodUsageError
from lodtool.ops import POOL_TYPES, pool_dtypes, sequence_first_step, sequence_last_step, sequence_pool
from tests.test_ops_common import BACKENDS, FLOATS, INTS, OPS_SETTINGS, same_bits, tensors

SEQS = [[2, 0, 4]]
X = np.arange(12, dtype=np.float32).reshape(6, 2)

# PaddlePaddle 3.3 (static graph, float32), x = arange(12).reshape(6, 2), lengths [[2, 0, 4]], pad_value -1
PADDLE = {
    "sum": [[2.0, 4.0], [-1.0, -1.0], [28.0, 32.0]],
    "average": [[1.0, 2.0], [-1.0, -1.0], [7.0, 8.0]],
    "sqrt": [[1.4142135381698608, 2.8284270763397217], [-1.0, -1.0], [14.0, 16.0]],
    "max": [[2.0, 3.0], [-1.0, -1.0], [10.0, 11.0]],
    "last": [[2.0, 3.0], [-1.0, -1.0], [10.0, 11.0]],
    "first": [[0.0, 1.0], [-1.0, -1.0], [4.0, 5.0]],
}


@pytest.mark.parametrize("pool_type", sorted(PADDLE))
@pytest.mark.parametrize("backend", BACKENDS)
def test_matches_paddle(pool_type, backend):
    x = LoDTensor(X, recursive_sequence_lengths=SEQS)
    out = sequence_pool(x, pool_type, pad_value=-1, backend=backend)
    assert out.dtype == np.float32 and out.lod_level == 0
    assert out.data.tolist() == PADDLE[pool_type]


@pytest.mark.parametrize("backend", BACKENDS)
def test_min_and_case_insensitive(backend):
    x = LoDTensor(X, recursive_sequence_lengths=SEQS)
    assert sequence_pool(x, "MIN", pad_value=-1, backend=backend).data.tolist() == [[0, 1], [-1, -1], [4, 5]]
    assert sequence_pool(x, "Sum", backend=backend).data.tolist() == [[2, 4], [0, 0], [28, 32]]


@pytest.mark.parametrize("backend", BACKENDS)
def test_levels_are_kept(backend):
    # Paddle 3.3: arange(6) with lengths [[2, 1], [1, 2, 3]], sum -> [[0], [3], [12]] with lod [[0, 2, 3]]
    x = LoDTensor(np.arange(6, dtype=np.float32).reshape(6, 1), recursive_sequence_lengths=[[2, 1], [1, 2, 3]],
                  level_names=["doc", "sentence"])
    out = sequence_pool(x, "sum", backend=backend)
    assert out.data.ravel().tolist() == [0, 3, 12] and out.lod == [[0, 2, 3]]
    assert out.level_names == ("doc",)
    # three levels (Paddle stops at two): both upper levels stay
    x3 = LoDTensor(np.arange(6.0), recursive_sequence_lengths=[[1, 1], [2, 1], [1, 2, 3]])
    out3 = sequence_pool(x3, "max", backend=backend)
    assert out3.lod == [[0, 1, 2], [0, 2, 3]] and out3.data.tolist() == [0, 2, 5]


@pytest.mark.parametrize("backend", BACKENDS)
def test_nan_follows_paddle(backend):
    # Paddle 3.3 max of [1, nan, 3] -> 3 (a later NaN is skipped), of [nan, 1] -> nan (a first NaN stays)
    x = LoDTensor(np.array([1, np.nan, 3, np.nan, 1], np.float32), recursive_sequence_lengths=[[3, 2]])
    out = sequence_pool(x, "max", backend=backend).data
    assert out[0] == 3 and np.isnan(out[1])
    out = sequence_pool(x, "min", backend=backend).data
    assert out[0] == 1 and np.isnan(out[1])


@pytest.mark.parametrize("backend", BACKENDS)
def test_no_rows_at_all(backend):
    x = LoDTensor(np.zeros((0, 3), np.float64), recursive_sequence_lengths=[[0, 0]])
    for pool_type in POOL_TYPES:
        out = sequence_pool(x, pool_type, pad_value=2.5, backend=backend)
        assert out.shape == (2, 3) and (out.data == 2.5).all()


@pytest.mark.parametrize("dtype,pool_type,out", [
    ("int8", "sum", "int64"), ("uint16", "sum", "uint64"), ("bool", "sum", "int64"), ("float16", "sum", "float16"),
    ("float32", "sum", "float32"), ("int32", "average", "float64"), ("bool", "sqrt", "float64"),
    ("float16", "average", "float16"), ("int8", "max", "int8"), ("bool", "max", "bool"),
    ("uint64", "min", "uint64"), ("complex64", "first", "complex64"), ("int16", "last", "int16"),
])
@pytest.mark.parametrize("backend", BACKENDS)
def test_output_dtypes(dtype, pool_type, out, backend):
    assert pool_dtypes(dtype, pool_type)[0] == np.dtype(out)
    x = LoDTensor(np.ones((3, 2), dtype), recursive_sequence_lengths=[[2, 1]])
    assert sequence_pool(x, pool_type, backend=backend).dtype == np.dtype(out)


@pytest.mark.parametrize("backend", BACKENDS)
def test_integer_results(backend):
    x = LoDTensor(np.array([100, 100, 100, -128, 1], np.int8), recursive_sequence_lengths=[[3, 2]])
    assert sequence_pool(x, "sum", backend=backend).data.tolist() == [300, -127]  # no int8 wrap-around
    assert sequence_pool(x, "average", backend=backend).data.tolist() == [100.0, -63.5]
    assert sequence_pool(x, "max", backend=backend).data.tolist() == [100, 1]
    big = LoDTensor(np.array([2**63, 2**63 - 1, 5], np.uint64), recursive_sequence_lengths=[[2, 1]])
    assert sequence_pool(big, "sum", backend=backend).data.tolist() == [2**64 - 1, 5]
    assert sequence_pool(big, "min", backend=backend).data.tolist() == [2**63 - 1, 5]
    flags = LoDTensor(np.array([False, True, False, False]), recursive_sequence_lengths=[[2, 2]])
    assert sequence_pool(flags, "max", backend=backend).data.tolist() == [True, False]
    assert sequence_pool(flags, "sum", backend=backend).data.tolist() == [1, 0]


def test_aliases():
    x = LoDTensor(np.arange(5), recursive_sequence_lengths=[[2, 0, 3]])
    assert sequence_first_step(x, pad_value=-1).data.tolist() == [0, -1, 2]
    assert sequence_last_step(x, backend="numpy").data.tolist() == [1, 0, 4]


def test_errors():
    x = LoDTensor(np.arange(5), recursive_sequence_lengths=[[2, 3]])
    with pytest.raises(LodUsageError, match="unknown pool_type"):
        sequence_pool(x, "median")
    with pytest.raises(LodShapeError, match="no LoD"):
        sequence_pool(np.arange(3), "sum")
    with pytest.raises(LodDtypeError, match="complex"):
        sequence_pool(LoDTensor(np.ones(2, np.complex64), [[0, 2]]), "sum")
    with pytest.raises(LodDtypeError, match="pad_value"):
        sequence_pool(LoDTensor(np.ones(2, np.uint8), [[0, 2]]), "max", pad_value=-1)
    with pytest.raises(LodDtypeError, match="pad_value"):
        sequence_pool(x, "sum", pad_value=0.5)
    assert sequence_pool(x, "average", pad_value=0.5).dtype == np.float64  # float output takes any pad


def _compare(got: np.ndarray, expected: np.ndarray, pool_type: str, dtype: np.dtype):
    assert got.dtype == expected.dtype and got.shape == expected.shape
    if dtype.kind in "fc" and pool_type in ("sum", "average", "sqrt"):
        tol = {np.float16: 1e-2, np.float32: 1e-5}.get(dtype.type, 1e-12)
        np.testing.assert_allclose(got.astype(np.float64), expected.astype(np.float64), rtol=tol, atol=tol)
    else:
        assert same_bits(got, expected)


@OPS_SETTINGS
@given(tensors(dtypes=INTS + ["bool"], values="small"), st.sampled_from(POOL_TYPES), st.integers(-3, 3))
def test_kernel_matches_reference_integers(x, pool_type, pad):
    if x.dtype.kind in "ub":  # pads the output dtype can hold
        pad = abs(pad) % 2 if x.dtype.kind == "b" else abs(pad)
    expected = sequence_pool(x, pool_type, pad, backend="numpy")
    got = sequence_pool(x, pool_type, pad, backend="numba")
    assert got.lod == expected.lod
    _compare(got.data, expected.data, pool_type, x.dtype)


@OPS_SETTINGS
@given(tensors(dtypes=FLOATS, values="small"), st.sampled_from(POOL_TYPES))
def test_kernel_matches_reference_float_integers(x, pool_type):
    got = sequence_pool(x, pool_type, -1.5, backend="numba")
    expected = sequence_pool(x, pool_type, -1.5, backend="numpy")
    _compare(got.data, expected.data, pool_type, x.dtype)


@OPS_SETTINGS
@given(tensors(dtypes=FLOATS, values="bytes"), st.sampled_from(POOL_TYPES))
def test_kernel_matches_reference_any_floats(x, pool_type):
    """Arbitrary bit patterns: NaN, inf, subnormals, -0.0."""
    got = sequence_pool(x, pool_type, backend="numba").data
    expected = sequence_pool(x, pool_type, backend="numpy").data
    if pool_type in ("sum", "average", "sqrt"):
        with np.errstate(all="ignore"):
            g, e = got.astype(np.float64), expected.astype(np.float64)
            finite = np.isfinite(g) & np.isfinite(e) & (np.abs(e) < 1e30)
        if not (np.isinf(g).any() or np.isinf(e).any()):  # overflow may hit inf - inf in either order
            assert np.array_equal(np.isnan(g), np.isnan(e))
        np.testing.assert_allclose(g[finite], e[finite], rtol=1e-3 if x.dtype != np.float64 else 1e-9,
                                   atol=_atol(x))
    else:
        assert np.array_equal(got, expected, equal_nan=True)
        assert same_bits(np.isnan(got), np.isnan(expected))


def _atol(x) -> float:
    with np.errstate(invalid="ignore"):  # signalling NaNs
        finite = np.asarray(x.data, np.float64)
    finite = finite[np.isfinite(finite)]
    return float(np.abs(finite).max() * 1e-3) if finite.size else 0.0


@pytest.mark.parametrize("backend", BACKENDS)
def test_random_floats_against_python(backend):
    rng = np.random.default_rng(7)
    lens = rng.integers(0, 9, 200)
    x = LoDTensor(rng.standard_normal((int(lens.sum()), 4)), recursive_sequence_lengths=[lens.tolist()])
    for pool_type in ("sum", "average", "sqrt"):
        out = sequence_pool(x, pool_type, backend=backend).data
        for i, seq in enumerate(np.split(np.asarray(x.data), np.cumsum(lens)[:-1])):
            if not len(seq):
                assert (out[i] == 0).all()
                continue
            total = seq.sum(axis=0)
            want = {"sum": total, "average": total / len(seq), "sqrt": total / math.sqrt(len(seq))}[pool_type]
            np.testing.assert_allclose(out[i], want, rtol=1e-12, atol=1e-12)


# -- Paddle's edges: pad_value through float32, and MaxIndex (tests/data/paddle_ops/pool_edges.npz) -----------

EDGES = Path(__file__).parent / "data" / "paddle_ops" / "pool_edges.npz"


def paddle_pool_cases():
    with np.load(EDGES) as z:
        count = len([k for k in z.files if k.endswith("_out")])
        cases = []
        for i in range(count):
            lod = [z[f"pool_{i}_lod{k}"] for k in range(2) if f"pool_{i}_lod{k}" in z.files]
            cases.append({"x": z[f"pool_{i}_x"], "lod": lod, "type": ["max", "sum", "average"][int(z[f"pool_{i}_type"])],
                          "pad": float(z[f"pool_{i}_attrs"][0]), "out": z[f"pool_{i}_out"],
                          "index": z[f"pool_{i}_index"] if f"pool_{i}_index" in z.files else None})
        return cases


@pytest.mark.parametrize("backend", BACKENDS)
def test_paddle_pad_value_and_max_index(backend):
    cases = paddle_pool_cases()
    assert len(cases) >= 30 and sum(c["index"] is not None for c in cases) >= 10
    for i, case in enumerate(cases):
        x = LoDTensor(case["x"], case["lod"])
        if case["index"] is not None:
            out, index = sequence_pool(x, "max", case["pad"], return_index=True, backend=backend)
            assert index.dtype == np.int32 and np.array_equal(index, case["index"]), i
        else:
            out = sequence_pool(x, case["type"], case["pad"], backend=backend)
        tol = 1e-6 if x.dtype == np.float32 else 1e-15
        np.testing.assert_allclose(out.data, case["out"], rtol=tol, atol=tol, err_msg=str(i))
        empty = np.diff(x.offsets[-1]) == 0
        assert same_bits(out.data[empty], case["out"][empty]), i  # the pad rows: Paddle's bits exactly


@pytest.mark.parametrize("backend", BACKENDS)
def test_pad_value_goes_through_float32_on_float64(backend):
    x = LoDTensor(np.ones(2), [[0, 0, 2]])
    out = sequence_pool(x, "sum", 0.3, backend=backend)
    assert out.data.tolist() == [0.30000001192092896, 2.0]
    out = sequence_pool(LoDTensor(np.ones(2, np.float32), [[0, 0, 2]]), "sum", 0.3, backend=backend)
    assert out.data[0] == np.float32(0.3)
    out = sequence_pool(LoDTensor(np.ones(2, np.int16), [[0, 0, 2]]), "average", 0.3, backend=backend)
    assert out.dtype == np.float64 and out.data[0] == 0.30000001192092896  # float64 output: as Paddle's attribute
    assert sequence_pool(LoDTensor(np.ones(2, np.int8), [[0, 0, 2]]), "sum", 7, backend=backend).data[0] == 7
    assert np.isinf(sequence_pool(x, "max", 1e300, backend=backend).data[0])  # beyond float32: inf, as Paddle


@pytest.mark.parametrize("backend", BACKENDS)
def test_max_index(backend):
    x = LoDTensor(np.array([[1, 9], [4, 9], [4, 2], [0, 0]], np.float32), [[0, 3, 3, 4]])
    out, index = sequence_pool(x, "max", return_index=True, backend=backend)
    assert out.data.tolist() == [[4, 9], [0, 0], [0, 0]] and index.tolist() == [[1, 0], [-1, -1], [3, 3]]
    _, index = sequence_pool(x, "min", return_index=True, backend=backend)
    assert index.tolist() == [[3 - 3, 2], [-1, -1], [3, 3]]
    nan = LoDTensor(np.array([np.nan, 5.0, 1.0, np.nan, 7.0]), [[0, 2, 5]])
    out, index = sequence_pool(nan, "max", return_index=True, backend=backend)
    assert np.isnan(out.data[0]) and out.data[1] == 7.0 and index.tolist() == [0, 4]
    with pytest.raises(LodUsageError, match="return_index"):
        sequence_pool(x, "sum", return_index=True, backend=backend)


@OPS_SETTINGS
@given(tensors(max_levels=2, dtypes=INTS + FLOATS + ["bool"], values="small"), st.sampled_from(["max", "min"]))
def test_max_index_kernel_matches_reference(x, pool_type):
    want, want_index = sequence_pool(x, pool_type, return_index=True, backend="numpy")
    got, got_index = sequence_pool(x, pool_type, return_index=True, backend="numba")
    assert same_bits(got.data, want.data) and same_bits(got_index, want_index)
    data = np.asarray(x.data)
    off = x.offsets[-1]
    for i in range(len(off) - 1):  # each index points into its own sequence, at a row holding the result
        idx = got_index[i]
        if off[i] == off[i + 1]:
            assert (idx == -1).all()
        else:
            assert ((idx >= off[i]) & (idx < off[i + 1])).all()
            picked = np.take_along_axis(data, idx.reshape((1,) + idx.shape), axis=0)[0]
            assert np.array_equal(picked, got.data[i], equal_nan=True)
