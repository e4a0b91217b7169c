"""What `make local` tells a person changing code: routing, failing consumers, reloads, persisted
state, and `make demo` beside `make local`.

The runtime-level scenarios are in tests/e2e/test_local_code_and_state.py.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import boto3
import pytest
from moto import mock_aws
from werkzeug.test import Client

from local import snapshot
from local.__main__ import DEFAULT_API_PORT, DEMO_STATE_DIR, parse_args
from local.demo import summary_lines
from local.fakes.base import FakeRequest, FakeResponse, FakeService
from local.fakes.sns import SnsFaultProxy
from local.reload import ChangeDetector, affected_functions
from local.routing import Publish, explain, why_not
from local.runtime import DEFAULT_STATE_DIR, Runtime
from local.status import FAILING, READY, FunctionStatus, QueueDepth
from pipeline.registry import MESSAGE_KINDS, by_name, enabled

REGION = "eu-central-1"


# -- routing ----------------------------------------------------------------------------------------
class MotoLikeSns(FakeService):
    """Answers every call as SNS does a Publish; records nothing else."""

    name = "upstream"

    def answer(self, request: FakeRequest) -> FakeResponse:
        body = (
            b'<PublishResponse xmlns="http://sns.amazonaws.com/doc/2010-03-31/"><PublishResult>'
            b"<MessageId>m-1</MessageId></PublishResult><ResponseMetadata><RequestId>r</RequestId>"
            b"</ResponseMetadata></PublishResponse>"
        )
        return FakeResponse(200, body, {"Content-Type": "text/xml"})


def test_the_sns_proxy_hears_each_accepted_publish_with_its_attributes_and_event_id(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.setenv(name, "testing")
    heard: list[Publish] = []
    upstream = MotoLikeSns()
    upstream.start()
    proxy = SnsFaultProxy(upstream=lambda: upstream.url, on_publish=heard.extend)
    proxy.start()
    try:
        sns = boto3.client("sns", region_name=REGION, endpoint_url=proxy.url)
        topic = "arn:aws:sns:eu-central-1:123456789012:events"
        body = {"event_id": "telegram:1:9", "source": "telegram", "payload": {"text": "secret text"}}
        sns.publish(
            TopicArn=topic,
            Message=json.dumps(body),
            MessageAttributes={
                "source": {"DataType": "String", "StringValue": "telegram"},
                "type": {"DataType": "String", "StringValue": "message"},
            },
        )
        proxy.add_faults({"fail_next": 3, "status": 500})  # refused: not accepted, not heard
        with pytest.raises(Exception, match="InternalError"):
            sns.publish(TopicArn=topic, Message="{}")
    finally:
        proxy.stop()
        upstream.stop()

    assert heard == [Publish(topic, {"source": "telegram", "type": "message"}, "telegram:1:9")]


def test_the_routing_line_names_reached_consumers_and_why_the_others_were_not() -> None:
    consumers = enabled(
        {"bedrock_model_id": "m", "crm_leads": True, "bitrix24_stages": {"0": {}}, "amocrm_statuses": {}}
    )
    edit = Publish("arn", {"source": "telegram", "type": "edited_message", "chat_type": "private"}, "t:1:2")

    line = explain(edit, consumers)

    assert line.startswith("event t:1:2 (telegram edited_message) -> analytics, store; not ")
    kinds = ", ".join(MESSAGE_KINDS)
    assert f"ai, crm: type 'edited_message' is not in [{kinds}]" in line
    assert "sms: source 'telegram' is not 'crm'" in line
    # Exactly the consumers of the registry, each named once.
    named = {
        c.name for c in consumers if f" {c.name}" in line or f"{c.name}:" in line or f"{c.name}," in line
    }
    assert named == {c.name for c in consumers}


def test_a_crm_order_event_reaches_sms_whatever_its_status_and_nothing_telegram() -> None:
    order = Publish("arn", {"source": "crm", "type": "order.status_changed", "status": "paid"}, "crm:A-1")

    line = explain(order, [by_name("sms"), by_name("store")])

    assert (
        line == "event crm:A-1 (crm order.status_changed) -> sms; not store: source 'crm' is not 'telegram'"
    )


def test_why_not_says_which_attribute_is_missing_or_wrong() -> None:
    assert why_not({"source": ["crm"]}, {}) == "no source (needs 'crm')"
    assert why_not({"source": ["telegram"], "command": [{"exists": True}]}, {"source": "telegram"}) == (
        "command is absent"
    )
    assert why_not({"type": ["a", "b"]}, {"type": "c"}) == "type 'c' is not in [a, b]"


# -- failing consumers ---------------------------------------------------------------------------
def test_a_handler_raising_on_every_record_shows_as_failing_with_its_error_class() -> None:
    status = FunctionStatus("crm", "consumer", state=READY)
    for _ in range(3):
        status.apply(
            {
                "event": "invocation",
                "records": 1,
                "failed": 1,
                "error": "RuntimeError: broken",
                "outcomes": None,
            }
        )
    status.queue, status.dlq = QueueDepth(in_flight=1), QueueDepth(visible=2)

    line = status.line()

    assert line.split()[:2] == ["crm", FAILING]
    assert "failed 3" in line and "retried 3" in line and "last RuntimeError" in line
    assert line.endswith("DLQ 2  ALARM")
    assert status.as_dict()["failing"] is True and status.as_dict()["failed_records"] == 3


def test_the_demo_summary_names_a_failing_consumer_and_its_last_error() -> None:
    status = FunctionStatus("crm", "consumer", state=READY)
    status.apply({"event": "invocation", "records": 1, "failed": 1, "error": "RuntimeError: broken"})

    [line] = [line for line in summary_lines({"crm": status.as_dict()}, {}) if "crm" in line]

    assert "FAILING (last error: RuntimeError: broken)" in line


def test_worker_retries_and_dead_letters_without_a_success_are_failing_and_a_success_clears_it() -> None:
    status = FunctionStatus("sms", "consumer", state=READY)
    status.apply(
        {
            "event": "invocation",
            "records": 2,
            "failed": 1,
            "outcomes": {"retry": 1, "dead_lettered": 1},
            "last_failure": "retries exhausted after 10 attempts: HTTPError: 503",
        }
    )
    assert status.failing and "last HTTPError" in status.line() and "dead 1" in status.line()

    status.apply({"event": "invocation", "records": 1, "failed": 0, "outcomes": {"processed": 1}})

    assert not status.failing
    assert status.line().split()[1] == "ready" and "last " not in status.line()


def test_a_process_that_dies_is_failing_and_counted_until_a_record_succeeds() -> None:
    status = FunctionStatus("store", "consumer", state=READY)
    status.crashed(1)
    status.state = READY  # the supervisor started a new one, which loaded its handler

    assert status.line().split()[1] == FAILING
    assert "crashes 1" in status.line() and status.as_dict()["crashes"] == 1


def test_the_api_is_failing_after_its_process_died_until_it_answers_again_even_a_refusal() -> None:
    status = FunctionStatus("webhook", "api", state=READY)
    status.crashed(1)
    assert status.line().split()[1] == FAILING

    status.apply({"event": "invocation", "records": 1, "failed": 1, "status": 401})

    assert not status.failing and status.line().split()[1] == "ready"


# -- reload --------------------------------------------------------------------------------------
def touch(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    later = time.time() + 5  # a different mtime even on a coarse clock
    os.utime(path, (later, later))


def test_the_change_detector_sees_added_changed_and_removed_files_but_not_caches(tmp_path: Path) -> None:
    functions, layer = tmp_path / "functions", tmp_path / "layer"
    touch(functions / "crm" / "app.py", "a")
    touch(functions / "store" / "logic.py", "b")
    touch(layer / "pipeline" / "worker.py", "c")
    detector = ChangeDetector((functions, layer))
    assert detector.changes() == []

    touch(functions / "crm" / "app.py", "a2")
    touch(functions / "crm" / "__pycache__" / "app.cpython-311.pyc", "x")
    touch(functions / "crm" / ".app.py.swp", "x")
    (functions / "store" / "logic.py").unlink()
    touch(layer / "pipeline" / "new.py", "d")

    assert detector.changes() == sorted(
        [functions / "crm" / "app.py", functions / "store" / "logic.py", layer / "pipeline" / "new.py"]
    )
    assert detector.changes() == []


def test_a_change_restarts_its_package_functions_and_a_layer_change_all() -> None:
    functions, layer = Path("/p/functions"), Path("/p/layers/shared/python")
    packages = {"webhook": "webhook", "sms": "sms", "reconciler": "reconciler", "crm": "crm"}

    assert affected_functions([functions / "crm" / "app.py"], functions, layer, packages) == {
        "crm": functions / "crm" / "app.py"
    }
    assert set(affected_functions([layer / "pipeline" / "sms" / "x.py"], functions, layer, packages)) == set(
        packages
    )
    assert affected_functions([functions / "other" / "app.py"], functions, layer, packages) == {}
    assert affected_functions([Path("/elsewhere/app.py")], functions, layer, packages) == {}


def test_reload_restarts_the_affected_functions_and_says_why(tmp_path: Path) -> None:
    functions = tmp_path / "functions"
    runtime = Runtime(
        state_dir=tmp_path / "state",
        consumers=(by_name("crm"), by_name("store")),
        functions_dir=functions,
        layer_dir=tmp_path / "layer",
    )
    runtime.log_dir.mkdir(parents=True)
    runtime.functions = {name: FunctionStatus(name, "consumer", state=READY) for name in ("crm", "store")}
    restarted: list[tuple[str, ...]] = []
    runtime.restart_functions = lambda *names, timeout=0: restarted.append(names) or {}  # type: ignore[method-assign]
    heard: list[str] = []
    runtime.on_announcement(heard.append)

    runtime.reload_changed([functions / "crm" / "app.py"])

    assert restarted == [("crm",)]
    assert heard == [f"reloaded crm ({functions.name}/crm/app.py changed)"]
    assert heard[0] in runtime.runtime_log.read_text()


# -- demo beside local ---------------------------------------------------------------------------
def test_demo_defaults_to_its_own_state_directory_and_a_free_port() -> None:
    local, demo = parse_args([]), parse_args(["demo"])

    assert (local.port, local.state_dir) == (DEFAULT_API_PORT, DEFAULT_STATE_DIR)
    assert (demo.port, demo.state_dir) == (0, DEMO_STATE_DIR)
    assert DEMO_STATE_DIR != DEFAULT_STATE_DIR
    # Two runtimes of these defaults write different logs and stack.json files.
    runtimes = [Runtime(state_dir=args.state_dir) for args in (local, demo)]
    assert runtimes[0].runtime_log != runtimes[1].runtime_log
    assert runtimes[0].persist_dir != runtimes[1].persist_dir
    assert all(port == 0 for port in vars(runtimes[1].ports).values())  # fakes and moto: free ports
    # An explicit choice still wins.
    chosen = parse_args(["demo", "--port", "9000", "--state-dir", "/tmp/x", "--persist", "--no-reload"])
    assert (chosen.port, chosen.state_dir, chosen.persist, chosen.no_reload) == (
        9000,
        Path("/tmp/x"),
        True,
        True,
    )


# -- persisted state -----------------------------------------------------------------------------
@pytest.fixture
def in_process_moto(monkeypatch: pytest.MonkeyPatch) -> Any:
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
        monkeypatch.setenv(name, "testing")
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    return lambda service: boto3.client(service, region_name=REGION)


def create_journal(dynamodb: Any) -> None:
    """A table keyed `pk`, as the runtime's start makes it empty before a restore."""
    dynamodb.create_table(
        TableName="journal",
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
    )


