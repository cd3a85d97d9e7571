"""Hostile input, round 3 (issue 33): mangled Arrow IPC, Parquet and Paddle files through ``pack``, as real processes.

Valid seed files of each format are mangled (bytes flipped, cut, inserted,
deleted, duplicated, and int64 / int32 words swapped for hostile sizes: -1,
2**31, 3 GiB, 2**40, 2**62 ...), then packed by the driver of
``tests/hostile.py``: one forked process per input, under an address-space
limit and a timeout.  Each run must end in a one-line error or a container
that ``validate`` and ``verify`` accept: no traceback, internal error, signal,
hang, memory blow-up or "out of memory".

The default profile packs a few variants of each format (seconds);
``LODTOOL_TEST_PROFILE=long`` packs 150 of each.  ``LODTOOL_FUZZ_SEED`` picks
other variants (the seed is in pytest's header); a failure names the variant
to rerun, ``python -m tests.test_hostile_round3_io SEED COUNT`` prints the table.
"""

from __future__ import annotations

import os
import random
import struct
import sys
from collections import Counter

import numpy as np
import pytest

from . import hostile as H

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

LONG = os.environ.get("LODTOOL_TEST_PROFILE", "").lower() == "long"
SEED = int(os.environ.get("LODTOOL_FUZZ_SEED", "0"))
PER_FORMAT = 150 if LONG else 3
#: what each pack may allocate for what a file claims (the CLI's --max-memory)
MAX_MEMORY = "256M"
FORMATS = ("arrow", "arrows", "parquet", "pdtensor")

#: sizes a swapped word claims: negative, past 2**31 and 2**32, gigabytes, far past any memory
HOSTILE_INTS = (-1, -(1 << 40), (1 << 31) - 1, 1 << 31, 1 << 32, 3 << 30, 1 << 40, 1 << 62, (1 << 63) - 1)


def seed_files(folder: str) -> dict[str, list[str]]:
    """Valid inputs of each format: nested lists, element shapes, several batches / row groups, compression."""
    from lodtool import LoDTensor
    from lodtool.io.arrow import write_ipc
    from lodtool.io.pdtensor import write_pdtensor

    os.makedirs(folder, exist_ok=True)
    rng = np.random.default_rng(3)
    docs = LoDTensor(rng.integers(-50, 50, 40).astype(np.int32),
                     recursive_sequence_lengths=[[2, 1, 3, 1], [4, 0, 6, 10, 5, 3, 12]])
    frames = LoDTensor(rng.standard_normal((12, 2)).astype(np.float32), recursive_sequence_lengths=[[5, 0, 7]])
    parts = [docs.slice_level(0, 0, 2), docs.slice_level(0, 2, 4)]
    out = {"arrow": [], "arrows": [], "parquet": [], "pdtensor": []}
    for name, chunks, compression in (("docs", parts, None), ("frames", [frames], "lz4")):
        path = os.path.join(folder, f"{name}.arrow")
        with pa.OSFile(path, "wb") as f:
            if compression is None:
                write_ipc(chunks, f, name="t")
            else:  # what lodtool itself never writes: compressed buffers, each claiming its inflated size
                batch = pa.RecordBatch.from_arrays([pa.array(frames.to_nested(), pa.large_list(
                    pa.list_(pa.float32(), 2)))], names=["t"])
                with pa.ipc.new_file(f, batch.schema, options=pa.ipc.IpcWriteOptions(compression="lz4")) as w:
                    w.write_batch(batch)
        out["arrow"].append(path)
    path = os.path.join(folder, "docs.arrows")
    with pa.OSFile(path, "wb") as f:
        write_ipc(parts, f, name="t", stream=True)
    out["arrows"].append(path)
    views = pa.LargeListViewArray.from_arrays(pa.array([4, 0, 2], pa.int64()), pa.array([3, 4, 2], pa.int64()),
                                              pa.array(np.arange(8, dtype=np.int64)))
    path = os.path.join(folder, "views.arrows")
    with pa.OSFile(path, "wb") as f, pa.ipc.new_stream(f, pa.schema([("t", views.type)])) as w:
        w.write_batch(pa.RecordBatch.from_arrays([views], names=["t"]))
    out["arrows"].append(path)
    table = pa.table({"t": pa.array(docs.to_nested(), pa.large_list(pa.large_list(pa.int32())))})
    path = os.path.join(folder, "docs.parquet")
    pq.write_table(table, path, row_group_size=2, compression="zstd", use_dictionary=True)
    out["parquet"].append(path)
    path = os.path.join(folder, "frames.parquet")
    pq.write_table(pa.table({"t": pa.array(frames.to_nested(), pa.large_list(pa.list_(pa.float32(), 2)))}), path,
                   compression="snappy", use_dictionary=False)
    out["parquet"].append(path)
    for name, t in (("docs", docs), ("frames", frames)):
        path = os.path.join(folder, f"{name}.pdtensor")
        write_pdtensor(t, path)
        out["pdtensor"].append(path)
    return out


