"""Secret masking and terminal safety: the public API.

Every string this package exports or prints passes :meth:`SecretMasker.clean` (sanitize, then
mask). Host patterns use the dialect described in docs/masking.md (RE2 syntax: linear time, no
backreferences or lookaround); a pattern that is refused raises :class:`~rulvar_otel.errors.ConfigError`.

::

    from rulvar_otel.masking import compile_secret_masker

    masker = compile_secret_masker([r"(?i)\\bpassword=\\S+", r"tok_[0-9a-f]{32}"])
    masker.clean("login password=hunter2\\x1b[2J")   # 'login [masked-secret]'
"""

from rulvar_otel.core.log_masking import (
    MaskingLogFilter,
    masked_logging,
    output_masker,
    set_output_masker,
)
from rulvar_otel.core.masking import (
    DEFAULT_SECRET_PATTERNS,
    MASKED_SECRET,
    WORK_PER_BYTE,
    SecretMasker,
    compile_secret_masker,
    default_masker,
    mask_secrets,
    mask_secrets_deep,
    redact_url,
    redact_userinfo,
    sanitize_and_mask,
    sanitize_terminal_text,
)

__all__ = [
    "DEFAULT_SECRET_PATTERNS",
    "MASKED_SECRET",
    "WORK_PER_BYTE",
    "MaskingLogFilter",
    "SecretMasker",
    "compile_secret_masker",
    "default_masker",
    "mask_secrets",
    "mask_secrets_deep",
    "masked_logging",
    "redact_url",
    "redact_userinfo",
    "sanitize_and_mask",
    "output_masker",
    "sanitize_terminal_text",
    "set_output_masker",
]
