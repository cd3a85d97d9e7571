"""Hostile files, round 2 (issue 13): files lodtool never wrote, built here with h5py's own API.

Each class of attack is one test class, with a fixture that builds the hostile
file from tiny real data.  Commands run in process through click's runner where
the fix makes them fail fast; where the old behaviour was a hang, a crash or a
memory blow-up, the run is a real process with a timeout and an address-space
limit, so a regression fails the test instead of killing the suite.
"""

from __future__ import annotations

import os
import subprocess
import sys

import h5py
import numpy as np
import pytest
import xxhash
from click.testing import CliRunner

from lodtool import LoDTensor
from lodtool.cli.main import cli
from lodtool.container import save

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def digest(values: np.ndarray) -> str:
    """The checksum attribute lodtool would record for ``values``."""
    return "xxh3_64:" + xxhash.xxh3_64_hexdigest(np.ascontiguousarray(values).tobytes())


def replace_dataset(path: str, member: str, values: np.ndarray | None = None, **create) -> None:
    """Swap ``member`` for a dataset made with ``create_dataset(**create)``; record a checksum of ``values``."""
    with h5py.File(path, "r+") as f:
        del f[member]
        parent, _, name = member.rpartition("/")
        ds = f[parent].create_dataset(name, **create)
        if values is not None:
            ds.attrs["checksum"] = digest(values)


def run_cli(*args: str, input: str | None = None):
    return CliRunner().invoke(cli, list(args), input=input)


