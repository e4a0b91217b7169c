"""The local runtime: the whole pipeline on one machine, no AWS account (`make local`, `make demo`).

See local/README.md. `local.runtime.Runtime` is the entry point for code and tests.
"""

from __future__ import annotations

import sys
from pathlib import Path

# The runtime reads the registry from the shared layer's `pipeline` package, as app.py does.
_SHARED_LAYER = str(Path(__file__).resolve().parent.parent / "layers" / "shared" / "python")
if _SHARED_LAYER not in sys.path:
    sys.path.append(_SHARED_LAYER)
