"""Benchmarks that print figures: the webhook, the worker runtime, the local pipeline, and a cost model.

Run with `make bench` or `python -m bench [webhook|worker|pipeline|cost ...]` (see bench/README.md).
The in-process benchmarks import the handlers the way Lambda does: the shared layer and the
functions' asset root (`functions/`) go on the import path here, as `local` and `ops` do.
"""

from __future__ import annotations

import sys
from pathlib import Path

_ROOT = Path(__file__).resolve().parent.parent
for _path in (_ROOT / "layers" / "shared" / "python", _ROOT / "functions"):
    if str(_path) not in sys.path:
        sys.path.append(str(_path))
