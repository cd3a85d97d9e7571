"""Killed and concurrent writers: a SIGKILLed pack leaves the old file or nothing; two writers, one winner.

Every trial runs ``lodtool pack`` (new target, overwrite, or ``--append``) as a
real process and SIGKILLs it after a random delay.  Afterwards the target is
absent (new target) or byte for byte the old file, or else the complete new
file, which validates and verifies; the only other thing in the folder may be
the killed writer's temp file, which readers refuse and the next write sweeps.

The default profile runs a few trials; ``LODTOOL_TEST_PROFILE=long`` runs 60.
``python -m tests.test_killed_writers [TRIALS]`` runs the trials alone and
prints the table used in ``docs/reliability.md``.
"""

from __future__ import annotations

import hashlib
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter

import numpy as np
import pytest

from lodtool.errors import LodFormatError
from lodtool.atomic import is_temp_path, sweep_stale_temps
from lodtool.container import load, open_file, validate_file, verify_file
from lodtool import load as lodtool_load  # a file or a sharded folder
from lodtool.container.shards import MANIFEST_NAME, read_manifest, validate_sharded

LONG = os.environ.get("LODTOOL_TEST_PROFILE", "").lower() == "long"
TRIALS = 60 if LONG else 8
MODES = ("new", "overwrite", "append")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def lodtool(*args: str, **kw) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "lodtool", *args], cwd=ROOT, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, **kw)


