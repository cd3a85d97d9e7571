"""``lodtool.text``: splitting documents so the pieces join back exactly, and the tokenizer wrapper."""

from __future__ import annotations

import os
import sys

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from lodtool.errors import LodBackendError, LodInputError, LodUsageError
from lodtool.text import SPLITS, TextTokenizer, decode_nested, decoder_for, split_text
from lodtool.tokens import TokenInfo

pytest.importorskip("tokenizers")
pytest.importorskip("blingfire")

SAMPLE = os.path.join(os.path.dirname(__file__), os.pardir, "sample_data", "tokenizer.json")
TEXT = st.text(st.characters(blacklist_categories=("Cs",)), max_size=200)


@pytest.fixture(scope="module")
def bpe():
    return TextTokenizer.load(SAMPLE)


@given(TEXT, st.sampled_from(SPLITS))
def test_the_pieces_of_a_split_join_back_to_the_text(text, how):
    pieces = split_text(text, how)
    assert "".join(pieces) == text and all(pieces)


def test_sentences_and_paragraphs_are_cut_where_a_reader_would():
    assert split_text("Dr. Smith paid $3.50. He left!  Then?", "sentences") == \
        ["Dr. Smith paid $3.50. ", "He left!  ", "Then?"]
    assert split_text("one\n\n \ntwo\nthree", "paragraphs") == ["one\n\n \n", "two\nthree"]


@settings(max_examples=60, deadline=None)
@given(st.lists(TEXT, max_size=5))
def test_a_byte_level_bpe_round_trip_is_exact(bpe, texts):
    ids, lengths = bpe.encode(texts)
    assert ids.dtype == np.int64 and lengths.sum() == ids.size and ids.max(initial=0) < bpe.vocab_size
    ends = np.cumsum(lengths)
    assert bpe.decode([ids[e - n:e] for e, n in zip(ends, lengths)]) == texts


def test_the_token_info_of_the_sample_tokenizer(bpe):
    info = bpe.token_info()
    assert (info.vocab_size, info.eos_id, info.pad_id, info.bos_id) == (2048, 0, 1, None)
    assert info.tokenizer_name == "sample_data" and info.tokenizer_json == open(SAMPLE, "rb").read()
    assert bpe.token_info(store_json=False).tokenizer_json is None
    assert bpe.token_info(eos_id=5).eos_id == 5
    with pytest.raises(LodUsageError, match="has no token '<nope>'"):
        bpe.special_id("eos_id", "<nope>")


def test_a_file_that_is_no_tokenizer_is_one_line_naming_it(tmp_path):
    bad = tmp_path / "tokenizer.json"
    bad.write_text('{"version": "1.0", "model": 3}')
    with pytest.raises(LodInputError, match=r"tokenizer.json: not a tokenizer.json that the tokenizers library") as e:
        TextTokenizer.load(bad)
    assert "\n" not in str(e.value)
    bad.write_bytes(b"\xff{}")
    with pytest.raises(LodInputError, match="invalid UTF-8 at byte 0"):
        TextTokenizer.load(bad)


def test_decoding_needs_a_stored_tokenizer_and_keeps_the_nesting(bpe):
    with pytest.raises(LodUsageError, match=r"x.h5: tensor 't' stores no tokenizer \(a container packed with one "
                                            r"stores it\), so its ids cannot be read as text$"):
        decoder_for(TokenInfo(vocab_size=5), "x.h5: tensor 't'")
    decoder = decoder_for(bpe.token_info(), "x.h5")
    from lodtool import LoDTensor

    ids, lengths = bpe.encode(["Hello ", "world.", "Again"])
    chunk = LoDTensor(ids, [[0, 2, 3], np.concatenate(([0], np.cumsum(lengths))).tolist()])
    assert decode_nested(chunk, decoder) == [["Hello ", "world."], ["Again"]]


def test_sentences_without_blingfire_name_the_split_keyword(monkeypatch):
    monkeypatch.setitem(sys.modules, "blingfire", None)  # as if it were not installed
    with pytest.raises(LodBackendError, match=r"^split='sentences' needs blingfire: pip install 'lodtool\[text\]'$"):
        split_text("One. Two.", "sentences")
