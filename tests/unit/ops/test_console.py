"""The ops console against a deployed-looking stack (moto): its guard, its actions through the CLI's
own functions, and each event's path as built from log lines. The browser tests
(tests/e2e/test_console_browser.py) click through it against the local runtime."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import boto3
import pytest
from moto import mock_aws
from starlette.testclient import TestClient

from infra.outputs import OutputKey
from ops.console import events
from ops.console.app import SESSION_COOKIE, Console, build_app
from ops.console.data import Where, alarm_rows, bot_conversation
from ops.dlq import peek_messages
from ops.stack import DEFAULT_STACK_NAME, StackOutputs
from pipeline.registry import by_name
from pipeline.telegram_bot.state import item_attributes
from tests.unit.ops.console_stack import create_bot_state_table
from tests.unit.ops.support import Deployed, dead_letter, depth, drain

PORT = 8765
BASE = f"http://127.0.0.1:{PORT}"


@pytest.fixture
def console(deployed: Deployed) -> Console:
    where = Where(local=False, local_file=Path("unused"), stack_name=DEFAULT_STACK_NAME)
    return Console(where, PORT, audit=lambda line: audited.append(line))


audited: list[str] = []


@pytest.fixture
def client(console: Console) -> TestClient:
    audited.clear()
    client = TestClient(build_app(console), base_url=BASE, follow_redirects=False)
    answer = client.get(f"/?token={console.token}")
    assert answer.status_code == 303
    assert SESSION_COOKIE in answer.cookies
    return client


def csrf(console: Console) -> str:
    [token] = console.sessions.values()
    return token


def test_without_the_token_or_session_every_page_is_refused(console: Console) -> None:
    stranger = TestClient(build_app(console), base_url=BASE, follow_redirects=False)
    assert stranger.get("/events").status_code == 403
    assert stranger.get("/?token=not-it").status_code == 403
    assert console.sessions == {}


def test_a_foreign_host_or_origin_or_a_missing_csrf_token_is_refused(
    client: TestClient, console: Console, deployed: Deployed
) -> None:
    dead_letter(deployed.dlq_urls["crm"], 1)
    assert client.get("/dlqs", headers={"Host": "attacker.example"}).status_code == 403
    form = {"consumer": "crm", "csrf": csrf(console)}
    assert (
        client.post("/actions/redrive", data=form, headers={"Origin": "https://evil.example"}).status_code
        == 403
    )
    assert client.post("/actions/redrive", data={"consumer": "crm"}).status_code == 403
    assert client.post("/actions/redrive", data={"consumer": "crm", "csrf": "guess"}).status_code == 403
    assert depth(deployed.dlq_urls["crm"]) == 1  # nothing moved
    assert audited == []


def test_redrive_all_asks_with_the_cli_s_dry_run_then_moves_with_its_lines(
    client: TestClient, console: Console, deployed: Deployed
) -> None:
    for update_id in (1, 2):
        dead_letter(deployed.dlq_urls["crm"], update_id)

    question = client.get("/confirm/redrive?consumer=crm")
    assert question.status_code == 200
    assert "dry run: would move the 2 message(s) of the crm DLQ back to its queue" in question.text
    assert depth(deployed.dlq_urls["crm"]) == 2
    done = client.post(
        "/actions/redrive", data={"consumer": "crm", "csrf": csrf(console)}, headers={"Origin": BASE}
    )

    assert done.status_code == 200
    assert "moved 2 message(s) from the crm DLQ to its queue" in done.text
    assert depth(deployed.dlq_urls["crm"]) == 0
    assert len(drain(deployed.queue_urls["crm"])) == 2
    assert any("console redrive" in line and "moved 2 message(s)" in line for line in audited)


def test_redrive_one_moves_only_that_message_and_an_unknown_consumer_is_refused_as_by_the_cli(
    client: TestClient, console: Console, deployed: Deployed
) -> None:
    for update_id in (1, 2, 3):
        dead_letter(deployed.dlq_urls["crm"], update_id)
    stack = console.where.stack()
    _, shown = peek_messages(stack, "crm")
    [wanted] = [m for m in shown if m["event_id"] == "telegram:default:2"]

    done = client.post(
        "/actions/redrive",
        data={"consumer": "crm", "message_id": wanted["message_id"], "csrf": csrf(console)},
    )

    assert f"moved message {wanted['message_id']} from the crm DLQ" in done.text
    [moved] = drain(deployed.queue_urls["crm"])
    assert '"telegram:default:2"' in moved["Body"]
    _, left = peek_messages(stack, "crm")
    assert sorted(m["event_id"] for m in left) == ["telegram:default:1", "telegram:default:3"]
    refused = client.post("/actions/redrive", data={"consumer": "nope", "csrf": csrf(console)})
    assert "no consumer &#39;nope&#39;" in refused.text
    assert "refused" in refused.text


def test_the_dlq_page_shows_reasons_and_no_full_phone(client: TestClient, deployed: Deployed) -> None:
    dead_letter(deployed.dlq_urls["crm"], 7, reason="permanent: CRM refused +375291234567")

    page = client.get("/dlqs")

    assert page.status_code == 200
    assert "telegram:default:7" in page.text
    assert "+375291234567" not in page.text
    assert "permanent: CRM refused +37529*****67" in page.text
    assert page.headers["Content-Security-Policy"].startswith("default-src 'none'")


# -- each event's path, from log lines ---------------------------------------------------------------
def line(service: str, message: str, event_id: str, at: str, **fields: Any) -> dict[str, Any]:
    return {"service": service, "message": message, "event_id": event_id, "timestamp": at, **fields}


CONSUMERS = [by_name("store"), by_name("crm"), by_name("sms")]


def test_a_path_names_each_consumer_s_state_and_why_the_others_were_not_routed() -> None:
    records = [
        line(
            "webhook",
            "Event published",
            "tg:1",
            "t1",
            source="telegram",
            type="message",
            correlation_id="c-1",
            message_group="telegram:default:chat:42",
        ),
        line("store", "record processed", "tg:1", "t2", event_type="message", receive_count=1),
        line(
            "crm",
            "record will be retried",
            "tg:1",
            "t2",
            event_type="message",
            reason="CRM 503",
            receive_count=1,
        ),
        line(
            "crm",
            "record sent to the DLQ",
            "tg:1",
            "t3",
            event_type="message",
            reason="CRM 400",
            receive_count=2,
        ),
    ]

    [path] = events.event_paths(records, CONSUMERS, {})

    steps = {s.consumer: s for s in path.steps}
    assert (path.source, path.type, path.correlation_id) == ("telegram", "message", "c-1")
    assert steps["store"].state == events.PROCESSED
    # Dead-lettered once, no longer in the DLQ and not processed since: redriven, waiting.
    assert (steps["crm"].state, steps["crm"].detail, steps["crm"].attempts) == (events.REDRIVEN, "CRM 400", 2)
    assert steps["sms"].state == events.NOT_ROUTED
    assert steps["sms"].why_not == "source 'telegram' is not 'crm'"
    assert path.summary == events.REDRIVEN


def test_a_dead_letter_still_in_the_dlq_names_its_message_and_filters_pick_events() -> None:
    records = [
        line(
            "webhook",
            "Event published",
            "tg:1",
            "t1",
            source="telegram",
            type="message",
            message_group="telegram:default:chat:42",
        ),
        line("crm", "record sent to the DLQ", "tg:1", "t2", reason="CRM 400"),
        line(
            "webhook",
            "Event published",
            "crm:e-2",
            "t3",
            source="crm",
            type="order.status_changed",
            message_group="crm:order:A-7",
        ),
        line("sms", "record processed", "crm:e-2", "t4"),
    ]
    held = {("crm", "tg:1"): {"message_id": "m-1", "dead_letter_reason": "CRM 400 (DLQ)"}}

    paths = events.event_paths(records, CONSUMERS, held)

    assert [p.event_id for p in paths] == ["crm:e-2", "tg:1"]  # newest first
    crm = next(s for s in paths[1].steps if s.consumer == "crm")
    assert (crm.state, crm.detail, crm.dlq_message_id) == (events.DEAD_LETTERED, "CRM 400 (DLQ)", "m-1")
    assert [p.event_id for p in events.event_paths(records, CONSUMERS, held, events.Filters(chat="42"))] == [
        "tg:1"
    ]
    by_order = events.event_paths(records, CONSUMERS, held, events.Filters(order="A-7"))
    assert [p.event_id for p in by_order] == ["crm:e-2"]
    assert [
        p.event_id for p in events.event_paths(records, CONSUMERS, held, events.Filters(source="crm"))
    ] == ["crm:e-2"]


def test_a_chat_s_conversation_shows_its_state_and_its_latest_steps_bot_api_calls(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with mock_aws():
        dynamodb = boto3.resource("dynamodb")
        create_bot_state_table("bot_state")
        dynamodb.create_table(
            TableName="journal",
            KeySchema=[{"AttributeName": "id", "KeyType": "HASH"}],
            AttributeDefinitions=[{"AttributeName": "id", "AttributeType": "S"}],
            BillingMode="PAY_PER_REQUEST",
        )
        for pk, data, version in (
            ("chat#42", '{"phone": "+375291234567"}', 1),
            ("conversation#order#[42,42]", '"ASK_ADDRESS"', 3),
            ("user#42", '{"phone": "+375297654321"}', 2),
            ("chat#43", '{"other": 1}', 1),
            ("user#43", '{"other": 1}', 1),
        ):
            boto3.client("dynamodb").put_item(TableName="bot_state", Item=item_attributes(pk, data, version))
        calls = dynamodb.Table("journal")
        for index, method in enumerate(("sendMessage", "answerCallbackQuery")):
            calls.put_item(Item={"id": f"botcall#tg:5#{index}", "method": method, "status": 200})
        stack = StackOutputs(
            "test",
            {
                OutputKey.table_name("bot_state"): "bot_state",
                OutputKey.JOURNAL_TABLE: "journal",
                OutputKey.queue_url("bot"): "https://queue/bot",
                OutputKey.dlq_url("bot"): "https://queue/bot-dlq",
            },
        )
        where = Where(local=False, local_file=Path("unused"), stack_name="test", _stack=stack)
        records = [
            line(
                "webhook",
                "Event published",
                "tg:5",
                "t1",
                source="telegram",
                type="callback_query",
                message_group="telegram:default:chat:42",
            ),
            line("bot", "record processed", "tg:5", "t2"),
            line(
                "webhook",
                "Event published",
                "tg:6",
                "t3",
                source="telegram",
                type="message",
                message_group="telegram:default:chat:43",
            ),
            line("bot", "record processed", "tg:6", "t4"),
        ]
        monkeypatch.setattr(Where, "log_records", lambda self: records)

        view = bot_conversation(where, "42")

    assert sorted(item["key"] for item in view["state"]) == [
        "chat#42",
        "conversation#order#[42,42]",
        "user#42",
    ]
    assert "+375291234567" not in str(view) and "+375297654321" not in str(view)
    assert {item["key"]: item["data"] for item in view["state"]}["user#42"] == '{"phone": "+37529*****21"}'
    assert view["steps"] == [
        {
            "event_id": "tg:5",
            "type": "callback_query",
            "state": events.PROCESSED,
            "calls": [
                {"method": "sendMessage", "status": 200},
                {"method": "answerCallbackQuery", "status": 200},
            ],
        }
    ]


def test_the_console_command_without_a_local_runtime_says_so_and_serves_nothing(run, tmp_path: Path) -> None:
    result = run("console", "--local", "--local-file", str(tmp_path / "stack.json"), "--port", "0")

    assert result.code == 2
    assert "not found: start the local runtime first (make local)" in result.err
    assert "http://" not in result.out


def test_a_deployed_stack_s_events_come_from_its_log_groups(monkeypatch: pytest.MonkeyPatch) -> None:
    """FilterLogEvents over the stack's own log groups; only structured lines naming an event count."""
    with mock_aws():
        template = {
            "Resources": {
                "StoreLogs": {
                    "Type": "AWS::Logs::LogGroup",
                    "Properties": {"LogGroupName": "/aws/lambda/store"},
                },
                "Topic": {"Type": "AWS::SNS::Topic"},
            }
        }
        boto3.client("cloudformation").create_stack(StackName="Console", TemplateBody=json.dumps(template))
        logs = boto3.client("logs")
        logs.create_log_group(logGroupName="/aws/lambda/other-stack")
        now = int(time.time() * 1000)
        for group in ("/aws/lambda/store", "/aws/lambda/other-stack"):
            logs.create_log_stream(logGroupName=group, logStreamName="s")
            logs.put_log_events(
                logGroupName=group,
                logStreamName="s",
                logEvents=[
                    {"timestamp": now, "message": "START RequestId: 1"},
                    {
                        "timestamp": now,
                        "message": json.dumps(
                            {"service": "store", "message": "record processed", "event_id": group}
                        ),
                    },
                ],
            )

        groups = events.stack_log_groups("Console")
        records = events.cloudwatch_records(groups)

    assert groups == ["/aws/lambda/store"]
    assert [r["event_id"] for r in records] == ["/aws/lambda/store"]


