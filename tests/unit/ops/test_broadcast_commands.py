"""`ops broadcast create|status|pause|resume|cancel` against moto: the audience read from the
store, --dry-run changing nothing, the job and its pages on the events topic."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from moto import mock_aws

from infra.outputs import OutputKey
from ops.broadcast_texts import TEMPLATES_FILE_NAME, team_template
from ops.stack import DEFAULT_STACK_NAME
from pipeline import broadcast as jobs
from tests.unit.ops.support import Deployed, create_resources, drain

CONVERSATIONS = "pipeline-conversations"


def stored(chat: int, update_id: int, chat_type: str = "private", language: str = "en") -> dict[str, Any]:
    update = {"update_id": update_id, "message": {"from": {"id": chat, "language_code": language}}}
    return {
        "pk": f"chat#{chat}",
        "sk": f"update#{update_id:012d}",
        "chat_type": chat_type,
        "received_at": f"2026-12-01T00:00:{update_id % 60:02d}+00:00",
        "payload": json.dumps(update),
    }


def seed_broadcast_stack() -> Deployed:
    """The ops test stack, with a conversations table and a FIFO events topic feeding the
    broadcast consumer's queue (as the registry subscribes it), on whatever AWS boto3 reaches:
    250 private chats (odd ones de-AT, else en), a group, 5003 tagged vip, 5001 blocked."""
    deployed = create_resources()
    dynamodb = boto3.client("dynamodb")
    dynamodb.create_table(
        TableName=CONVERSATIONS,
        KeySchema=[
            {"AttributeName": "pk", "KeyType": "HASH"},
            {"AttributeName": "sk", "KeyType": "RANGE"},
        ],
        AttributeDefinitions=[{"AttributeName": n, "AttributeType": "S"} for n in ("pk", "sk")],
        BillingMode="PAY_PER_REQUEST",
    )
    sns = boto3.client("sns")
    topic = sns.create_topic(
        Name="pipeline-events.fifo",
        Attributes={"FifoTopic": "true", "ContentBasedDeduplication": "false"},
    )["TopicArn"]
    queue = deployed.queue_urls["broadcast"]
    arn = boto3.client("sqs").get_queue_attributes(QueueUrl=queue, AttributeNames=["QueueArn"])
    sns.subscribe(
        TopicArn=topic,
        Protocol="sqs",
        Endpoint=arn["Attributes"]["QueueArn"],
        Attributes={"RawMessageDelivery": "true", "FilterPolicy": json.dumps({"source": ["broadcast"]})},
    )
    outputs = {
        **deployed.outputs,
        OutputKey.EVENTS_TOPIC_ARN: topic,
        OutputKey.table_name("conversations"): CONVERSATIONS,
    }
    template = {
        "Resources": {"Nothing": {"Type": "AWS::SNS::Topic"}},
        "Outputs": {key: {"Value": value} for key, value in outputs.items()},
    }
    boto3.client("cloudformation").create_stack(
        StackName=DEFAULT_STACK_NAME, TemplateBody=json.dumps(template)
    )
    table = boto3.resource("dynamodb").Table(CONVERSATIONS)
    for n in range(250):
        table.put_item(Item=stored(5000 + n, n, language="de-AT" if n % 2 else "en"))
    table.put_item(Item=stored(-100, 999, chat_type="group"))
    table.put_item(Item={"pk": "chat#5003", "sk": "tag#vip"})
    journal = boto3.resource("dynamodb").Table(deployed.journal_table)
    # 5001 blocked the bot after its last message; 5002 blocked it, then came back.
    journal.put_item(Item={"id": "blocked#5001", "blocked_at": "2026-12-02T00:00:00+00:00"})
    journal.put_item(Item={"id": "blocked#5002", "blocked_at": "2026-11-01T00:00:00+00:00"})
    return deployed


@pytest.fixture
def stack() -> Iterator[Deployed]:
    with mock_aws():
        yield seed_broadcast_stack()


def test_dry_run_counts_the_audience_and_changes_nothing(stack: Deployed, run: Callable[..., Any]) -> None:
    result = run("broadcast", "create", "--text", "Sale starts today!", "--dry-run")

    assert result.code == 0, result.err
    assert "recipients: 249" in result.out  # 250 private chats, one blocked; the group left out
    assert "Sale starts today!" in result.out
    assert drain(stack.queue_urls["broadcast"]) == []
    german = run("broadcast", "create", "--text", "Hallo", "--language", "de", "--dry-run", "--json")
    assert json.loads(german.out)["recipients"] == 124  # odd ones, 5001 blocked
    assert (
        json.loads(run("broadcast", "create", "--text", "x", "--tag", "vip", "--dry-run", "--json").out)[
            "recipients"
        ]
        == 1
    )


def test_create_writes_the_job_and_publishes_its_pages_and_status_pause_resume_cancel_steer_it(
    stack: Deployed, run: Callable[..., Any]
) -> None:
    result = run("broadcast", "create", "--text", "Sale starts today!", "--yes", "--json")

    assert result.code == 0, result.err
    created = json.loads(result.out)
    assert (created["recipients"], created["pages"]) == (249, 3)
    bodies = [json.loads(m["Body"]) for m in drain(stack.queue_urls["broadcast"])]
    chats = sorted(chat for body in bodies for chat in body["payload"]["chats"])
    assert chats == sorted(5000 + n for n in range(250) if n != 1)
    assert {body["payload"]["schema_version"] for body in bodies} == {jobs.JOB_VERSION}

    status = json.loads(run("broadcast", "status", created["id"], "--json").out)
    assert (status["state"], status["remaining"], status["sent"]) == ("sending", 249, 0)
    assert run("broadcast", "pause", created["id"]).out.strip().endswith("paused")
    assert run("broadcast", "resume", created["id"]).out.strip().endswith("sending")
    assert run("broadcast", "cancel", created["id"]).code == 0
    refused = run("broadcast", "resume", created["id"])
    assert refused.code != 0 and "is cancelled" in refused.err


def test_an_empty_text_or_a_time_without_offset_is_refused(stack: Deployed, run: Callable[..., Any]) -> None:
    assert "empty" in run("broadcast", "create", "--text", " ", "--yes").err
    assert "offset" in run("broadcast", "create", "--text", "x", "--at", "2026-12-24T18:00", "--yes").err


def write_templates(directory: Path, document: Any) -> None:
    directory.mkdir(exist_ok=True)
    (directory / TEMPLATES_FILE_NAME).write_text(json.dumps(document), encoding="utf-8")


TEMPLATES = {
    "version": 1,
    "fallback_language": "en",
    "broadcasts": {"sale": {"en": "Sale today!", "de": "Heute Ausverkauf!"}, "only_de": {"de": "Hallo"}},
}


def test_a_template_sends_each_chat_its_language_s_text_else_the_fallback(
    stack: Deployed, run: Callable[..., Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_templates(tmp_path, TEMPLATES)
    monkeypatch.setenv("PIPELINE_TEAM_DIR", str(tmp_path))

    preview = run("broadcast", "create", "--template", "sale", "--dry-run")
    assert preview.code == 0, preview.err
    assert "language de, 124 chats):\nHeute Ausverkauf!" in preview.out
    assert "language en, 125 chats):\nSale today!" in preview.out
    assert drain(stack.queue_urls["broadcast"]) == []

    created = json.loads(run("broadcast", "create", "--template", "sale", "--yes", "--json").out)
    pages = [json.loads(m["Body"])["payload"] for m in drain(stack.queue_urls["broadcast"])]
    by_language = {
        language: sorted(c for p in pages if p.get("language") == language for c in p["chats"])
        for language in ("de", "en")
    }
    assert by_language["de"] == [5000 + n for n in range(250) if n % 2 and n != 1]  # de-AT: de
    assert by_language["en"] == [5000 + n for n in range(250) if not n % 2]
    job = jobs.read_job(boto3.resource("dynamodb").Table(stack.journal_table), created["id"])
    assert job is not None
    assert (job["text"], job["texts"], job["template"]) == (
        "Sale today!",
        TEMPLATES["broadcasts"]["sale"],
        "sale",
    )


@pytest.mark.parametrize(
    ("document", "name", "said"),
    [
        (TEMPLATES, "winter", "has no broadcast 'winter' (it has: only_de, sale)"),
        (TEMPLATES, "only_de", "no text in the fallback language 'en'"),
        (
            {**TEMPLATES, "broadcasts": {"long": {"en": "x" * 4097}}},
            "long",
            "long (en): the broadcast text is 4097",
        ),
        ({"replies": {}}, "sale", '"version": 1'),
    ],
)
def test_a_missing_or_bad_template_is_refused_naming_the_file_and_nothing_is_sent(
    stack: Deployed,
    run: Callable[..., Any],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    document: Any,
    name: str,
    said: str,
) -> None:
    write_templates(tmp_path, document)
    monkeypatch.setenv("PIPELINE_TEAM_DIR", str(tmp_path))

    refused = run("broadcast", "create", "--template", name, "--yes")

    assert refused.code != 0 and said in refused.err and TEMPLATES_FILE_NAME in refused.err
    assert drain(stack.queue_urls["broadcast"]) == []


def test_text_and_template_are_one_or_the_other(stack: Deployed, run: Callable[..., Any]) -> None:
    assert "one of them" in run("broadcast", "create", "--yes").err
    assert "one of them" in run("broadcast", "create", "--text", "x", "--template", "sale", "--yes").err


def test_the_shipped_templates_file_is_valid() -> None:
    template = team_template("summer_sale")
    assert template.fallback in template.texts and set(template.texts) >= {"en", "de"}
