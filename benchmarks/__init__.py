"""lodtool's benchmark suite: ``python -m benchmarks --size full`` writes ``docs/benchmarks.md`` (see run.py)."""
