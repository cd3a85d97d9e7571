"""Test configuration: hypothesis profiles and the long-run switch.

LODTOOL_TEST_PROFILE=long runs the long profiles (10,000 hypothesis examples,
the long fuzzing suites, tests marked ``slow``).  The default profile keeps the
whole suite within a few minutes on a 2-core machine.
"""

from __future__ import annotations

import os
import signal

import pytest
from hypothesis import HealthCheck, settings

LONG = os.environ.get("LODTOOL_TEST_PROFILE", "").lower() == "long"

# A suite started in the background of a non-interactive shell (`pytest &` in a script) inherits SIGINT
# ignored, and so do the processes it starts; the signal tests need Ctrl-C delivered as a terminal would.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

# pytest-xdist's workers inherit COLUMNS=80; the report tests expect a pipe's width, as in a plain run
os.environ.pop("COLUMNS", None)

settings.register_profile("default", max_examples=100, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
settings.register_profile("long", max_examples=10_000, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
settings.load_profile("long" if LONG else "default")


def pytest_collection_modifyitems(config, items):
    if LONG:
        return
    skip_slow = pytest.mark.skip(reason="long profile only (LODTOOL_TEST_PROFILE=long)")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip_slow)


def pytest_report_header(config):
    # the fuzzing suites draw their variants from this seed: a failure names what to rerun
    seed = os.environ.get("LODTOOL_FUZZ_SEED", "0")
    return f"lodtool test profile: {'long' if LONG else 'default'}; fuzz seed: {seed} (LODTOOL_FUZZ_SEED)"
