"""lodtool.limits: sizes given by a user, and the memory limit."""

from __future__ import annotations

import numpy as np
import pytest

from lodtool.errors import LodUsageError
from lodtool.limits import parse_size


@pytest.mark.parametrize("text, expected", [("256MB", 256 << 20), ("1.5KiB", 1536), ("2g", 2 << 30), (" 512 M ", 512 << 20),
                                            ("1000", 1000), (4096, 4096), (np.int64(7), 7), ("1P", 1 << 50)])
def test_sizes(text, expected):
    assert parse_size(text) == expected


@pytest.mark.parametrize("bad", ["", "ten", "-1", "0", 0, -5, True, 1.5, None, "inf", "infG", "nan", "1e400",
                                 "--1M"])
def test_bad_sizes_are_usage_errors_that_name_what(bad):
    with pytest.raises(LodUsageError, match=r"^bad partition size "):
        parse_size(bad, "partition size")
