"""Make the golden Paddle tensor files lodtool's pdtensor codec is tested against.

Run with PaddlePaddle installed (these were made with paddle 3.3.1, CPU)::

    python tests/data/paddle/make_pdtensor_golden.py

Each ``<case>.pdtensor`` is written by Paddle's own ``core.save_dense_tensor``;
``combined.pdiparams`` by ``core.save_combine_func`` (what ``.pdiparams`` files
hold); ``bf16.pdtensor`` holds bfloat16 (NumPy uint16 set into a Paddle tensor
becomes BF16), which lodtool must refuse by name; ``no_rows_lod_past_end.pdtensor``
holds a LoD Paddle accepts only because the tensor has no rows, which lodtool
refuses.  ``expected.npz`` holds what
went in: ``<case>__data`` and ``<case>__offsets_<k>``.
"""

from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
rng = np.random.default_rng(18)

CASES = {
    # name: (data, lod as offsets)
    "tokens_int64_lod2": (np.arange(7, dtype=np.int64).reshape(7, 1) * 11, [[0, 2, 3], [0, 2, 4, 7]]),
    "emb_float32_lod1": (rng.standard_normal((5, 3)).astype(np.float32), [[0, 3, 3, 5]]),
    "plain_float16_lod0": (np.array([[0.5, -1.0], [2.0, 65504.0], [0.0, -0.0], [1e-3, 3.0]], np.float16), []),
    "mask_bool_lod1": (np.array([True, False, True, True, False, True]), [[0, 1, 6]]),
    "pixels_uint8_lod3": (np.arange(16, dtype=np.uint8).reshape(4, 2, 2), [[0, 1, 2], [0, 1, 3], [0, 2, 3, 4]]),
    "small_int8_lod1": (np.array([-128, 0, 127], np.int8), [[0, 2, 3]]),
    "small_int16_lod1": (np.array([-32768, 1, 32767, 5], np.int16), [[0, 0, 4]]),
    "small_int32_lod1": (np.array([[1, -2], [3, 2147483647]], np.int32), [[0, 1, 2]]),
    "small_float64_lod2": (np.array([np.pi, -np.e, 1e300, np.inf, -np.inf]), [[0, 1, 2], [0, 3, 5]]),
    "small_complex64_lod1": (np.array([1 + 2j, -3.5j, 4], np.complex64), [[0, 1, 3]]),
    "small_complex128_lod0": (np.array([[1 + 1j], [2 - 2j]], np.complex128), []),
    "empty_float32_lod1": (np.zeros((0, 2), np.float32), [[0, 0]]),
}
COMBINED = ["emb_float32_lod1", "plain_float16_lod0", "tokens_int64_lod2"]


def dense(data, lod):
    from paddle.base import core  # only this script needs paddle; the tests import CASES without it

    t = core.DenseTensor()
    t.set(data, core.CPUPlace())
    if lod:
        t.set_lod(lod)
    return t


def main():
    from paddle.base import core

    expected = {}
    for name, (data, lod) in CASES.items():
        core.save_dense_tensor(dense(data, lod), str(HERE / f"{name}.pdtensor"))
        expected[f"{name}__data"] = data
        for k, level in enumerate(lod):
            expected[f"{name}__offsets_{k}"] = np.array(level, np.int64)
    core.save_combine_func([dense(*CASES[n]) for n in COMBINED], COMBINED, str(HERE / "combined.pdiparams"),
                           True, False, False)
    core.save_dense_tensor(dense(np.array([16256, 16384], np.uint16), [[0, 2]]), str(HERE / "bf16.pdtensor"))
    # Paddle skips the last-offset check when a tensor has no rows; lodtool does not (it refuses this file)
    core.save_dense_tensor(dense(np.zeros(0, np.float32), [[0, 3]]), str(HERE / "no_rows_lod_past_end.pdtensor"))
    np.savez(HERE / "expected.npz", **expected)


if __name__ == "__main__":
    main()
