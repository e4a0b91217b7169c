"""`--help` everywhere, and the operator mistakes that must end as one line and exit code 2."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import boto3
import pytest
from moto import mock_aws

from ops import REPO_ROOT
from ops.cli import build_parser
from tests.unit.ops.support import BOT_TOKEN, TELEGRAM_SECRET, Deployed, FakeTelegram

COMMANDS = [
    ("set-webhook",),
    ("webhook-info",),
    ("delete-webhook",),
    ("rotate-secret",),
    ("rotate-crm-token",),
    ("outputs",),
    ("doctor",),
    ("new-consumer",),
    ("configure",),
    ("console",),
    ("forget",),
    ("dlq", "list"),
    ("dlq", "peek"),
    ("dlq", "redrive"),
    ("journal", "show"),
    ("journal", "unknown"),
    ("journal", "resolve"),
    ("sms", "preview"),
    ("sms", "opt-out"),
    ("sms", "opt-in"),
    ("broadcast", "create"),
    ("broadcast", "status"),
    ("broadcast", "pause"),
    ("broadcast", "resume"),
    ("broadcast", "cancel"),
    ("release", "capture-fixtures"),
]


def leaf_commands(parser: argparse.ArgumentParser, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    found: list[tuple[str, ...]] = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found.extend(leaf_commands(sub, (*prefix, name)))
    return found or [prefix]


def test_every_command_is_covered_by_the_help_test() -> None:
    assert sorted(leaf_commands(build_parser())) == sorted(COMMANDS)


@pytest.mark.parametrize(
    "command", [(), ("dlq",), ("journal",), *COMMANDS], ids=lambda c: " ".join(c) or "top"
)
def test_help_works_for_every_command(command: tuple[str, ...], run) -> None:
    with pytest.raises(SystemExit) as exit_info:
        run(*command, "--help")

    assert exit_info.value.code == 0


def test_help_describes_the_options(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args(["set-webhook", "--help"])
    text = capsys.readouterr().out
    for option in ("--stack", "--local", "--bot-token-secret", "--max-connections", "--drop-pending-updates"):
        assert option in text


def assert_one_line_error(result, fragment: str) -> None:
    assert result.code == 2
    assert result.err.startswith("error: ")
    assert result.err.count("\n") == 1
    assert "Traceback" not in result.err
    assert fragment in result.err


def test_missing_stack(run) -> None:
    with mock_aws():
        result = run("dlq", "list", "--stack", "NoSuchStack")

    assert_one_line_error(result, "stack 'NoSuchStack' not found in region eu-central-1")


def test_missing_credentials(run, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(name)
    for name in (
        "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
        "AWS_CONTAINER_CREDENTIALS_FULL_URI",
        "AWS_WEB_IDENTITY_TOKEN_FILE",
    ):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")

    result = run("webhook-info")

    assert_one_line_error(result, "no AWS credentials found")


@pytest.mark.parametrize(
    ("token", "code"),
    [("111:revoked-or-wrong-token", 401), ("not a token at all", None)],
    ids=["unauthorized", "malformed"],
)
def test_bad_bot_token(
    deployed: Deployed,
    telegram: FakeTelegram,
    run,
    monkeypatch: pytest.MonkeyPatch,
    token: str,
    code: int | None,
) -> None:
    monkeypatch.setenv("TELEGRAM_BOT_TOKEN", token)

    result = run("set-webhook", "--yes")

    if code is None:
        assert_one_line_error(result, "TELEGRAM_BOT_TOKEN does not hold a bot token")
        assert telegram.calls == []
    else:
        assert_one_line_error(result, "Telegram rejected the bot token (401 Unauthorized)")
    assert token not in result.err


def test_bot_api_not_found_is_reported_as_a_bad_token(
    deployed: Deployed, telegram: FakeTelegram, run
) -> None:
    telegram.fail_with = (404, "Not Found")

    result = run("webhook-info")

    assert_one_line_error(result, "Telegram rejected the bot token (404 Not Found)")


def test_unreachable_bot_api_does_not_leak_the_token(
    deployed: Deployed, run, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TELEGRAM_API_BASE", "http://127.0.0.1:9")  # discard port: nothing listens

    result = run("webhook-info")

    assert_one_line_error(result, "cannot reach the Telegram Bot API at http://127.0.0.1:9")
    assert BOT_TOKEN not in result.err


def test_missing_local_stack_file(run, tmp_path: Path) -> None:
    result = run("dlq", "list", "--local", "--local-file", str(tmp_path / "stack.json"))

    assert_one_line_error(result, "stack.json not found: start the local runtime first (make local)")


def test_local_runtime_not_running(run, tmp_path: Path) -> None:
    stack_file = tmp_path / "stack.json"
    stack_file.write_text(json.dumps({"aws_endpoint": "http://127.0.0.1:9", "queues": {}}))

    result = run("journal", "unknown", "--local", "--local-file", str(stack_file))

    assert_one_line_error(result, "no output 'JournalTableName'")
    stack_file.write_text(json.dumps({"aws_endpoint": "http://127.0.0.1:9", "tables": {"journal": "j"}}))

    result = run("journal", "show", "some-key", "--local", "--local-file", str(stack_file))

    assert_one_line_error(result, "cannot reach the local runtime's AWS endpoint http://127.0.0.1:9/")
    assert "make local" in result.err


def test_errors_from_a_real_process_have_no_traceback(tmp_path: Path) -> None:
    """`python -m ops` as users run it: the layer is found and the error is one line."""
    environment = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    completed = subprocess.run(
        [
            sys.executable,
            "-m",
            "ops",
            "webhook-info",
            "--local",
            "--local-file",
            str(tmp_path / "missing.json"),
        ],
        cwd=REPO_ROOT,
        env=environment,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )

    assert completed.returncode == 2
    assert completed.stdout == ""
    assert completed.stderr.count("\n") == 1
    assert "missing.json not found" in completed.stderr


def test_no_secret_in_any_output_without_show_secrets(
    deployed: Deployed, telegram: FakeTelegram, run
) -> None:
    telegram.webhook_info = {
        "url": "https://example.org/hook",
        "has_custom_certificate": False,
        "pending_update_count": 0,
    }
    outputs = [
        run(*command)
        for command in (
            ("set-webhook", "--yes"),
            ("webhook-info",),
            ("rotate-secret", "--yes"),
            ("dlq", "list"),
        )
    ]

    assert all(result.code == 0 for result in outputs)
    text = "".join(result.out + result.err for result in outputs)
    rotated = boto3.client("secretsmanager").get_secret_value(SecretId=deployed.telegram_secret_id)[
        "SecretString"
    ]
    assert rotated != TELEGRAM_SECRET
    for secret in (TELEGRAM_SECRET, rotated, BOT_TOKEN):
        assert secret not in text
