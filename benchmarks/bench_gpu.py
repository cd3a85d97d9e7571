"""Benchmark the CUDA operators (lodtool.ops._cuda) against a device copy, naive CuPy and the CPU path.

Needs a CUDA GPU with CuPy and numba-cuda; data is generated on the device::

    python benchmarks/bench_gpu.py                       # outputs of >= 1 GB, widths 1 and 16
    python benchmarks/bench_gpu.py --gb 0.05 --repeat 5 --out bench_out

Cases (float32 data, widths 1 and 16; lengths drawn on the device):

* expand (rows case): ``x`` without LoD, each row repeated 0..6 times (mean 3); output >= ``--gb``.
* pad: 1..19-row sequences padded to 19 rows, pad value 0; output >= ``--gb``.
* pool sum: 1..19-row sequences; *input* >= ``--gb`` (the output is small).
* feed (``--feed GB``): a memory-mappable container of that many int32 tokens (documents > sentences) read as
  varlen training batches of sentences (``max_tokens=65536``, ``mode="random"``) and moved to the device:
  ``lodtool.batches`` in the main process through two pinned staging buffers (copies overlapped with the
  next read), and torch's ``DataLoader(BatchDataset(...), pin_memory=True)`` with 0 and 4 workers; beside
  them the floor, pinned host to device copies of the same batches' tokens.

Each GPU timing is the median of ``--repeat`` (>= 5) runs timed with CUDA
events, after a warm-up (which compiles the kernels).  ``lodtool`` is the
whole call with the offsets already on the device (validated there, output
allocated); ``host offsets`` the same with NumPy offsets (uploaded each call);
``kernel`` skips the validation (``validated=True``); ``in-kernel`` is the GPU
time inside lodtool's own kernels during that call (CUDA events recorded right
around each launch, via ``_cuda.PROFILE``), i.e. without the host-side overhead
of the call (argument conversion, the size read-back, CuPy's small kernels).  Baselines: ``copy`` is
``cudaMemcpyAsync`` device to device of the same bytes (the output's, or for
pool the input's) in the same run; ``naive`` is plain CuPy (``searchsorted`` +
fancy indexing for expand, a boolean-mask scatter for pad, ``cupyx.scatter_add``
for pool); ``cpu`` is lodtool's Numba CPU kernel (``backend="numba"``, host
arrays, wall-clock median).  Ratios: ``vs copy`` = copy time / kernel time
(1.0 = as fast as a copy of the same bytes); ``x naive`` and ``x cpu`` =
their time / lodtool's time (bigger is better for lodtool).
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import platform
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from lodtool import LoDTensor  # noqa: E402
from lodtool.ops import _cuda, sequence_expand, sequence_pad, sequence_pool  # noqa: E402
from lodtool.ops.expand import cuda_expand  # noqa: E402
from lodtool.ops.pad import cuda_pad  # noqa: E402
from lodtool.ops.pool import cuda_pool  # noqa: E402
from lodtool._device import cupy_module  # noqa: E402

cp = cupy_module()


def gpu_median(fn, repeat: int) -> float:
    """Median seconds of ``fn()`` over ``repeat`` runs, timed with CUDA events, after one warm-up."""
    fn()
    cp.cuda.Device().synchronize()
    times = []
    for _ in range(repeat):
        start, end = cp.cuda.Event(), cp.cuda.Event()
        start.record()
        out = fn()
        end.record()
        end.synchronize()
        times.append(cp.cuda.get_elapsed_time(start, end) / 1e3)
        del out
    return statistics.median(times)


def device_median(fn, repeat: int) -> float:
    """Median seconds the GPU spends inside lodtool's own kernels during ``fn()`` (events around each launch)."""
    fn()
    times = []
    for _ in range(repeat):
        _cuda.PROFILE = []
        out = fn()
        cp.cuda.Device().synchronize()
        times.append(sum(cp.cuda.get_elapsed_time(a, b) for _, a, b in _cuda.PROFILE) / 1e3)
        _cuda.PROFILE = None
        del out
    return statistics.median(times)


def cpu_median(fn, repeat: int) -> float:
    fn()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
        del out
    return statistics.median(times)


def memcpy(nbytes: int):
    src = cp.ones(nbytes, cp.uint8)
    dst = cp.empty(nbytes, cp.uint8)

    def run():
        dst.data.copy_from_device_async(src.data, nbytes)
        return dst
    return run


def lengths(n: int, lo: int, hi: int, seed: int):
    rs = cp.random.RandomState(seed)
    return rs.randint(lo, hi + 1, n, dtype=cp.int64)


