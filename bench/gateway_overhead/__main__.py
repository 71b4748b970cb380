"""``python -m bench.gateway_overhead``: see bench/gateway_overhead/__init__.py and bench/README.md."""

import sys

from bench.gateway_overhead.cli import run

run(sys.argv[1:])