def write_jsonl(path: str, n: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    with open(path, "w") as f:
        for _ in range(n):
            lengths = rng.integers(1, 40, size=rng.integers(1, 8))
            f.write("[" + ",".join("[" + ",".join(map(str, rng.integers(0, 50_000, k))) + "]"
                                   for k in lengths) + "]\n")


def digest(path: str) -> str:
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def wait_for_temp(folder: str, proc: subprocess.Popen, timeout: float = 30.0) -> bool:
    """Poll until the writer's temp file appears (``False`` if the writer ended first)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        if any(is_temp_path(n) for n in os.listdir(folder)):
            return True
        time.sleep(0.0005)
    return False


class Fixture:
    """Inputs (the same tensor as JSON Lines and NPZ), the files they pack into, and write timings."""

    def __init__(self, folder: str):
        from lodtool.io.npy import write_npz
        from lodtool.tasks import pack

        self.folder = folder
        self.small = os.path.join(folder, "small.jsonl")
        write_jsonl(self.small, 300, 1)
        self.inputs = {"jsonl": os.path.join(folder, "big.jsonl"), "npz": os.path.join(folder, "big.npz")}
        write_jsonl(self.inputs["jsonl"], 8000, 2)
        self.old = os.path.join(folder, "old.lod.h5")
        new = os.path.join(folder, "new.lod.h5")
        twice = os.path.join(folder, "twice.lod.h5")
        pack([self.small], self.old)
        pack([self.inputs["jsonl"]], new)
        with open(self.inputs["npz"], "wb") as f:
            write_npz(load(new), f)
        shutil.copyfile(self.old, twice)
        pack([self.small], twice, append=True)
        self.old_digest = digest(self.old)
        self.expected = {"new": load(new), "overwrite": load(new), "append small": load(twice)}
        # how long a write takes, from start and from the temp file's appearance, per mode and input
        self.duration, self.write_window = {}, {}
        for mode in ("new", "append"):
            for fmt in self.inputs:
                trial = os.path.join(folder, f"calibrate-{mode}-{fmt}")
                os.makedirs(trial)
                target = os.path.join(trial, "t.lod.h5")
                if mode == "append":
                    shutil.copyfile(self.old, target)
                start = time.monotonic()
                proc = lodtool("pack", self.inputs[fmt], "-o", target, *(["--append"] if mode == "append" else ["--force"]))
                wait_for_temp(trial, proc)
                temp_seen = time.monotonic()
                assert proc.wait() == 0, proc.stderr.read()
                self.duration[mode, fmt] = time.monotonic() - start
                self.write_window[mode, fmt] = time.monotonic() - temp_seen
                if mode == "append":
                    self.expected["append"] = load(target)
        for fmt in self.inputs:
            self.duration["overwrite", fmt] = self.duration["new", fmt]
            self.write_window["overwrite", fmt] = self.write_window["new", fmt]


@pytest.fixture(scope="module")
def fixture(tmp_path_factory) -> Fixture:
    return Fixture(str(tmp_path_factory.mktemp("killed")))


def run_trial(fx: Fixture, mode: str, fmt: str, rng: random.Random, folder: str) -> str:
    """Kill one pack at a random moment; check the folder; return when the kill landed."""
    os.makedirs(folder)
    target = os.path.join(folder, "t.lod.h5")
    if mode != "new":
        shutil.copyfile(fx.old, target)
    proc = lodtool("pack", fx.inputs[fmt], "-o", target, *(["--append"] if mode == "append" else ["--force"]))
    if rng.random() < 1 / 3:  # anywhere in the run, start-up included
        time.sleep(rng.uniform(0, fx.duration[mode, fmt] * 1.1))
    else:  # while the temp file is being written, copied or committed
        wait_for_temp(folder, proc)
        time.sleep(rng.uniform(0, fx.write_window[mode, fmt] * 1.2))
    proc.send_signal(signal.SIGKILL)
    code = proc.wait()
    names = sorted(os.listdir(folder))
    leftovers = [os.path.join(folder, n) for n in names if n != "t.lod.h5"]
    assert all(is_temp_path(p) and os.path.basename(p).startswith(".t.lod.h5.lodtmp-") for p in leftovers), names
    for p in leftovers:  # a leftover is never taken for data ...
        with pytest.raises(LodFormatError, match="temp file of an unfinished lodtool write"):
            open_file(p)
    # ... and the next write to the target removes it (the dead writer's lock is gone)
    assert sorted(sweep_stale_temps(target, min_age=0)) == leftovers
    if not os.path.exists(target):
        assert mode == "new", "the old file vanished"
        return "before commit" + (" (temp file left)" if leftovers else "")
    if mode != "new" and digest(target) == fx.old_digest:
        return "before commit" + (" (temp file left)" if leftovers else "")
    assert code in (0, -signal.SIGKILL)
    assert load(target).equals(fx.expected[mode]), "the target is neither the old file nor the new one"
    report = validate_file(target)
    assert report.ok, report
    assert verify_file(target) == []
    return "after commit"


def run_trials(fx: Fixture, n: int, folder: str, seed: int = 0) -> Counter:
    rng = random.Random(seed)
    outcomes = Counter()
    for i in range(n):
        mode, fmt = MODES[i % len(MODES)], ("npz", "jsonl")[i % 2]
        outcomes[(mode, run_trial(fx, mode, fmt, rng, os.path.join(folder, f"trial{i}")))] += 1
    return outcomes


def test_killed_pack_and_append_leave_old_file_or_nothing(fixture, tmp_path):
    outcomes = run_trials(fixture, TRIALS, str(tmp_path), seed=int(os.environ.get("LODTOOL_FUZZ_SEED", "0")))
    assert sum(outcomes.values()) == TRIALS
    print("\nkilled writers:", dict(outcomes))


def test_two_writers_one_target(fixture, tmp_path):
    target = str(tmp_path / "t.lod.h5")
    small = load(fixture.old)
    for _ in range(1 if not LONG else 6):
        a = lodtool("pack", fixture.small, "-o", target, "--force")
        b = lodtool("pack", fixture.inputs["npz"], "-o", target, "--force")
        assert a.wait() == 0 and b.wait() == 0, (a.stderr.read(), b.stderr.read())
        result = load(target)
        assert result.equals(small) or result.equals(fixture.expected["new"])
        assert validate_file(target).ok and verify_file(target) == []
        assert os.listdir(tmp_path) == ["t.lod.h5"]


def test_two_appends_one_target_keep_both(fixture, tmp_path):
    target = str(tmp_path / "t.lod.h5")
    shutil.copyfile(fixture.old, target)
    a = lodtool("pack", fixture.small, "-o", target, "--append")
    b = lodtool("pack", fixture.inputs["npz"], "-o", target, "--append")
    assert a.wait() == 0 and b.wait() == 0, (a.stderr.read(), b.stderr.read())
    # the second waits on the first's lock on the target, then appends to its result: no rows lost
    result = load(target).to_nested()
    old = load(fixture.old).to_nested()
    small = fixture.expected["append small"].to_nested()[len(old):]
    big = fixture.expected["append"].to_nested()[len(old):]
    assert result in (old + small + big, old + big + small)
    assert validate_file(target).ok and verify_file(target) == []
    assert os.listdir(tmp_path) == ["t.lod.h5"]


def test_readers_during_writes_see_old_or_new(fixture, tmp_path):
    target = str(tmp_path / "t.lod.h5")
    shutil.copyfile(fixture.old, target)
    versions = [load(fixture.old), fixture.expected["new"]]
    rounds = 2 if not LONG else 10
    done = threading.Event()
    failures = []

    def writer():
        try:
            for i in range(rounds):
                proc = lodtool("pack", fixture.inputs["npz"] if i % 2 == 0 else fixture.small, "-o", target, "--force")
                if proc.wait() != 0:
                    failures.append(proc.stderr.read())
        finally:
            done.set()

    thread = threading.Thread(target=writer)
    thread.start()
    reads = 0
    while not done.is_set():
        t = load(target)  # the file is always there, and always one complete version
        assert any(t.equals(v) for v in versions)
        reads += 1
        if reads % 20 == 1:  # now and then, a reader of its own: the CLI
            proc = subprocess.run([sys.executable, "-m", "lodtool", "-q", "validate", target], cwd=ROOT,
                                  capture_output=True, text=True)
            assert proc.returncode == 0, proc.stdout + proc.stderr
    thread.join()
    assert not failures
    assert reads > rounds
    assert os.listdir(tmp_path) == ["t.lod.h5"]


def test_sweep_leaves_live_writers_alone(tmp_path):
    """The lock that marks a live writer's temp file keeps a concurrent sweep away from it."""
    from lodtool.atomic import AtomicPath

    target = str(tmp_path / "x.lod.h5")
    live = AtomicPath(target)
    old = os.path.join(tmp_path, ".x.lod.h5.lodtmp-0123456789ab")
    with open(old, "wb") as f:
        f.write(b"left by a killed writer")
    os.utime(old, (time.time() - 3600, time.time() - 3600))
    young = os.path.join(tmp_path, ".x.lod.h5.lodtmp-ba9876543210")
    with open(young, "wb") as f:
        f.write(b"a writer that has not locked yet")
    other = os.path.join(tmp_path, ".y.lod.h5.lodtmp-0123456789ab")
    shutil.copyfile(old, other)
    os.utime(live.tmp, (time.time() - 3600, time.time() - 3600))
    assert sweep_stale_temps(target) == [old]
    assert os.path.exists(live.tmp) and os.path.exists(young) and os.path.exists(other)
    with open(live.tmp, "wb") as f:
        f.write(b"done")
    live.commit()
    assert open(target, "rb").read() == b"done"


# -- SIGINT and SIGTERM at the commit point, through the CLI ---------------------------------------------------
SIGNAL_TRIALS = 10 if LONG else 1


def wait_for(predicate, proc: subprocess.Popen, timeout: float = 60.0) -> bool:
    """Poll ``predicate`` until it holds (``False`` if the process ended first, or after ``timeout`` s)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        if predicate():
            return True
        time.sleep(0.0005)
    return False


def manifest_id(folder: str):
    try:
        info = os.stat(os.path.join(folder, MANIFEST_NAME))
    except FileNotFoundError:
        return None
    return info.st_ino, info.st_mtime_ns


def folder_state(folder: str, versions: dict) -> str:
    """Which version the folder holds (``absent`` when it is gone); fails on anything else."""
    if not os.path.exists(folder):
        return "absent"
    names = sorted(os.listdir(folder))
    named = sorted([s.file for s in read_manifest(folder).shards] + [MANIFEST_NAME])
    assert names == named, f"files no manifest names, or temp files: {sorted(set(names) - set(named))}"
    assert validate_sharded(folder).ok
    t = lodtool_load(folder)
    (state,) = [k for k, v in versions.items() if t.equals(v)] or ["neither old nor new"]
    return state


@pytest.fixture(scope="module")
def signal_inputs(tmp_path_factory):
    from lodtool.tasks import pack

    d = tmp_path_factory.mktemp("signals")
    small, big = str(d / "small.jsonl"), str(d / "big.jsonl")
    write_jsonl(small, 200, 3)
    write_jsonl(big, 1500, 4)
    pack([small], str(d / "small.lod.h5"))
    pack([big], str(d / "big.lod.h5"))
    return {"small": small, "big": big, "old": load(str(d / "small.lod.h5")), "big_t": load(str(d / "big.lod.h5"))}


def test_ctrl_c_as_a_sharded_append_commits_leaves_the_old_folder_or_the_new_one(signal_inputs, tmp_path):
    from lodtool.container.shards import ShardWriter, concat_tensors

    old, new = signal_inputs["old"], concat_tensors([signal_inputs["old"], signal_inputs["big_t"]])
    seen = Counter()
    for i in range(SIGNAL_TRIALS * 2):
        folder = str(tmp_path / f"f{i}")
        with ShardWriter(folder, shard_size="64KB") as w:
            w.write(old)
        before = manifest_id(folder)
        proc = lodtool("pack", signal_inputs["big"], "-o", folder, "--append", "--shard-size", "64KB")
        if i % 2 == 0:  # the moment the new manifest is in place
            assert wait_for(lambda: manifest_id(folder) != before, proc), proc.stderr.read()
        else:  # while the new shards are being written
            assert wait_for(lambda: len(os.listdir(folder)) > len(read_manifest(folder).shards) + 2, proc)
        proc.send_signal(signal.SIGINT)
        code = proc.wait(timeout=60)
        assert code >= 0, "the process was killed by the signal instead of finishing its cleanup"
        state = folder_state(folder, {"old": old, "new": new})
        assert state == ("new" if i % 2 == 0 else "old"), state
        seen[state] += 1
    print("\nsharded append, Ctrl-C:", dict(seen))


def test_ctrl_c_while_packing_small_shards_leaves_no_shard_and_no_folder(signal_inputs, tmp_path):
    seen = Counter()
    for i in range(SIGNAL_TRIALS):
        folder = str(tmp_path / f"f{i}")
        proc = lodtool("pack", signal_inputs["big"], "-o", f"{folder}/", "--shard-size", "1KB")
        assert wait_for(lambda: os.path.isdir(folder) and len(os.listdir(folder)) > 2 + 3 * i, proc)
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=60) >= 0
        state = folder_state(folder, {"new": signal_inputs["big_t"]})
        assert state == "absent", state
        seen[state] += 1
    print("\n1KB shards, Ctrl-C:", dict(seen))


def test_sigterm_during_a_write_removes_its_temp_file(signal_inputs, tmp_path):
    for i in range(SIGNAL_TRIALS):
        folder = tmp_path / f"t{i}"
        folder.mkdir()
        target = str(folder / "t.lod.h5")
        proc = lodtool("pack", signal_inputs["big"], "-o", target)
        assert wait_for_temp(str(folder), proc)
        time.sleep(0.01 * i)
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=60)
        names = os.listdir(folder)
        assert not any(is_temp_path(n) for n in names), names  # removed at once, not left for the next write
        if names:  # the signal came after the commit: the whole new file
            assert names == ["t.lod.h5"] and load(target).equals(signal_inputs["big_t"])
        else:
            assert code != 0


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 60
    folder = tempfile.mkdtemp(prefix="lodtool-killed-")
    try:
        fx = Fixture(folder)
        start = time.monotonic()
        outcomes = run_trials(fx, n, os.path.join(folder, "trials"), seed=1)
        print(f"{n} trials in {time.monotonic() - start:.0f} s; uninterrupted runs took "
              + ", ".join(f"{m} {f} {d:.2f} s" for (m, f), d in fx.duration.items()))
        print("| mode | killed before commit | of which left a temp file | killed after commit | data lost |")
        print("|---|---:|---:|---:|---:|")
        for mode in MODES:
            before = sum(c for (m, o), c in outcomes.items() if m == mode and o.startswith("before"))
            temp = outcomes[(mode, "before commit (temp file left)")]
            print(f"| {mode} | {before} | {temp} | {outcomes[(mode, 'after commit')]} | 0 |")
    finally:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
