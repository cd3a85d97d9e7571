"""Corrupted containers: every command over every variant, as real processes, with bounds-checked kernels.

The variants and the driver are in ``tests/hostile.py``.  Each run must end with
exit 0, 1 or 2 and at most one line on stderr: no traceback, no signal, no hang
past the timeout, no memory blow-up.  Exit 0 is fine only where the damage
allows it: a variant records which commands must notice it, and a command
that succeeds with values unlike the base file's must have been caught by
``verify``.

The default profile tries one variant of every class, each with ``verify``
and two other commands (about 100 runs), and packs 12 mangled JSON / JSON Lines /
NPY / NPZ inputs.  ``LODTOOL_TEST_PROFILE=long`` runs every command over 12
variants of every class (about 6,000 runs) and packs 400 mangled inputs;
``LODTOOL_FUZZ_SEED`` picks other variants.  ``python -m tests.hostile report``
prints the table of outcomes per class.
"""

from __future__ import annotations

import itertools
import os
import random
import subprocess
import sys

import pytest

from . import hostile as H

LONG = os.environ.get("LODTOOL_TEST_PROFILE", "").lower() == "long"
SEED = int(os.environ.get("LODTOOL_FUZZ_SEED", "0"))
PER_CLASS = 12 if LONG else 1
INPUTS = 400 if LONG else 12


def sampled_commands(variants: list[H.Variant], bases: dict[str, H.Base], seed: int):
    """``verify`` plus two other commands per variant, every command in turn; the bases run what is compared."""
    others = [c for c in H.COMMANDS if c != "verify"]
    random.Random(seed).shuffle(others)
    turn = itertools.cycle(others)
    chosen = {v.name: ["verify", next(turn), next(turn)] for v in variants}
    for b in bases.values():
        used = {c for v in variants if v.base == b.name for c in chosen[v.name] if c in H.VALUE_COMMANDS}
        chosen[f"base/{b.name}"] = ["validate", "verify", *sorted(used)]
    return lambda v: chosen[v.name]


@pytest.fixture(scope="session")
def numba_cache(request, tmp_path_factory) -> str:
    """Where the bounds-checked kernels are cached: kept between runs in pytest's cache when there is one."""
    cache = getattr(request.config, "cache", None)
    return str(cache.mkdir("numba-boundscheck")) if cache is not None else str(tmp_path_factory.mktemp("numba"))


@pytest.fixture(scope="module")
def matrix(tmp_path_factory, numba_cache):
    folder = str(tmp_path_factory.mktemp("hostile"))
    bases = H.make_bases(folder)
    variants = H.make_variants(bases, folder, PER_CLASS, SEED)
    commands = H.COMMANDS if LONG else sampled_commands(variants, bases, SEED)
    runs = H.run_matrix(bases, variants, commands, os.path.join(folder, "runs"), cache_dir=numba_cache)
    return bases, variants, runs


def test_every_run_keeps_the_promises(matrix):
    _, variants, runs = matrix
    problems = H.check(runs, variants)
    assert not problems, "\n".join(problems)


def test_every_class_and_command_was_tried(matrix):
    _, variants, runs = matrix
    assert {v.klass for v in variants} == set(H.MUTATORS)
    assert {r.command for r in runs if r.klass != "base"} == set(H.COMMANDS)
    # most variants must be refused by something: a suite where everything passes tests nothing
    refused = {r.variant for r in runs if r.exit not in (0, None)}
    assert len(refused) >= 0.6 * len(variants)
    print("\n" + H.format_table(H.summary(runs, variants), []))


def test_the_driver_sees_what_a_real_process_does(matrix, numba_cache):
    """The forked children behave as ``python -m lodtool`` started from scratch."""
    bases, variants, runs = matrix
    rng = random.Random(SEED)
    sample = rng.sample([r for r in runs if r.klass != "base" and r.command != "append"], 4)
    for run in sample:
        folder = os.path.join(os.path.dirname(variants[0].path), "real", str(sample.index(run)))
        os.makedirs(folder)
        proc = subprocess.run([sys.executable, "-m", "lodtool", *run.argv], cwd=folder, capture_output=True,
                              text=True, env=H.driver_env(numba_cache), timeout=H.TIMEOUT)
        assert (proc.returncode, proc.stderr.strip()) == (run.exit, run.stderr.strip()), run.argv


def test_pack_of_mangled_inputs(tmp_path, numba_cache):
    """Flipped, cut, spliced JSON / JSON Lines / NPY / NPZ: a one-line error, or a valid container."""
    variants = H.make_input_variants(str(tmp_path / "inputs"), INPUTS, SEED)
    results = H.run_input_variants(variants, str(tmp_path / "runs"), cache_dir=numba_cache)
    problems = H.check_pack_runs(results)
    assert not problems, "\n".join(problems)
    assert {name.split("/")[0] for name, _ in results} == {"json", "jsonl", "npy", "npz"}


def test_the_judge_notices_broken_promises(tmp_path, numba_cache):
    canaries = {"segfault": "signal", "hang": "hang", "traceback": "traceback", "two-lines": "multi-line-error",
                "exit-3": "bad-exit"}
    jobs = [H.job(["__canary__", kind], str(tmp_path / kind), timeout=1.5) for kind in canaries]
    results = H.run_jobs(jobs, str(tmp_path), cache_dir=numba_cache)
    assert [H.outcome(r) for r in results] == list(canaries.values())
