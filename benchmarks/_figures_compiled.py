"""Figure 13: the mypyc-compiled build against the pure-Python sources, on the same stream.

The compiled build is the one ``_build.compiled_site`` makes (and caches) for the whole run.
Each round runs one fresh process per build (order alternating), which maps the pre-parsed
stream on the direct path and serializes every batch's OTLP request (deterministic ids), one
warm-up pass and then the timed pass. Both builds must produce the same request bytes.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from benchmarks._build import compiled_site
from benchmarks._report import Figure, rate

__all__ = ["bench_compiled"]

_ROOT = Path(__file__).resolve().parent.parent

# Run in a child: argv[1] is the import root (the unpacked wheel or the checkout), argv[2] the stream.
_WORKER = r"""
import gc, hashlib, json, sys, time
sys.path.insert(0, sys.argv[1])
import orjson
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
import rulvar_otel
from rulvar_otel._build import build_label
from rulvar_otel.otel.direct import export_events_direct
from rulvar_otel.otel.ids import RulvarIdGenerator

with open(sys.argv[2], "rb") as f:
    events = [orjson.loads(line) for line in f if line.strip()]

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

class Serialize(SpanExporter):
    def __init__(self):
        self.requests = []
    def export(self, batch):
        self.requests.append(batch.request_bytes())
        return SpanExportResult.SUCCESS
    def shutdown(self):
        pass

def once():
    exporter = Serialize()
    export_events_direct(events, exporter, resource=Resource.create({"service.name": "bench"}),
                         id_generator=RulvarIdGenerator())
    return exporter.requests

def digest_of(requests):
    # Batch boundaries follow a timer and the resource carries a per-process service.instance.id:
    # the spans, each serialized, in order, are what must match.
    digest = hashlib.sha256()
    for data in requests:
        for resource_spans in ExportTraceServiceRequest.FromString(data).resource_spans:
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    digest.update(span.SerializeToString(deterministic=True))
    return digest.hexdigest()

once()
times = []
for _ in range(3):
    gc.collect()
    start = time.perf_counter()
    requests = once()
    times.append(time.perf_counter() - start)
seconds = min(times)  # the least disturbed pass: this machine class drifts within a process too
digest = digest_of(requests)
print(json.dumps({"seconds": seconds, "digest": digest, "build": build_label(),
                  "origin": rulvar_otel.__file__}))
"""


def _run(root: Path, stream: Path) -> dict[str, object]:
    done = subprocess.run(
        [sys.executable, "-c", _WORKER, str(root), str(stream)],
        check=True, capture_output=True, text=True, cwd=tempfile.gettempdir(),
    )  # fmt: skip
    result: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def bench_compiled(stream: Path, rounds: int) -> list[Figure]:
    n = sum(1 for line in stream.read_bytes().splitlines() if line.strip())
    try:
        roots = {"compiled": compiled_site(), "pure": _ROOT}
    except subprocess.CalledProcessError as exc:
        reason = (exc.stderr or b"").decode(errors="replace").strip().splitlines()[-1:] or ["?"]
        note = f"the compiled wheel did not build: {reason[0][:300]}"
        return [Figure("compiled", "mypyc build", "not built", met=False, notes=[note])]
    seen: dict[str, list[dict[str, object]]] = {"compiled": [], "pure": []}
    for index in range(rounds):
        order = ["compiled", "pure"] if index % 2 == 0 else ["pure", "compiled"]
        for name in order:
            seen[name].append(_run(roots[name], stream))
    builds = {name: {str(r["build"]) for r in results} for name, results in seen.items()}
    digests = {str(r["digest"]) for results in seen.values() for r in results}
    right = builds == {"compiled": {"compiled with mypyc"}, "pure": {"pure Python"}}
    same = len(digests) == 1
    times = {name: [float(str(r["seconds"])) for r in results] for name, results in seen.items()}
    ratio = statistics.median(c / p for c, p in zip(times["compiled"], times["pure"], strict=True))
    compiled_s, pure_s = statistics.median(times["compiled"]), statistics.median(times["pure"])
    notes = [] if right else [f"builds seen: {builds}"]
    if not same:
        notes.append(f"the builds' OTLP requests differ: {sorted(digests)}")
    return [
        Figure(
            "compiled",
            "map + encode the OTLP request, direct path, pre-parsed, mypyc-compiled build "
            f"(fresh process per round; request bytes {'identical' if same else 'DIFFER'} across builds)",
            rate(n, compiled_s),
            f"pure Python {pure_s * 1e3:8.1f} ms",
            ratio,
            "<= 0.85 x pure Python, identical bytes",
            ratio <= 0.85 and same and right,
            notes,
        )
    ]