def run_process(args: list[str], timeout: float = 20.0, address_space: int | None = None,
                cwd: str | None = None) -> subprocess.CompletedProcess:
    """``python -m lodtool ARGS`` as a real process, optionally under an address-space limit."""
    preexec = None
    if address_space is not None:
        import resource

        def preexec():
            resource.setrlimit(resource.RLIMIT_AS, (address_space, address_space))
    env = {**os.environ, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")}
    return subprocess.run([sys.executable, "-m", "lodtool", *args], capture_output=True, text=True,
                          timeout=timeout, preexec_fn=preexec, env=env, cwd=cwd)


def one_line_error(result) -> str:
    """The single stderr line of a failed run (asserting there is exactly one)."""
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("lodtool: error: "), result.stderr
    return lines[0]


# every command that reads a tensor's values or offsets, as argument lists after the file name
READERS = {
    "unpack": ["unpack", "{f}", "--to", "json", "-o", "-"],
    "head": ["head", "{f}", "--to", "json", "-o", "-"],
    "tail": ["tail", "{f}", "--to", "json", "-o", "-"],
    "slice": ["slice", "{f}", "0", "--to", "json", "-o", "-"],
    "tree": ["tree", "{f}"],
    "inspect": ["inspect", "{f}"],
    "pad": ["pad", "{f}", "-o", "{out}.npz"],
    "pool": ["pool", "{f}", "-o", "{out}.h5"],
    "reverse": ["reverse", "{f}", "-o", "{out}.h5"],
    "pack-plan": ["pack-plan", "{f}"],
}


def reader_args(command: str, path: str, out: str) -> list[str]:
    return [a.format(f=path, out=out) for a in READERS[command]]


# -- 1. external raw storage and virtual datasets ------------------------------------------------------------------
SECRET = b"TOPSECRETKEY1234"


@pytest.fixture
def secret(tmp_path) -> str:
    p = tmp_path / "secret.bin"
    p.write_bytes(SECRET)
    return str(p)


def external_container(folder, secret: str, member: str) -> str:
    """A valid-looking container whose ``member`` keeps its bytes in the local file ``secret``."""
    path = str(folder / f"external-{member.replace('/', '-')}.lod.h5")
    if member.endswith("data"):
        save(path, LoDTensor(np.zeros(16, dtype=np.uint8), [[0, 6, 16]]))
        values = np.frombuffer(SECRET, dtype=np.uint8)
        replace_dataset(path, member, values, shape=(16,), dtype="u1", external=[(secret, 0, 16)])
    else:  # offsets [0, x, 16] whose middle entry is the secret's bytes
        save(path, LoDTensor(np.zeros(16, dtype=np.uint8), [[0, 6, 16]]))
        values = np.frombuffer(SECRET, dtype="<i8")
        replace_dataset(path, member, values, shape=(2,), dtype="<i8", external=[(secret, 0, 16)])
    return path


class TestExternalStorage:
    """Issue 13.1: a dataset whose raw bytes live in another local file is refused before any byte is read."""

    @pytest.mark.parametrize("command", sorted(READERS))
    def test_no_reader_prints_or_uses_the_other_file(self, tmp_path, secret, command):
        path = external_container(tmp_path, secret, "tensor/data")
        result = run_cli(*reader_args(command, path, str(tmp_path / "out")))
        assert result.exit_code == 1, result.output
        assert "TOPSECRET" not in result.output and "84, 79, 80" not in result.output
        assert "external storage" in one_line_error(result)
        assert not any(p.name.startswith("out") for p in tmp_path.iterdir())

    def test_external_offsets_leak_nothing_into_messages(self, tmp_path, secret):
        path = external_container(tmp_path, secret, "tensor/lod/0")
        for command in ("head", "tree", "unpack", "inspect"):
            result = run_cli(*reader_args(command, path, str(tmp_path / "out")))
            assert result.exit_code == 1
            line = one_line_error(result)
            assert "external storage" in line and str(int.from_bytes(SECRET[:8], "little")) not in line

    @pytest.mark.parametrize("member", ["tensor/data", "tensor/lod/0"])
    def test_validate_and_verify_refuse_it(self, tmp_path, secret, member):
        path = external_container(tmp_path, secret, member)
        validate = run_cli("validate", path)
        assert validate.exit_code == 1 and "external storage" in validate.output
        verify = run_cli("verify", path)
        # verify's exit 2 is "unreadable", its 1 "a mismatch": either way never ok, and it says why
        assert verify.exit_code in (1, 2) and "external storage" in verify.output + verify.stderr

    def test_a_fifo_or_an_endless_device_is_never_opened(self, tmp_path):
        fifo = str(tmp_path / "fifo")
        os.mkfifo(fifo)
        path = str(tmp_path / "fifo.lod.h5")
        save(path, LoDTensor(np.zeros(16, dtype=np.uint8), [[0, 6, 16]]))
        replace_dataset(path, "tensor/data", np.zeros(16, np.uint8), shape=(16,), dtype="u1",
                        external=[(fifo, 0, 16)])
        huge = str(tmp_path / "zero.lod.h5")
        save(huge, LoDTensor(np.zeros(16, dtype=np.uint8), [[0, 6, 16]]))
        replace_dataset(huge, "tensor/data", None, shape=(1 << 40,), dtype="u1",
                        external=[("/dev/zero", 0, 1 << 40)])
        for args in (["head", path], ["verify", huge]):  # a hang, and a 1 TiB read, before the fix
            proc = run_process(args, timeout=30)
            assert proc.returncode in (1, 2) and "external storage" in proc.stdout + proc.stderr, (args, proc)

    def test_virtual_datasets_are_refused(self, tmp_path):
        source = str(tmp_path / "source.h5")
        with h5py.File(source, "w") as f:
            f["x"] = np.arange(16, dtype=np.uint8)
        path = str(tmp_path / "vds.lod.h5")
        save(path, LoDTensor(np.zeros(16, dtype=np.uint8), [[0, 6, 16]]))
        layout = h5py.VirtualLayout(shape=(16,), dtype="u1")
        layout[:] = h5py.VirtualSource(source, "x", shape=(16,))
        with h5py.File(path, "r+") as f:
            del f["tensor/data"]
            f["tensor"].create_virtual_dataset("data", layout)
        for args in (["head", path], ["validate", path], ["verify", path]):
            result = run_cli(*args)
            assert result.exit_code in (1, 2) and "virtual dataset" in result.output + result.stderr, args


# -- 4. and 5. chunk bombs and one-entry chunks -------------------------------------------------------------------
#: runs lodtool in a child that writes its own peak RSS (VmHWM, KiB) to the file named by argv[1] on exit;
#: ru_maxrss would not do: it keeps the forking parent's (pytest's) figure across exec
_MEASURED = ("import atexit, runpy, sys; out = sys.argv.pop(1); "
             "hwm = lambda: [l.split()[1] for l in open('/proc/self/status') if l.startswith('VmHWM')][0]; "
             "atexit.register(lambda: open(out, 'w').write(hwm())); "
             "sys.argv[0] = 'lodtool'; runpy.run_module('lodtool', run_name='__main__')")


def peak_rss(args: list[str], timeout: float = 60.0) -> tuple[subprocess.CompletedProcess, int]:
    """Run ``python -m lodtool ARGS``; return the result and the child's own peak RSS in bytes."""
    import tempfile

    env = {**os.environ, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")}
    with tempfile.NamedTemporaryFile("r") as out:
        proc = subprocess.run([sys.executable, "-c", _MEASURED, out.name, *args], capture_output=True, text=True,
                              env=env, timeout=timeout)
        text = out.read().strip()
    return proc, int(text) * 1024 if text else 0


def gzip_chunk(values: np.ndarray, chunk_bytes: int) -> bytes:
    """``values`` followed by zeros up to ``chunk_bytes``, deflated as HDF5's gzip filter stores a chunk."""
    import zlib

    packer = zlib.compressobj(1)
    parts = [packer.compress(values.tobytes())]
    zeros = bytes(1 << 20)
    left = chunk_bytes - values.nbytes
    while left > 0:
        parts.append(packer.compress(zeros[:min(left, len(zeros))]))
        left -= len(zeros)
    parts.append(packer.flush())
    return b"".join(parts)


def chunk_bomb(path: str, member: str, values: np.ndarray, chunk_rows: int) -> None:
    """Store ``values`` (1-D) in ``member`` as one gzip chunk of ``chunk_rows`` entries that really inflates."""
    replace_dataset(path, member, values, shape=values.shape, maxshape=(None,), chunks=(chunk_rows,),
                    dtype=values.dtype, compression="gzip")
    with h5py.File(path, "r+") as f:
        f[member].id.write_direct_chunk((0,), gzip_chunk(values, chunk_rows * values.dtype.itemsize))


def one_entry_chunks(path: str, member: str, values: np.ndarray) -> None:
    """Store ``values`` (1-D) in ``member`` with one entry per chunk."""
    replace_dataset(path, member, values, shape=values.shape, maxshape=(None,), chunks=(1,), dtype=values.dtype)
    with h5py.File(path, "r+") as f:
        f[member][...] = values


#: peak RSS of a reading command (inspect, validate, verify, head: no numba) on a small file: about 65 MiB
#: measured, so the bombs below (128 MiB and more before the fixes) fail it
SMALL_RSS = 150 << 20


class TestChunkBombs:
    """Issue 13.4: a few values declared in one huge gzip chunk are refused before the chunk is decoded."""

    @pytest.fixture(scope="class")
    @staticmethod
    def bomb(tmp_path_factory) -> str:
        path = str(tmp_path_factory.mktemp("bomb") / "bomb.lod.h5")
        save(path, LoDTensor(np.arange(10, dtype=np.int64), [[0, 2, 5, 9, 10]]))
        chunk_bomb(path, "tensor/lod/0", np.array([0, 2, 5, 9, 10], dtype=np.int64), 1 << 24)  # 128 MiB
        return path

    @pytest.mark.parametrize("command", ["validate", "tree"])
    def test_offsets_bomb_is_refused_in_flat_memory(self, bomb, command):
        proc, rss = peak_rss([command, "--max-memory", "64M", bomb] if command == "validate" else [command, bomb])
        assert proc.returncode == 1, proc
        assert "chunk far larger than its dataset" in proc.stdout + proc.stderr
        assert rss < SMALL_RSS, f"{command}: peak RSS {rss >> 20} MiB"

    @pytest.mark.parametrize("command", ["inspect", "head", "branch", "verify"])
    def test_every_reader_refuses_it(self, bomb, command):
        args = ["slice", bomb, "1"] if command == "branch" else [command, bomb]
        result = run_cli(*args)
        assert result.exit_code in (1, 2) and "chunk far larger than its dataset" in result.output + result.stderr

    def test_data_bomb_is_refused(self, tmp_path):
        path = str(tmp_path / "data-bomb.lod.h5")
        values = np.arange(10, dtype=np.float64)
        save(path, LoDTensor(values, [[0, 2, 5, 9, 10]]))
        chunk_bomb(path, "tensor/data", values, 1 << 21)  # 16 MiB for 80 bytes
        for args in (["head", path], ["verify", path], ["pool", path, "-o", str(tmp_path / "p.h5")]):
            result = run_cli(*args)
            assert result.exit_code in (1, 2) and "far larger than its dataset" in result.output + result.stderr

    def test_a_chunk_above_the_memory_limit_is_refused_before_it_is_read(self, tmp_path):
        path = str(tmp_path / "big-chunk.lod.h5")
        n = 1 << 19  # 4 MiB of offsets in an 8 MiB chunk: plausible, but not under --max-memory 4M
        offsets = np.arange(n + 1, dtype=np.int64)
        save(path, LoDTensor(np.zeros(n, dtype=np.uint8), [offsets]))
        chunk_bomb(path, "tensor/lod/0", offsets, 2 * n)
        from lodtool.errors import LodMemoryError
        from lodtool.container import open_file

        with open_file(path, max_memory=4 << 20) as f:
            with pytest.raises(LodMemoryError, match="one chunk of tensor 'tensor' level 0 offsets needs 8.0 MiB"):
                f.tensor().head(2)
        result = run_cli("validate", "--max-memory", "4M", path)
        assert result.exit_code == 2 and "needs 8.0 MiB, above the memory limit of 4.0 MiB" in result.output
        assert run_cli("head", path).exit_code == 0  # under the default limit it reads

    def test_a_row_spread_over_too_many_chunks_is_refused(self, tmp_path):
        path = str(tmp_path / "band.lod.h5")
        save(path, LoDTensor(np.zeros((4, 5000), dtype=np.uint8), [[0, 1, 4]]))
        replace_dataset(path, "tensor/data", np.zeros((4, 5000), np.uint8), data=np.zeros((4, 5000), np.uint8),
                        chunks=(1, 1), maxshape=(None, 5000))
        result = run_cli("head", path)
        assert result.exit_code == 1 and "one row spans 5,000 chunks" in one_line_error(result)
        assert "one row spans" in run_cli("validate", path).output


class TestOneEntryChunks:
    """Issue 13.5: one chunk per entry costs memory per chunk read at once; reads go 1024 chunks at a time."""

    N = 32_768  # 215 MiB of libhdf5 bookkeeping when read at once (131,072: 820 MB)

    @pytest.fixture(scope="class")
    @staticmethod
    def files(tmp_path_factory) -> dict[str, str]:
        folder = tmp_path_factory.mktemp("ones")
        offsets = np.arange(TestOneEntryChunks.N + 1, dtype=np.int64)
        out = {}
        for member in ("tensor/lod/0", "tensor/data"):
            path = str(folder / f"{member.replace('/', '-')}.lod.h5")
            data = np.arange(TestOneEntryChunks.N, dtype=np.int64)
            save(path, LoDTensor(data, [offsets]))
            one_entry_chunks(path, member, offsets if member.endswith("0") else data)
            out[member] = path
        return out

    @pytest.mark.parametrize("member, command", [("tensor/lod/0", "validate"), ("tensor/data", "verify")])
    def test_memory_stays_flat(self, files, member, command):
        proc, rss = peak_rss([command, files[member]])
        assert proc.returncode == 0, proc
        assert rss < SMALL_RSS, f"{command} {member}: peak RSS {rss >> 20} MiB"

    def test_values_read_in_pieces_are_the_values(self, files):
        from lodtool.container import load

        for path in files.values():
            t = load(path)
            assert t.lod == [list(range(self.N + 1))] and t.data.tolist() == list(range(self.N))
        assert run_cli("verify", files["tensor/lod/0"]).exit_code == 0


def zeros_deflated(nbytes: int, level: int) -> bytes:
    """A zlib stream (HDF5's gzip filter's format) of ``nbytes`` zeros, made in 1 MiB pieces."""
    import zlib

    packer = zlib.compressobj(level)
    piece = bytes(1 << 20)
    return b"".join(packer.compress(piece) for _ in range(nbytes >> 20)) + packer.flush()


def lzf_zeros(nbytes: int) -> bytes:
    """An lzf stream of about ``nbytes`` zeros: one literal zero, then 264-byte back-references at distance 1."""
    return b"\x00\x00" + b"\xe0\xff\x00" * (nbytes // 264)


def zstd_rle_frame(nbytes: int) -> bytes:
    """A zstd frame that declares and really holds ``nbytes`` zeros: 128 KiB run-length blocks of 4 bytes each."""
    block = 1 << 17
    n = nbytes // block
    head = (0xFD2FB528).to_bytes(4, "little") + bytes([0xE0]) + nbytes.to_bytes(8, "little")  # 8-byte content size
    return head + b"".join(((block << 3) | 0b10 | (i == n - 1)).to_bytes(3, "little") + b"\x00" for i in range(n))


def inflating_chunk(path: str, member: str, values: np.ndarray, chunk_rows: int, raw: bytes, mask: int = 0,
                    **create) -> None:
    """Store ``values`` in ``member`` with chunks of ``chunk_rows``, then replace chunk 0 by the stored bytes ``raw``."""
    replace_dataset(path, member, values, data=values, chunks=(chunk_rows,), maxshape=(None,), **create)
    with h5py.File(path, "r+") as f:
        f[member].id.write_direct_chunk((0,), raw, mask)


_READ_MEASURED = ("import sys; from lodtool.container import open_file\n"
                  "try:\n    open_file(sys.argv[1], max_memory=64 << 20).tensor().read()\n"
                  "except Exception as exc:\n    print(type(exc).__name__ + ': ' + str(exc))\n"
                  "print([l.split()[1] for l in open('/proc/self/status') if l.startswith('VmHWM')][0])")


def library_read(path: str) -> tuple[str, int]:
    """``open_file(path, max_memory=64 MiB).tensor().read()`` in a child: its error line and its peak RSS."""
    env = {**os.environ, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")}
    proc = subprocess.run([sys.executable, "-c", _READ_MEASURED, path], capture_output=True, text=True, env=env,
                          timeout=60, check=False)
    *lines, rss = proc.stdout.strip().splitlines()
    return "\n".join(lines), int(rss) * 1024


class TestChunksInflatingPastTheirSize:
    """A chunk's declared shape says what it decodes to; its codec may say otherwise (deflate and lzf grow their
    buffer to whatever the stream holds; zstd allocates what its header declares).  Refused before decoding."""

    @pytest.fixture(scope="class")
    @staticmethod
    def files(tmp_path_factory) -> dict[str, str]:
        folder = tmp_path_factory.mktemp("inflating")
        rng = np.random.default_rng(7)
        out = {}
        # 8 KiB chunks, chunk 0 stored as 128 MiB of deflated zeros (585 KB): far more than 8 KiB holds.  The
        # 5.6 MB of other chunks make the file too large for "any chunk x 1032 fits", so chunks are looked at
        values = rng.standard_normal(700_000)
        out["stored"] = str(folder / "stored.lod.h5")
        save(out["stored"], LoDTensor(values, [[0, 10, values.size]]))
        inflating_chunk(out["stored"], "tensor/data", values, 1024, zeros_deflated(128 << 20, 1),
                        compression="gzip", compression_opts=1)
        # 256 KiB chunks, chunk 0 holds 128 MiB in 130 KB (an honest stored size; fletcher32 skipped by its mask)
        values = rng.standard_normal(4 << 15)
        out["ratio"] = str(folder / "ratio.lod.h5")
        save(out["ratio"], LoDTensor(values, [[0, 10, values.size]]))
        inflating_chunk(out["ratio"], "tensor/data", values, 1 << 15, zeros_deflated(128 << 20, 9), mask=0b100,
                        compression="gzip", shuffle=True, fletcher32=True)
        # 1 MiB lzf chunks, chunk 0 holds 92 MiB in 1 MiB
        values = rng.standard_normal(2 << 17)
        out["lzf"] = str(folder / "lzf.lod.h5")
        save(out["lzf"], LoDTensor(values, [[0, 10, values.size]]), compression="lzf")
        inflating_chunk(out["lzf"], "tensor/data", values, 1 << 17, lzf_zeros(92 << 20), compression="lzf")
        # offsets in 8 KiB chunks, chunk 0 stored as 128 MiB of deflated zeros
        offsets = np.arange(0, 40_001, dtype=np.int64)
        out["offsets"] = str(folder / "offsets.lod.h5")
        save(out["offsets"], LoDTensor(np.zeros(40_000, np.uint8), [offsets]))
        inflating_chunk(out["offsets"], "tensor/lod/0", offsets, 1024, zeros_deflated(128 << 20, 1),
                        compression="gzip", compression_opts=1)
        return out

    @pytest.mark.parametrize("command", ["unpack", "head", "verify", "pool"])
    def test_a_chunk_stored_far_larger_than_declared_is_refused(self, files, command, tmp_path):
        args = {"unpack": ["unpack", files["stored"], "--to", "json", "-o", "-"], "head": ["head", files["stored"]],
                "verify": ["verify", files["stored"]],
                "pool": ["pool", files["stored"], "--max-memory", "64M", "-o", str(tmp_path / "p.h5")]}[command]
        proc, rss = peak_rss(args)
        assert proc.returncode in (1, 2), proc
        text = proc.stdout if command == "verify" else one_line_error(proc)
        assert "chunk at rows 0..1,023: stored in 585,694 bytes, far more than the 8,192 it holds decoded" in text
        assert "stored.lod.h5" in text and "/tensor/data" in text and "Traceback" not in proc.stderr
        assert rss < SMALL_RSS, f"{command}: peak RSS {rss >> 20} MiB (the chunk inflates to 128 MiB)"

    @pytest.mark.parametrize("kind, declared", [("ratio", "256.0 KiB"), ("lzf", "1.0 MiB")])
    def test_a_chunk_inflating_past_its_declared_size_is_refused_under_the_limit(self, files, kind, declared, tmp_path):
        proc, rss = peak_rss(["pool", files[kind], "--max-memory", "64M", "-o", str(tmp_path / "p.h5")])
        line = one_line_error(proc)
        assert proc.returncode == 1 and f"inflates past its declared {declared}" in line and "decompression bomb" in line
        assert rss < SMALL_RSS, f"pool: peak RSS {rss >> 20} MiB"
        message, rss = library_read(files[kind])
        assert message.startswith("LodFormatError: ") and f"inflates past its declared {declared}" in message
        assert rss < SMALL_RSS, f"read(): peak RSS {rss >> 20} MiB"

    def test_validate_reports_it_from_the_chunk_index(self, files):
        result = run_cli("validate", files["stored"])
        assert result.exit_code == 1  # invalid: reported, not an error
        assert ("the data's chunk at rows 0..1,023 is stored in 585,694 bytes, far more than the 8,192 it holds "
                "decoded (a decompression bomb)") in result.output

    def test_offsets_are_checked_as_the_data_is(self, files):
        proc, rss = peak_rss(["validate", "--max-memory", "64M", files["offsets"]])
        assert proc.returncode in (1, 2) and "/tensor/lod/0, chunk at rows 0..1,023: stored in" in proc.stdout + proc.stderr
        assert rss < SMALL_RSS, f"validate: peak RSS {rss >> 20} MiB"

    def test_a_zstd_header_declaring_more_than_the_chunk_is_refused(self, tmp_path):
        from lodtool.container.filters import PLUGIN_FILTERS, filter_available, register_own_plugins

        register_own_plugins()
        if not filter_available(PLUGIN_FILTERS["zstd"]):
            pytest.skip("hdf5plugin's zstd library is not installed")
        path = str(tmp_path / "zstd.lod.h5")
        values = np.random.default_rng(3).standard_normal(80 << 13)  # 80 chunks: unpack's read bounds them in one pass
        save(path, LoDTensor(values, [[0, 10, values.size]]), compression="zstd")
        with h5py.File(path, "r+") as f:  # 256 MiB in 8 KB, under a 64 KiB chunk; fletcher32 skipped by the mask
            f["tensor/data"].id.write_direct_chunk((0,), zstd_rle_frame(256 << 20), 0b100)
        for args in (["head", path], ["unpack", path, "--to", "json", "-o", "-"]):
            proc, rss = peak_rss(args)
            line = one_line_error(proc)
            assert "inflates past its declared 64.0 KiB (its zstd header declares 268,435,456 bytes" in line
            assert rss < SMALL_RSS, f"{args[0]}: peak RSS {rss >> 20} MiB"

    @pytest.mark.parametrize("compression", ["deflate", "gzip", "lzf", "none", "zstd", "blosc", "lz4"])
    def test_ordinary_files_read_under_any_limit(self, tmp_path, compression):
        from lodtool.container import open_file
        from lodtool.container.filters import PLUGIN_FILTERS, filter_available, register_own_plugins

        if compression in PLUGIN_FILTERS:
            register_own_plugins()
            if not filter_available(PLUGIN_FILTERS[compression]):
                pytest.skip("hdf5plugin is not installed")
        rng = np.random.default_rng(5)
        lengths = rng.integers(0, 40, 3000)
        t = LoDTensor(np.concatenate([rng.standard_normal(30_000), np.zeros(int(lengths.sum()) - 30_000)]),
                      recursive_sequence_lengths=[lengths.tolist()])  # incompressible and very compressible chunks
        path = str(tmp_path / "ok.lod.h5")
        save(path, t, compression=compression)
        for limit in (None, 2 << 20):  # the default: no chunk looked at; 2 MiB (4 MiB, the floor): random chunks decoded here
            with open_file(path, max_memory=limit) as f:
                x = f.tensor()
                assert x.read().equals(t) and x.branch(7).equals(t.branch(7)) and not x.validate()
        assert run_cli("verify", path).exit_code == 0


# -- 7. zero-width rows ------------------------------------------------------------------------------------------
def zero_width(path: str, rows: int, lod: list | None = None) -> str:
    """A container whose data claims ``rows`` rows of shape ``(0,)`` (no bytes stored, whatever ``rows`` is)."""
    save(path, LoDTensor(np.zeros((4, 0), dtype=np.float32), [[0, 4]] if lod else None))
    replace_dataset(path, "tensor/data", np.zeros((rows, 0), np.float32), shape=(rows, 0), maxshape=(None, 0),
                    dtype="<f4")
    if lod:
        replace_dataset(path, "tensor/lod/0", np.array(lod), data=np.array(lod), maxshape=(None,))
    return path


class TestZeroWidthRows:
    """Issue 13.7: rows of zero bytes still count; a file claiming 2**40 of them is refused by every check."""

    @pytest.mark.parametrize("command", ["validate", "verify", "head", "tail", "unpack", "tree", "pad", "pack-plan"])
    def test_a_claim_of_2_40_rows_is_refused_by_every_command(self, tmp_path, command):
        flat = zero_width(str(tmp_path / "flat.lod.h5"), 1 << 40)
        nested = zero_width(str(tmp_path / "nested.lod.h5"), 1 << 40, lod=[0, 1 << 40])
        for path in (flat, nested):
            args = [command, path] if command in ("validate", "verify", "tree", "pack-plan") else \
                reader_args(command, path, str(tmp_path / "out")) if command in READERS else \
                [command, path, "--to", "json", "-o", "-"]
            result = run_cli(*args)
            assert result.exit_code in (1, 2), (args, result.output)
            text = result.output + result.stderr
            assert "1,099,511,627,776" in text and "memory limit" in text, (args, text)
            assert not any(p.name.startswith("out") for p in tmp_path.iterdir())

    def test_two_million_empty_rows_unpack_in_flat_memory(self, tmp_path):
        path = zero_width(str(tmp_path / "zw.lod.h5"), 1 << 21)
        out = str(tmp_path / "zw.json")
        proc, rss = peak_rss(["unpack", path, "--to", "json", "-o", out])
        assert proc.returncode == 0, proc.stderr
        with open(out, "rb") as f:
            assert f.read() == b"[" + b",".join([b"[]"] * (1 << 21)) + b"]\n"
        assert rss < 400 << 20, f"peak RSS {rss >> 20} MiB"  # a segfault after 4 GB before the fix

    def test_many_short_sequences_unpack_in_flat_memory(self, tmp_path):
        """The same cause on ordinary data: one 4 KiB orjson buffer per sequence (2 GB for 500,000 before)."""
        path = str(tmp_path / "short.lod.h5")
        n = 250_000
        save(path, LoDTensor(np.arange(n, dtype=np.int64), [np.arange(n + 1)]))
        out = str(tmp_path / "short.jsonl")
        proc, rss = peak_rss(["unpack", path, "--to", "jsonl", "-o", out])
        assert proc.returncode == 0, proc.stderr
        with open(out, "rb") as f:
            assert f.read() == b"".join(b"[%d]\n" % i for i in range(n))
        assert rss < 400 << 20, f"peak RSS {rss >> 20} MiB"


# -- 16. one attribute check for validate and verify ----------------------------------------------------------------
class TestValidateAndVerifyAgree:
    """Issue 13.16: ``lod_level`` is read by one function; validate's "ok" is never verify's "unreadable"."""

    @pytest.mark.parametrize("value", [np.array([2]), np.int32(2), np.uint8(2), np.array([[2]]), np.array([2, 2]),
                                       2.0, True, -1, 65, "2", np.array([], dtype=np.int64)])
    def test_every_form_of_lod_level(self, tmp_path, value):
        path = str(tmp_path / "a.lod.h5")
        save(path, LoDTensor(np.arange(1, 16), recursive_sequence_lengths=[[3, 1, 2], [3, 2, 4, 1, 2, 3]]))
        with h5py.File(path, "r+") as f:
            f["tensor"].attrs["lod_level"] = value
        validate, verify = run_cli("validate", path), run_cli("verify", path)
        assert (validate.exit_code == 0) == (verify.exit_code == 0), (validate.output, verify.output)
        if validate.exit_code == 0:
            assert "(3 datasets)" in verify.output
        else:  # both name the attribute, and neither crashes on it
            assert validate.exit_code == 1 and verify.exit_code == 2
            assert "attribute 'lod_level' is" in validate.output and "attribute 'lod_level' is" in verify.output
        from lodtool.container.reader import declared_lod_level

        with h5py.File(path) as f:
            assert (declared_lod_level(f["tensor"].attrs) == 2) == (validate.exit_code == 0)


# -- 3. native decoders ---------------------------------------------------------------------------------------------
def foreign_filter_container(path: str, filter_id: int, chunk: bytes, opts: tuple = ()) -> str:
    """A container whose data names plugin filter ``filter_id`` and stores ``chunk`` as its only chunk."""
    save(path, LoDTensor(np.zeros(16, dtype=np.float32), [[0, 6, 16]]))
    replace_dataset(path, "tensor/data", np.zeros(16, np.float32), shape=(16,), maxshape=(None,), chunks=(16,),
                    dtype="<f4", compression=filter_id, compression_opts=opts, allow_unknown_filter=True)
    with h5py.File(path, "r+") as f:
        f["tensor/data"].id.write_direct_chunk((0,), chunk)
    return path


class TestNativeDecoders:
    """Issue 13.3: only the codecs lodtool writes decode by default; opted-in ones decode in a child process."""

    CRAFTED = bytes(range(160))  # not a valid SZ3 / bzip2 stream: a decoder must never see it by default

    @pytest.mark.parametrize("command", ["head", "unpack", "tree", "pool"])
    def test_a_foreign_filter_is_refused_by_name_before_decoding(self, tmp_path, command):
        path = foreign_filter_container(str(tmp_path / "sz3.lod.h5"), 32024, self.CRAFTED)
        result = run_cli(*reader_args(command, path, str(tmp_path / "out")))
        assert result.exit_code == 1, result.output
        line = one_line_error(result)
        assert "compressed with sz3, a filter lodtool does not decode unless asked" in line
        assert "LODTOOL_FILTER_PLUGINS=sz3" in line

    def test_verify_and_validate_never_vouch_for_it(self, tmp_path):
        path = foreign_filter_container(str(tmp_path / "sz3.lod.h5"), 32024, self.CRAFTED)
        verify = run_cli("verify", path)
        assert verify.exit_code in (1, 2) and "compressed with sz3" in verify.output
        validate = run_cli("validate", path)
        assert validate.exit_code == 1 and "data not decoded" in validate.output

    def test_no_hdf5plugin_codec_is_loaded_by_reading(self, tmp_path):
        """Reading a zstd file registers zstd alone (importing hdf5plugin would register a dozen codecs)."""
        path = str(tmp_path / "z.lod.h5")
        save(path, LoDTensor(np.arange(6.0), [[0, 2, 6]]), compression="zstd")
        code = ("import sys, h5py; from lodtool.container import load; t = load(sys.argv[1]); "
                "print(t.data.sum(), 'hdf5plugin' in sys.modules, bool(h5py.h5z.filter_avail(32024)), "
                "bool(h5py.h5z.filter_avail(307)))")
        env = {**os.environ, "PYTHONPATH": ROOT}
        out = subprocess.run([sys.executable, "-c", code, path], capture_output=True, text=True, env=env, timeout=60)
        assert out.stdout.split() == ["15.0", "False", "False", "False"], out

    def test_an_opted_in_decoder_runs_in_a_child_and_its_chatter_stays_off_the_error_line(self, tmp_path):
        """bzip2 prints "BUG: ..." on a bad chunk: in process that is a second stderr line."""
        pytest.importorskip("hdf5plugin")
        path = foreign_filter_container(str(tmp_path / "bz.lod.h5"), 307, self.CRAFTED)
        env = {**os.environ, "LODTOOL_FILTER_PLUGINS": "bzip2"}
        proc = subprocess.run([sys.executable, "-m", "lodtool", "head", path, "--to", "json"], capture_output=True,
                              text=True, timeout=60, env={**env, "PYTHONPATH": ROOT})
        assert proc.returncode == 1 and proc.stdout == "", proc
        lines = proc.stderr.splitlines()
        assert len(lines) == 1 and lines[0].startswith("lodtool: error: "), proc.stderr  # no codec chatter

    def test_an_opted_in_plugin_reads_good_data(self, tmp_path):
        hdf5plugin = pytest.importorskip("hdf5plugin")
        path = str(tmp_path / "good.lod.h5")
        values = np.arange(16, dtype=np.float32)
        save(path, LoDTensor(values, [[0, 6, 16]]))
        replace_dataset(path, "tensor/data", values, data=values, maxshape=(None,), chunks=(16,),
                        **hdf5plugin.BZip2())
        refused = run_process(["head", path, "--to", "json"])
        assert refused.returncode == 1 and "compressed with bzip2" in refused.stderr
        env = {**os.environ, "PYTHONPATH": ROOT, "LODTOOL_FILTER_PLUGINS": "bzip2"}
        for args in (["head", path, "--to", "json"], ["verify", path]):
            proc = subprocess.run([sys.executable, "-m", "lodtool", *args], capture_output=True, text=True,
                                  timeout=60, env=env)
            assert proc.returncode == 0, proc
        assert proc.stdout.startswith("ok ")


# -- 6. NPZ zip bombs -------------------------------------------------------------------------------------------------
def npz_bomb(path: str, members: dict[str, np.ndarray]) -> str:
    """An .npz whose members are deflated (zeros compress ~1000:1): small on disk, large when inflated."""
    import zipfile

    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=1) as z:
        for name, arr in members.items():
            with z.open(f"{name}.npy", "w", force_zip64=True) as f:
                np.lib.format.write_array(f, arr, allow_pickle=False)
    return path


class TestNpzBombs:
    """Issue 13.6: declared member sizes are checked against the memory limit before anything is inflated."""

    @pytest.fixture(scope="class")
    @staticmethod
    def bomb(tmp_path_factory) -> str:
        """128 MiB of float64 zeros (a 0.5 MB file), with offsets that do not fit its rows."""
        n = 1 << 24
        data = np.lib.stride_tricks.as_strided(np.zeros(1), shape=(n,), strides=(0,))  # no memory for the fixture
        return npz_bomb(str(tmp_path_factory.mktemp("npz") / "bomb.npz"),
                        {"offsets_0": np.array([0, 5, n + 1]), "data": data})

    def test_pack_checks_the_offsets_before_inflating_the_data(self, bomb, tmp_path):
        proc, rss = peak_rss(["pack", bomb, "-o", str(tmp_path / "x.lod.h5")])
        assert proc.returncode == 1 and "offsets_0" in proc.stderr and "16,777,216 rows" in proc.stderr, proc
        assert rss < SMALL_RSS, f"peak RSS {rss >> 20} MiB"

    def test_the_declared_size_is_checked_against_max_memory(self, bomb, tmp_path):
        result = run_cli("pack", bomb, "--max-memory", "64M", "-o", str(tmp_path / "x.lod.h5"))
        assert result.exit_code == 1
        assert "its arrays inflate to 134,218,0" in one_line_error(result) and "--max-memory" in result.stderr

    def test_unpad_checks_before_inflating(self, tmp_path):
        n = 1 << 22
        padded = np.lib.stride_tricks.as_strided(np.zeros(1, np.float32), shape=(8, n), strides=(0, 0))
        path = npz_bomb(str(tmp_path / "padded.npz"), {"padded": padded, "lengths": np.full(8, 3)})
        proc, rss = peak_rss(["unpad", path, "--max-memory", "128M", "-o", str(tmp_path / "u.lod.h5")])
        assert proc.returncode == 1 and "inflate to 134,21" in proc.stderr, proc
        tiny = npz_bomb(str(tmp_path / "tiny.npz"), {"padded": np.zeros((8, 4), np.float32),
                                                     "lengths": np.full(8, 3)})
        baseline = peak_rss(["unpad", tiny, "-o", str(tmp_path / "t.lod.h5")])[1]  # unpad loads the operators
        assert rss < baseline + (32 << 20), f"peak RSS {rss >> 20} MiB, {baseline >> 20} MiB on a tiny archive"
        assert not (tmp_path / "u.lod.h5").exists()


# -- 13. and 14. byte order and dtypes ----------------------------------------------------------------------------------
def with_data(path: str, data: np.ndarray, lod=((0, 2, 6),)) -> str:
    """A container whose data dataset is ``data`` exactly as given (byte order and dtype kept)."""
    save(path, LoDTensor(np.zeros(len(data)), [list(o) for o in lod]))
    replace_dataset(path, "tensor/data", data, data=data, maxshape=(None,) + data.shape[1:], chunks=data.shape)
    with h5py.File(path, "r+") as f:
        del f["tensor"].attrs["dtype"]
    return path


class TestByteOrderAndDtypes:
    """Issue 13.13/14: big-endian data reaches kernels in native order; float128 is refused by name, everywhere."""

    VALUES = np.array([0.5, 1.5, -2.0, 3.25, 4.0, 5.0])

    def test_big_endian_data_runs_through_every_operator(self, tmp_path):
        from lodtool.container import load

        path = with_data(str(tmp_path / "be.lod.h5"), self.VALUES.astype(">f8"))
        assert run_cli("validate", path).exit_code == 0
        out = str(tmp_path / "pooled.lod.h5")
        assert run_cli("pool", path, "-o", out, "--type", "sum").exit_code == 0
        assert load(out).data.tolist() == [2.0, 10.25]
        out = str(tmp_path / "soft.lod.h5")
        assert run_cli("softmax", path, "-o", out).exit_code == 0
        expected = np.concatenate([np.exp(v - v.max()) / np.exp(v - v.max()).sum()
                                   for v in (self.VALUES[:2], self.VALUES[2:])])
        assert np.allclose(load(out).data, expected) and load(out).data.dtype == np.dtype("<f8")
        assert run_cli("head", path, "--to", "json").output == "[[0.5,1.5],[-2.0,3.25,4.0,5.0]]\n"
        assert load(path).data.dtype.isnative

    @pytest.mark.parametrize("command", ["validate", "pool", "softmax", "unpack", "slice", "head", "tail"])
    def test_float128_is_refused_by_name(self, tmp_path, command):
        path = with_data(str(tmp_path / "f128.lod.h5"), self.VALUES.astype(np.longdouble))
        args = ["validate", path] if command == "validate" else \
            [command, path, "-o", str(tmp_path / "o.h5")] if command in ("pool", "softmax") else \
            reader_args(command, path, str(tmp_path / "out"))
        result = run_cli(*args)
        assert result.exit_code == 1
        assert command == "validate" or result.stdout == ""
        assert "has dtype float128 (numpy.longdouble, extended precision)" in result.output + result.stderr

    @pytest.mark.parametrize("command", ["unpack", "slice", "head", "tail"])
    def test_nothing_reaches_stdout_before_an_encoding_error(self, tmp_path, command):
        path = str(tmp_path / "c.lod.h5")
        save(path, LoDTensor(self.VALUES + 1j, [[0, 2, 6]]))
        result = run_cli(*reader_args(command, path, str(tmp_path / "out")))
        assert result.exit_code == 1 and result.stdout == ""
        assert "complex128 data has no JSON form" in one_line_error(result)


# -- 12. terminal escapes ---------------------------------------------------------------------------------------------
class TestTerminalEscapes:
    """Issue 13.12: names from a file never reach the terminal raw; lodtool refuses to write such names."""

    NASTY = "\x1b]0;pwned\x07\x1b[2J\nok evil.lod.h5"

    @pytest.fixture
    def path(self, tmp_path) -> str:
        p = str(tmp_path / "esc.lod.h5")
        save(p, LoDTensor(np.arange(6), [[0, 2, 6]], level_names=["lvl"]), name="tensor")
        with h5py.File(p, "r+") as f:
            f.move("tensor", self.NASTY.replace("/", "_"))
            f[self.NASTY].attrs["level_names"] = np.array([self.NASTY + "[red]x[/]"], dtype=h5py.string_dtype())
        return p

    @pytest.mark.parametrize("args", [["inspect"], ["tree"], ["validate"], ["head", "--to", "tree"],
                                      ["pool", "-o", "{out}"], ["slice", "--name", "nope", "0"]])
    def test_nothing_printed_holds_a_control_character(self, path, tmp_path, args):
        argv = [a.format(out=str(tmp_path / "o.lod.h5")) for a in args]
        result = run_cli(argv[0], path, *argv[1:])
        text = result.output + result.stderr
        assert "\x1b" not in text and "\x07" not in text, text
        assert not any(line.startswith("ok evil") for line in text.splitlines())
        if argv[0] in ("inspect", "tree"):
            assert "\\x1b]0;pwned\\x07" in text and "[red]x[/]" in text  # shown, escaped, not styled

    @pytest.mark.parametrize("option", ["--name", "--level-names"])
    def test_pack_refuses_control_characters_in_names(self, tmp_path, option):
        src = tmp_path / "a.json"
        src.write_text("[[1, 2], [3]]")
        result = run_cli("pack", str(src), "-o", str(tmp_path / "a.lod.h5"), option, "\x1b[31m")
        assert result.exit_code == 2 and "control character '\\x1b'" in one_line_error(result)
        assert not (tmp_path / "a.lod.h5").exists()


# -- 11. and 17. integers in JSON ----------------------------------------------------------------------------------------
class TestIntegersInJson:
    """Issue 13.11/17: no silent rounding of integers mixed with floats; a huge integer is placed and explained."""

    @pytest.mark.parametrize("fmt, text, place", [
        ("json", "[[1.5, 2], [9007199254740993, 0.5]]", ":1:13:"),
        ("jsonl", "[1, 2]\n[0.5, 9007199254740993]\n", ":2:7:"),
        ("jsonl", "[-9007199254740995, 0.25]\n", ":1:2:"),
    ])
    def test_an_integer_float64_would_round_is_refused_with_its_place(self, tmp_path, fmt, text, place):
        src = tmp_path / f"a.{fmt}"
        src.write_text(text)
        out = str(tmp_path / "a.lod.h5")
        result = run_cli("pack", str(src), "-o", out)
        assert result.exit_code == 1 and not os.path.exists(out)
        line = one_line_error(result)
        assert f"a.{fmt}{place} integer" in line and "cannot hold it exactly" in line and "--dtype" in line
        assert run_cli("pack", str(src), "-o", out, "--dtype", "float64").exit_code == 0  # asked for: rounds

    def test_exact_integers_and_separate_inputs(self, tmp_path):
        from lodtool.container import load

        (tmp_path / "ok.json").write_text("[[9007199254740992, 0.5], [12345678901234567.5]]")
        assert run_cli("pack", str(tmp_path / "ok.json"), "-o", str(tmp_path / "ok.lod.h5")).exit_code == 0
        assert load(str(tmp_path / "ok.lod.h5")).data.tolist() == [9007199254740992.0, 0.5, 12345678901234568.0]
        (tmp_path / "a.jsonl").write_text("[1, 9007199254740993]\n")
        (tmp_path / "b.jsonl").write_text("[0.5]\n")
        result = run_cli("pack", str(tmp_path / "a.jsonl"), str(tmp_path / "b.jsonl"), "-o", str(tmp_path / "x.h5"))
        assert result.exit_code == 1 and "data row 1: integer 9007199254740993" in one_line_error(result)

    def test_a_100000_digit_integer_has_a_place_and_a_cli_hint(self, tmp_path):
        src = tmp_path / "big.json"
        src.write_text("[[1], [2, " + "9" * 100_000 + "]]")
        result = run_cli("pack", str(src), "-o", str(tmp_path / "big.lod.h5"))
        line = one_line_error(result)
        assert result.exit_code == 1 and "big.json:1:11: an integer of 100,000 digits" in line
        assert "set_int_max_str_digits" not in line and "write it as a float literal" in line


# -- 8. a full disk ------------------------------------------------------------------------------------------------------
def _file_size_limit():  # pragma: no cover - runs in the child
    import resource
    import signal

    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG, as a full disk does
    resource.setrlimit(resource.RLIMIT_FSIZE, (64 << 10, 64 << 10))


class TestFullDisk:
    """Issue 13.8: a write that runs out of room ends with its one-line error, not SIGSEGV/SIGBUS in cleanup."""

    @pytest.mark.parametrize("command", ["head", "pack", "append"])
    def test_a_writer_out_of_room_exits_cleanly(self, tmp_path, command):
        values = np.random.default_rng(0).standard_normal(40_000)  # incompressible: 320 KB, above the 64 KiB
        src = str(tmp_path / "big.lod.h5")
        save(src, LoDTensor(values, [[0, 20_000, 40_000]]), compression="none")
        jsonl = tmp_path / "rows.jsonl"
        jsonl.write_text("".join(f"[{', '.join(map(repr, values[i:i + 5000].tolist()))}]\n"
                                 for i in range(0, 20_000, 5000)))
        small = str(tmp_path / "small.lod.h5")
        save(small, LoDTensor(np.arange(3.0), [[0, 3]]))
        before = open(small, "rb").read()
        out = str(tmp_path / "out.lod.h5")
        args = {"head": ["head", src, "--to", "h5", "-o", out],
                "pack": ["pack", str(jsonl), "-o", out, "--compression", "none"],
                "append": ["pack", str(jsonl), "-o", small, "--append", "--compression", "none"]}[command]
        env = {**os.environ, "PYTHONPATH": ROOT}
        proc = subprocess.run([sys.executable, "-m", "lodtool", *args], capture_output=True, text=True, env=env,
                              preexec_fn=_file_size_limit, timeout=60)
        assert proc.returncode == 1, (proc.returncode, proc.stderr)  # -11 / -7 before the fix
        assert len(proc.stderr.splitlines()) == 1 and proc.stderr.startswith("lodtool: error: ")
        assert not os.path.exists(out) and not [p for p in os.listdir(tmp_path) if ".lodtmp-" in p]
        assert open(small, "rb").read() == before

    def test_a_library_caller_gets_the_error_and_goes_on(self, tmp_path):
        # every writer of the library, out of room, in one process that then frees everything and writes again:
        # a dirty chunk libhdf5 could not flush used to crash it (SIGSEGV in H5D_close) when its handle was freed
        script = f"""
import gc, os, resource, signal, sys
import numpy as np
from lodtool import LoDTensor, tasks
from lodtool.container import LodWriter, load, save
from lodtool.errors import LodFormatError
home, out, small = {str(tmp_path)!r}, {str(tmp_path / "out.lod.h5")!r}, {str(tmp_path / "small.lod.h5")!r}
values = np.random.default_rng(0).standard_normal(40_000)
t = LoDTensor(values, [[0, 20_000, 40_000]])
src = os.path.join(home, "src.lod.h5")
save(src, t, compression="none")
jsonl = os.path.join(home, "rows.jsonl")
with open(jsonl, "w") as f:
    f.write("".join("[" + ", ".join(map(repr, values[i:i + 5000].tolist())) + "]\\n" for i in range(0, 40_000, 5000)))
save(small, LoDTensor(np.arange(3.0), [[0, 3]]))
before = open(small, "rb").read()
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
resource.setrlimit(resource.RLIMIT_FSIZE, (64 << 10, hard))  # the soft limit only: it is raised again below

def writer():
    with LodWriter(out, compression="none") as w:
        w.write("tensor", t)

cases = [lambda c=c: save(out, t, compression=c) for c in ("none", "lzf", "gzip", "deflate")] + [
    writer, lambda: tasks.pack([jsonl], out, compression="none"),
    lambda: tasks.pack([jsonl], small, append=True, compression="none"),
    lambda: tasks.reverse(src, out, compression="none"), lambda: tasks.softmax(src, out, compression="none")]
for case in cases:
    try:
        case()
        raise SystemExit("no error")
    except LodFormatError as exc:
        assert "\\n" not in str(exc) and "cannot" in str(exc), exc
    gc.collect()
    assert sorted(os.listdir(home)) == ["rows.jsonl", "small.lod.h5", "src.lod.h5"], os.listdir(home)
    assert open(small, "rb").read() == before
resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
save(out, t)
assert load(out).equals(t)
print("alive")
"""
        env = {**os.environ, "PYTHONPATH": ROOT}
        proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120,
                              check=False)
        assert proc.returncode == 0 and proc.stdout.strip() == "alive", (proc.returncode, proc.stderr[-2000:])
