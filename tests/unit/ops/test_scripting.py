"""The CLI in scripts: global flags anywhere, --json, exit codes, closed pipes, confirmations."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import boto3
import pytest

from ops import REPO_ROOT
from ops.cli import EXIT_BROKEN_PIPE, main
from pipeline.observability import mask_phone
from pipeline.sms.journal import Journal, State
from tests.unit.ops.support import CUSTOMER_PHONE, DEPLOYED_CONSUMERS, Deployed, dead_letter, depth
from tests.unit.ops.test_journal_commands import ORDER_ID, PHONE, record


@pytest.fixture
def journal(deployed: Deployed) -> Journal:
    return Journal(deployed.journal_table)


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


# -- global flags ---------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "argv",
    [
        ("--local", "--local-file", "/nonexistent/stack.json", "dlq", "list"),
        ("dlq", "--local", "list", "--local-file", "/nonexistent/stack.json"),
        ("dlq", "list", "--local", "--local-file", "/nonexistent/stack.json"),
    ],
)
def test_local_flags_work_before_and_after_the_command(run, argv) -> None:
    result = run(*argv)

    assert result.code == 2
    assert (
        result.err == "error: /nonexistent/stack.json not found: start the local runtime first (make local)\n"
    )


@pytest.mark.parametrize("argv", [("--stack", "Other", "outputs"), ("outputs", "--stack", "Other")])
def test_stack_flag_works_before_and_after_the_command(deployed: Deployed, run, argv) -> None:
    result = run(*argv)

    assert result.code == 2
    assert "Other" in result.err


def test_a_flag_after_the_command_wins_over_one_before(deployed: Deployed, run) -> None:
    assert run("--stack", "Other", "outputs", "--stack", "TelegramCrmPipeline").code == 0


# -- --json and exit codes --------------------------------------------------------------------------
def test_dlq_list_json_and_fail_on_messages(deployed: Deployed, run) -> None:
    assert run("dlq", "list", "--fail-on-messages").code == 0
    dead_letter(deployed.dlq_urls["crm"], 1)

    result = run("dlq", "list", "--json", "--fail-on-messages")

    assert result.code == 1
    rows = {row["consumer"]: row for row in json.loads(result.out)["dlqs"]}
    assert set(rows) == set(DEPLOYED_CONSUMERS)
    assert rows["crm"]["dlq_depth"] == 1
    assert set(rows["crm"]) == {
        "consumer",
        "dlq_depth",
        "in_flight",
        "oldest_age_seconds",
        "age_source",
        "delivery_dlq_depth",
        "groups",  # a FIFO DLQ's message groups (chats), with --sample; None otherwise
        "fifo",  # whether the DLQ is a FIFO queue (an ordered consumer's)
    }
    assert rows["crm"]["groups"] is None
    assert rows["crm"]["fifo"] is False
    assert run("dlq", "list").code == 0  # without the flag a non-empty DLQ is not a failure


def test_dlq_peek_json_has_ids_not_the_payload(deployed: Deployed, run) -> None:
    dead_letter(deployed.dlq_urls["crm"], 7, reason="permanent: CRM answered 422")

    result = run("dlq", "peek", "crm", "--json")

    assert result.code == 0, result.err
    data = json.loads(result.out)
    assert data["consumer"] == "crm"
    [message] = data["messages"]
    assert message["dead_letter_reason"] == "permanent: CRM answered 422"
    assert message["type"] == "message"
    assert CUSTOMER_PHONE not in result.out
    assert depth(deployed.dlq_urls["crm"]) == 1


def test_outputs_json(deployed: Deployed, run) -> None:
    result = run("outputs", "--json")

    assert result.code == 0, result.err
    data = json.loads(result.out)
    assert set(deployed.outputs) <= set(data)
    assert data == {**data, **deployed.outputs}


def test_journal_json_commands(journal: Journal, run) -> None:
    key = record(journal, ORDER_ID, State.UNKNOWN)

    shown = json.loads(run("journal", "show", key, "--json").out)
    unknown = json.loads(run("journal", "unknown", "--json").out)

    assert shown["key"] == key
    assert shown["record"]["recipient"] == mask_phone(PHONE)
    assert shown["record"]["attempt_count"] == 1
    assert [r["key"] for r in unknown["records"]] == [key]
    assert unknown["records"][0]["recipient"] == mask_phone(PHONE)


def test_a_closed_stdout_is_not_a_traceback(deployed: Deployed, monkeypatch: pytest.MonkeyPatch) -> None:
    class ClosedPipe(io.StringIO):
        def write(self, text: str) -> int:
            raise BrokenPipeError(32, "Broken pipe")

    monkeypatch.setattr("sys.stdout", ClosedPipe())

    assert main(["outputs"]) == EXIT_BROKEN_PIPE


def test_a_real_process_whose_reader_went_away_ends_quietly(tmp_path: Path) -> None:
    """`python -m ops outputs | head -0`: the pipe's read end is closed before the CLI writes."""
    stack_file = tmp_path / "stack.json"
    stack_file.write_text(
        json.dumps({"aws_endpoint": "http://127.0.0.1:9/", "webhook_url": "https://x.example/telegram"})
    )
    environment = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    process = subprocess.Popen(
        [sys.executable, "-m", "ops", "--local", "--local-file", str(stack_file), "outputs"],
        cwd=REPO_ROOT,
        env=environment,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert process.stdout is not None and process.stderr is not None
    process.stdout.close()
    err = process.stderr.read()
    process.stderr.close()

    assert process.wait(timeout=60) == EXIT_BROKEN_PIPE
    assert err == b""


# -- journal show masks the phone only --------------------------------------------------------------
def test_journal_show_masks_the_phone_but_not_timestamps_or_ids(journal: Journal, run) -> None:
    key = record(journal, ORDER_ID, State.UNKNOWN)

    result = run("journal", "show", key)

    assert result.code == 0, result.err
    fields = dict(line.split(": ", 1) for line in result.out.splitlines())
    assert fields["body"] == f"Order {ORDER_ID} is ready. Questions: {mask_phone(PHONE)}"
    occurred_at = journal.get(key).occurred_at
    assert occurred_at is not None
    assert fields["occurred_at"] == occurred_at.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    assert "*" not in fields["created_at"] + fields["state_since"] + fields["attempts"]
    assert "2026-01-01T00:00:01.000000Z" in fields["attempts"]
    assert PHONE not in result.out


# -- confirmation and --dry-run ---------------------------------------------------------------------
def test_redrive_without_a_terminal_or_yes_is_refused(deployed: Deployed, run) -> None:
    dead_letter(deployed.dlq_urls["crm"], 1)

    result = run("dlq", "redrive", "crm")

    assert result.code == 2
    assert result.err.startswith("error: refusing to move the 1 message(s) of the crm DLQ")
    assert "--yes" in result.err
    assert depth(deployed.dlq_urls["crm"]) == 1


def test_redrive_dry_run_changes_nothing(deployed: Deployed, run) -> None:
    dead_letter(deployed.dlq_urls["crm"], 1)

    result = run("dlq", "redrive", "crm", "--dry-run")

    assert result.code == 0, result.err
    assert result.out.startswith("dry run: would move the 1 message(s) of the crm DLQ")
    assert depth(deployed.dlq_urls["crm"]) == 1
    assert depth(deployed.queue_urls["crm"]) == 0


@pytest.mark.parametrize(("answer", "code", "moved"), [("y\n", 0, 1), ("n\n", 2, 0), ("\n", 2, 0)])
def test_redrive_asks_on_a_terminal(
    deployed: Deployed, run, monkeypatch: pytest.MonkeyPatch, answer: str, code: int, moved: int
) -> None:
    dead_letter(deployed.dlq_urls["crm"], 1)
    monkeypatch.setattr("sys.stdin", Terminal(answer))

    result = run("dlq", "redrive", "crm")

    assert result.code == code
    assert "? [y/N]" in result.err
    assert depth(deployed.queue_urls["crm"]) == moved


def test_journal_resolve_dry_run_and_refusal_change_nothing(journal: Journal, run) -> None:
    key = record(journal, ORDER_ID, State.UNKNOWN)

    dry = run("journal", "resolve", key, "--accepted", "--dry-run")
    refused = run("journal", "resolve", key, "--accepted")

    assert dry.code == 0 and dry.out.startswith("dry run: would resolve SMS record")
    assert refused.code == 2 and "refusing" in refused.err
    assert journal.get(key).state is State.UNKNOWN


@pytest.mark.parametrize("command", ["rotate-secret", "rotate-crm-token", "set-webhook", "delete-webhook"])
def test_secret_and_webhook_changes_need_yes(deployed: Deployed, telegram, run, command: str) -> None:
    secrets = boto3.client("secretsmanager")
    before = {s["Name"]: s.get("LastChangedDate") for s in secrets.list_secrets()["SecretList"]}

    refused = run(command)
    dry = run(command, "--dry-run")

    assert refused.code == 2 and "refusing" in refused.err
    assert dry.code == 0 and "dry run: would" in dry.out
    assert telegram.params("setWebhook") == [] and telegram.params("deleteWebhook") == []
    after = {s["Name"]: s.get("LastChangedDate") for s in secrets.list_secrets()["SecretList"]}
    assert after == before


# -- peek and the receive count -------------------------------------------------------------------
def test_peeking_does_not_count_against_the_source_queue_after_a_redrive(deployed: Deployed, run) -> None:
    dead_letter(deployed.dlq_urls["crm"], 1)
    for _ in range(6):  # more than the source queue's maxReceiveCount (5)
        assert run("dlq", "peek", "crm").code == 0

    assert run("dlq", "redrive", "crm", "--yes").code == 0

    [message] = boto3.client("sqs").receive_message(
        QueueUrl=deployed.queue_urls["crm"], AttributeNames=["ApproximateReceiveCount"]
    )["Messages"]
    assert message["Attributes"]["ApproximateReceiveCount"] == "1"
