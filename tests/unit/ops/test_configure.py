"""bin/ops configure: deploy settings that stay in cdk.json, refused there as the synth refuses them."""

from __future__ import annotations

import io
import json
import shutil
import stat
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


# -- issue 40: what the synth refuses, configure refuses; the file is never broken nor lost ---------
@pytest.mark.parametrize(
    ("assignment", "message"),
    [
        ("stack_name=my stack", "stack_name: String should match pattern"),
        ("stack_name=1Pipeline", "stack_name: String should match pattern"),
        ("api_rate_limit=inf", "api_rate_limit: Input should be a finite number (given 'inf')"),
        ("api_rate_limit=1e309", "api_rate_limit: Input should be a finite number"),
        ("sms_reconcile_deadline_hours=-Infinity", "sms_reconcile_deadline_hours: Input should be a finite"),
        ("alarm_email.x=ops@example.com", "alarm_email.x: not a setting of this app; did you mean"),
        ("telegram.bot_id=mybot", "telegram.bot_id: not a setting of this app"),
        ("stack-name=Other", "stack-name: not a setting of this app; did you mean `stack_name`?"),
        (" tracing=true", "holds a blank or control character"),
        ("tracing =true", "holds a blank or control character"),
    ],
)
def test_a_value_or_key_the_synth_would_refuse_never_reaches_the_file(
    cdk_json: Path, run, assignment: str, message: str
) -> None:
    before = cdk_json.read_bytes()

    result = run("configure", assignment, "--yes")

    assert result.code == 2, result.out
    assert message in result.err
    assert len(result.err.strip().splitlines()) == 1
    assert cdk_json.read_bytes() == before


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ('{"context": {"tracing": true}', "is not valid JSON (line 1, column 30"),
        ("[]", "is not a JSON object"),
        ('{"context": ["tracing"]}', 'its "context" is not a JSON object'),
        ("\udcff", "is not UTF-8 text"),
    ],
)
def test_a_broken_cdk_json_is_refused_in_one_line_and_left_as_it_is(
    cdk_json: Path, run, content: str, message: str
) -> None:
    cdk_json.write_bytes(content.encode("utf-8", "surrogateescape"))
    before = cdk_json.read_bytes()

    for argv in (("configure",), ("configure", "tracing=true", "--yes")):
        result = run(*argv)
        assert result.code == 2
        assert result.err.startswith("error: ") and message in result.err
        assert len(result.err.strip().splitlines()) == 1
        assert cdk_json.read_bytes() == before


class AnswerAfterAnEdit(io.StringIO):
    """A terminal where, while `configure` asks its question, someone else changes cdk.json."""

    def __init__(self, path: Path, answer: str) -> None:
        super().__init__(answer)
        self.path = path

    def isatty(self) -> bool:
        return True

    def readline(self, size: int | None = -1) -> str:
        document = json.loads(self.path.read_text(encoding="utf-8"))
        document["context"]["alarm_email"] = "other@example.com"
        self.path.write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")
        return super().readline()


def test_a_change_made_while_configure_asks_is_kept_and_nothing_is_written(
    cdk_json: Path, run, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("sys.stdin", AnswerAfterAnEdit(cdk_json, "y\n"))

    result = run("configure", "tracing=true")

    assert result.code == 2
    assert "changed while configure ran: nothing written" in result.err
    context = context_of(cdk_json)
    assert context["alarm_email"] == "other@example.com" and "tracing" not in context
    assert [p.name for p in cdk_json.parent.iterdir()] == ["cdk.json"]  # no temporary file left


def test_the_file_is_replaced_whole_keeping_its_mode(cdk_json: Path, run) -> None:
    cdk_json.chmod(0o600)

    assert run("configure", "tracing=true", "--yes").code == 0

    assert stat.S_IMODE(cdk_json.stat().st_mode) == 0o600
    assert [p.name for p in cdk_json.parent.iterdir()] == ["cdk.json"]
    assert context_of(cdk_json)["tracing"] == "true"
