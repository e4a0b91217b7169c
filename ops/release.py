"""`python -m ops release capture-fixtures`: what a release leaves behind, for the next one's upgrade test.

It runs the release's own code: `make demo`'s burst through its local pipeline (moto and the
stand-ins; `--ref <commit>` runs another commit's, checked out in a temporary git worktree), with
`--persist`, so at the stop the local runtime saves every table's items as DynamoDB holds them.
Before the stop it reads what the webhook published (the SNS stand-in's recorded `Publish` calls):
the messages every consumer queue held in flight, and what a DLQ holds (SQS moves a message to the
DLQ unchanged). It writes, under `tests/fixtures/upgrade/<version>/`:

- `tables.json`: table -> items (DynamoDB JSON), the table named by its logical name;
- `messages.json`: the published messages (body and message attributes);
- `capture.json`: the version, the commit and when (`tests/unit/upgrade` rebases the items'
  expirations on it, so a record still live at the capture is still live in the test).

Only the CLI of the release is used (`python -m local demo --persist --keep-running`), which every
release since 0.4.0 has. Nothing here reads a secret or reaches AWS.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from infra.paths import PROJECT_ROOT
from infra.version import release_version
from ops.errors import OpsError

FIXTURES_DIR = PROJECT_ROOT / "tests" / "fixtures" / "upgrade"
# The demo prints this line last in its summary (the scheduled reconciler's).
SUMMARY_LAST_LINE = "  reconciler"
DEMO_SECONDS = 600
# How long the pipeline gets to act on each step of `leave_work_behind`.
SETTLE_SECONDS = 8.0


@contextlib.contextmanager
def checkout(ref: str | None) -> Iterator[Path]:
    """This checkout, or `ref` in a temporary git worktree (removed afterwards)."""
    if ref is None:
        yield PROJECT_ROOT
        return
    with tempfile.TemporaryDirectory(prefix="release-") as parent:
        tree = Path(parent) / "tree"
        git = ["git", "-C", str(PROJECT_ROOT), "worktree"]
        subprocess.run([*git, "add", "--detach", str(tree), ref], check=True, capture_output=True)  # noqa: S603
        try:
            yield tree
        finally:
            subprocess.run([*git, "remove", "--force", str(tree)], check=False, capture_output=True)  # noqa: S603


def _commit(tree: Path) -> str:
    command = ["git", "-C", str(tree), "rev-parse", "HEAD"]
    run = subprocess.run(command, capture_output=True, text=True, check=False)  # noqa: S603 - git
    return run.stdout.strip()


def published_messages(sns_stand_in: str) -> list[dict[str, Any]]:
    """The messages the SNS stand-in forwarded (`Publish` calls), as SNS delivers them raw to a queue."""
    with urllib.request.urlopen(f"{sns_stand_in}/_calls", timeout=10) as answer:  # noqa: S310 - loopback
        calls = json.loads(answer.read())
    messages = []
    for call in calls:
        body = call.get("body")
        # The stand-in records a form body as its fields (older ones: as the raw text).
        form = body if isinstance(body, dict) else dict(urllib.parse.parse_qsl(str(body or "")))
        if form.get("Action") != "Publish" or call.get("fault"):
            continue
        attributes: dict[str, dict[str, str]] = {}
        index = 1
        while f"MessageAttributes.entry.{index}.Name" in form:
            entry = f"MessageAttributes.entry.{index}."
            attributes[form[entry + "Name"]] = {
                "DataType": form.get(entry + "Value.DataType", "String"),
                "StringValue": form.get(entry + "Value.StringValue", ""),
            }
            index += 1
        messages.append(
            {
                "topic_arn": form["TopicArn"],
                "body": form["Message"],
                "attributes": attributes,
                "group_id": form.get("MessageGroupId"),
                "deduplication_id": form.get("MessageDeduplicationId"),
            }
        )
    return messages


def _post(url: str, document: dict[str, Any] | None = None, headers: dict[str, str] | None = None) -> Any:
    data = json.dumps(document or {}).encode()
    request = urllib.request.Request(  # noqa: S310 - the local stand-ins, on loopback
        url, data=data, method="POST", headers={"Content-Type": "application/json", **(headers or {})}
    )
    with urllib.request.urlopen(request, timeout=30) as answer:  # noqa: S310
        raw = answer.read()
    return json.loads(raw) if raw else None


def _telegram_update(update_id: int, text: str) -> dict[str, Any]:
    user = {"id": 2001, "is_bot": False, "first_name": "Carla"}
    chat = {"id": 2001, "type": "private", "first_name": "Carla"}
    message = {"message_id": update_id, "date": int(time.time()), "chat": chat, "from": user, "text": text}
    return {"update_id": update_id, "message": message}


def leave_work_behind(stack: dict[str, Any], log: Any) -> None:
    """After the demo, what a deploy may meet: a Bitrix24 deal moved (its sync marks and SMS), a
    reply Telegram refused for good (a dead letter in the bot's DLQ) and replies waiting while
    Telegram is down (messages in flight in the queues). Each step is best effort: a release whose
    stand-ins lack a control endpoint captures the rest."""
    fakes = stack["fakes"]
    secret = {"X-Telegram-Bot-Api-Secret-Token": stack["telegram_secret"]}
    steps: list[tuple[str, Callable[[], Any]]] = [
        (
            "bitrix24 deal",
            lambda: _post(
                f"{fakes['bitrix24']}/_deals",
                {"title": "Order 7", "contact": {"name": "Ann", "phone": "+375291234567"}},
            ),
        ),
        ("bitrix24 move", lambda: _post(f"{fakes['bitrix24']}/_deals/1/move", {"stage_id": "EXECUTING"})),
        (
            "telegram refuses",
            lambda: _post(
                f"{fakes['telegram']}/_faults", {"fail_next": 3, "status": 400, "match": "sendMessage"}
            ),
        ),
        ("update refused", lambda: _post(stack["webhook_url"], _telegram_update(900, "/start"), secret)),
        ("settle", lambda: time.sleep(SETTLE_SECONDS)),
        ("telegram down", lambda: _post(f"{fakes['telegram']}/_faults", {"down_for": 600})),
        ("update waiting", lambda: _post(stack["webhook_url"], _telegram_update(901, "/start"), secret)),
        ("settle", lambda: time.sleep(SETTLE_SECONDS)),
    ]
    for name, step in steps:
        try:
            step()
        except (OSError, ValueError) as error:
            print(f"capture: {name} skipped ({type(error).__name__}: {error})", file=log)


def run_demo(tree: Path, state: Path, log: Any = sys.stderr) -> list[dict[str, Any]]:
    """The release's demo with `--persist`; returns what it published once its summary is out and
    `leave_work_behind` ran, then stops it (Ctrl-C), which saves the queues and tables under
    `state/persisted/`."""
    command = [sys.executable, "-m", "local", "demo", "--persist", "--keep-running", "--no-reload"]
    command += ["--state-dir", str(state)]
    env = {**os.environ, "AWS_DEFAULT_REGION": os.environ.get("AWS_DEFAULT_REGION", "eu-central-1")}
    process = subprocess.Popen(  # noqa: S603 - our own module, no shell
        command, cwd=tree, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    try:
        deadline = time.monotonic() + DEMO_SECONDS
        assert process.stdout is not None
        for line in process.stdout:
            if line.startswith(SUMMARY_LAST_LINE):
                break
            if time.monotonic() > deadline:
                raise OpsError("the demo did not finish in time")
        else:
            raise OpsError(f"the demo stopped before its summary (exit {process.wait()})")
        stack = json.loads((state / "stack.json").read_text())
        leave_work_behind(stack, log)
        messages = published_messages(stack["fakes"]["sns"])
    finally:
        process.send_signal(signal.SIGINT)
        try:
            process.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            process.kill()
            process.communicate()
    return messages


def logical_tables(saved: dict[str, list[dict[str, Any]]]) -> dict[str, list[dict[str, Any]]]:
    """ "<Stack>-journal" -> "journal", items sorted by key (a stable fixture)."""
    return {
        name.rsplit("-", 1)[-1]: sorted(items, key=lambda item: json.dumps(item, sort_keys=True))
        for name, items in sorted(saved.items())
    }


def logical_queues(saved: dict[str, list[dict[str, Any]]]) -> dict[str, list[dict[str, Any]]]:
    """ "<Stack>-bot-dlq.fifo" -> "bot-dlq": the messages each queue and DLQ held at the stop."""
    named: dict[str, list[dict[str, Any]]] = {}
    for name, messages in sorted(saved.items()):
        logical = name.removesuffix(".fifo").split("-", 1)[-1]
        named.setdefault(logical, []).extend(messages)
    return named


def capture_fixtures(ref: str | None, version: str | None, out: Path | None) -> Path:
    with checkout(ref) as tree, tempfile.TemporaryDirectory(prefix="release-state-") as state_dir:
        version = version or _version_of(tree)
        state = Path(state_dir)
        messages = run_demo(tree, state)
        saved = json.loads((state / "persisted" / "tables.json").read_text())
        queues = json.loads((state / "persisted" / "queues.json").read_text())
        target = out or FIXTURES_DIR / version
        target.mkdir(parents=True, exist_ok=True)
        document = {
            "version": version,
            "commit": _commit(tree),
            "captured_at": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        }
        _write(target / "capture.json", document)
        _write(target / "tables.json", logical_tables(saved))
        _write(target / "messages.json", messages)
        _write(target / "queues.json", logical_queues(queues))
    return target


def _version_of(tree: Path) -> str:
    text = (tree / "pyproject.toml").read_text()
    version = next((line.split('"')[1] for line in text.splitlines() if line.startswith("version =")), "")
    if tree == PROJECT_ROOT or version not in ("", "0.1.0"):
        return version or release_version()
    raise OpsError("that commit names no release version (0.1.0 stood for none): pass --version")


def _write(path: Path, document: Any) -> None:
    path.write_text(json.dumps(document, indent=1, sort_keys=True, ensure_ascii=False) + "\n")
