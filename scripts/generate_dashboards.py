"""Generate the Grafana dashboards and the Prometheus alert rules from the metric registry.

    python scripts/generate_dashboards.py          # rewrite dashboards/*.json and alerts.yml
    python scripts/generate_dashboards.py --check  # exit 1 when a checked-in file is stale

This module is the command: where each generated file lives, and writing or checking them. What
goes into them is built by the ``dashboard_generator`` package beside it (queries, panels, one
module per dashboard, alert rules, the docs table), from rulvar_otel.otel.metrics.registry, so a
panel or an alert can only read what is written. Dashboards are built with grafana-foundation-sdk.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Final

# The generator package sits beside this script, which is run as a file (and loaded so by tests).
_HERE: Final = str(Path(__file__).resolve().parent)
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)

from dashboard_generator import (  # noqa: E402 - after the path set-up above
    TABLE_BEGIN,
    TABLE_END,
    build_alerts_text,
    build_dashboards,
    changed,
    counted,
    with_metrics_table,
)

__all__ = ["TABLE_BEGIN", "TABLE_END", "changed", "counted", "generated", "main"]

ROOT: Final = Path(__file__).resolve().parents[1]
DASHBOARDS_DIR: Final = ROOT / "dashboards"
ALERTS_FILE: Final = ROOT / "collector_config" / "prometheus" / "alerts.yml"
DOCS_FILE: Final = ROOT / "docs" / "metrics.md"


def generated() -> dict[Path, str]:
    """Every generated file's path -> the text it must hold."""
    files = {DASHBOARDS_DIR / name: text for name, text in build_dashboards().items()}
    files[ALERTS_FILE] = build_alerts_text()
    if DOCS_FILE.exists():
        docs = with_metrics_table(DOCS_FILE.read_text(encoding="utf-8"))
        if docs is not None:
            files[DOCS_FILE] = docs
    return files


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--check", action="store_true", help="exit 1 when a checked-in file is stale")
    args = parser.parse_args(argv)
    stale = []
    for path, text in generated().items():
        current = path.read_text(encoding="utf-8") if path.exists() else None
        if current == text:
            continue
        stale.append(path)
        if not args.check:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
    rel = [str(p.relative_to(ROOT)) for p in stale]
    if args.check:
        if stale:
            print("stale generated files (run python scripts/generate_dashboards.py):", *rel, sep="\n  ")
            return 1
        print("generated files are current")
        return 0
    print("wrote:", *rel, sep="\n  ") if rel else print("nothing to write: generated files are current")
    return 0


if __name__ == "__main__":
    sys.exit(main())
