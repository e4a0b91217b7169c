"""What a local function process hands its handler, and how it treats the result.

Oracles: Powertools' parser models of the SQS and EventBridge events, and Powertools' own
`LambdaContext` type for the context.
"""

from __future__ import annotations

import hashlib
import http.server
import json
import textwrap
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from aws_lambda_powertools.utilities.parser.models import EventBridgeModel, SqsModel
from aws_lambda_powertools.utilities.typing import LambdaContext
from moto import mock_aws

from local.lambda_host import FunctionHost, LocalLambdaContext
from local.sqs_poller import event_id_of, failed_message_ids, sqs_record
from local.worker_process import scheduled_event
from tests.support.imports import run_fresh

REGION = "eu-central-1"


@pytest.fixture
def received(aws_env: None) -> Iterator[tuple[dict[str, Any], str]]:
    """One message sent with attributes and received twice (receive count 2), and its queue ARN."""
    with mock_aws():
        sqs = boto3.client("sqs", region_name=REGION)
        url = sqs.create_queue(QueueName="q", Attributes={"VisibilityTimeout": "0"})["QueueUrl"]
        arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
        sqs.send_message(
            QueueUrl=url,
            MessageBody='{"event_id":"e1"}',
            MessageAttributes={"source": {"DataType": "String", "StringValue": "telegram"}},
        )
        receive = {"QueueUrl": url, "MessageSystemAttributeNames": ["All"], "MessageAttributeNames": ["All"]}
        sqs.receive_message(**receive)
        message = sqs.receive_message(**receive)["Messages"][0]
        yield message, arn


def test_record_has_lambdas_sqs_shape(received: tuple[dict[str, Any], str]) -> None:
    message, arn = received

    record = sqs_record(message, arn, REGION)
    parsed = SqsModel.model_validate({"Records": [record]}).Records[0]

    assert parsed.body == '{"event_id":"e1"}'
    assert parsed.md5OfBody == hashlib.md5(b'{"event_id":"e1"}').hexdigest()  # noqa: S324 - SQS's checksum
    assert parsed.attributes.ApproximateReceiveCount == "2"
    assert parsed.attributes.SentTimestamp is not None
    assert parsed.messageAttributes["source"].stringValue == "telegram"
    assert parsed.messageAttributes["source"].dataType == "String"
    assert (parsed.eventSource, parsed.eventSourceARN, parsed.awsRegion) == ("aws:sqs", arn, REGION)
    assert record["receiptHandle"] == message["ReceiptHandle"]


RECORDS = [{"messageId": "a"}, {"messageId": "b"}, {"messageId": "c"}]


@pytest.mark.parametrize(
    ("result", "failed"),
    [
        ({"batchItemFailures": []}, set()),
        (None, set()),
        ({"batchItemFailures": [{"itemIdentifier": "b"}]}, {"b"}),
        # A malformed answer fails the whole batch, as Lambda does.
        ({"batchItemFailures": [{"itemIdentifier": "zzz"}]}, {"a", "b", "c"}),
        ({"batchItemFailures": [{"itemIdentifier": ""}]}, {"a", "b", "c"}),
        ({"batchItemFailures": "b"}, {"a", "b", "c"}),
    ],
)
def test_only_records_not_reported_as_failures_count_as_succeeded(result: Any, failed: set[str]) -> None:
    assert failed_message_ids(result, RECORDS) == failed


def test_a_busy_workers_events_are_read_from_raw_and_sns_wrapped_bodies() -> None:
    """What a killed worker held (`local.chaos.inflight`): the envelope's event id, either way."""
    envelope = json.dumps({"event_id": "telegram:1:5", "type": "message"})
    assert event_id_of(envelope) == "telegram:1:5"
    assert event_id_of(json.dumps({"Type": "Notification", "Message": envelope})) == "telegram:1:5"
    assert [event_id_of(body) for body in ("not json", "[]", '{"event_id": 5}')] == [None, None, None]


def test_scheduled_event_is_an_eventbridge_scheduled_event() -> None:
    parsed = EventBridgeModel.model_validate(
        scheduled_event("arn:aws:events:eu-central-1:123456789012:rule/r", REGION)
    )

    assert parsed.detail_type == "Scheduled Event"
    assert parsed.source == "aws.events"
    assert parsed.resources == ["arn:aws:events:eu-central-1:123456789012:rule/r"]


