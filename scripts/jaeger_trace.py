"""Print the newest trace of a service as Jaeger stores it, as an indented span tree.

Used by `scripts/stack.sh trace [SERVICE]`: the Jaeger built from its Go module serves the query
API but not the UI's assets, so this is how the local stack shows a trace without Docker. Reads
only Jaeger's HTTP API (the one its UI and Grafana read); standard library only.
    python3 scripts/jaeger_trace.py JAEGER_URL [SERVICE]      (SERVICE defaults to rulvar)
"""

from __future__ import annotations

import json
import sys
import time
import urllib.parse
import urllib.request
from typing import Any


def _get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=10) as response:
        return json.load(response)


def _plain(text: str) -> str:
    """Printable on one line: a span name from a foreign emitter may carry escape sequences."""
    return "".join(c if c.isprintable() else "?" for c in text)


def _status(span: dict[str, Any]) -> str:
    tags = {tag["key"]: tag["value"] for tag in span.get("tags", [])}
    return "error" if tags.get("otel.status_code") == "ERROR" or tags.get("error") is True else "ok"


def main(argv: list[str]) -> int:
    if not 1 <= len(argv) <= 2:
        print(__doc__, file=sys.stderr)
        return 2
    base, service = argv[0].rstrip("/"), argv[1] if len(argv) == 2 else "rulvar"
    query = urllib.parse.urlencode(
        {"service": service, "limit": 50, "start": 1, "end": int((time.time() + 86_400) * 1_000_000)}
    )
    traces = _get(f"{base}/api/traces?{query}").get("data") or []
    if not traces:
        print(f"no trace of service {service!r} in Jaeger at {base}", file=sys.stderr)
        return 1
    trace = max(traces, key=lambda t: max(s["startTime"] for s in t["spans"]))
    spans = {span["spanID"]: span for span in trace["spans"]}
    children: dict[str | None, list[dict[str, Any]]] = {}
    for span in spans.values():
        parents = [r["spanID"] for r in span.get("references", []) if r.get("refType") == "CHILD_OF"]
        parent = parents[0] if parents and parents[0] in spans else None
        children.setdefault(parent, []).append(span)
    trace_id = trace["traceID"]
    print(f"trace {trace_id}: {len(spans)} spans of service {_plain(service)} ({base}/api/traces/{trace_id})")

    def show(span: dict[str, Any], depth: int) -> None:
        millis = span["duration"] / 1000
        print(f"{'  ' * depth}{_plain(span['operationName'])}  {millis:.1f} ms  {_status(span)}")
        for child in sorted(children.get(span["spanID"], []), key=lambda s: s["startTime"]):
            show(child, depth + 1)

    for root in sorted(children.get(None, []), key=lambda s: s["startTime"]):
        show(root, 0)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
