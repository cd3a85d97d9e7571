"""Validation speed (issue 5): full offsets validation against a read-only pass over the same offsets.

    python benchmarks/bench_validate.py --size full     # 2 levels, 64M + 1M offsets (520 MB)

Times, interleaved, over the same in-memory int64 offsets of a 2-level LoD:

* lodtool: :func:`lodtool.lod.validate_lod` (every rule: first offset 0, never
  decreasing, each level ending where the level below does), run twice: in a
  process without Numba loaded (what ``lodtool validate`` and ``inspect`` run)
  and after ``import numba`` (what the kernel commands run: a compiled
  monotonicity check takes over).  Either way a level of 4M offsets or more
  is checked in two halves on two threads (this machine's two cores);
* the anchor: a read-only pass, ``o.sum()`` of every level (NumPy's sum, one thread);
* a baseline: NumPy's ``(o[1:] >= o[:-1]).all()`` of every level;

and, from a container on disk, ``LazyTensor.validate()`` (what ``lodtool
validate`` does, reading the offsets block by block) against reading the same
blocks with h5py and summing them.  Speeds are GB/s of offsets; ratios are
lodtool's speed over the read-only pass's.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as C

TAG = "validate"
#: level-1 offsets entries per size (level 0 has 1/64 of that)
SIZES = {"tiny": 1 << 20, "small": 1 << 23, "full": 1 << 26}


def make_offsets(n1: int, seed: int = 5) -> tuple[list[np.ndarray], int]:
    rng = np.random.default_rng(seed)
    n0 = max(n1 // 64, 2)
    l0 = rng.multinomial(n1 - 1, np.full(n0 - 1, 1 / (n0 - 1))).astype(np.int64)  # sums to n1 - 1 sequences
    o0 = np.zeros(n0, np.int64)
    np.cumsum(l0, out=o0[1:])
    l1 = rng.integers(0, 3, n1 - 1).astype(np.int64)
    o1 = np.zeros(n1, np.int64)
    np.cumsum(l1, out=o1[1:])
    return [o0, o1], int(o1[-1])


def measure_memory(levels, n_rows: int, runs: int, numba_loaded: bool) -> dict[str, float]:
    from lodtool.lod import validate_lod

    assert ("numba" in sys.modules) == numba_loaded

    def lodtool_():
        validate_lod(levels, n_rows)

    def read_only():
        return [o.sum() for o in levels]

    def numpy_():
        return all(bool((o[1:] >= o[:-1]).all()) for o in levels)

    times = C.interleaved({"lodtool": lodtool_, "sum": read_only, "numpy": numpy_}, max(runs, 5))
    return {k: C.median(v) for k, v in times.items()}


def measure_file(path: Path, runs: int) -> dict[str, float]:
    import lodtool
    from lodtool.container.reader import OFFSET_BLOCK

    def lodtool_():
        with lodtool.open(path) as f:
            problems = f["x"].validate()
        assert not problems, problems

    def h5py_sum():
        import h5py

        with h5py.File(path, "r", locking=False) as h:
            for k in range(2):
                ds = h[f"x/lod/{k}"]
                for start in range(0, ds.shape[0], OFFSET_BLOCK):
                    ds[start:start + OFFSET_BLOCK].sum()

    times = C.interleaved({"lodtool": lodtool_, "h5py+sum": h5py_sum}, max(runs, 5))
    return {k: C.median(v) for k, v in times.items()}


def run(size: str, runs: int, tmpdir: str | None) -> dict:
    n1 = SIZES[size]
    load0 = C.loadavg()
    levels, n_rows = make_offsets(n1)
    nbytes = sum(o.nbytes for o in levels)
    gbs = lambda t: nbytes / t / 1e9

    without = measure_memory(levels, n_rows, runs, numba_loaded=False)
    C.progress(TAG, f"without numba: validate {gbs(without['lodtool']):.1f} GB/s, sum {gbs(without['sum']):.1f} GB/s")
    import numba  # noqa: F401  (the kernel commands' situation)

    from lodtool.lod import validate_lod

    validate_lod(levels, n_rows)  # loads (or compiles) the compiled check
    with_ = measure_memory(levels, n_rows, runs, numba_loaded=True)
    C.progress(TAG, f"with numba: validate {gbs(with_['lodtool']):.1f} GB/s, sum {gbs(with_['sum']):.1f} GB/s")

    with tempfile.TemporaryDirectory(prefix="lodtool-bench-validate-", dir=tmpdir) as d:
        from lodtool import LoDTensor
        from lodtool.container import save

        path = Path(d) / "offsets.lod.h5"
        save(path, {"x": LoDTensor._trusted(np.zeros(n_rows, np.int8), levels)}, compression="none", force=True)
        filed = measure_file(path, runs)
    C.progress(TAG, f"from a file: validate {gbs(filed['lodtool']):.2f} GB/s, h5py+sum {gbs(filed['h5py+sum']):.2f}")
    load1 = C.loadavg()

    def row(label, t, anchor_label, ta):
        return [label, f"{gbs(t):.2f} GB/s", anchor_label, f"{gbs(ta):.2f} GB/s", C.fmt_x(ta / t)]

    r_without = without["sum"] / without["lodtool"]
    r_with = with_["sum"] / with_["lodtool"]
    r_file = filed["h5py+sum"] / filed["lodtool"]
    targets = [
        C.target("full offsets validation ≥ 0.8× a read-only pass (`o.sum()`), Numba loaded (kernel commands)",
                 f"{gbs(with_['lodtool']):.1f} GB/s", f"`o.sum()` {gbs(with_['sum']):.1f} GB/s", C.fmt_x(r_with),
                 r_with >= 0.8, "≥ 0.8×"),
        C.target("the same without Numba (`lodtool validate`, `inspect`)", f"{gbs(without['lodtool']):.1f} GB/s",
                 f"`o.sum()` {gbs(without['sum']):.1f} GB/s", C.fmt_x(r_without), r_without >= 0.8, "≥ 0.8×"),
        C.target("NumPy `(o[1:] >= o[:-1]).all()` vs the read-only pass", f"{gbs(without['numpy']):.1f} GB/s "
                 "(NumPy)", f"`o.sum()` {gbs(without['sum']):.1f} GB/s",
                 C.fmt_x(without["sum"] / without["numpy"]), None, "baseline"),
        C.target("validation from a container (`LazyTensor.validate()`) vs h5py read + `sum()` of the same blocks",
                 f"{gbs(filed['lodtool']):.2f} GB/s", f"{gbs(filed['h5py+sum']):.2f} GB/s", C.fmt_x(r_file),
                 None, "informative"),
    ]
    tables = [{
        "title": "Speeds (GB/s of offsets; ratio = lodtool's speed / the anchor's, higher is better)",
        "head": ["lodtool", "speed", "anchor", "anchor speed", "ratio"],
        "rows": [
            row("`validate_lod`, Numba loaded", with_["lodtool"], "`o.sum()`", with_["sum"]),
            row("`validate_lod`, Numba not loaded", without["lodtool"], "`o.sum()`", without["sum"]),
            row("NumPy `(o[1:] >= o[:-1]).all()`", without["numpy"], "`o.sum()`", without["sum"]),
            row("`validate_lod`, Numba loaded", with_["lodtool"], "NumPy `(o[1:] >= o[:-1]).all()`",
                with_["numpy"]),
            row("`LazyTensor.validate()` from a file", filed["lodtool"], "h5py read + `sum()`", filed["h5py+sum"]),
        ]}]
    about = (f"Offsets: 2 levels, {len(levels[0]):,} + {len(levels[1]):,} int64 entries ({C.fmt_bytes(nbytes)}), in "
             f"memory; medians of {max(runs, 5)} interleaved runs; the file row reads the same offsets from an "
             f"uncompressed container (page cache warm). Load average {load0} before, {load1} after.")
    return {"key": TAG, "title": "Validation speed (issue 5)", "about": about, "targets": targets, "tables": tables,
            "notes": [], "meta": {"with_numba": with_, "without_numba": without, "file": filed, "bytes": nbytes}}


if __name__ == "__main__":
    raise SystemExit(C.main(run, __doc__))
