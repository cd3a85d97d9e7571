"""Regenerate everything in sample_data/ (deterministic: same bytes on every run).

    python sample_data/make_sample_data.py

The small files are the worked examples of the LoD design docs; corpus.jsonl is
a realistic set of documents > sentences > token ids.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent


def write_json(name: str, obj) -> None:
    (HERE / name).write_text(json.dumps(obj, separators=(",", ":")) + "\n")


def main() -> None:
    # 3 articles of 3, 1 and 2 sentences of 3,2,4 / 1 / 2,3 words (token ids 1..15)
    tokens = iter(range(1, 16))
    write_json("articles.json", [[[next(tokens) for _ in range(n)] for n in article]
                                 for article in ([3, 2, 4], [1], [2, 3])])
    # a mini-batch of 3 sentences of 3, 1 and 2 words, each word a 4-dim vector
    rng = np.random.default_rng(0)
    vectors = np.round(rng.standard_normal((6, 4)), 3).tolist()
    write_json("sentences.json", [vectors[0:3], vectors[3:4], vectors[4:6]])
    # Paddle's LoDTensor doc example: lengths [[2, 1], [2, 2, 3]] over 7 rows of width 2
    rows = [[1, 2], [3, 4], [5, 6], [7, 8], [9, 10], [11, 12], [13, 14]]
    write_json("paddle_lod.json", [[rows[0:2], rows[2:4]], [rows[4:7]]])
    # sequence_expand from the LoD user guide: x lengths [[1, 3]], y lengths [[1, 3], [1, 2, 1, 2]]
    write_json("expand_x.json", [[[1.1]], [[2.2], [3.3], [4.4]]])
    y = [[1.1]] * 6
    write_json("expand_y.json", [[y[0:1]], [y[1:3], y[3:4], y[4:6]]])
    # a tiny video batch of 3, 1 and 2 frames (48x64 grey frames; the doc's are 640x480)
    videos = HERE / "videos"
    videos.mkdir(exist_ok=True)
    for i, frames in enumerate((3, 1, 2)):
        clip = (np.arange(frames * 48 * 64, dtype=np.uint32).reshape(frames, 48, 64) * (i + 7) % 251).astype(np.uint8)
        np.save(videos / f"video_{i}.npy", clip)
    # a realistic corpus: 3,000 documents > sentences > token ids (Zipf-like vocabulary)
    rng = np.random.default_rng(2026)
    lines = []
    for _ in range(3000):
        n_sent = int(rng.integers(1, 16))
        doc = []
        for _ in range(n_sent):
            n_tok = int(min(rng.geometric(1 / 14), 80))
            doc.append(np.minimum(rng.zipf(1.5, n_tok), 30_000).tolist())
        lines.append(json.dumps(doc, separators=(",", ":")))
    (HERE / "corpus.jsonl").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
