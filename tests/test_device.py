"""lodtool._device: the one place that tells device arrays from host arrays."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from lodtool import _device
from lodtool.errors import LodBackendError


class FakeDeviceArray:
    __cuda_array_interface__ = {}

    def __init__(self, values):
        self.values = np.asarray(values)

    def get(self):
        return self.values


def test_device_arrays_are_told_by_the_cuda_array_interface():
    assert _device.is_device_array(FakeDeviceArray([1]))
    assert not any(_device.is_device_array(a) for a in (np.zeros(2), [1, 2], 3.0, None))


def test_to_host_copies_device_arrays_and_keeps_host_ones():
    host = np.arange(3)
    assert _device.to_host(host) is host
    assert _device.to_host(FakeDeviceArray([4, 5])).tolist() == [4, 5]


def test_array_module_is_numpy_for_host_arrays():
    assert _device.array_module(np.zeros(1), [1]) is np


def test_array_module_of_a_device_array_needs_cupy(monkeypatch):
    monkeypatch.setitem(sys.modules, "cupy", None)
    monkeypatch.setattr(_device, "_cupy_module", None)
    with pytest.raises(LodBackendError, match="needs CuPy"):
        _device.array_module(FakeDeviceArray([1]))
