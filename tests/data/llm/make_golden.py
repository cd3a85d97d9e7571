"""Regenerate the golden token datasets of tests/data/llm with the real writers (not lodtool's).

    python -m venv /tmp/llm-venv --system-site-packages
    /tmp/llm-venv/bin/pip install megatron-core datatrove dolma   # dolma: --no-deps, plus msgspec smart_open
    /tmp/llm-venv/bin/python tests/data/llm/make_golden.py

Writes, next to this script:

- ``megatron_<dtype>.bin/.idx``: megatron-core's ``IndexedDatasetBuilder``, one
  per dtype code it has (1-8), with empty documents and empty sequences;
- ``megatron_multimodal.bin/.idx``: the same with ``multimodal=True`` (a
  ``sequence_modes`` array after ``document_indices``);
- ``datatrove_uint16.ds`` (+ ``.index``, ``.loss``, ``.metadata``) and
  ``datatrove_uint32.ds`` (+ ``.index``): datatrove's ``TokenizedFile``;
- ``dolma_uint16.npy`` + ``.csv.gz``: dolma's ``MemmapWriter``;
- ``expected.json``: what each of them holds, as nested lists.

dolma's package ``__init__`` imports its taggers (fasttext, a compiled
extension); only its tokenizer's writer is needed, so it is imported without
them.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import types

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))

#: documents of sequences of tokens: an empty document, an empty sequence, a lone token
DOCUMENTS = [[[1, 2, 3], [4]], [], [[5]], [[], [6, 7, 8]], [[9, 10, 11, 12]]]
#: documents of tokens (datatrove, dolma: one level), with an empty document
FLAT = [[101, 102, 103], [], [104], [105, 106, 107, 108, 109], [110, 111]]
#: per-token loss mask of FLAT (datatrove's .ds.loss)
LOSS = [[True, False, True], [], [False], [True, True, True, False, False], [True, True]]
BIG = [[70000, 1, 2], [], [4294967295]]


def megatron() -> dict:
    import torch
    from megatron.core.datasets.indexed_dataset import DType, IndexedDatasetBuilder

    expected = {}
    for code in sorted(c.value for c in DType):
        dtype = DType.dtype_from_code(code)
        prefix = os.path.join(HERE, f"megatron_{np.dtype(dtype).name}")
        builder = IndexedDatasetBuilder(prefix + ".bin", dtype=dtype)
        for doc in DOCUMENTS:
            for seq in doc:
                builder.add_item(torch.tensor(seq, dtype=torch.int64))
            builder.end_document()
        builder.finalize(prefix + ".idx")
        expected[os.path.basename(prefix)] = {"code": code, "dtype": np.dtype(dtype).name, "documents": DOCUMENTS}
    prefix = os.path.join(HERE, "megatron_multimodal")
    builder = IndexedDatasetBuilder(prefix + ".bin", dtype=np.uint16, multimodal=True)
    for doc in DOCUMENTS:
        builder.add_document(torch.tensor([t for s in doc for t in s], dtype=torch.int64), [len(s) for s in doc],
                             modes=[i % 2 for i in range(len(doc))])
    builder.finalize(prefix + ".idx")
    expected["megatron_multimodal"] = {"code": 8, "dtype": "uint16", "documents": DOCUMENTS}
    return expected


def datatrove() -> dict:
    from datatrove.pipeline.tokens.tokenizer import TokenizedFile

    f = TokenizedFile(HERE, "datatrove_uint16.ds", save_loss_metadata=True, tokenizer_name_or_path="gpt2",
                      save_final_metadata=True, token_size=2)
    for doc, loss in zip(FLAT, LOSS):
        f.write(doc, np.array(loss, dtype=bool))
    f.close()
    g = TokenizedFile(HERE, "datatrove_uint32.ds", token_size=4)
    for doc in BIG:
        g.write(doc, None)
    g.close()
    return {"datatrove_uint16.ds": {"dtype": "uint16", "documents": FLAT, "loss": LOSS, "tokenizer": "gpt2"},
            "datatrove_uint32.ds": {"dtype": "uint32", "documents": BIG}}


def _dolma_writer():
    spec = importlib.util.find_spec("dolma")
    root = os.path.dirname(spec.origin)
    for name, sub in (("dolma", ""), ("dolma.core", "core"), ("dolma.tokenizer", "tokenizer")):
        module = types.ModuleType(name)
        module.__path__ = [os.path.join(root, sub)]
        sys.modules.setdefault(name, module)
    from dolma.tokenizer.data_types import TokenizerOutput
    from dolma.tokenizer.memmap_writer import MemmapWriter

    return MemmapWriter, TokenizerOutput


def dolma() -> dict:
    MemmapWriter, TokenizerOutput = _dolma_writer()
    path = os.path.join(HERE, "dolma_uint16.npy")
    with MemmapWriter(path, dtype=np.dtype("uint16"), max_tokens=1024) as w:
        for i, doc in enumerate(FLAT):
            w.write(TokenizerOutput.from_tokens(id=f"doc-{i}", src="golden.jsonl.gz", loc=i, tokens=doc))
    return {"dolma_uint16.npy": {"dtype": "uint16", "documents": FLAT}}


def main() -> None:
    expected = {}
    expected.update(megatron())
    expected.update(datatrove())
    expected.update(dolma())
    with open(os.path.join(HERE, "expected.json"), "w") as f:
        json.dump(expected, f, indent=1, sort_keys=True)
        f.write("\n")


if __name__ == "__main__":
    main()
