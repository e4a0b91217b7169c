"""A team's things are outside the pipeline's folders: after `make consumer`, a change of the SMS
rules and texts, of the autoreply texts, of a built-in consumer's tuning and the choice of a bot,
`git status` of a copy of the repository names only files of the team's (`functions/<their
folders>/`, `team/`, `cdk.json`), and the pipeline (settings, registry, the functions'
environments) follows them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.repository import changed, tracked_copy

# What the copy's pipeline makes of its files, read in a fresh interpreter in the copy.
READ_BACK = """
import json
import sys

sys.path[:0] = ["layers/shared/python", "functions", "."]  # as pyproject's pythonpath
from infra.application import project_context
from infra.config import PipelineSettings
from infra.environment import FunctionEnvironments
from pipeline.registry import by_name, enabled
from pipeline.replies import REPLIES_ENV
from pipeline.sms.rules import RULES_ENV

settings = PipelineSettings.from_context(project_context())
environments = FunctionEnvironments(settings, stack_name="Copy")
names = {"journal": "j", "telegram_bot_token": "s"}
autoreply = by_name("autoreply")
print(json.dumps({
    "rules": json.loads(environments.sms(by_name("sms"))[RULES_ENV]),
    "replies": json.loads(
        environments.worker(autoreply, queue_url="q", dlq_url="d", tables=names, secrets=names)[REPLIES_ENV]
    ),
    "autoreply": [autoreply.max_concurrency, autoreply.retry.max_receive_count],
    "consumers": sorted(c.name for c in enabled(settings.registry_settings())),
    "bot_application": settings.bot_application,
}))
"""

OUR_TEXT = "{customer_name}, your order {order_id} has been shipped."
THEIR_TEXT = "{customer_name}, parcel {order_id} left our shop today."
THEIR_REPLIES = {"/start": "Servus! Schreib uns.", "default": "Wir melden uns."}
THEIR_TUNING = "[autoreply]\nmax_concurrency = 10\n\n[autoreply.retry]\nmax_receive_count = 8\n"


def run(command: list[str], copy: Path) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "COV_"))}
    result = subprocess.run(
        command, cwd=copy, env=env, capture_output=True, text=True, timeout=300, check=False
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    return result.stdout


@pytest.mark.slow
def test_the_pipelines_folders_are_unchanged_by_what_a_team_does(tmp_path: Path) -> None:
    copy = tracked_copy(tmp_path / "copy")

    run([sys.executable, "-m", "ops", "new-consumer", "loyalty"], copy)
    rules_file = copy / "team" / "sms_rules.json"
    rules = json.loads(rules_file.read_text())
    [shipped] = [rule for rule in rules["rules"] if rule["template"]["en"] == OUR_TEXT]
    shipped["template"]["en"] = THEIR_TEXT
    rules_file.write_text(json.dumps(rules, indent=2))
    (copy / "team" / "autoreply.json").write_text(json.dumps({"version": 1, "replies": THEIR_REPLIES}))
    (copy / "team" / "consumers.toml").write_text(THEIR_TUNING)
    (copy / "functions" / "mybot").mkdir()
    (copy / "functions" / "mybot" / "__init__.py").write_text("")
    (copy / "functions" / "mybot" / "main.py").write_text(
        '"""Our bot: the example\'s conversation, for now."""\n\nfrom bot.examples.lead_bot import build\n\n'
        '__all__ = ["build"]\n'
    )
    run([sys.executable, "-m", "ops", "configure", "bot_application=mybot.main:build", "--yes"], copy)

    theirs = ("functions/loyalty/", "functions/mybot/", "team/", "cdk.json")
    status = changed(copy)
    assert {line[3:].split("/")[0] for line in status} == {"functions", "team", "cdk.json"}
    assert [line for line in status if not line[3:].startswith(theirs)] == []

    seen = json.loads(run([sys.executable, "-c", READ_BACK], copy))
    assert THEIR_TEXT in [rule["template"]["en"] for rule in seen["rules"]["rules"]]
    assert OUR_TEXT not in json.dumps(seen["rules"])
    assert seen["replies"] == THEIR_REPLIES
    assert seen["autoreply"] == [10, 8]
    assert seen["bot_application"] == "mybot.main:build"
    assert {"bot", "loyalty"} <= set(seen["consumers"]) and "autoreply" not in seen["consumers"]
