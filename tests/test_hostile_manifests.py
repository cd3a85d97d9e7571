"""Hostile manifests (issue 33): a sharded folder's ``lodtool.json`` mangled, read by the CLI as real processes.

A valid folder of two shards gets its manifest changed: one value anywhere in
the document swapped for a hostile one (2**63, -1, 10**400, 1e30, deep
nesting, long strings, paths out of the folder, dtypes lodtool does not store:
float128, datetime, object, subarray), a key deleted or added, or the text's
bytes flipped, cut or repeated.  ``validate``, ``inspect`` and ``unpack`` then
run over each variant through the driver of ``tests/hostile.py`` (a forked
process each, under an address-space limit and a timeout): each must end in a
result or a one-line error, never a traceback, internal error, signal, hang or
memory blow-up; and ``read_manifest`` in process raises a one-line LodError
naming the manifest, or parses it.

``LODTOOL_FUZZ_SEED`` picks other variants (the seed is in pytest's header);
``LODTOOL_TEST_PROFILE=long`` runs 100 variants instead of a few.
"""

from __future__ import annotations

import json
import os
import random
import shutil

import numpy as np
import pytest

from . import hostile as H

LONG = os.environ.get("LODTOOL_TEST_PROFILE", "").lower() == "long"
SEED = int(os.environ.get("LODTOOL_FUZZ_SEED", "0"))
VARIANTS = 100 if LONG else 6
COMMANDS = (["validate"], ["inspect", "--json"], ["unpack", "--to", "jsonl"])

#: a value nested deeper than Python's recursion limit (spliced into the text: json.dumps cannot write it)
DEEP = "<nested 2,000 deep>"
#: what a swapped value becomes: sizes past any memory, numbers JSON holds but int64 does not, wrong types,
#: strings that are paths out of the folder or dtypes lodtool refuses
HOSTILE_VALUES = (2 ** 63, 2 ** 62, -1, -(2 ** 63) - 1, 10 ** 400, 1e30, 0.5, 0, True, None, "", "a" * 100_000,
                  [], {}, DEEP, [2 ** 40, 2 ** 40], [1e30],
                  "../outside.lod.h5", "/etc/passwd", "part-00000.lod.h5", "lodtool.json", ".",
                  "<f16", "<M8[ns]", "|O", "(2,)<i4", "|V8", "<U4", "|S0", "float128", "xxh3_64:00", "9.9",
                  "lodtool-sharded")


def seed_folder(folder: str) -> str:
    """A valid sharded folder of two shards (two levels, int32 rows)."""
    from lodtool import LoDTensor
    from lodtool.container.shards import ShardWriter

    with ShardWriter(folder, shard_size=256) as w:
        w.write(LoDTensor(np.arange(60, dtype=np.int32), [[0, 2, 3, 5], [0, 10, 20, 30, 40, 60]]))
    return folder


def _paths(node, at=()) -> list[tuple]:
    """Every place in a JSON document: the path of keys and indices to it."""
    out = [at]
    if isinstance(node, dict):
        for key, value in node.items():
            out += _paths(value, at + (key,))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            out += _paths(value, at + (i,))
    return out


def mangle_manifest(rng: random.Random, text: str) -> str:
    """One hostile change to a manifest's text."""
    doc = json.loads(text)
    how = rng.choice(("swap", "swap", "swap", "delete", "add", "duplicate", "bytes"))
    if how == "bytes":
        blob = bytearray(text.encode())
        at = rng.randrange(len(blob))
        edit = rng.choice(("flip", "cut", "repeat"))
        if edit == "flip":
            blob[at] ^= 1 << rng.randrange(8)
        elif edit == "cut":
            del blob[at:]
        else:
            blob[at:at] = blob[at:at + rng.randrange(1, 64)] * rng.randrange(2, 50)
        return blob.decode("utf-8", "replace")
    place = rng.choice(_paths(doc)[1:])
    parent = doc
    for key in place[:-1]:
        parent = parent[key]
    if how == "delete":
        del parent[place[-1]]
    elif how == "add" and isinstance(parent, dict):
        parent["x" + str(rng.randrange(100))] = rng.choice(HOSTILE_VALUES)
    elif how == "add":  # a value added to a list: a shard or a count too many
        parent.insert(place[-1], rng.choice(HOSTILE_VALUES))
    elif how == "duplicate" and isinstance(parent, list):
        parent.append(parent[place[-1]])
    else:
        parent[place[-1]] = rng.choice(HOSTILE_VALUES)
    return json.dumps(doc).replace(json.dumps(DEEP), "[" * 2000 + "1" + "]" * 2000)


def make_variants(folder: str, count: int, seed: int) -> list[tuple[str, str]]:
    """``count`` folders of the seed's shards under a mangled manifest: ``(name, folder)``."""
    base = seed_folder(os.path.join(folder, "seed"))
    with open(os.path.join(base, "lodtool.json")) as f:
        text = f.read()
    out = []
    for i in range(count):
        rng = random.Random(f"{seed}/manifest/{i}")
        variant = os.path.join(folder, f"v{i}")
        shutil.copytree(base, variant)
        with open(os.path.join(variant, "lodtool.json"), "w", encoding="utf-8") as f:
            f.write(mangle_manifest(rng, text))
        out.append((f"manifest/{i} (seed {seed})", variant))
    return out


@pytest.fixture(scope="session")
def numba_cache(request, tmp_path_factory) -> str:
    cache = getattr(request.config, "cache", None)
    return str(cache.mkdir("numba-boundscheck")) if cache is not None else str(tmp_path_factory.mktemp("numba"))


def test_the_seed_folder_reads_as_it_is(tmp_path):
    from lodtool import load

    assert load(seed_folder(str(tmp_path / "s"))).to_nested()[2] == [list(range(30, 40)), list(range(40, 60))]


def test_mangled_manifests_keep_the_promises(tmp_path, numba_cache):
    print(f"\nfuzz seed {SEED} (LODTOOL_FUZZ_SEED), {VARIANTS} manifest variant(s)")
    variants = make_variants(str(tmp_path / "inputs"), VARIANTS, SEED)
    jobs = [H.job(command + [folder], str(tmp_path / "runs" / f"{i}-{command[0]}"))
            for i, (_, folder) in enumerate(variants) for command in COMMANDS]
    results = H.run_jobs(jobs, str(tmp_path / "runs"), numba_cache)
    problems = []
    names = [f"{name} {command[0]}" for name, _ in variants for command in COMMANDS]
    for name, r in zip(names, results):
        what = H.outcome(r)
        if what in H.BAD_OUTCOMES:
            problems.append(f"{name}: {what} (exit {r['exit']}): {r['stderr'].strip()[-600:]}")
    assert not problems, "\n".join(problems)


def test_mangled_manifests_through_the_library_are_one_line_errors(tmp_path):
    from lodtool.container.shards import read_manifest
    from lodtool.errors import LodError

    for name, folder in make_variants(str(tmp_path / "inputs"), VARIANTS * 4, SEED):
        try:
            read_manifest(folder)
        except LodError as exc:
            message = str(exc)
            assert "\n" not in message and "lodtool.json" in message, f"{name}: {message}"
