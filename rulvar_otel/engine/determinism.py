"""Runtime detection of bare clock and randomness calls in workflow code.

Workflow bodies are re-executed on replay, so a bare ``time.time()``, ``datetime.now()`` or
``random.random()`` inside one makes a replay diverge; ``ctx.now()`` and ``ctx.random()`` are the
journaled alternatives. The engine drives every workflow coroutine step with a profile hook
switched on only while that step runs (other tasks on the loop are never profiled); the hook
recognises the clock and random entry points and classifies the calling frame:

- standard library, installed packages and this package: exempt (no event);
- a file matching the engine's ``determinism_allow`` prefixes: provenance ``allowlisted``;
- anything else: provenance ``workflow``.

Each (category, provenance) pair is reported at most once per execution segment. A rejecting
detector (``determinism_mode="error"``) additionally raises :class:`DeterminismError` at every
workflow-origin call, after its warning, and remembers the first violation so the run is
rejected even when the workflow swallows the exception. Tool bodies,
adapter calls and event listeners run with detection suppressed: their effects are journaled or
they are not part of the workflow.
"""

from __future__ import annotations

import datetime as _dt
import random as _random
import sys
import sysconfig
import time as _time
from collections.abc import Callable, Coroutine, Generator, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path
from types import CodeType, FrameType
from typing import Any, Final, TypeVar

from rulvar_otel.engine.model import DeterminismError

__all__ = ["DeterminismDetector", "drive", "suppressed"]

T = TypeVar("T")

_ACTIVE: ContextVar[DeterminismDetector | None] = ContextVar("rulvar_determinism", default=None)
_SUPPRESS: ContextVar[bool] = ContextVar("rulvar_determinism_suppress", default=False)

_CLOCK_FUNCS: Final = (_time.time, _time.time_ns)
_RANDOM_INSTANCE: Final = getattr(_random, "_inst", None)
_RANDOM_C_NAMES: Final = frozenset({"random", "getrandbits"})
_DT_OWNERS: Final = (_dt.datetime, _dt.date)
_DT_NAMES: Final = frozenset({"now", "utcnow", "today"})
_RANDOM_PY_CODES: Final[frozenset[CodeType]] = frozenset(
    getattr(_random.Random, name).__code__
    for name in (
        "randint",
        "randrange",
        "choice",
        "choices",
        "shuffle",
        "sample",
        "uniform",
        "gauss",
        "normalvariate",
        "triangular",
        "betavariate",
        "expovariate",
    )
    if hasattr(getattr(_random.Random, name, None), "__code__")
)


def _exempt_roots() -> tuple[str, ...]:
    roots: set[str] = set()
    for key in ("stdlib", "platstdlib", "purelib", "platlib"):
        path = sysconfig.get_paths().get(key)
        if path:
            roots.add(str(Path(path).resolve()))
    roots.add(str(Path(__file__).resolve().parents[1]))  # the rulvar_otel package itself
    return tuple(sorted(roots))


_EXEMPT: Final = _exempt_roots()


def _category_of(frame: FrameType, event: str, arg: Any) -> tuple[str, FrameType] | None:
    if event == "c_call":
        if arg in _CLOCK_FUNCS:
            return "bare-date-now", frame
        owner = getattr(arg, "__self__", None)
        if owner is None:
            return None
        name = getattr(arg, "__name__", "")
        if owner is _RANDOM_INSTANCE and name in _RANDOM_C_NAMES:
            return "bare-math-random", frame
        if owner in _DT_OWNERS and name in _DT_NAMES:
            return "bare-date-now", frame
        return None
    if (
        event == "call"
        and frame.f_code in _RANDOM_PY_CODES
        and frame.f_back is not None
        and frame.f_locals.get("self") is _RANDOM_INSTANCE
    ):
        return "bare-math-random", frame.f_back
    return None


