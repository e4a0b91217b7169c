"""A create interrupted between two pages (issue 45): SNS stops taking publishes after two pages,
at moto's door (`local.moto_faults`, as a lost connection or a killed process would leave it).
The job and its planned pages are written; `ops broadcast resume ID`, or the same create run
again, publishes only the pages not yet published, from the stored plan, so every chat is on
exactly one queued page and no second broadcast is made."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import boto3
import pytest
import requests

from local.moto_faults import PATH as FAULTS
from local.moto_process import FaultyMotoServer
from pipeline import aws
from pipeline import broadcast as jobs
from tests.unit.ops.support import Deployed, drain
from tests.unit.ops.test_broadcast_commands import seed_broadcast_stack


@pytest.fixture
def moto(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    server = FaultyMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    monkeypatch.setenv("AWS_ENDPOINT_URL", endpoint)
    aws.reset_clients()
    # moto's state is the process's, whichever server serves it: each test starts from none.
    requests.post(f"{endpoint}/moto-api/reset", timeout=10)
    try:
        yield endpoint
    finally:
        aws.reset_clients()
        server.stop()


@pytest.fixture
def stack(moto: str) -> Deployed:
    return seed_broadcast_stack()


def queued_pages(stack: Deployed) -> list[dict[str, Any]]:
    return [json.loads(m["Body"])["payload"] for m in drain(stack.queue_urls["broadcast"])]


@pytest.mark.parametrize("finish", ["resume", "create again"])
def test_resume_or_the_same_create_again_publishes_only_the_pages_an_interrupted_create_left(
    moto: str, stack: Deployed, run: Callable[..., Any], finish: str
) -> None:
    fault = {"target": "sns.Publish", "kind": "error", "count": 50, "after": 2}
    assert requests.post(moto + FAULTS, json=fault, timeout=5).status_code == 200

    created = run("broadcast", "create", "--text", "Sale starts today!", "--yes")

    assert created.code != 0
    assert "not all its pages were published" in created.err
    broadcast_id = created.err.split("bin/ops broadcast resume ", 1)[1].split()[0]
    first = queued_pages(stack)
    assert sorted(page["page"] for page in first) == [0, 1]
    table = boto3.resource("dynamodb").Table(stack.journal_table)
    job = jobs.read_job(table, broadcast_id)
    assert job is not None and job["pages"] == 3 and set(job["published"]) == {"0", "1"}

    status = json.loads(run("broadcast", "status", broadcast_id, "--json").out)
    assert (status["pages"], status["pages_published"], status["remaining"]) == (3, 2, 249)
    requests.delete(moto + FAULTS, timeout=5)
    if finish == "resume":
        resumed = run("broadcast", "resume", broadcast_id, "--yes")
    else:  # the operator runs the very command again: it finishes that broadcast, no second one
        resumed = run("broadcast", "create", "--text", "Sale starts today!", "--yes")
        assert f"broadcast {broadcast_id} (this message, this audience) was interrupted" in resumed.out

    assert resumed.code == 0, resumed.err
    assert "pages published: 1" in resumed.out
    second = queued_pages(stack)
    assert [page["page"] for page in second] == [2]
    on_pages = Counter(chat for page in first + second for chat in page["chats"])
    assert set(on_pages) == {5000 + n for n in range(250)} - {5001}
    assert set(on_pages.values()) == {1}  # nobody on two pages: nobody queued twice
    job = jobs.read_job(table, broadcast_id)
    assert job is not None and set(job["published"]) == {"0", "1", "2"}
    assert [j["broadcast_id"] for j in jobs.recent(table, 5)] == [broadcast_id]
    # Nothing left to publish, and it is not paused: a second resume changes nothing.
    again = run("broadcast", "resume", broadcast_id, "--yes")
    assert again.code != 0 and "is sending" in again.err
    assert queued_pages(stack) == []
