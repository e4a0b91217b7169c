"""Tests run on the Lambda runtime's Python (3.13): `bin/find-python` finds it for `make` and
`.ci/run`; the code stays valid on 3.11 (ruff's and mypy's target, `requires-python`)."""

from __future__ import annotations

import re
import subprocess
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def lambda_runtime() -> str:
    """ "3.13" from `infra/constructs/layers.py`'s `Runtime.PYTHON_3_13` (read, not imported: no CDK here)."""
    [minor] = re.findall(
        r"RUNTIME = lambda_\.Runtime\.PYTHON_3_(\d+)", (ROOT / "infra/constructs/layers.py").read_text()
    )
    return f"3.{minor}"


def test_find_python_seeks_the_lambda_runtime_and_make_and_ci_use_it() -> None:
    assert re.search(rf"^want={re.escape(lambda_runtime())}$", (ROOT / "bin/find-python").read_text(), re.M)
    assert "bin/find-python" in (ROOT / "Makefile").read_text()
    assert 'PYTHON="$(bin/find-python --install)"' in (ROOT / ".ci/run").read_text()


def test_find_python_prints_an_interpreter_of_that_version_or_fails() -> None:
    run = subprocess.run([str(ROOT / "bin/find-python")], capture_output=True, text=True, check=False)
    if run.returncode:
        assert run.stdout == ""
        return
    version = subprocess.run(
        [run.stdout.strip(), "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert version == lambda_runtime()


def test_the_code_stays_valid_on_python_3_11() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert project["project"]["requires-python"] == ">=3.11"
    assert project["tool"]["ruff"]["target-version"] == "py311"
    assert project["tool"]["mypy"]["python_version"] == "3.11"
