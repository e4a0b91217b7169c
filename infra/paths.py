"""Where the Lambda code and the shared layer live, independent of the current directory."""

from __future__ import annotations

from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parent.parent
# Code asset of every function: handler strings are "<package>.app.lambda_handler" under it.
FUNCTIONS_DIR = PROJECT_ROOT / "functions"
# Layer asset: Lambda mounts its `python/` folder at /opt/python.
SHARED_LAYER_DIR = PROJECT_ROOT / "layers" / "shared"
# Source of the phonenumbers layer: only its requirements file (the pin); bundling installs it.
PHONENUMBERS_LAYER_DIR = PROJECT_ROOT / "layers" / "phonenumbers"
CDK_JSON = PROJECT_ROOT / "cdk.json"

# Files that are never shipped in an asset (and must not change its hash).
ASSET_EXCLUDES = [
    "**/__pycache__",
    "**/*.pyc",
    "**/tests",
    "**/conftest.py",
    "**/.pytest_cache",
    "**/.mypy_cache",
    "**/.ruff_cache",
]
