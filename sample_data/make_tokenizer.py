"""Make sample_data/text.jsonl (a small text corpus) and train sample_data/tokenizer.json on it.

    pip install 'lodtool[text]' && python sample_data/make_tokenizer.py

The corpus is lodtool's own documentation (docs/*.md but the generated CLI reference and the benchmark logs),
one document per section, as JSON Lines ``{"source", "title", "text"}``: real prose, tables and code, which the
project owns.  The tokenizer is a byte-level BPE of 2,048 ids (GPT-2's design: every byte sequence encodes, and
decoding gives the text back exactly) with ``<|endoftext|>`` and ``<pad>`` as special tokens, trained by the
``tokenizers`` library itself: nothing is downloaded.  Training is deterministic, so the same docs give the same
bytes; the files are committed, and regenerated only when this script changes.
"""

from __future__ import annotations

import json
from pathlib import Path

HERE = Path(__file__).resolve().parent
DOCS = HERE.parent / "docs"
SKIPPED = {"cli.md", "benchmarks.md"}
VOCAB_SIZE = 2048
SPECIAL_TOKENS = ["<|endoftext|>", "<pad>"]


def sections(path: Path):
    """``(title, text)`` of each ``#`` / ``##`` section of a Markdown file."""
    title, lines = path.stem, []
    for line in path.read_text(encoding="utf-8").splitlines(keepends=True):
        if line.startswith(("# ", "## ")) and lines:
            yield title, "".join(lines).strip("\n")
            lines = []
        if line.startswith(("# ", "## ")):
            title = line.lstrip("#").strip()
        lines.append(line)
    if lines:
        yield title, "".join(lines).strip("\n")


def make_corpus() -> list[str]:
    texts, rows = [], []
    for path in sorted(DOCS.glob("*.md")):
        if path.name in SKIPPED:
            continue
        for title, text in sections(path):
            rows.append(json.dumps({"source": f"docs/{path.name}", "title": title, "text": text},
                                   ensure_ascii=False))
            texts.append(text)
    (HERE / "text.jsonl").write_text("\n".join(rows) + "\n", encoding="utf-8")
    return texts


def train(texts: list[str]) -> None:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB_SIZE, special_tokens=SPECIAL_TOKENS, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(texts, trainer=trainer)
    tok.save(str(HERE / "tokenizer.json"))


if __name__ == "__main__":
    train(make_corpus())
