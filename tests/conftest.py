"""Shared test set-up: 4 forced CPU devices (for the sharding tests) and small helpers."""

import os

# Must be set before JAX initialises its backends; harmless for tests that use 1 device.
os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=4")
os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import pytest  # noqa: E402


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: long test, run by benchmark/launch scripts, not CI")
