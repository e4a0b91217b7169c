"""Where the team's own files are (`team/`, README "What is yours, what is ours"), and how a
function that has no such folder gets their content.

The pipeline's code reads these files and never writes them. The stack and the local runtime read
them at synth or start and hand their content to the functions in environment variables (a
Lambda function's code asset holds `functions/`, not `team/`); without the variable a function
reads the file, as the tests and the local tools do.
"""

from __future__ import annotations

import os
from pathlib import Path

# Where the team's folder is: this variable if set, else the repository's `team/` (found from
# layers/shared/python/pipeline/; in Lambda /opt/python/pipeline/, where `.parent` stops at the
# root and no such folder exists).
TEAM_DIR_ENV = "PIPELINE_TEAM_DIR"
_REPOSITORY_TEAM = Path(__file__).resolve().parent.parent.parent.parent.parent / "team"


def team_dir() -> Path:
    """The team's folder (see TEAM_DIR_ENV)."""
    return Path(os.environ.get(TEAM_DIR_ENV) or _REPOSITORY_TEAM)


def team_file(name: str) -> Path:
    """One of the team's files, by name (it need not exist)."""
    return team_dir() / name