def test_a_deployed_stack_s_alarms_are_its_own_with_their_states(monkeypatch: pytest.MonkeyPatch) -> None:
    alarm = {
        "MetricName": "ApproximateNumberOfMessagesVisible",
        "Namespace": "AWS/SQS",
        "Statistic": "Maximum",
        "Period": 60,
        "EvaluationPeriods": 1,
        "Threshold": 0,
        "ComparisonOperator": "GreaterThanThreshold",
    }
    listed: list[tuple[str, str]] = []

    def resources(stack_name: str, resource_type: str) -> list[str]:
        # moto's CloudFormation makes no alarms: the stack's resource list, as CloudFormation has it.
        listed.append((stack_name, resource_type))
        return ["DlqNotEmpty-store-dlq", "DlqNotEmpty-crm-dlq"]

    monkeypatch.setattr(events, "stack_resources", resources)
    with mock_aws():
        cloudwatch = boto3.client("cloudwatch")
        for name in ("DlqNotEmpty-crm-dlq", "DlqNotEmpty-store-dlq", "another-stack-alarm"):
            cloudwatch.put_metric_alarm(AlarmName=name, **alarm)
        cloudwatch.set_alarm_state(
            AlarmName="DlqNotEmpty-crm-dlq", StateValue="ALARM", StateReason="1 message for +375291234567"
        )
        where = Where(local=False, local_file=Path("unused"), stack_name="Console")

        rows = alarm_rows(where)

    assert listed == [("Console", "AWS::CloudWatch::Alarm")]
    assert [(r["name"], r["state"]) for r in rows] == [
        ("DlqNotEmpty-crm-dlq", "ALARM"),
        ("DlqNotEmpty-store-dlq", "OK"),
    ]
    assert rows[0]["reason"] == "1 message for +37529*****67"