def offsets_of(lens):
    off = cp.zeros(int(lens.shape[0]) + 1, cp.int64)
    cp.cumsum(lens, out=off[1:])
    return off


def case_expand(width: int, gb: float, seed: int):
    row_bytes = 4 * width
    n = int(np.ceil(gb * 1e9 / row_bytes / 3))
    reps = lengths(n, 0, 6, seed)
    ref = offsets_of(reps)
    total = int(ref[-1].get())
    x = cp.random.RandomState(seed).random_sample((n, width), dtype=cp.float32)
    ref_host = ref.get()
    out_bytes = total * row_bytes

    def naive():
        idx = cp.searchsorted(ref[1:], cp.arange(total, dtype=cp.int64), side="right")
        return x[idx]

    host_x = x.get()
    y = LoDTensor._trusted(np.broadcast_to(np.zeros(1, np.float32), (total,)), (ref_host,))
    return dict(
        op="expand", width=width, out_bytes=out_bytes, moved_bytes=out_bytes,
        lodtool=lambda: cuda_expand(cp, x, None, ref),
        upload=lambda: cuda_expand(cp, x, None, ref_host),
        kernel=lambda: cuda_expand(cp, x, None, ref, validated=True),
        naive=naive, cpu=lambda: sequence_expand(host_x, y, backend="numba"),
        check=lambda: bool(cp.array_equal(cuda_expand(cp, x, None, ref)[0], naive())),
    )


def case_pad(width: int, gb: float, seed: int, maxlen: int = 19):
    row_bytes = 4 * width
    n = int(np.ceil(gb * 1e9 / (row_bytes * maxlen)))
    lens = lengths(n, 1, maxlen, seed)
    off = offsets_of(lens)
    rows = int(off[-1].get())
    x = cp.random.RandomState(seed).random_sample((rows, width), dtype=cp.float32)
    off_host = off.get()
    out_bytes = n * maxlen * row_bytes

    def naive():
        out = cp.zeros((n, maxlen, width), cp.float32)
        mask = cp.arange(maxlen) < lens[:, None]
        out[mask] = x
        return out

    host = LoDTensor(x.get(), [off_host])
    return dict(
        op="pad", width=width, out_bytes=out_bytes, moved_bytes=out_bytes,
        lodtool=lambda: cuda_pad(cp, x, off, maxlen),
        upload=lambda: cuda_pad(cp, x, off_host, maxlen),
        kernel=lambda: cuda_pad(cp, x, off, maxlen, validated=True),
        naive=naive, cpu=lambda: sequence_pad(host, 0, maxlen, backend="numba"),
        check=lambda: bool(cp.array_equal(cuda_pad(cp, x, off, maxlen)[0], naive())),
    )


def case_pool(width: int, gb: float, seed: int):
    cupyx = importlib.import_module("cupyx")
    row_bytes = 4 * width
    rows_wanted = int(np.ceil(gb * 1e9 / row_bytes))
    n = rows_wanted // 10 + 1
    lens = lengths(n, 1, 19, seed)
    off = offsets_of(lens)
    rows = int(off[-1].get())
    x = cp.random.RandomState(seed).random_sample((rows, width), dtype=cp.float32)
    off_host = off.get()

    def naive():
        seg = cp.searchsorted(off[1:], cp.arange(rows, dtype=cp.int64), side="right")
        out = cp.zeros((n, width), cp.float32)
        cupyx.scatter_add(out, seg, x)
        return out

    host = LoDTensor(x.get(), [off_host])
    in_bytes = rows * row_bytes
    return dict(
        op="pool sum", width=width, out_bytes=n * row_bytes, moved_bytes=in_bytes,
        lodtool=lambda: cuda_pool(cp, x, off, "sum"),
        upload=lambda: cuda_pool(cp, x, off_host, "sum"),
        kernel=lambda: cuda_pool(cp, x, off, "sum", validated=True),
        naive=naive, cpu=lambda: sequence_pool(host, "sum", backend="numba"),
        check=lambda: bool(cp.allclose(cuda_pool(cp, x, off, "sum"), naive(), rtol=1e-4, atol=1e-4)),
    )


