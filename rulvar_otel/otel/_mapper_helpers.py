"""Stateless helpers of the span mapper: the masking memo, tracer and key checks, closer messages.

Nothing here knows which spans are open; :class:`~rulvar_otel.otel._mapper.SpanMapper` does.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Final

from mypy_extensions import mypyc_attr
from opentelemetry.sdk.trace.id_generator import RandomIdGenerator
from opentelemetry.trace import NoOpTracer, Status, StatusCode, Tracer

from rulvar_otel.otel import semconv as sc
from rulvar_otel.otel._attributes import AttrValue, Event, fits_int64
from rulvar_otel.otel._records import STATUS_ERROR, STATUS_OK

__all__ = [
    "closing_status",
    "envelope_attributes",
    "SETTLEMENT_FAILED_MESSAGE",
    "SUPERSEDED_MESSAGE",
    "MaskMemo",
    "hashable",
    "reads_identity",
    "unsettled_message",
]

SETTLEMENT_FAILED_MESSAGE: Final = (
    "settlement failed: nothing durable records this terminal; resume re-settles"
)
SUPERSEDED_MESSAGE: Final = "superseded: a successor owns settlement; this stale terminal is withheld"
# Bound on the per-export memo of masked strings (ids, names and statuses repeat in every event).
_MASK_MEMO_LIMIT: Final = 8192


def unsettled_message(run_end: Mapping[str, Any]) -> str:
    """The status message of a run:end that did not settle."""
    if run_end.get("settledReason") == "superseded":
        return SUPERSEDED_MESSAGE
    return SETTLEMENT_FAILED_MESSAGE


def reads_identity(tracer: Tracer) -> bool:
    """Whether span ids may come from :data:`SPAN_IDENTITY`: false only where that is certain.

    No-op tracers make no ids, and the SDK's tracer keeps the id generator its provider had; the
    stock random one never reads the variable. Any other tracer (a proxy, a wrapper, another
    generator) gets the variable set, as ``RulvarIdGenerator`` needs.
    """
    if isinstance(tracer, NoOpTracer):
        return False
    return type(getattr(tracer, "id_generator", None)) is not RandomIdGenerator


@mypyc_attr(native_class=False)  # a dict subclass: a compiled class cannot extend dict
class MaskMemo(dict[str, str]):
    """``mask`` behind a dict: a repeated string costs one C-level lookup (``__getitem__``), and
    only a new one reaches the masker (``__missing__``)."""

    __slots__ = ("_masker", "_plain_below")

    def __init__(self, mask: Callable[[str], str], plain_below: int = 0) -> None:
        super().__init__()
        self._masker = mask
        self._plain_below = plain_below  # the masker's SecretMasker.plain_below (0: always ask it)

    def __missing__(self, text: str) -> str:
        # A short plain string (a call id) is one the masker hands back as it is: no call for it.
        if (
            len(text) < self._plain_below
            and "=" not in text
            and "@" not in text
            and "://" not in text
            and text.isprintable()
        ):
            out = text
        else:
            out = self._masker(text)
        if len(self) >= _MASK_MEMO_LIMIT:
            self.clear()
        self[text] = out
        return out


_SCALARS: Final = (str, int, float, bool)  # a tuple: ``str | int`` is built anew each call


def hashable(value: object) -> object:
    """``value`` as a dict key part: scalars as they are, anything else by its repr."""
    return value if isinstance(value, _SCALARS) or value is None else repr(value)


def closing_status(ok: bool, waiting: bool, message: str | None) -> Status | None:
    """The status a closer sets: OK, none for a suspension (UNSET), else ERROR with ``message``."""
    if ok:
        return STATUS_OK
    if waiting:
        return None
    return STATUS_ERROR if message is None else Status(StatusCode.ERROR, message)


def envelope_attributes(run_id: str | None, event: Event, mask: Callable[[str], str]) -> dict[str, AttrValue]:
    """A new span's envelope (run id, entry seq, scope, replayed): the dict its kind's attributes
    are then added to, so they follow in one dict."""
    seq = event.get("seq")
    scope = event.get("scope")
    replayed = event.get("replayed") is True
    if run_id is not None and type(seq) is int and fits_int64(seq) and not replayed and scope is None:
        return {sc.RUN_ID: run_id, sc.ENTRY_SEQ: seq}  # the usual envelope
    attrs: dict[str, AttrValue] = {}
    if run_id is not None:
        attrs[sc.RUN_ID] = run_id
    if type(seq) is float or (type(seq) is int and fits_int64(seq)):
        attrs[sc.ENTRY_SEQ] = seq
    if isinstance(scope, str):
        attrs[sc.SCOPE] = mask(scope)
    if replayed:
        attrs[sc.REPLAYED] = True
    return attrs
