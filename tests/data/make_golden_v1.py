"""Write tests/data/golden_v1.h5: a small container of format v1.0, kept forever as a reading test.

Run from the repository root: ``python tests/data/make_golden_v1.py``.  The file
is committed; tests/test_golden.py reads it with lodtool and with plain h5py and
checks every value, so lodtool keeps reading v1.0 files as long as it lives.
Regenerate it only for a new format version (then write golden_v2.h5 instead).

Contents:
  tokens  the seeds' three articles: int64 token ids 1..15, lengths [[3, 1, 2], [3, 2, 4, 1, 2, 3]],
          level names (article, sentence)
  labels  one int8 tag per token, sharing tokens' offsets datasets (HDF5 hard links)
  paddle  the user guide's 7-row example: float32 rows of width 2, lengths [[2, 1], [2, 2, 3]]
"""

from __future__ import annotations

import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(os.path.dirname(HERE)))

from lodtool import LoDTensor  # noqa: E402
from lodtool.container import save  # noqa: E402

LENGTHS = [[3, 1, 2], [3, 2, 4, 1, 2, 3]]
TOKENS = np.arange(1, 16, dtype=np.int64)
LABELS = np.array([1, 2, 3, 1, 2, 1, 2, 2, 3, 1, 1, 2, 1, 2, 3], dtype=np.int8)
PADDLE_LENGTHS = [[2, 1], [2, 2, 3]]
PADDLE = (np.arange(14, dtype=np.float32) / 2).reshape(7, 2)


def tensors() -> dict[str, LoDTensor]:
    names = ["article", "sentence"]
    return {
        "tokens": LoDTensor(TOKENS, recursive_sequence_lengths=LENGTHS, level_names=names),
        "labels": LoDTensor(LABELS, recursive_sequence_lengths=LENGTHS, level_names=names),
        "paddle": LoDTensor(PADDLE, recursive_sequence_lengths=PADDLE_LENGTHS),
    }


def main(path: str = os.path.join(HERE, "golden_v1.h5")) -> None:
    save(path, tensors(), share_lod=True)
    print(f"wrote {path}")


if __name__ == "__main__":
    main(*sys.argv[1:])
