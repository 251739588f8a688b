"""The bounded OTLP/HTTP transport against a real server's answers, one variant at a time.

Redirects of every kind, oversized and compressed-bomb bodies (gzip and deflate), unknown
encodings, bodies that are not an OTLP answer, and ``partial_success`` in protobuf and JSON.
"""

from __future__ import annotations

import gzip
import zlib

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse

from rulvar_otel.export._http_transport import BoundedHttpTransport
from rulvar_otel.export._transport import MAX_RESPONSE_BYTES, Rejections
from tests._support import HostileHttpReceiver, HttpAnswer

_ZEROS = b"\0" * (MAX_RESPONSE_BYTES * 8)


def _answer(status: int, headers: dict[str, str], body: bytes) -> tuple[BoundedHttpTransport, object]:
    rejections = Rejections()
    transport = BoundedHttpTransport(ExportTraceServiceResponse, "rejected_spans", rejections)
    with HostileHttpReceiver(HttpAnswer.RAW) as receiver:
        receiver.raw = (status, headers, body)
        result = transport.request("POST", f"{receiver.endpoint}/v1/traces", data=b"x", timeout=5)
    transport.close()
    return transport, result


@pytest.mark.parametrize("status", [300, 301, 302, 303, 304, 307, 308])
def test_every_redirect_status_is_a_failure_naming_it(status: int) -> None:
    transport, result = _answer(status, {"Location": "/elsewhere"}, b"")
    assert result.status_code is None and result.error is not None
    assert f"HTTP {status}" in (transport.last_error or "")


@pytest.mark.parametrize(
    ("headers", "body", "said"),
    [
        ({}, b"\x01" * (MAX_RESPONSE_BYTES + 1), "larger than"),
        ({"Content-Encoding": "gzip"}, gzip.compress(_ZEROS), "inflates past"),
        ({"Content-Encoding": "deflate"}, zlib.compress(_ZEROS), "inflates past"),
        ({"Content-Encoding": "br"}, b"\x00\x01", "unknown content encoding"),
        ({"Content-Encoding": "gzip"}, b"not gzip at all", "not valid compressed data"),
        ({"Content-Type": "application/x-protobuf"}, b"\xff\xff\xff\xff", "not an OTLP export response"),
        ({"Content-Type": "application/json"}, b"{not json", "not an OTLP export response"),
    ],
)
def test_an_unreadable_or_oversized_answer_fails_clearly(
    headers: dict[str, str], body: bytes, said: str
) -> None:
    transport, result = _answer(200, headers, body)
    assert result.error is not None
    assert said in (transport.last_error or "")


def test_partial_success_is_read_from_protobuf_json_and_gzip_answers() -> None:
    answer = ExportTraceServiceResponse()
    answer.partial_success.rejected_spans = 4
    answer.partial_success.error_message = "too old"
    body = answer.SerializeToString()
    json_body = b'{"partialSuccess": {"rejectedSpans": "4", "errorMessage": "too old"}}'
    for headers, payload in [
        ({"Content-Type": "application/x-protobuf"}, body),
        ({"Content-Type": "application/json"}, json_body),
        ({"Content-Encoding": "gzip"}, gzip.compress(body)),
    ]:
        transport, result = _answer(200, headers, payload)
        assert result.status_code == 200
        assert transport.rejections.take() == (4, "too old")


def test_an_empty_answer_is_a_delivery_with_nothing_rejected() -> None:
    transport, result = _answer(200, {}, b"")
    assert result.status_code == 200 and result.error is None
    assert transport.rejections.take() == (0, None)


def test_a_plain_http_receiver_never_loads_the_trust_store_and_https_uses_the_configured_one() -> None:
    # A CA file that does not exist: reading it would fail, so a success proves it was never read.
    missing = "/nonexistent/rulvar-otel-test-ca.pem"
    rejections = Rejections()
    transport = BoundedHttpTransport(ExportTraceServiceResponse, "rejected_spans", rejections, verify=missing)
    with HostileHttpReceiver(HttpAnswer.RAW) as receiver:
        receiver.raw = (200, {"Content-Type": "application/x-protobuf"}, b"")
        plain = transport.request("POST", f"{receiver.endpoint}/v1/traces", data=b"x", timeout=5)
        secure_url = receiver.endpoint.replace("http://", "https://") + "/v1/traces"
        secure = transport.request("POST", secure_url, data=b"x", timeout=5)
    transport.close()
    assert plain.error is None and plain.status_code == 200
    # The https:// request builds its TLS context from the configured CA file, and fails on it.
    assert secure.error is not None and "No such file" in (transport.last_error or "")
