"""Issue 41 stages: `bin/ops --stage <stage>` addresses that stage's stack and `make local` state,
and `bin/ops configure --stage <stage>` keeps that stage's own settings in cdk.json."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from infra.config import PipelineSettings
from infra.outputs import OutputKey
from infra.paths import CDK_JSON
from ops import REPO_ROOT
from tests.unit.ops.support import Deployed, create_stack

PROD_STACK = "TelegramCrmPipeline-prod"
PROD_JOURNAL = "pipeline-prod-journal"


@pytest.fixture
def prod_deployed(deployed: Deployed) -> Deployed:
    """Stage prod deployed beside dev (the `deployed` stack) in the same account and region."""
    create_stack(
        Deployed(**{**vars(deployed), "outputs": {OutputKey.JOURNAL_TABLE: PROD_JOURNAL}}), PROD_STACK
    )
    return deployed


@pytest.mark.parametrize(
    ("argv", "journal"),
    [
        (("outputs", OutputKey.JOURNAL_TABLE), "pipeline-journal"),
        (("--stage", "dev", "outputs", OutputKey.JOURNAL_TABLE), "pipeline-journal"),
        (("--stage", "prod", "outputs", OutputKey.JOURNAL_TABLE), PROD_JOURNAL),
        (("outputs", OutputKey.JOURNAL_TABLE, "--stage", "prod"), PROD_JOURNAL),
    ],
)
def test_stage_flag_addresses_that_stages_stack(prod_deployed: Deployed, run, argv, journal) -> None:
    result = run(*argv)

    assert result.code == 0, result.err
    assert result.out.strip() == journal


def test_a_stage_not_deployed_names_its_stack(prod_deployed: Deployed, run) -> None:
    result = run("--stage", "qa", "dlq", "list")

    assert result.code == 2
    assert "stack 'TelegramCrmPipeline-qa' not found" in result.err


@pytest.mark.parametrize("stage", ["Prod", "prod-1", "1prod", "", "p" * 17])
def test_a_stage_name_that_is_none_is_refused_before_anything_is_read(
    run, stage: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_:
        run("--stage", stage, "outputs")

    assert exit_.value.code == 2
    assert "a stage name is 1-16 lowercase letters and digits" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("stage", "state"),
    [(None, ".local/stack.json"), ("dev", ".local/stack.json"), ("prod", ".local/stages/prod/stack.json")],
)
def test_local_mode_reads_the_stages_state_folder(run, stage: str | None, state: str) -> None:
    flags = ("--stage", stage) if stage else ()
    result = run("--local", *flags, "dlq", "list")

    # No runtime of that stage is running here: the message names the file it looked for.
    if (REPO_ROOT / state).exists():
        pytest.skip(f"a make local runtime left {state}")
    assert result.code == 2
    assert f"{REPO_ROOT / state} not found" in result.err


# -- configure --stage -----------------------------------------------------------------------------
@pytest.fixture
def cdk_json(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    copy = tmp_path / "cdk.json"
    shutil.copy(CDK_JSON, copy)
    monkeypatch.setattr("ops.cli.CDK_JSON", copy)
    return copy


def context_of(path: Path) -> dict[str, object]:
    return dict(json.loads(path.read_text(encoding="utf-8"))["context"])


def test_configure_stage_writes_that_stages_own_settings(cdk_json: Path, run) -> None:
    assert run("configure", "alarms=essential", "--yes").code == 0
    result = run("configure", "--stage", "prod", "alarms=full", "alarm_email=ops@example.com", "--yes")

    assert result.code == 0, result.err
    context = context_of(cdk_json)
    assert context["stages"] == {"prod": {"alarms": "full", "alarm_email": "ops@example.com"}}
    dev = PipelineSettings.from_context(context)
    prod = PipelineSettings.from_context({**context, "stage": "prod"})
    assert (dev.alarms, dev.alarm_email, dev.stage_stack_name) == ("essential", None, "TelegramCrmPipeline")
    assert (prod.alarms, prod.alarm_email, prod.stage_stack_name) == ("full", "ops@example.com", PROD_STACK)
    assert run("configure", "--stage", "prod").out.splitlines() == [
        "alarm_email=ops@example.com",
        "alarms=full",
    ]
    assert run("configure", "--stage", "prod", "--unset", "alarms", "--yes").code == 0
    assert context_of(cdk_json)["stages"] == {"prod": {"alarm_email": "ops@example.com"}}


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (("--stage", "prod", "alarms=most"), "alarms: Input should be 'full' or 'essential'"),
        (("--stage", "prod", "stage=qa"), "a stage's settings cannot choose the stage"),
        (("stage=qa",), None),  # a stage with no block while others have one: see below
    ],
)
def test_configure_refuses_what_a_stages_synth_refuses(cdk_json: Path, run, argv, message) -> None:
    assert run("configure", "--stage", "prod", "alarms=full", "--yes").code == 0
    before = cdk_json.read_bytes()

    result = run("configure", *argv, "--yes")

    assert result.code == 2
    assert message is None or message in result.err
    assert "no such stage" in result.err or message is not None
    assert cdk_json.read_bytes() == before
