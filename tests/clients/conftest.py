"""Fixtures for the Oxbow client suite: a real broker per test.

Run from the repository root:  python -m pytest tests/clients -q
Binary: $OXBOW_BROKER_BIN, default target/release/oxbow-broker. A missing
binary fails every test (it is never a skip).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from oxbow_harness import Broker, free_port, require_broker_binary  # noqa: E402


@pytest.fixture
def broker_factory(request, tmp_path):
    """make(overrides=None, name="broker", start=True) -> started Broker."""
    brokers: list[Broker] = []
    request.node._oxbow_brokers = brokers

    def make(overrides: dict[str, str] | None = None, name: str = "broker", start: bool = True) -> Broker:
        binary = require_broker_binary()
        b = Broker(
            binary=binary,
            port=free_port(),
            data_dir=tmp_path / f"{name}-data",
            log_path=tmp_path / f"{name}.log",
            overrides=overrides,
        )
        brokers.append(b)
        if start:
            b.start()
        return b

    yield make
    for b in brokers:
        b.close()


@pytest.fixture
def broker(broker_factory) -> Broker:
    return broker_factory()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.failed:
        for b in getattr(item, "_oxbow_brokers", []):
            report.sections.append(
                (f"oxbow broker log tail ({b.log_path})", b.log_tail(80))
            )
