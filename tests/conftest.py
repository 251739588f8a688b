"""Fixtures every test file can use: in-memory spans and metrics, the reference corpus, a clean OTEL env.

The harness is the public one (:mod:`rulvar_otel.testing`), so the project tests itself the way a
host would. Tests that start real services (Prometheus, Alertmanager, Phoenix, a collector,
Jaeger) carry the ``live`` marker: ``pytest -m "not live"`` skips them locally; the default run
(CI's, ``scripts/test.sh``) runs everything.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.metrics import Meter
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from rulvar_otel.core.handle import RunOutcome
from rulvar_otel.errors import RunRejectedError
from rulvar_otel.export import SETTINGS
from rulvar_otel.testing import MetricCapture, SpanCapture
from tests import _support

# Files whose tests start real services are live by name too (test_*_live.py, test_phoenix*,
# test_jaeger*, test_stack*), so a new one cannot forget the marker its module should carry.
_LIVE_FILE_PREFIXES = ("test_phoenix", "test_jaeger", "test_stack")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        name = item.path.name
        if name.startswith(_LIVE_FILE_PREFIXES) or name.endswith("_live.py"):
            item.add_marker(pytest.mark.live)


@pytest.fixture
def span_capture() -> SpanCapture:
    """A tracer whose spans stay in memory (sequential ids, start order)."""
    return SpanCapture()


@pytest.fixture
def metric_capture() -> Iterator[MetricCapture]:
    """A meter read from memory; shut down after the test."""
    capture = MetricCapture()
    yield capture
    capture.shutdown()


@pytest.fixture
def meter_and_reader(metric_capture: MetricCapture) -> tuple[Meter, InMemoryMetricReader]:
    """The meter and the reader of :func:`metric_capture`, for tests that fold metrics by hand."""
    return metric_capture.meter, metric_capture.reader


@pytest.fixture
def reference_stream() -> Callable[[str], tuple[list[dict[str, Any]], RunOutcome | RunRejectedError]]:
    """``reference_stream("tools")`` -> (a fresh copy of the corpus stream's events, its outcome)."""

    def load(name: str) -> tuple[list[dict[str, Any]], RunOutcome | RunRejectedError]:
        return _support.events(name), _support.outcome(name)

    return load


@pytest.fixture
def otel_env_cleared(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """No ``OTEL_*`` variable the export reads is set, and the working directory is a temp dir.

    The embedded default writes ``./rulvar-traces.otlp.jsonl``: it must land in ``tmp_path``.
    """
    for setting in SETTINGS:
        monkeypatch.delenv(setting.name, raising=False)
    monkeypatch.chdir(tmp_path)
    return tmp_path


_REPO_ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(autouse=True, scope="session")
def _tests_leave_the_checkout_alone() -> Iterator[None]:
    """Fails the session when a test wrote a file into the repository's root directory.

    Tool caches (``.hypothesis``, ``__pycache__`` and the like) are the tools' own business.
    """

    def files() -> set[str]:
        return {p.name for p in _REPO_ROOT.iterdir() if not p.name.startswith((".", "__"))}

    before = files()
    yield
    written = sorted(files() - before)
    assert not written, f"tests wrote into the checkout's root: {written}"
