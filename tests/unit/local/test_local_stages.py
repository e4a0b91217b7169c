"""Issue 41 stages: `make local STAGE=prod` (`python -m local --stage prod`) runs that stage's
settings with its own state folder; dev keeps `.local/`, where it always was."""

from __future__ import annotations

import pytest

from local.__main__ import DEMO_STATE_DIR, parse_args
from local.runtime import DEFAULT_STATE_DIR
from local.settings import PROJECT_ROOT


def test_the_default_stage_keeps_its_state_folder() -> None:
    args = parse_args([])

    assert args.settings.deployment.stage == "dev"
    assert args.settings.stack_name == "TelegramCrmPipeline"
    assert args.state_dir == DEFAULT_STATE_DIR == PROJECT_ROOT / ".local"
    assert parse_args(["demo"]).state_dir == DEMO_STATE_DIR


def test_another_stage_runs_its_settings_in_its_own_state_folder() -> None:
    prod, demo = parse_args(["--stage", "prod"]), parse_args(["demo", "--stage", "prod"])

    assert prod.settings.deployment.stage == "prod"
    # Every local resource (queues, topics, tables, secrets, functions) is named after it.
    assert prod.settings.stack_name == "TelegramCrmPipeline-prod"
    assert prod.state_dir == PROJECT_ROOT / ".local" / "stages" / "prod"
    assert demo.state_dir == prod.state_dir / "demo"
    assert len({prod.state_dir, demo.state_dir, DEFAULT_STATE_DIR, DEMO_STATE_DIR}) == 4
    assert parse_args(["--stage", "prod", "--state-dir", "/tmp/x"]).state_dir.as_posix() == "/tmp/x"


@pytest.mark.parametrize("stage", ["Prod", "pr od", "../x", "demo/x"])
def test_a_stage_name_that_is_none_is_refused(stage: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        parse_args(["--stage", stage])

    assert exit_.value.code == 2
    assert "a stage name is" in capsys.readouterr().err
