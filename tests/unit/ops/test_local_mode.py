"""`--local`: the stack file the local runtime writes, a moto server, and the fake Bot API.

The resources are made by the local runtime's own `create_resources()` and the file holds its
`describe()`, so a change in what `make local` writes breaks this test rather than the CLI.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
import requests
from moto.server import ThreadedMotoServer

from local.resources import create_resources
from local.settings import LocalSettings
from pipeline import broadcast as jobs
from tests.unit.ops.support import FakeTelegram, dead_letter, depth


@pytest.fixture
def moto_endpoint() -> Iterator[str]:
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    # The in-process server shares moto's global state: start and leave it empty.
    requests.post(f"{endpoint}/moto-api/reset", timeout=10).raise_for_status()
    yield endpoint
    requests.post(f"{endpoint}/moto-api/reset", timeout=10).raise_for_status()
    server.stop()


@pytest.fixture
def local_stack(moto_endpoint: str, telegram: FakeTelegram, tmp_path: Path) -> dict[str, Any]:
    settings = LocalSettings()
    telegram.token = settings.telegram_bot_token
    unreachable = "http://127.0.0.1:9"
    fakes = {
        "telegram": telegram.url,
        "crm": unreachable,
        "bedrock": unreachable,
        "sms": unreachable,
        "end_user_messaging": unreachable,
        "bitrix24": unreachable,
        "amocrm": unreachable,
    }

    def client(service: str) -> Any:
        return boto3.client(service, endpoint_url=moto_endpoint, region_name=settings.region)

    resources = create_resources(client, settings, fakes)
    document = {
        "webhook_url": "http://127.0.0.1:8080/telegram",
        "crm_url": "http://127.0.0.1:8080/crm",
        "telegram_secret": settings.telegram_secret,
        "telegram_bot_token": settings.telegram_bot_token,
        "aws_endpoint": moto_endpoint,
        "region": settings.region,
        "fakes": fakes,
        **resources.describe(),
    }
    (tmp_path / "stack.json").write_text(json.dumps(document))
    return {
        "document": document,
        "file": str(tmp_path / "stack.json"),
        "client": client,
        "settings": settings,
    }


def test_set_webhook_local_uses_the_fake_and_the_local_secrets(
    local_stack: dict[str, Any], telegram: FakeTelegram, run, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Even a TELEGRAM_API_BASE pointing elsewhere does not win over --local's fake.
    monkeypatch.setenv("TELEGRAM_API_BASE", "http://127.0.0.1:9")

    result = run("set-webhook", "--yes", "--local", "--local-file", local_stack["file"])

    assert result.code == 0, result.err
    [params] = telegram.params("setWebhook")
    assert params["url"] == local_stack["document"]["webhook_url"]
    assert params["secret_token"] == local_stack["settings"].telegram_secret


def test_dlq_commands_local_reach_the_moto_server(local_stack: dict[str, Any], run) -> None:
    crm = local_stack["document"]["queues"]["crm"]
    sqs = local_stack["client"]("sqs")
    for update_id in (1, 2):
        dead_letter(crm["dlq_url"], update_id, sqs=sqs)

    listed = run("dlq", "list", "--local", "--local-file", local_stack["file"])
    moved = run("dlq", "redrive", "--yes", "crm", "--local", "--local-file", local_stack["file"])

    assert listed.code == 0, listed.err
    crm_row = next(line.split() for line in listed.out.splitlines() if line.startswith("crm "))
    assert crm_row[1] == "2"
    assert moved.code == 0, moved.err
    # moto's server answers StartMessageMoveTask with a 500: the fallback moved them.
    assert "moved 2 message(s)" in moved.out
    assert depth(crm["dlq_url"], sqs=sqs) == 0
    assert depth(crm["url"], sqs=sqs) == 2


def test_chaos_seed_4511_broadcast_pause_resume_and_status_local_reach_the_moto_server(
    local_stack: dict[str, Any], run, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The chaos campaign (seed 4511) paused its broadcast with `bin/ops broadcast pause ID --local`
    and got "no AWS region": the journal's table was made before `--local` pointed boto3 at the
    local stack (with a region set, at AWS itself). `create` read the stack first, and worked."""
    monkeypatch.delenv("AWS_DEFAULT_REGION", raising=False)
    monkeypatch.delenv("AWS_REGION", raising=False)
    table = local_stack["document"]["tables"]["journal"]
    journal = boto3.resource(
        "dynamodb", endpoint_url=local_stack["document"]["aws_endpoint"], region_name="eu-central-1"
    ).Table(table)
    jobs.create(journal, jobs.job_item("bc-1", "Sale!", 3, at=0.0, now=1.0, audience={}))
    where = ("--local", "--local-file", local_stack["file"])

    paused = run("broadcast", "pause", "bc-1", *where)
    status = run("broadcast", "status", "bc-1", "--json", *where)
    resumed = run("broadcast", "resume", "bc-1", *where)
    cancelled = run("broadcast", "cancel", "bc-1", *where)

    assert paused.code == 0, paused.err
    assert paused.out.strip() == "bc-1: paused"
    assert json.loads(status.out)["state"] == "paused"
    assert resumed.out.strip() == "bc-1: sending" and cancelled.out.strip() == "bc-1: cancelled"