def test_a_snapshot_keeps_in_flight_messages_and_items_and_restores_them_visible(
    in_process_moto: Any, tmp_path: Path
) -> None:
    client = in_process_moto
    with mock_aws():
        sqs, dynamodb = client("sqs"), client("dynamodb")
        url = sqs.create_queue(QueueName="q-dlq")["QueueUrl"]
        sqs.send_message(
            QueueUrl=url,
            MessageBody="one",
            MessageAttributes={"dead_letter_reason": {"DataType": "String", "StringValue": "why"}},
        )
        sqs.send_message(QueueUrl=url, MessageBody="two")
        assert sqs.receive_message(QueueUrl=url, VisibilityTimeout=600)["Messages"]  # one in flight
        create_journal(dynamodb)
        item = {
            "pk": {"S": "k"},
            "n": {"N": "1"},
            "b": {"B": b"\x00"},
            "m": {"M": {"x": {"L": [{"S": "y"}]}}},
        }
        dynamodb.put_item(TableName="journal", Item=item)

        assert snapshot.save_queues(tmp_path / snapshot.QUEUES_FILE) == 2
        assert snapshot.save_tables(tmp_path / snapshot.TABLES_FILE) == 1

    with mock_aws():  # a fresh moto: the runtime's next start, resources created again
        sqs, dynamodb = client("sqs"), client("dynamodb")
        url = sqs.create_queue(QueueName="q-dlq")["QueueUrl"]
        create_journal(dynamodb)

        said = snapshot.restore(client, tmp_path)

        messages = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, MessageAttributeNames=["All"])
        assert sorted(m["Body"] for m in messages["Messages"]) == ["one", "two"]
        assert any(
            m.get("MessageAttributes", {}).get("dead_letter_reason", {}).get("StringValue") == "why"
            for m in messages["Messages"]
        )
        assert dynamodb.get_item(TableName="journal", Key={"pk": {"S": "k"}})["Item"] == item
        assert "2 messages in 1 queues" in said and "1 items in 1 tables" in said


