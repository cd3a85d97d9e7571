"""The TensorFlow bridge: RaggedTensor round trips and the tf.data source of training batches.

Everything but the batches' signature needs TensorFlow, and is skipped where it is not installed.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import lodtool
from lodtool import LoDTensor
from lodtool.errors import LodUsageError
from lodtool.interop.tf import TF_OUTPUTS, batch_dataset, batch_signature, from_ragged_tensor, to_ragged_tensor
from tests.strategies import lod_tensors

try:
    import tensorflow as tf
except ImportError:
    tf = None
needs_tf = pytest.mark.skipif(tf is None, reason="needs tensorflow (an optional extra)")

DTYPES = ["int8", "int16", "int32", "int64", "uint8", "uint16", "float16", "float32", "float64", "bool",
          "complex64"]


@needs_tf
@settings(max_examples=50)
@given(lod_tensors(min_levels=0, max_levels=3, dtypes=DTYPES))
def test_round_trip(t):
    rt = to_ragged_tensor(t)
    if t.lod_level:
        assert rt.ragged_rank == t.lod_level
        assert [s.numpy().tolist() for s in rt.nested_row_splits] == t.lod
        np.testing.assert_array_equal(rt.flat_values.numpy(), t.data)
    back = from_ragged_tensor(rt)
    assert back.equals(t) and back.dtype == t.dtype


@needs_tf
def test_tensorflows_own_ragged_tensors():
    rt = tf.RaggedTensor.from_row_splits(tf.constant([[1, 2], [3, 4], [5, 6]]), tf.constant([0, 2, 3], tf.int32))
    t = from_ragged_tensor(rt)
    assert t.lod == [[0, 2, 3]] and t.element_shape == (2,) and t.offsets[0].dtype == np.int64
    uniform = tf.RaggedTensor.from_uniform_row_length(tf.ragged.constant([[1], [2, 3], [], [4]]), 2)
    assert from_ragged_tensor(uniform).lod == [[0, 2, 4], [0, 1, 3, 3, 4]]


@needs_tf
def test_int32_row_splits():
    t = LoDTensor(np.arange(3), [[0, 1, 3]])
    assert to_ragged_tensor(t, row_splits_dtype="int32").row_splits.dtype == tf.int32
    with pytest.raises(LodUsageError):
        to_ragged_tensor(t, row_splits_dtype="int16")


# -- batch_dataset: a container's training batches as a tf.data source ---------------------------------
#: what lodtool.batches reads for each output of batch_dataset
READ_AS = {"padded": "padded", "ragged": "jagged-numpy", "varlen": "varlen"}


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """A container of 60 sequences of 0..12 rows of 2 float32 each."""
    rng = np.random.default_rng(7)
    lengths = rng.integers(0, 13, 60)
    data = rng.standard_normal((int(lengths.sum()), 2)).astype(np.float32)
    path = tmp_path_factory.mktemp("tf") / "c.lod.h5"
    lodtool.save(path, LoDTensor(data, recursive_sequence_lengths=[lengths.tolist()]))
    return path


@pytest.mark.parametrize("output", TF_OUTPUTS)
def test_the_signature_describes_every_batch_lodtool_reads(corpus, output):
    signature = batch_signature(output, np.float32, (2,))
    for b in lodtool.batches(corpus, output=READ_AS[output], max_tokens=40, mode="sorted"):
        extra = {"offsets"} if output == "ragged" else set()  # flat values + offsets become one RaggedTensor
        assert set(b) - {"batch"} == set(signature) | extra
        for name, (shape, dtype) in signature.items():
            value = np.asarray(b[name])
            if output == "ragged" and name == "values":
                shape = shape[1:]  # [B, None, 2] as flat rows [None, 2]
            assert value.dtype == dtype, name
            assert value.ndim == len(shape) and all(s is None or s == v for s, v in zip(shape, value.shape)), name


def test_an_unknown_output_is_refused_without_tensorflow():
    with pytest.raises(LodUsageError, match="output 'jagged' is not one of padded, ragged, varlen"):
        batch_signature("jagged", np.float32)


@needs_tf
@pytest.mark.parametrize("output", TF_OUTPUTS)
def test_batch_dataset_yields_what_lodtool_batches_reads(corpus, output):
    options = {"max_tokens": 40, "mode": "megabatch", "seed": 3, "epoch": 1}
    expected = [{k: np.array(v) for k, v in b.items()}
                for b in lodtool.batches(corpus, output=READ_AS[output], **options)]
    ds = batch_dataset(corpus, output=output, **options).prefetch(8)  # TF holds batches while more are read
    got = list(ds)
    assert len(got) == len(expected) > 1
    for b, want in zip(got, expected):
        assert set(b) == set(batch_signature(output, np.float32, (2,)))
        for name, value in b.items():
            if output == "ragged" and name == "values":
                assert isinstance(value, tf.RaggedTensor)
                np.testing.assert_array_equal(value.row_splits.numpy(), want["offsets"])
                value = value.flat_values
            np.testing.assert_array_equal(value.numpy(), want[name], err_msg=name)


@needs_tf
def test_batch_dataset_takes_a_saved_plan_and_each_epochs_order(corpus, tmp_path):
    plan = lodtool.batch_plan(corpus, max_sequences=7, mode="random", seed=1, epoch=0)
    plan.save(tmp_path / "plan.npz")
    from_file = [b["indices"].numpy().tolist() for b in batch_dataset(corpus, tmp_path / "plan.npz")]
    assert from_file == [plan.batch(i).tolist() for i in range(len(plan))]
    epoch_1 = [b["indices"].numpy().tolist()
               for b in batch_dataset(corpus, max_sequences=7, mode="random", seed=1, epoch=1)]
    assert sorted(sum(epoch_1, [])) == sorted(sum(from_file, [])) and epoch_1 != from_file
    with pytest.raises(LodUsageError, match="not one of padded, ragged, varlen"):
        batch_dataset(corpus, max_sequences=7, output="jagged")


@needs_tf
@settings(max_examples=5, deadline=None)
@given(lengths=st.lists(st.integers(0, 6), min_size=1, max_size=12), max_sequences=st.integers(1, 5))
def test_padded_batches_hold_every_sequence_of_any_container(tmp_path_factory, lengths, max_sequences):
    path = tmp_path_factory.mktemp("tf_any") / "c.lod.h5"
    t = LoDTensor(np.arange(sum(lengths), dtype=np.int32), recursive_sequence_lengths=[lengths])
    lodtool.save(path, t)
    seen = {}
    for b in batch_dataset(path, max_sequences=max_sequences, mode="sorted", pad_value=-1):
        for i, row, mask in zip(b["indices"].numpy(), b["values"].numpy(), b["mask"].numpy()):
            seen[int(i)] = row[mask].tolist()
    assert [seen[i] for i in range(len(lengths))] == t.to_nested()


@needs_tf
def test_a_plan_for_another_file_or_a_pad_value_that_does_not_fit_is_refused_up_front(corpus, tmp_path):
    other = tmp_path / "other.lod.h5"
    lodtool.save(other, LoDTensor(np.arange(3, dtype=np.int32), recursive_sequence_lengths=[[1, 2]]))
    lodtool.batch_plan(corpus, max_sequences=7).save(tmp_path / "plan.npz")
    with pytest.raises(LodUsageError, match=r"other\.lod\.h5: the plan is for 60 sequences"):
        batch_dataset(other, tmp_path / "plan.npz")
    with pytest.raises(LodUsageError, match=r"pad value 0\.5 does not fit"):
        batch_dataset(other, max_sequences=1, pad_value=0.5)