def test_context_counts_down_from_the_functions_timeout() -> None:
    context: LambdaContext = LocalLambdaContext("TelegramCrmPipeline-store", 256, 30, REGION)  # type: ignore[assignment]

    first = context.get_remaining_time_in_millis()
    time.sleep(0.05)

    assert 29_000 < first <= 30_000
    assert context.get_remaining_time_in_millis() < first
    assert (
        context.invoked_function_arn
        == "arn:aws:lambda:eu-central-1:123456789012:function:TelegramCrmPipeline-store"
    )
    assert context.memory_limit_in_mb == 256
    assert uuid.UUID(context.aws_request_id)


@pytest.fixture
def package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[str, threading.Event]]:
    """A throwaway function package whose handler waits for an event or returns at once."""
    name = f"localfn_{uuid.uuid4().hex[:8]}"
    (tmp_path / name).mkdir()
    (tmp_path / name / "__init__.py").write_text("")
    (tmp_path / name / "app.py").write_text(
        textwrap.dedent(
            """
            import threading
            release = threading.Event()

            def lambda_handler(event, context):
                if event.get("wait"):
                    release.wait(10)
                if event.get("fail"):
                    raise ValueError("boom")
                return {"remaining": context.get_remaining_time_in_millis()}
            """
        )
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    host = FunctionHost(f"{name}.app.lambda_handler", "fn", timeout_seconds=0.3, memory_mb=128)
    assert host.load() == ("ready", None)
    yield name, host.module.release
    host.module.release.set()


def test_invocation_returns_the_handlers_result_or_error(package: tuple[str, threading.Event]) -> None:
    host = FunctionHost(f"{package[0]}.app.lambda_handler", "fn", timeout_seconds=5, memory_mb=128)
    host.load()

    ok = host.invoke({})
    failed = host.invoke({"fail": True})

    assert ok.ok and 0 < ok.result["remaining"] <= 5000
    assert not failed.ok and failed.error == "ValueError: boom"


def test_a_handler_past_its_timeout_is_not_waited_for(package: tuple[str, threading.Event]) -> None:
    host = FunctionHost(f"{package[0]}.app.lambda_handler", "fn", timeout_seconds=0.3, memory_mb=128)
    host.load()
    started = time.monotonic()

    outcome = host.invoke({"wait": True})

    assert outcome.timed_out and not outcome.ok
    assert time.monotonic() - started < 1.5


def test_an_invocation_reports_the_clients_its_handler_built_and_the_modules_it_imported(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What `make local`'s hosts report per invocation (tests/e2e/test_first_invocation.py reads
    it): a handler that builds a botocore client and imports a module at its first call reports
    both then, and neither at its second; its CPU time is its own thread's."""
    name = f"localfn_{uuid.uuid4().hex[:8]}"
    (tmp_path / name).mkdir()
    (tmp_path / name / "__init__.py").write_text("")
    (tmp_path / name / "lazy.py").write_text("VALUE = 1\n")
    (tmp_path / name / "app.py").write_text(
        textwrap.dedent(
            f"""
            import botocore.session
            clients = []

            def lambda_handler(event, context):
                if not clients:
                    from {name} import lazy
                    session = botocore.session.get_session()
                    clients.append(session.create_client("sqs", region_name="eu-central-1"))
                sum(range(200_000))
                return {{}}
            """
        )
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    host = FunctionHost(f"{name}.app.lambda_handler", "fn", timeout_seconds=10, memory_mb=128)
    assert host.load() == ("ready", None)

    first, second = host.invoke({}), host.invoke({})

    assert (first.clients_built, first.imported) == (1, [f"{name}.lazy"])
    assert (second.clients_built, second.imported) == (0, [])
    assert first.cpu_ms > 0 and second.cpu_ms > 0
    assert first.work() == {
        "cpu_ms": first.cpu_ms,
        "clients_built": 1,
        "imported": [f"{name}.lazy"],
        "cpu_ms_at": {},  # it sent nothing
    }


class _AnswersEverything(http.server.BaseHTTPRequestHandler):
    """An endpoint that answers any POST 200 `{}`: an AWS JSON API's empty answer, or Telegram's."""

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        body = b'{"ok": true, "result": {}}'
        self.send_response(200)
        self.send_header("Content-Type", "application/x-amz-json-1.0")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


def test_an_invocation_reports_the_cpu_spent_when_each_call_left(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`bench latency` stretches a reply's CPU until its call left, not the invocation's after it:
    the host marks an AWS operation when botocore sends it and a Bot API method when it goes to
    the configured Telegram API, in the handler's thread's CPU time; the token in the Bot API's
    path is never in a mark, and a call to another host is not a Bot API call."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _AnswersEverything)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    other = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _AnswersEverything)
    threading.Thread(target=other.serve_forever, daemon=True).start()
    other_url = f"http://127.0.0.1:{other.server_address[1]}"
    monkeypatch.setenv("TELEGRAM_API_BASE", url)
    name = f"localfn_{uuid.uuid4().hex[:8]}"
    (tmp_path / name).mkdir()
    (tmp_path / name / "__init__.py").write_text("")
    (tmp_path / name / "app.py").write_text(
        textwrap.dedent(
            f"""
            import urllib.request
            import botocore.session

            sqs = botocore.session.get_session().create_client(
                "sqs", region_name="eu-central-1", endpoint_url={url!r},
                aws_access_key_id="testing", aws_secret_access_key="testing",
            )

            def post(base, method):
                request = urllib.request.Request(base + "/bot123:secret-token/" + method, data=b"{{}}")
                urllib.request.urlopen(request, timeout=5).read()

            def lambda_handler(event, context):
                sum(range(300_000))
                sqs.list_queues()
                post({other_url!r}, "sendPhoto")  # another host: not the Bot API
                sum(range(300_000))
                post({url!r}, "sendMessage")
                post({url!r}, "sendMessage")  # the first one is the mark
                sum(range(6_000_000))
                return {{}}
            """
        )
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    host = FunctionHost(f"{name}.app.lambda_handler", "fn", timeout_seconds=20, memory_mb=128)
    try:
        assert host.load() == ("ready", None)
        invocation = host.invoke({})
    finally:
        server.shutdown()
        other.shutdown()

    assert invocation.ok, invocation.error
    marks = invocation.cpu_ms_at
    assert set(marks) == {"sqs.ListQueues", "telegram.sendMessage"}
    assert 0 < marks["sqs.ListQueues"] < marks["telegram.sendMessage"]
    # The sum after the send is ten times both before it: most of the CPU came after the mark.
    assert marks["telegram.sendMessage"] < invocation.cpu_ms / 2
    assert "secret-token" not in json.dumps(invocation.work())


def test_a_missing_handler_is_reported_not_raised(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    name = f"localfn_{uuid.uuid4().hex[:8]}"
    (tmp_path / name).mkdir()
    (tmp_path / name / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))

    assert FunctionHost(f"{name}.app.lambda_handler", "fn", 1, 128).load()[0] == "missing handler"
    assert FunctionHost("nosuchpackage_x.app.lambda_handler", "fn", 1, 128).load()[0] == "missing handler"

    (tmp_path / name / "app.py").write_text("import nosuchdependency_x\n")
    state, detail = FunctionHost(f"{name}.app.lambda_handler", "fn", 1, 128).load()
    assert (state, detail) == ("init error", "ModuleNotFoundError: No module named 'nosuchdependency_x'")


def test_a_functions_local_host_loads_no_boto3_its_function_never_loads(tmp_path: Path) -> None:
    """The webhook never loads boto3 in Lambda (its clients are botocore's). Its host in `make
    local`, with the AWS calls' recorder on as the runtime runs it, loads it no more: a host that
    did would charge the function's init with it (`bench latency` measures the inits there)."""
    script = textwrap.dedent(
        """
        import sys
        sys.path.insert(0, ".")
        from local.lambda_host import FunctionHost
        state = FunctionHost("webhook.app.lambda_handler", "webhook", 10, 512).load()
        print(state[0], "boto3" in sys.modules, "botocore.client" in sys.modules)
        """
    )
    printed = run_fresh(
        script,
        LOCAL_AWS_CALLS_FILE=str(tmp_path / "calls.jsonl"),
        AWS_LAMBDA_FUNCTION_NAME="webhook",  # an execution environment: its init builds its clients
        AWS_REGION=REGION,
        AWS_ACCESS_KEY_ID="testing",
        AWS_SECRET_ACCESS_KEY="testing",
    )
    assert printed.split() == ["ready", "False", "True"]
