"""The operator's actions in a campaign, taken as a person takes them once the faults are gone.

- Every dead letter redriven: `bin/ops dlq redrive`'s move (`ops.dlq.move_by_hand`, on the
  campaign's own client; a FIFO DLQ is moved so on AWS too).
- Every SMS record that waits on a person (`failed`, `unknown`) decided with `bin/ops journal
  resolve`, run as a user runs it against the local stack: `--accepted` when the gateway's own
  record shows it took that SMS (its `Context` carries the record's key), else `--not-sent`, which
  the reconciler sends once, under the same key. A person decides from the gateway's records too.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

from local.chaos.checks import DECIDE_STATES
from local.fakes.end_user_messaging import EndUserMessagingFake
from local.runtime import Runtime
from local.settings import PROJECT_ROOT
from ops.dlq import move_by_hand
from ops.stack import ConsumerQueues
from pipeline.sms.gateways import CONTEXT_KEY
from pipeline.sms.journal import KEY_PREFIX

OPS_TIMEOUT_SECONDS = 120.0


class OperatorError(RuntimeError):
    """An operator's command failed; the message is the command's own error."""


def redrive(runtime: Runtime) -> dict[str, int]:
    """Each DLQ's messages back to its queue (a FIFO one's in the same group, under a new
    deduplication id); how many per consumer."""
    assert runtime.resources is not None
    sqs = runtime.client("sqs")
    moved: dict[str, int] = {}
    for name, queue_urls in runtime.resources.queues.items():
        count = move_by_hand(ConsumerQueues(name, queue_urls.url, queue_urls.dlq_url), sqs)
        if count:
            moved[name] = count
    return moved


def decide_sms_records(runtime: Runtime, records: list[tuple[str, str, str]]) -> Counter[str]:
    """`bin/ops journal resolve` for each record in `records` (key, state, run) that waits on a
    person; how many of each decision."""
    gateway = runtime.fakes["end_user_messaging"]
    assert isinstance(gateway, EndUserMessagingFake)
    taken = {str(message.get("context", {}).get(CONTEXT_KEY)) for message in gateway.messages()}
    decisions: Counter[str] = Counter()
    for item_id, state, _ in records:
        if state not in DECIDE_STATES:
            continue
        key = item_id.removeprefix(KEY_PREFIX)
        decision = "accepted" if state == "unknown" and key in taken else "not-sent"
        ops("journal", "resolve", key, f"--{decision}", "--yes", stack_file=runtime.state_dir / "stack.json")
        decisions[decision] += 1
    return decisions


def ops(*arguments: str, stack_file: Path) -> str:
    """`bin/ops --local --local-file <stack_file> <arguments>`, as `bin/ops` runs it (`python -m
    ops`, the project on the path) but with the campaign's own interpreter: a checkout without a
    `.venv` of its own (a second worktree) runs it too. Its output, or OperatorError."""
    command = [sys.executable, "-m", "ops", "--local", "--local-file", str(stack_file), *arguments]
    path = os.pathsep.join(p for p in (str(PROJECT_ROOT), os.environ.get("PYTHONPATH", "")) if p)
    result = subprocess.run(  # noqa: S603 - our own CLI, arguments of our own
        command,
        capture_output=True,
        text=True,
        timeout=OPS_TIMEOUT_SECONDS,
        check=False,
        env={**os.environ, "PYTHONPATH": path},
    )
    if result.returncode != 0:
        raise OperatorError(
            f"bin/ops {' '.join(arguments[:3])}: {result.stderr.strip() or result.stdout.strip()}"
        )
    return result.stdout
