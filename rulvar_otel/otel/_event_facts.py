"""The allow-list of what a span event (and an orphan closer) may carry, per event type: data only.

Each catalog type names the fields whose values are operational facts (ids, counts, codes,
statuses, costs, durations, enum values) and what kind of value each may export; any other field,
every field of an unknown type, and any value of another kind exports nothing. Content (log text,
error messages, tool inputs and outputs, prompts, completions, messages, deltas, labels, audit
payloads) is simply never listed. ``docs/otel-mapping.md#what-a-span-event-carries`` states this
table; ``_attributes.event_attributes`` reads it, and nothing else decides what a span event holds.

The run span's JSON-valued terminal facts are here too, as the shapes their values are projected
onto before encoding (``RUN_JSON_SHAPES``): a field or item outside the shape is dropped.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Final, NamedTuple

from rulvar_otel.otel import semconv as sc

__all__ = [
    "ENUM_KIND",
    "EVENT_FACTS",
    "EVENT_PLANS",
    "FLAG",
    "FLAG_KIND",
    "NUMBER",
    "NUMBERS",
    "NUMBERS_KIND",
    "NUMBER_KIND",
    "NUMBER_OR_TEXT",
    "NUMBER_OR_TEXT_KIND",
    "RUN_JSON_SHAPES",
    "TEXT",
    "TEXT_KIND",
    "WIRE_ERROR",
    "WIRE_ERROR_KIND",
    "Fact",
    "Shape",
    "enum",
]

# Value kinds (small ints: the extraction loop compares them on every fact of every event).
NUMBER_KIND: Final = 0  # a finite number OTLP can carry (never a bool)
FLAG_KIND: Final = 1  # a bool
TEXT_KIND: Final = 2  # a string (masked): an id, a name, a code, a status
NUMBER_OR_TEXT_KIND: Final = 3
ENUM_KIND: Final = 4  # a string, only when it is one of the listed values
NUMBERS_KIND: Final = 5  # a non-empty array of numbers
WIRE_ERROR_KIND: Final = 6  # an error object: its code and retryable flag, never its message


class Fact(NamedTuple):
    """What one listed field may export."""

    kind: int
    values: frozenset[str] = frozenset()


NUMBER: Final = Fact(NUMBER_KIND)
FLAG: Final = Fact(FLAG_KIND)
TEXT: Final = Fact(TEXT_KIND)
NUMBER_OR_TEXT: Final = Fact(NUMBER_OR_TEXT_KIND)
NUMBERS: Final = Fact(NUMBERS_KIND)
WIRE_ERROR: Final = Fact(WIRE_ERROR_KIND)


def enum(*values: str) -> Fact:
    return Fact(ENUM_KIND, frozenset(values))


RUN_STATUS: Final = enum("ok", "error", "cancelled", "exhausted", "suspended")
COMPLETION: Final = enum("complete", "partial", "rejected")
COST_BASIS: Final = enum("per-call", "aggregate-estimate")
_AGENT: Final[Mapping[str, Fact]] = {"agentType": TEXT}  # every agent:* body; its label is content

EVENT_FACTS: Final[Mapping[str, Mapping[str, Fact]]] = {
    # Openers (as span events only when repeated) and closers (as span events when orphaned).
    "run:start": {"workflow": TEXT, "resumed": FLAG},
    "run:end": {
        "status": RUN_STATUS,
        "totalUsd": NUMBER,
        "usageApprox": FLAG,
        "completion": COMPLETION,
        "deliverableAccepted": FLAG,
        "resultAvailable": FLAG,
        "acceptedArtifactRef": NUMBER,
        "settled": FLAG,
        "settledReason": enum("superseded"),
    },
    "phase:start": {"phase": TEXT},
    "child:start": {"workflow": TEXT, "scope": TEXT},
    "child:end": {"workflow": TEXT, "scope": TEXT, "status": TEXT},
    "agent:queued": _AGENT,
    "agent:start": {**_AGENT, "model": TEXT, "role": TEXT},
    "agent:phase:start": {**_AGENT, "role": TEXT, "model": TEXT, "invocation": NUMBER},
    "agent:phase:end": {
        **_AGENT,
        "role": TEXT,
        "model": TEXT,
        "invocation": NUMBER,
        "durationMs": NUMBER,
        "costUsd": NUMBER,
        "costBasis": COST_BASIS,
        "outcome": enum("ok", "error"),
        "retries": NUMBER,
    },
    "agent:end": {
        **_AGENT,
        "status": TEXT,
        "costUsd": NUMBER,
        "costBasis": COST_BASIS,
        "entryRef": NUMBER,
        "error": WIRE_ERROR,
        "hostRejected": FLAG,
        "retryCount": NUMBER,
        "usageApprox": FLAG,
    },
    "agent:error": {**_AGENT, "error": WIRE_ERROR, "willRetry": FLAG},
    "agent:stream": {},  # never a span event: a delta is content
    "tool:start": {"toolName": TEXT, "toolCallId": TEXT},
    "tool:end": {
        "toolName": TEXT,
        "toolCallId": TEXT,
        "outcome": enum("ok", "error", "denied"),
        "durationMs": NUMBER,
        "verdict": enum("allow", "deny", "ask"),
        "decidedBy": TEXT,
        "guard": enum("repeated-signature", "per-tool-cap", "finalization-window"),
        "errorCode": TEXT,
    },
    # Payload-only events.
    "log": {"level": enum("debug", "info", "warn", "error")},
    "budget:update": {"spentUsd": NUMBER, "remainingUsd": NUMBER, "committedReserveUsd": NUMBER},
    "external:waiting": {"key": TEXT, "entryRef": NUMBER, "deadlineAt": NUMBER_OR_TEXT},
    "approval:pending": {"toolName": TEXT, "entryRef": NUMBER, "deadlineAt": NUMBER_OR_TEXT},
    "quota:denied": {
        **_AGENT,
        "model": TEXT,
        "reason": TEXT,
        "retryAfterMs": NUMBER,
        "willRetry": FLAG,
    },
    "budget:exposure-wait": {
        **_AGENT,
        "model": TEXT,
        "scope": enum("root", "child"),
        "capUsd": NUMBER,
        "spentUsd": NUMBER,
        "inFlightUsd": NUMBER,
        "estimateUsd": NUMBER,
        "willWait": FLAG,
    },
    "agent:schema-retry": {**_AGENT, "attempt": NUMBER, "maxAttempts": NUMBER},
    "control:wire": {
        "controlKind": enum("countTokens"),
        "model": TEXT,
        "outcome": enum("ok", "failed", "denied"),
        "inputTokens": NUMBER,
    },
    "determinism:warning": {
        "category": enum("bare-date-now", "bare-math-random"),
        "provenance": enum("workflow", "allowlisted"),
        "file": TEXT,
        "line": NUMBER,
        "column": NUMBER,
    },
    "plan:revised": {
        "entryRef": NUMBER,
        "planHash": TEXT,
        "applied": NUMBER,
        "dropped": NUMBER,
        "revisionUnitsRemaining": NUMBER,
    },
    "node:parked": {"nodeId": TEXT, "logicalTaskId": TEXT},
    "node:cancelled": {"nodeId": TEXT, "logicalTaskId": TEXT},
    "node:linked": {
        "nodeId": TEXT,
        "logicalTaskId": TEXT,
        "donorRef": NUMBER_OR_TEXT,
        "reclaimedUsd": NUMBER,
    },
    "orchestrator:woke": {
        "digestSeq": NUMBER,
        "planHash": TEXT,
        "coversToOrdinal": NUMBER,
        "renderSize": NUMBER,
    },
    "orchestrator:budget": {
        "atCap": FLAG,
        "spentUsd": NUMBER,
        "capUsd": NUMBER,
        "finalizeReserveUsd": NUMBER,
        "runSpentUsd": NUMBER,
        "runCeilingUsd": NUMBER,
        "orchestratorSpentUsd": NUMBER,
        "orchestratorCapUsd": NUMBER,
        "orchestratorShare": NUMBER,
        "softWarning": FLAG,
    },
    "orchestrator:acceptance": {
        "verdict": enum("accepted", "rejected"),
        "completion": COMPLETION,
        "minSpawnedChildren": NUMBER,
        "spawnedChildren": NUMBER,
    },
    "escalation:raised": {
        "entryRef": NUMBER,
        "kind": enum("scope_bigger", "scope_different", "blocked_with_evidence"),
        "logicalTaskId": TEXT,
        "costToDateUsd": NUMBER,
    },
    "escalation:decided": {
        "entryRef": NUMBER,
        "decision": enum("retry", "decompose", "cancel", "accept"),
        "by": TEXT,
        "countsAgainstLimit": FLAG,
    },
    "spawn:admitted": {
        "entryRef": NUMBER,
        "verdict": enum("admit", "reuse_full", "admit_graft"),
        "agentType": TEXT,
        "logicalTaskId": TEXT,
        "spawnUnitsAfter": NUMBER,
        "reserveUsd": NUMBER,
    },
    "spawn:rejected": {"entryRef": NUMBER, "code": TEXT, "agentType": TEXT, "logicalTaskId": TEXT},
    "verify:failed": {
        "entryRef": NUMBER,
        "logicalTaskId": TEXT,
        "rung": NUMBER_OR_TEXT,
        "gate": enum("mechanical", "judge", "spot-check"),
    },
    "ledger:op": {
        "entryRef": NUMBER,
        "op": enum("brief_set", "fact_add", "fact_supersede", "lesson_add", "observation_add"),
    },
    "stall:detected": {"logicalTaskId": TEXT, "stallStreak": NUMBER},
    "guard:oscillation": {"spawnKeyHash": TEXT, "oscillationCount": NUMBER, "limit": NUMBER},
    "resolution:applied": {"targetRef": NUMBER, "entryRef": NUMBER, "by": TEXT},
    "resolution:superseded": {
        "targetRef": NUMBER,
        "entryRef": NUMBER,
        "supersededBy": NUMBER,
        "reason": enum("already_resolved", "target_abandoned"),
    },
    "termination:debit": {"entryRef": NUMBER, "counter": TEXT, "remaining": NUMBER, "phi": NUMBER},
    "termination:denied": {"entryRef": NUMBER, "counter": TEXT, "code": TEXT},
    # The frozen and live values are configuration values of any JSON type: numbers and flags only.
    "termination:config-drift": {
        "field": TEXT,
        "frozenValue": NUMBER,
        "liveValue": NUMBER,
    },
    "admission:lease-lost": {"unitId": TEXT, "generation": NUMBER},
    "journal:compat": {
        "code": enum("HASH_VERSION_TOO_OLD", "HASH_VERSION_TOO_NEW"),
        "found": NUMBER_OR_TEXT,
        "window": NUMBERS,
    },
}

# Facts exported under a name of their own instead of rulvar.event.<field>.
_OWN_KEYS: Final[Mapping[tuple[str, str], tuple[str, ...]]] = {
    ("determinism:warning", "category"): (sc.DETERMINISM_CATEGORY,),
    ("determinism:warning", "provenance"): (sc.DETERMINISM_PROVENANCE,),
    ("determinism:warning", "file"): (sc.CODE_FILEPATH, sc.CODE_FILE_PATH),
    ("determinism:warning", "line"): (sc.CODE_LINENO, sc.CODE_LINE_NUMBER),
}

_CAMEL_BOUNDARY: Final = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")


def _snake(name: str) -> str:
    return _CAMEL_BOUNDARY.sub("_", name).replace("-", "_").lower()


def _keys(kind: str, field: str, fact: Fact) -> tuple[str, ...]:
    if fact.kind == WIRE_ERROR_KIND:  # its code, then its retryable flag
        prefix = sc.EVENT_FIELD_PREFIX + _snake(field)
        return (prefix + "_code", prefix + "_retryable")
    return _OWN_KEYS.get((kind, field), (sc.EVENT_FIELD_PREFIX + _snake(field),))


# One plan per type: (field, kind, enum values, attribute keys), in the table's order.
Plan = tuple[tuple[str, int, frozenset[str], tuple[str, ...]], ...]
EVENT_PLANS: Final[dict[str, Plan]] = {  # a dict: compiled, .get is a C call
    kind: tuple(
        (
            field,
            fact.kind,
            fact.values,
            _keys(kind, field, fact),
        )
        for field, fact in facts.items()
    )
    for kind, facts in EVENT_FACTS.items()
}


class Shape(NamedTuple):
    """What a JSON-valued run fact may hold: a list of ``items``, a mapping of counts (string keys,
    number values), or a record of listed ``fields`` (each a Fact or a nested Shape)."""

    items: Fact | Shape | None = None
    counts: bool = False
    fields: Mapping[str, Fact | Shape] | None = None


_NAMES: Final = Shape(items=TEXT)
RUN_JSON_SHAPES: Final[Mapping[str, Shape]] = {
    "childStatusCounts": Shape(counts=True),
    "degradedReasons": _NAMES,
    "salvagedPartialChildren": _NAMES,
    "salvagedTerminalOutputChildren": _NAMES,
    "acceptanceChildren": Shape(
        items=Shape(
            fields={
                "child": TEXT,
                "status": TEXT,
                "salvage": enum("partial", "terminal-output"),
                "evidence": Shape(
                    fields={
                        "recordedEntries": NUMBER,
                        "minEntries": NUMBER,
                        "met": FLAG,
                        "waivedBySalvage": FLAG,
                        "floorRequired": FLAG,
                    }
                ),
            }
        )
    ),
}