def _hook(frame: FrameType, event: str, arg: Any) -> None:
    if event not in ("c_call", "call"):
        return
    found = _category_of(frame, event, arg)
    if found is None:
        return
    detector = _ACTIVE.get()
    if detector is None or _SUPPRESS.get():
        return
    try:
        rejection = detector.observe(found[0], found[1])
    except Exception:  # noqa: BLE001 - detection is telemetry: it never breaks the workflow
        return
    if rejection is not None:
        # Raised from the profile hook, it surfaces at the bare call itself, which never runs.
        raise rejection


Emit = Callable[[str, str, str, str, int, int | None], None]


class DeterminismDetector:
    """One segment's detector: classifies frames and reports each (category, provenance) once."""

    def __init__(self, emit: Emit, *, allow: Sequence[str] = (), reject: bool = False) -> None:
        self._emit = emit
        self._allow = tuple(str(Path(p).resolve()) if not p.startswith("<") else p for p in allow)
        self._seen: set[tuple[str, str]] = set()
        self.reject = reject
        self.violation: DeterminismError | None = None

    def provenance(self, filename: str) -> str | None:
        if filename.startswith("<frozen"):
            return None
        resolved = filename if filename.startswith("<") else str(Path(filename).resolve())
        if any(resolved.startswith(root) for root in _EXEMPT):
            return None
        if any(resolved.startswith(prefix) for prefix in self._allow):
            return "allowlisted"
        return "workflow"

    def observe(self, category: str, frame: FrameType) -> DeterminismError | None:
        """Report the call (once per category and provenance); the error to raise, if rejecting."""
        code = frame.f_code
        provenance = self.provenance(code.co_filename)
        if provenance is None:
            return None
        line = frame.f_lineno or code.co_firstlineno
        if (category, provenance) not in self._seen:
            self._seen.add((category, provenance))
            column: int | None = None
            positions = list(code.co_positions())
            index = frame.f_lasti // 2
            if 0 <= index < len(positions) and positions[index][2] is not None:
                column = int(positions[index][2] or 0) + 1
            text = f"at {code.co_qualname} ({code.co_filename}:{line}{f':{column}' if column else ''})"
            self._emit(category, provenance, text, code.co_filename, line, column)
        if not self.reject or provenance != "workflow":
            return None
        error = DeterminismError(
            f"{category}: a bare {'clock' if category == 'bare-date-now' else 'random'} call in workflow "
            f"code ({code.co_filename}:{line}); use ctx.now() or ctx.random()",
            data={"category": category, "file": code.co_filename, "line": line},
        )
        if self.violation is None:
            self.violation = error
        return error

    @contextmanager
    def active(self) -> Iterator[None]:
        token = _ACTIVE.set(self)
        try:
            yield
        finally:
            _ACTIVE.reset(token)


@contextmanager
def suppressed() -> Iterator[None]:
    """Run a block with detection off (tool bodies, adapter calls, listeners)."""
    token = _SUPPRESS.set(True)
    try:
        yield
    finally:
        _SUPPRESS.reset(token)


class _Driven:
    """Drives a coroutine step by step with the profile hook on only during its own steps."""

    __slots__ = ("_coro",)

    def __init__(self, coro: Coroutine[Any, Any, Any]) -> None:
        self._coro = coro

    def __await__(self) -> Generator[Any, Any, Any]:
        coro = self._coro
        value: Any = None
        error: BaseException | None = None
        while True:
            previous = sys.getprofile()
            sys.setprofile(_hook)
            try:
                if error is not None:
                    thrown, error = error, None
                    yielded = coro.throw(thrown)
                else:
                    yielded = coro.send(value)
            except StopIteration as stop:
                return stop.value
            finally:
                sys.setprofile(previous)
            try:
                value = yield yielded
            except GeneratorExit:
                coro.close()
                raise
            except BaseException as exc:  # noqa: BLE001 - forwarded into the workflow (cancellation included)
                error, value = exc, None


async def drive(coro: Coroutine[Any, Any, T], enabled: bool) -> T:
    """Await ``coro``, profiling its steps for bare clock/random calls when ``enabled``."""
    if not enabled:
        return await coro
    result: T = await _Driven(coro)
    return result