def test_an_older_snapshots_binary_values_are_restored_as_bytes(in_process_moto: Any, tmp_path: Path) -> None:
    """Snapshots written before the items were saved from moto's model held bytes as
    `{"__base64__": ...}`; a start with one restores them as they were."""
    client = in_process_moto
    (tmp_path / snapshot.TABLES_FILE).write_text(
        json.dumps({"journal": [{"pk": {"S": "k"}, "b": {"B": {"__base64__": "AAE="}}}]})
    )
    with mock_aws():
        dynamodb = client("dynamodb")
        create_journal(dynamodb)

        said = snapshot.restore(client, tmp_path)

        item = dynamodb.get_item(TableName="journal", Key={"pk": {"S": "k"}})["Item"]
        assert item == {"pk": {"S": "k"}, "b": {"B": b"\x00\x01"}}
        assert "1 items in 1 tables" in said


def test_a_restore_that_leaves_a_table_short_of_its_saved_items_fails(
    in_process_moto: Any, tmp_path: Path
) -> None:
    """A restore is checked against what was saved: tables that do not hold every saved item (here
    two saved items with one key) fail the start with the counts, never run on with less."""
    client = in_process_moto
    twice = [{"pk": {"S": "k"}, "n": {"N": "1"}}, {"pk": {"S": "k"}, "n": {"N": "2"}}]
    (tmp_path / snapshot.TABLES_FILE).write_text(json.dumps({"journal": twice}))
    with mock_aws():
        create_journal(client("dynamodb"))

        with pytest.raises(RuntimeError, match="journal holds 1 items after restoring 2 saved ones"):
            snapshot.restore(client, tmp_path)


