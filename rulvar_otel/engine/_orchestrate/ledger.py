"""The run ledger: the orchestrator's advisory working memory, written only through journaled ops.

The authored vocabulary is closed (``brief_set``, ``fact_add``, ``fact_supersede``, ``lesson_add``,
``observation_add``) and every section is capped. :func:`check_ledger_op` decides an op without
mutating anything, so a refused op is a tool error the model sees, never a crash; the ledger is
changed only by :meth:`RunLedger.apply` of an accepted, journaled op.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["LEDGER_OPS", "RunLedger", "check_ledger_op"]

LEDGER_OPS = ("brief_set", "fact_add", "fact_supersede", "lesson_add", "observation_add")
_CAPS = {"facts": 64, "lessons": 32, "observations": 16}
_MAX_TEXT = 2000
READ_BUDGET_CHARS = 65536


@dataclass
class RunLedger:
    brief: str | None = None
    facts: list[dict[str, Any]] = field(default_factory=list[dict[str, Any]])
    lessons: list[dict[str, Any]] = field(default_factory=list[dict[str, Any]])
    observations: list[str] = field(default_factory=list[str])

    def apply(self, op: str, args: Mapping[str, Any]) -> None:
        if op == "brief_set":
            self.brief = str(args["text"])
        elif op == "fact_add":
            self.facts.append({"id": len(self.facts), "text": str(args["text"]), "superseded": False})
        elif op == "fact_supersede":
            fact = self.facts[int(args["fact"])]
            fact["superseded"] = True
            self.facts.append({"id": len(self.facts), "text": str(args["text"]), "superseded": False})
        elif op == "lesson_add":
            self.lessons.append({"task": str(args["task"]), "text": str(args["text"])})
        else:
            self.observations.append(str(args["text"]))

    def render(self) -> str:
        """What ``ledger_read`` shows, bounded to the read budget (oldest rows dropped first)."""
        rows = [f"brief: {self.brief or '(unset)'}"]
        rows += [
            f"fact {f['id']}{' (superseded)' if f['superseded'] else ''}: {f['text']}" for f in self.facts
        ]
        rows += [f"lesson [{lesson['task']}]: {lesson['text']}" for lesson in self.lessons]
        rows += [f"observation: {o}" for o in self.observations]
        dropped = 0
        while len("\n".join(rows)) > READ_BUDGET_CHARS and len(rows) > 1:
            rows.pop(1)
            dropped += 1
        if dropped:
            rows.append(f"({dropped} oldest row(s) dropped to fit the read budget)")
        return "\n".join(rows)


def check_ledger_op(ledger: RunLedger, op: Any, args: Any, known_tasks: set[str]) -> str | None:
    """Why ``op`` cannot be applied (a reason code), or None when it can."""
    if op not in LEDGER_OPS or not isinstance(args, Mapping):
        return "malformed_op"
    text = args.get("text")
    if not isinstance(text, str) or not text or len(text) > _MAX_TEXT:
        return "malformed_op"
    if op == "brief_set" and ledger.brief is not None:
        return "brief_already_set"
    if op in ("fact_add", "fact_supersede") and len(ledger.facts) >= _CAPS["facts"]:
        return "section_full"
    if op == "fact_supersede":
        fact = args.get("fact")
        if not isinstance(fact, int) or isinstance(fact, bool) or not 0 <= fact < len(ledger.facts):
            return "unknown_fact"
        if ledger.facts[fact]["superseded"]:
            return "fact_superseded"
    if op == "lesson_add":
        if len(ledger.lessons) >= _CAPS["lessons"]:
            return "section_full"
        if args.get("task") not in known_tasks:
            return "unknown_task"
    if op == "observation_add" and len(ledger.observations) >= _CAPS["observations"]:
        return "section_full"
    return None
