"""A credential corpus: one obviously fake sample of every shape the default set masks.

Each sample carries :data:`MARK` inside the part that must be masked, so "the mark survives"
means "the credential leaked". ``after_letter`` says whether the shape is masked when glued
directly after a letter (prefixes that end ordinary words, ``sk-`` in ``task-``, are not).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

__all__ = ["CREDENTIALS", "MARK", "Credential", "credential", "credential_kinds"]

MARK: Final = "FAKEMARK"


@dataclass(frozen=True, slots=True)
class Credential:
    """One shape: a sample holding :data:`MARK`, and whether a letter right before it is glue."""

    kind: str
    sample: str
    after_letter: bool = True
    # The sample has no "," or "=" (it can be an OTEL_RESOURCE_ATTRIBUTES key or value).
    resource_safe: bool = True


_PEM_BODY: Final = f"MIIEow{MARK}AIBAAKCAQEAfakefakefake\nZmFrZWZha2VmYWtlZmFrZQ==\n"

CREDENTIALS: Final[tuple[Credential, ...]] = (
    Credential("openai", f"sk-{MARK}abcdefghijklmnop", after_letter=False),
    Credential("openai-project", f"sk-proj-{MARK}_abc-defghijklmnop", after_letter=False),
    Credential("anthropic", f"sk-ant-api03-{MARK}abcdefghijkl", after_letter=False),
    Credential("stripe-live", f"sk_live_{MARK}abcdefghij0123", after_letter=False),
    Credential("stripe-test", f"sk_test_{MARK}abcdefghij0123", after_letter=False),
    Credential("stripe-restricted", f"rk_live_{MARK}abcdefghij0123", after_letter=False),
    Credential("aws-akia", f"AKIA{MARK}23456789"),
    Credential("aws-asia", f"ASIA{MARK}23456789"),
    Credential("aws-aroa", f"AROA{MARK}23456789"),
    Credential("aws-aida", f"AIDA{MARK}23456789"),
    Credential("aws-agpa", f"AGPA{MARK}23456789"),
    Credential("aws-anpa", f"ANPA{MARK}23456789"),
    Credential("github-classic", f"ghp_{MARK}abcdefghijklmnopqrstuvwx01"),
    Credential("github-oauth", f"gho_{MARK}abcdefghijklmnopqrstuvwx01"),
    Credential("github-fine-grained", f"github_pat_11{MARK}_abcdefghijklmnopqrst"),
    Credential("gitlab", f"glpat-{MARK}abcdefghijkl"),
    Credential("slack-bot", f"xoxb-1234-{MARK}abcdef"),
    Credential("slack-user", f"xoxp-1234-{MARK}abcdef"),
    Credential("slack-app", f"xapp-1-A012{MARK}-1234-abcdef"),
    Credential("huggingface", f"hf_{MARK}abcdefghijklmnopqrstuvwxyz"),
    Credential("npm", f"npm_{MARK}abcdefghijklmnopqrstuvwxyz01"),
    Credential("pypi", f"pypi-AgEIcHlwaS5vcmc{MARK}abcdefgh"),
    Credential("google-api", f"AIza{MARK}abcdefghijklmnopqrstuvwxyz0"),
    Credential("google-oauth", f"ya29.a0{MARK}abcdefghijklmnop"),
    Credential("jwt", f"eyJhbGciOiJIUzI1NiJ9.eyJ{MARK}c3ViIjoiMSJ9.c2lnbmF0dXJlZmFrZQ"),
    Credential("bearer", f"Bearer {MARK}abcdefghijklmnopqrstuv"),
    Credential("bearer-lower", f"bearer {MARK}abcdefghijklmnopqrstuv"),
    Credential("bearer-upper", f"BEARER {MARK}abcdefghijklmnopqrstuv"),
    Credential("authorization-basic", f"Authorization: Basic ZmFrZTp{MARK}"),
    Credential("authorization-token", f"authorization: token {MARK}"),
    Credential("query-api-key", f"https://api.example.test/v1?api_key={MARK}&page=2", resource_safe=False),
    Credential("query-apikey", f"https://h.example.test/?apikey={MARK}", resource_safe=False),
    Credential("query-token", f"https://h.example.test/?token={MARK}", resource_safe=False),
    Credential("query-access-token", f"https://h.example.test/?access_token={MARK}", resource_safe=False),
    Credential("query-client-secret", f"https://h.example.test/?client_secret={MARK}", resource_safe=False),
    Credential("conn-password", f"Server=db;User Id=app;Password={MARK};", resource_safe=False),
    Credential("conn-pwd", f"host=db user=app pwd={MARK}", resource_safe=False),
    Credential("conn-passwd", f"passwd={MARK}", resource_safe=False),
    Credential("conn-secret", f"secret={MARK}", resource_safe=False),
    Credential(
        "azure-account-key",
        f"DefaultEndpointsProtocol=https;AccountName=a;AccountKey={MARK}ZmFrZQ==;",
        resource_safe=False,
    ),
    Credential("azure-sas", f"https://a.blob.example.test/c?sv=2022&sig={MARK}%3D", resource_safe=False),
    Credential("url-userinfo", f"postgres://admin:{MARK}@db.example.test:5432/app"),
    Credential("url-userinfo-at", f"https://user:p@{MARK}@ss@collector.example.test:4318"),
    Credential("url-userinfo-long", "https://u:" + MARK + "x" * 2000 + "@collector.example.test"),
    Credential(
        "pem-rsa",
        f"-----BEGIN RSA PRIVATE KEY-----\n{_PEM_BODY}-----END RSA PRIVATE KEY-----",
        resource_safe=False,
    ),
    Credential(
        "pem-openssh",
        f"-----BEGIN OPENSSH PRIVATE KEY-----\n{_PEM_BODY}-----END OPENSSH PRIVATE KEY-----",
        resource_safe=False,
    ),
    Credential(
        "pgp",
        "-----BEGIN PGP PRIVATE KEY BLOCK-----\nVersion: Fake 1.0\n\n"
        f"{_PEM_BODY}=fake\n-----END PGP PRIVATE KEY BLOCK-----",
        resource_safe=False,
    ),
    Credential(
        "pgp-truncated",
        f"-----BEGIN PGP PRIVATE KEY BLOCK-----\nVersion: Fake 1.0\n\n{_PEM_BODY}",
        resource_safe=False,
    ),
)


def credential_kinds() -> list[str]:
    """Every kind, for ``parametrize``."""
    return [c.kind for c in CREDENTIALS]


def credential(kind: str) -> Credential:
    """The corpus entry named ``kind``."""
    return next(c for c in CREDENTIALS if c.kind == kind)
