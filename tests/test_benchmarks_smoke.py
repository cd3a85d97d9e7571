"""Smoke test of the benchmark suite: ``python -m benchmarks --size tiny`` runs every section and reports it.

The default profile runs the quick sections; ``LODTOOL_TEST_PROFILE=long`` (and ``.ci/run``) runs the heavy
ones too.

The figures of a tiny run mean nothing; this checks that every benchmark still
runs against the current code, that the report has every section and target
row, that an existing ``## GPU`` section survives verbatim, and that the run
never touches ``docs/benchmarks.md``.  The real numbers come from
``python -m benchmarks --size full`` (see docs/benchmarks.md).
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

GPU = "## GPU\n\nKept verbatim: | a | table | from the GPU run |\n"

#: each section key (benchmarks/run.py), its report heading and the target rows it must report
SECTIONS = {
    "ingest": ("## Ingest: JSON Lines → data + LoD (issue 5)", [
        "`lodtool pack` JSONL → container, `--compression none`, ≥ 2× awkward `from_json` with a schema",
        "`lodtool pack` with the default compression (shuffle + deflate), whole process",
        "default compression: file no larger than lzf's",
        "`unpack --to jsonl` at least orjson's speed"]),
    "ops": ("## Sequence operators in memory (issue 4)", [
        "`sequence_expand` and `sequence_pad` ≥ 1.5× the NumPy reference, every case",
        "`sequence_pool` sum ≥ 1× `np.add.reduceat`"]),
    "slice": ("## Branches from disk (issue 3)", [
        "offsets read per branch ≤ 64 KiB",
        "`f[name].branch(i)` latency ≤ 3× the h5py floor",
        "`lodtool slice FILE i --to jsonl` process ≤ 1.5× `python -c \"import numpy, h5py\"`"]),
    "random": ("## Random access for training (issue 28)", [
        "random `branch(i)`, memory-mappable container, int32, warm",
        "`lodtool.batches(output=\"varlen\")` sorted plan, tokens/s, uint16",
        "`lodtool.batches(output=\"jagged-numpy\")` sorted plan, tokens/s, uint16"]),
    "startup": ("## CLI start-up (issue 5)", [
        "on 10k rows ≤ 1.5×",
        "`lodtool inspect` start-up ≤ 1.5×",
        "`lodtool validate` start-up ≤ 1.5×",
        "the second run pays no Numba compile"]),
    "validate": ("## Validation speed (issue 5)", ["full offsets validation ≥ 0.8× a read-only pass"]),
    "memory": ("## Bounded memory: pack (issue 5)", ["`lodtool pack` peak RSS below 1 GB for both inputs"]),
    "ooc": ("## Out-of-core operators (issue 5)", [
        "`lodtool pool` on a file ≥ 2× the RSS cap: flat memory, under the cap",
        "`lodtool pool` out-of-core throughput ≤ 1.5× slower than in memory"]),
    "newops": ("## More sequence operators (issue 17)", []),
    "batch": ("## Training batches (issue 20)", []),
    "interop": ("## Interop: conversions and Parquet (issue 18)", [
        "`lodtool pack x.parquet` ≥ 1× `pq.read_table` + `from_arrow`",
        "`lodtool unpack --to parquet` ≤ 1.2× `pq.write_table`"]),
    "toolkit": ("## Toolkit operators in memory (issue 17)", [
        "`sequence_conv` kernel ≥ 1.5× its NumPy reference",
        "`im2sequence` ≥ 2× Paddle's op"]),
    "dask": ("## lodtool on Dask (issue 19)", []),
    "llm": ("## Token datasets of LLM training (issue 29)", [
        "Megatron → container → Megatron ≥ 0.5× the speed of `cp` + `sync`, byte-identical",
        "`validate` of a Megatron dataset in place ≥ a NumPy pass over its .idx arrays"]),
    "text": ("## Text: pack --tokenizer and unpack --detokenize (issue 30)", [
        "`lodtool pack --tokenizer` JSONL → container (default compression) ≥ 1× the floor",
        "`lodtool pack --tokenizer` peak RSS flat in input size"]),
    "remote": ("## Object storage (issue 31)", []),
}
#: the sections the default profile runs (about 30 s on 2 cores); the long profile runs the others, and
#: .ci/run runs them too
QUICK = ["slice", "random", "llm", "startup", "validate", "ooc", "newops", "toolkit"]
HEAVY = [k for k in SECTIONS if k not in QUICK]


def _digest(path: Path) -> str | None:
    return hashlib.sha256(path.read_bytes()).hexdigest() if path.exists() else None


def _run_sections(tmp_path, keys: list[str]) -> None:
    docs = ROOT / "docs" / "benchmarks.md"
    before = _digest(docs)
    out = tmp_path / "benchmarks.md"
    out.write_text("# an older report\n\n## Targets\n\nold\n\n" + GPU, encoding="utf-8")
    r = subprocess.run([sys.executable, "-m", "benchmarks", "--size", "tiny", "--output", str(out),
                        "--tmpdir", str(tmp_path), "--only", ",".join(keys)], cwd=ROOT, capture_output=True,
                       text=True, timeout=900, check=False)
    assert r.returncode == 0, r.stderr[-4000:]
    text = out.read_text(encoding="utf-8")
    for key in keys:
        heading, rows = SECTIONS[key]
        assert f"\n{heading}" in text, heading
        for row in rows:
            assert row in text, row
    assert text.endswith(GPU)
    assert [line for line in text.splitlines() if line.startswith("## GPU")] == ["## GPU"]
    assert "old" not in text.split("## Targets", 1)[1]
    assert "python -m benchmarks --size full" in text
    assert "Load average" in text or "load average" in text
    assert _digest(docs) == before, "the smoke run must not write docs/benchmarks.md"
    assert not [p for p in tmp_path.iterdir() if p.name.startswith("lodtool-bench-")], "temp data left behind"


def test_the_quick_sections_run_at_tiny_size(tmp_path):
    _run_sections(tmp_path, QUICK)


@pytest.mark.slow
def test_the_heavy_sections_run_at_tiny_size(tmp_path):
    _run_sections(tmp_path, HEAVY)


def test_every_section_is_smoke_tested():
    from benchmarks.run import SECTIONS as RUN_SECTIONS

    assert sorted(QUICK + HEAVY) == sorted(RUN_SECTIONS)