def feed_container(gb: float, folder: str) -> str:
    """A memory-mappable container of ``gb`` GB of int32 tokens: documents of 1..40 sentences of 1..128 tokens."""
    import lodtool

    rs = np.random.default_rng(0)
    tokens = int(gb * 1e9 / 4)
    sent = rs.integers(1, 129, tokens // 64 + 1)
    sent = sent[:np.searchsorted(np.cumsum(sent), tokens) + 1]
    docs = rs.integers(1, 41, len(sent) // 20 + 2)
    docs = docs[:np.searchsorted(np.cumsum(docs), len(sent)) + 1]
    docs[-1] -= int(docs.sum()) - len(sent)
    docs = docs[docs > 0]
    data = rs.integers(0, 50_000, int(sent.sum()), dtype=np.int32)
    path = os.path.join(folder, "feed.lod.h5")
    lodtool.save(path, LoDTensor(data, recursive_sequence_lengths=[docs.tolist(), sent.tolist()]), compression="none")
    return path


def feed_rows(path: str, repeat: int, device: str = "cuda") -> list[dict]:
    """Tokens/s from ``path`` to ``device`` as varlen batches, three ways, beside pinned copies of the same tokens."""
    import lodtool
    from lodtool.interop.torch import BatchDataset

    torch = importlib.import_module("torch")
    dev = torch.device(device)
    pin = dev.type == "cuda"
    plan = dict(level=1, max_tokens=65536, mode="random", seed=0)
    sizes = [int(b["values"].shape[0]) for b in lodtool.batches(path, output="varlen", **plan)]
    total = sum(sizes)

    def sync():
        if pin:
            torch.cuda.synchronize()

    def floor():
        host = torch.empty(max(sizes), dtype=torch.int32, pin_memory=pin)
        for n in sizes:
            host[:n].to(dev, non_blocking=True)
        sync()

    def lodtool_batches():
        staging = [torch.empty(65536, dtype=torch.int32, pin_memory=pin) for _ in range(2)]
        done = [None, None]
        for i, b in enumerate(lodtool.batches(path, output="varlen", **plan)):
            values = b["values"]
            slot = i % 2
            if done[slot] is not None:
                done[slot].synchronize()  # the copy that last used this buffer has finished
            buf = staging[slot][:len(values)]
            buf.numpy()[:] = values
            buf.to(dev, non_blocking=True)
            torch.from_numpy(b["cu_seqlens"]).to(dev, non_blocking=True)
            if pin:
                done[slot] = torch.cuda.Event()
                done[slot].record()
        sync()

    def loader(workers: int):
        def run():
            ds = BatchDataset(path, output="varlen", **plan)
            dl = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=workers, pin_memory=pin)
            for b in dl:
                b["values"].to(dev, non_blocking=True)
                b["cu_seqlens"].to(dev, non_blocking=True)
            sync()
        return run

    rows = []
    for name, fn in (("pinned copies (floor)", floor), ("lodtool.batches, 2 pinned buffers", lodtool_batches),
                     ("DataLoader(BatchDataset), 0 workers, pin_memory", loader(0)),
                     ("DataLoader(BatchDataset), 4 workers, pin_memory", loader(4))):
        fn()
        t = cpu_median(fn, repeat)
        rows.append(dict(path=name, tokens=total, batches=len(sizes), seconds=t))
    return rows


def feed_table(rows: list[dict]) -> str:
    floor = rows[0]["seconds"]
    lines = ["| to the device | batches | tokens | M tokens/s | vs floor |", "|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['path']} | {r['batches']} | {r['tokens']:,} | {r['tokens'] / r['seconds'] / 1e6:,.0f} "
                     f"| {floor / r['seconds']:.2f} |")
    return "\n".join(lines)


def run_case(case: dict, repeat: int, cpu_repeat: int, skip_cpu: bool) -> dict:
    ok = case["check"]()
    t_copy = gpu_median(memcpy(case["moved_bytes"]), repeat)
    t_kernel = gpu_median(case["kernel"], repeat)
    t_device = device_median(case["kernel"], repeat)
    t_full = gpu_median(case["lodtool"], repeat)
    t_upload = gpu_median(case["upload"], repeat)
    t_naive = gpu_median(case["naive"], repeat)
    t_cpu = None if skip_cpu else cpu_median(case["cpu"], cpu_repeat)
    row = dict(op=case["op"], width=case["width"], gb=case["moved_bytes"] / 1e9, check=ok, copy_s=t_copy,
               kernel_s=t_kernel, device_s=t_device, lodtool_s=t_full, upload_s=t_upload, naive_s=t_naive, cpu_s=t_cpu)
    cp.get_default_memory_pool().free_all_blocks()
    return row


def table(rows: list[dict]) -> str:
    head = ("| op | width | GB | copy ms | in-kernel ms | in-kernel vs copy | kernel ms | lodtool ms | kernel GB/s "
            "| vs copy | lodtool vs copy "
            "| host offsets ms | naive ms | x naive | cpu ms | x cpu | equal |")
    lines = [head, "|" + "---|" * 17]
    for r in rows:
        cpu = "n/a" if r["cpu_s"] is None else f"{r['cpu_s'] * 1e3:.1f}"
        xcpu = "n/a" if r["cpu_s"] is None else f"{r['cpu_s'] / r['lodtool_s']:.0f}x"
        lines.append(
            f"| {r['op']} | {r['width']} | {r['gb']:.2f} | {r['copy_s'] * 1e3:.3f} | {r['device_s'] * 1e3:.3f} "
            f"| {r['copy_s'] / r['device_s']:.2f} | {r['kernel_s'] * 1e3:.3f} "
            f"| {r['lodtool_s'] * 1e3:.3f} | {r['gb'] / r['kernel_s']:.0f} | {r['copy_s'] / r['kernel_s']:.2f} "
            f"| {r['copy_s'] / r['lodtool_s']:.2f} | {r['upload_s'] * 1e3:.2f} | {r['naive_s'] * 1e3:.3f} "
            f"| {r['naive_s'] / r['lodtool_s']:.1f}x "
            f"| {cpu} | {xcpu} | {'yes' if r['check'] else 'NO'} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gb", type=float, default=1.07, help="output (pool: input) size in GB (default 1.07)")
    ap.add_argument("--repeat", type=int, default=7, help="GPU runs per timing, median taken (>= 5)")
    ap.add_argument("--cpu-repeat", type=int, default=5, help="CPU runs per timing (>= 5)")
    ap.add_argument("--skip-cpu", action="store_true", help="skip the Numba CPU baseline")
    ap.add_argument("--ops", default="expand,pad,pool", help="comma-separated subset of expand,pad,pool")
    ap.add_argument("--widths", default="1,16")
    ap.add_argument("--out", default=None, help="folder for bench_gpu.md and bench_gpu.json")
    ap.add_argument("--feed", type=float, default=0, metavar="GB",
                    help="also feed varlen batches of a container of GB gigabytes of tokens to the device")
    ap.add_argument("--tmpdir", default=None, help="where the feed's container is made (removed afterwards)")
    args = ap.parse_args(argv)
    args.repeat = max(args.repeat, 5)
    args.cpu_repeat = max(args.cpu_repeat, 5)
    makers = {"expand": case_expand, "pad": case_pad, "pool": case_pool}
    props = cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id)
    numba_cuda = _cuda.numba_cuda()
    env = (f"{props['name'].decode()}, CuPy {cp.__version__}, numba {importlib.import_module('numba').__version__}"
           f" ({numba_cuda.__file__.split('site-packages/')[-1].split('/')[0]}), Python {platform.python_version()},"
           f" {os.cpu_count()} CPU cores; float32; medians of {args.repeat} GPU runs (CUDA events) and "
           f"{args.cpu_repeat} CPU runs")
    print(env, flush=True)
    rows = []
    for op in args.ops.split(","):
        for width in (int(w) for w in args.widths.split(",")):
            t0 = time.perf_counter()
            case = makers[op](width, args.gb, seed=width)
            rows.append(run_case(case, args.repeat, args.cpu_repeat, args.skip_cpu))
            del case
            cp.get_default_memory_pool().free_all_blocks()
            print(f"{op} width {width}: done in {time.perf_counter() - t0:.1f} s", file=sys.stderr, flush=True)
    # the fixed cost of a call: a tiny input (one tile) through each operator, offsets on the device
    tiny = []
    for op in args.ops.split(","):
        case = makers[op](1, 4096 * 4 / 1e9, seed=0)
        tiny.append(f"{op} {gpu_median(case['kernel'], args.repeat) * 1e6:.0f} us "
                    f"(in kernels {device_median(case['kernel'], args.repeat) * 1e6:.0f} us)")
    md = env + "\n\n" + table(rows) + "\n\nFixed cost per call (4 KB output, validated=True): " + "; ".join(tiny) + "\n"
    feed = []
    if args.feed:
        import tempfile

        with tempfile.TemporaryDirectory(dir=args.tmpdir) as folder:
            feed = feed_rows(feed_container(args.feed, folder), args.cpu_repeat)
        md += f"\nFeeding the device (medians of {args.cpu_repeat} epochs, wall clock):\n\n{feed_table(feed)}\n"
    print(md)
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, "bench_gpu.md"), "w") as f:
            f.write(md)
        with open(os.path.join(args.out, "bench_gpu.json"), "w") as f:
            json.dump(dict(env=env, rows=rows, feed=feed), f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