def test_the_save_door_answers_with_the_counts_once_written_and_500_with_the_reason_otherwise(
    in_process_moto: Any, tmp_path: Path
) -> None:
    """The runtime stops moto only after this answer: 200 means both files are written."""
    client = in_process_moto

    def unknown_path(environ: Any, start_response: Any) -> list[bytes]:
        raise AssertionError("the door's own paths never reach moto")

    with mock_aws():
        sqs = client("sqs")
        sqs.send_message(QueueUrl=sqs.create_queue(QueueName="store-dlq")["QueueUrl"], MessageBody="{}")
        saved = Client(snapshot.PersistDoor(unknown_path, tmp_path / "persisted")).post(
            snapshot.SAVE_STATE_PATH
        )
        assert (saved.status_code, saved.json) == (200, {"messages": 1, "items": 0})
        assert json.loads((tmp_path / "persisted" / snapshot.QUEUES_FILE).read_text())["store-dlq"]

        (tmp_path / "a-file").write_text("not a directory")
        refused = Client(snapshot.PersistDoor(unknown_path, tmp_path / "a-file")).post(
            snapshot.SAVE_STATE_PATH
        )
        assert refused.status_code == 500 and "Error" in refused.json["error"]


def test_asking_a_moto_process_that_does_not_answer_raises_a_snapshot_error() -> None:
    with pytest.raises(snapshot.SnapshotError, match="_local_save_state failed"):
        snapshot.ask_moto("http://127.0.0.1:9", snapshot.SAVE_STATE_PATH, timeout=2)


def test_restoring_without_a_snapshot_says_so(tmp_path: Path) -> None:
    assert "no saved state" in snapshot.restore(lambda service: None, tmp_path)
