"""Operator CLI for a deployed (or local) pipeline: `python -m ops --help`.

The CLI reads the same consumer registry and SMS journal rules as the Lambdas. That code ships
as a Lambda layer (`layers/shared/python`), not as an installed distribution, so the layer
directory is put on the import path here, as Lambda does with /opt/python.
"""

from __future__ import annotations

import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
SHARED_LAYER = REPO_ROOT / "layers" / "shared" / "python"

if str(SHARED_LAYER) not in sys.path:
    sys.path.append(str(SHARED_LAYER))
