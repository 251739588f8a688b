"""``python -m benchmarks``: the build to measure is chosen before anything imports ``rulvar_otel``."""

import sys

from benchmarks._build import select_build

selected = select_build(sys.argv[1:])

from benchmarks.run import main  # noqa: E402  (after the build's import root is in place)

sys.exit(main(selected=selected))
