"""bin/ops: the operator CLI without activating the virtualenv, from any directory."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from ops import REPO_ROOT

BIN_OPS = REPO_ROOT / "bin" / "ops"


def run_outside_the_project(*argv: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    # No virtualenv on PATH, no PYTHONPATH: what a new shell has.
    environment = {
        "PATH": "/usr/bin:/bin",
        "HOME": str(tmp_path),
        "AWS_CONFIG_FILE": str(tmp_path / "none"),
    }
    return subprocess.run(
        [str(BIN_OPS), *argv], cwd=tmp_path, env=environment, capture_output=True, text=True, timeout=60
    )


def test_bin_ops_runs_the_cli_from_another_directory_without_the_venv_activated(tmp_path: Path) -> None:
    assert os.access(BIN_OPS, os.X_OK)

    result = run_outside_the_project("--help", tmp_path=tmp_path)

    assert result.returncode == 0, result.stderr
    assert "dlq" in result.stdout and "journal" in result.stdout


def test_local_mode_finds_the_projects_local_runtime_from_any_directory(tmp_path: Path) -> None:
    result = run_outside_the_project("outputs", "--local", tmp_path=tmp_path)

    assert "ModuleNotFoundError" not in result.stderr
    if result.returncode != 0:  # no `make local` running: the message names the project's own file
        assert str(REPO_ROOT / ".local" / "stack.json") in result.stderr or "cannot reach" in result.stderr