def _swap_word(rng: random.Random, blob: bytes) -> bytes:
    """One small int64 or int32 of ``blob`` (an offset, a length, a count) swapped for a hostile one."""
    data = bytearray(blob)
    width = rng.choice([8, 8, 4])
    fmt = "<q" if width == 8 else "<i"
    small = [i for i in range(0, len(data) - width + 1) if 0 <= struct.unpack_from(fmt, data, i)[0] <= 1 << 20]
    if not small:
        return bytes(data)
    at = rng.choice(small)
    value = rng.choice(HOSTILE_INTS)
    if width == 4:
        value = max(min(value, (1 << 31) - 1), -(1 << 31))
    struct.pack_into(fmt, data, at, value)
    return bytes(data)


def mangle(rng: random.Random, blob: bytes) -> bytes:
    """Swapped words, or the byte-level damage of the container fuzzer (flips, cuts, splices)."""
    if rng.random() < 0.6:
        for _ in range(rng.choice([1, 1, 2])):
            blob = _swap_word(rng, blob)
        return blob
    return H._mangle(rng, blob)


def make_variants(folder: str, per_format: int, seed: int) -> list[tuple[str, list[str]]]:
    """``per_format`` mangled files of each format: ``(name, pack arguments)``."""
    seeds = seed_files(os.path.join(folder, "seeds"))
    out = []
    for fmt in FORMATS:
        for i in range(per_format):
            rng = random.Random(f"{seed}/{fmt}/{i}")
            src = rng.choice(seeds[fmt])
            with open(src, "rb") as f:
                blob = mangle(rng, f.read())
            path = os.path.join(folder, f"{fmt}{i}{os.path.splitext(src)[1]}")
            with open(path, "wb") as f:
                f.write(blob)
            name = f"{fmt}/{i} ({os.path.basename(src)}, seed {seed})"
            out.append((name, ["pack", path, "--max-memory", MAX_MEMORY, "-o", "out.lod.h5"]))
    return out


@pytest.fixture(scope="session")
def numba_cache(request, tmp_path_factory) -> str:
    cache = getattr(request.config, "cache", None)
    return str(cache.mkdir("numba-boundscheck")) if cache is not None else str(tmp_path_factory.mktemp("numba"))


def test_the_seeds_pack_as_they_are(tmp_path):
    """A seed file is valid: what a variant breaks, it breaks in a file lodtool reads."""
    from lodtool.tasks import pack

    for fmt, paths in seed_files(str(tmp_path / "seeds")).items():
        for path in paths:
            result = pack([path], str(tmp_path / f"{os.path.basename(path)}.lod.h5"))
            assert result.sequences > 0, path


def test_mangled_table_and_paddle_files_keep_the_promises(tmp_path, numba_cache):
    print(f"\nfuzz seed {SEED} (LODTOOL_FUZZ_SEED), {PER_FORMAT} variant(s) per format")
    variants = make_variants(str(tmp_path / "inputs"), PER_FORMAT, SEED)
    results = H.run_input_variants(variants, str(tmp_path / "runs"), cache_dir=numba_cache)
    problems = H.check_pack_runs(results)
    assert not problems, "\n".join(problems)
    assert {name.split("/")[0] for name, _ in results} == set(FORMATS)


def test_mangled_files_through_the_library_are_located_errors(tmp_path):
    """The same variants read in process with a memory limit (what the CLI passes as --max-memory)."""
    from lodtool.errors import LodError
    from lodtool.io import get

    readers = {"arrow": "arrow", "arrows": "arrow", "parquet": "parquet", "pdtensor": "pdtensor"}
    variants = make_variants(str(tmp_path / "inputs"), PER_FORMAT * 2, SEED)
    outcomes = Counter()
    for name, argv in variants:
        fmt, path = name.split("/")[0], argv[1]
        options = {} if fmt == "pdtensor" else {"max_memory": 256 << 20}
        try:
            chunks = list(get(readers[fmt]).read([path], **options))
        except LodError as exc:
            message = str(exc)
            assert "\n" not in message and message.startswith(path), f"{name}: {message}"
            outcomes[type(exc).__name__] += 1
        else:
            assert all(c.n_rows == len(c.data) for c in chunks), name
            outcomes["read"] += 1
    print(f"\nfuzz seed {SEED}: {dict(outcomes)}")


def _table(seed: int, count: int) -> str:  # pragma: no cover - the long run's report
    import tempfile

    folder = tempfile.mkdtemp(prefix="lodtool-fuzz-io-")
    results = H.run_input_variants(make_variants(os.path.join(folder, "inputs"), count, seed),
                                   os.path.join(folder, "runs"), cache_dir=os.path.join(folder, "numba"))
    rows = Counter((name.split("/")[0], H.outcome(r)) for name, r in results)
    lines = [f"{fmt:10} {what:16} {n}" for (fmt, what), n in sorted(rows.items())]
    return "\n".join(lines + H.check_pack_runs(results))


if __name__ == "__main__":  # pragma: no cover
    print(_table(int(sys.argv[1]) if len(sys.argv) > 1 else 0, int(sys.argv[2]) if len(sys.argv) > 2 else 40))
