"""bin/ops configure: deploy settings that stay in cdk.json, refused there as the synth refuses them."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from infra.config import PipelineSettings
from infra.paths import CDK_JSON


@pytest.fixture
def cdk_json(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A copy of the project's cdk.json (feature flags and all) that the command edits."""
    copy = tmp_path / "cdk.json"
    shutil.copy(CDK_JSON, copy)
    monkeypatch.setattr("ops.cli.CDK_JSON", copy)
    return copy


def context_of(path: Path) -> dict[str, object]:
    return dict(json.loads(path.read_text(encoding="utf-8"))["context"])


def test_settings_written_once_apply_to_every_later_synth(cdk_json: Path, run) -> None:
    flags_before = {k: v for k, v in context_of(cdk_json).items() if k.startswith("@")}

    result = run("configure", "telegram_bot_id=mybot", "alarm_email=ops@example.com", "tracing=true", "--yes")

    assert result.code == 0, result.err
    assert "telegram_bot_id: (default) -> mybot" in result.out
    context = context_of(cdk_json)
    settings = PipelineSettings.from_context(context)  # what every synth reads from the file
    assert (settings.telegram_bot_id, settings.alarm_email, settings.tracing) == (
        "mybot",
        "ops@example.com",
        True,
    )
    assert {k: v for k, v in context.items() if k.startswith("@")} == flags_before  # the CDK's flags stay
    shown = run("configure")
    assert shown.out.splitlines() == ["alarm_email=ops@example.com", "telegram_bot_id=mybot", "tracing=true"]


@pytest.mark.parametrize(
    ("assignment", "message"),
    [
        (
            "alarm_emial=ops@example.com",
            "alarm_emial: not a setting of this app; did you mean `alarm_email`?",
        ),
        ("tracing=yes", "tracing: must be true or false (given 'yes')"),
        ("log_retention_days=31", "log_retention_days: must be one of"),
        ("telegram_bot_id", "'telegram_bot_id' is not KEY=VALUE"),
    ],
)
def test_a_refused_setting_never_reaches_the_file(cdk_json: Path, run, assignment: str, message: str) -> None:
    before = cdk_json.read_bytes()

    result = run("configure", assignment, "--yes")

    assert result.code == 2
    assert message in result.err
    assert cdk_json.read_bytes() == before


def test_unset_returns_a_setting_to_its_default_and_dry_run_writes_nothing(cdk_json: Path, run) -> None:
    assert run("configure", "log_retention_days=90", "--yes").code == 0
    written = cdk_json.read_bytes()

    dry = run("configure", "--unset", "log_retention_days", "--dry-run")
    assert dry.code == 0 and "would write unset log_retention_days" in dry.out
    assert cdk_json.read_bytes() == written

    assert run("configure", "--unset", "log_retention_days", "--yes").code == 0
    assert "log_retention_days" not in context_of(cdk_json)
    assert run("configure", "--unset", "log_retention_days", "--yes").code == 2  # not set any more


def test_changing_settings_asks_first_in_a_script(cdk_json: Path, run) -> None:
    before = cdk_json.read_bytes()

    result = run("configure", "telegram_bot_id=mybot")

    assert result.code == 2
    assert "without confirmation: pass --yes" in result.err
    assert cdk_json.read_bytes() == before
