"""The text reader of ``pack`` (lodtool/io/text.py) called as a library: its refusals name the keyword
arguments a caller passes (``tokenizer=``, ``field=``, ``bos_id=``), never the CLI's flags (tests/test_cli_text.py
sees those)."""

from __future__ import annotations

import io
import os

import numpy as np
import pytest

from lodtool.errors import LodInputError, LodUsageError
from lodtool.io.text import NO_TOKENIZER, TextOptions, read, write
from lodtool.tensor import LoDTensor

pytest.importorskip("tokenizers")

TOKENIZER = os.path.join(os.path.dirname(__file__), os.pardir, "sample_data", "tokenizer.json")


def chunks(source: bytes, **options):
    return list(read("text", [io.BytesIO(source)], **options))


def test_text_without_a_tokenizer_or_a_vocabulary_is_refused_naming_the_keyword():
    with pytest.raises(LodUsageError) as err:
        chunks(b'{"text": "a"}\n')
    assert str(err.value) == NO_TOKENIZER and "tokenizer='tokenizer.json'" in NO_TOKENIZER
    with pytest.raises(LodUsageError, match="packing text needs a tokenizer: give tokenizer='tokenizer.json'"):
        TextOptions(None).load()
    with pytest.raises(LodUsageError, match=r"count them first \(count_words\) or give vocabulary=\.\.\.$"):
        TextOptions(None, words=True).load()


def test_a_special_token_the_tokenizer_lacks_names_the_keyword_that_gives_its_id():
    with pytest.raises(LodUsageError) as err:
        chunks(b'{"text": "a"}\n', text=TextOptions(TOKENIZER, kind="jsonl", add_bos=True))
    assert str(err.value) == ("add_bos=True: the tokenizer has no BOS token that lodtool knows by name; "
                              "give bos_id=...")


def test_a_missing_field_or_column_and_a_level_count_name_their_keywords():
    with pytest.raises(LodInputError, match=r"no field 'text' \(its fields: body\); field=\.\.\. names it$"):
        chunks(b'{"body": "a"}\n', text=TextOptions(TOKENIZER, kind="jsonl"))
    with pytest.raises(LodUsageError, match=r"packs 2 LoD level\(s\), not lod_level=1$"):
        chunks(b'{"text": "a\\nb"}\n', text=TextOptions(TOKENIZER, kind="jsonl", split="lines"), lod_level=1)


def test_ids_past_the_dtype_name_the_dtype_keyword():
    with pytest.raises(LodInputError, match=r"does not fit uint8; give a wider dtype=\.\.\.$"):
        chunks(b'{"text": "zebra quartz xylophone"}\n' * 50, text=TextOptions(TOKENIZER, kind="jsonl"), dtype="uint8")


def test_a_tensor_in_memory_cannot_be_written_as_text_and_the_message_names_detokenize():
    tensor = LoDTensor(np.arange(3), [[0, 3]])
    with pytest.raises(LodUsageError, match=r"write text from a container \(detokenize=True\)"):
        write("text", tensor, io.BytesIO())


@pytest.mark.parametrize("line, message", [
    (b'{"text": {"a": 1}}\n', "<stream>:1: field 'text' is an object, not a string"),
    (b'{"text": null}\n', "<stream>:1: field 'text' is null, not a string"),
    (b'{"text": 5}\n', "<stream>:1: field 'text' is a number, not a string"),
    (b'[1]\n', "<stream>:1: a JSON Lines text input holds one object per line, this one is a list"),
])
def test_a_field_that_is_no_string_is_named_by_its_json_kind(line, message):
    with pytest.raises(LodInputError) as err:
        chunks(line, text=TextOptions(TOKENIZER, kind="jsonl"))
    assert str(err.value) == message
