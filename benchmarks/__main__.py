"""``python -m benchmarks``: the whole suite (see benchmarks/run.py)."""

from benchmarks.run import main

raise SystemExit(main())
