"""What the end-to-end scenarios share: a client of the running pipeline, real-shaped events, polling.

Everything goes through the local runtime's HTTP surfaces (the API, the fakes' `/_calls` and
`/_faults`); AWS state (queues, journal, tables) is read with boto3 against the runtime's moto
server, and function logs from the runtime's log directory.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import pytest
from boto3.dynamodb.types import TypeDeserializer

from infra.config import PipelineSettings
from local.runtime import LAYER_DIR, PROJECT_ROOT, Ports, Runtime
from local.settings import LocalSettings
from pipeline.bot_api import TIMEOUT_SECONDS as BOT_API_TIMEOUT_SECONDS
from pipeline.crm.contract import SIGNATURE_HEADER, sign
from pipeline.deadline import needed
from pipeline.registry import Consumer

TELEGRAM_SECRET_HEADER = "X-Telegram-Bot-Api-Secret-Token"
BOT_USERNAME = "local_pipeline_bot"
POLL_SECONDS = 0.25
# The shortest bot timeout the stack accepts (one Bot API call made and recorded, and room to pace
# a second message: infra.environment's telegram_pacing): shorter crash-recovery waits in tests.
SHORT_BOT_TIMEOUT_SECONDS = int(needed(BOT_API_TIMEOUT_SECONDS)) + 1
T = TypeVar("T")
# Pipelines started besides the session's (the HTTP-gateway one): the log scan reads theirs too.
OTHER_PIPELINES: list[Pipeline] = []
# Phone numbers sent in this session (CRM events, shared contacts): none may appear in any log.
SENT_PHONES: set[str] = set()
# The CRM history sweep, as EventBridge would run it every crm_sweep_minutes: shorter in the
# session's pipeline so the catch-up scenarios (test_crm_history.py) wait seconds, not minutes.
CRM_SWEEP_EVERY_SECONDS = 8.0


# -- waiting ----------------------------------------------------------------------------------------
def answered(calls: list[dict[str, Any]]) -> list[dict[str, Any]] | None:
    """The calls once a stand-in has answered each (None while none was made or one is in flight).

    A stand-in records a call before it answers and sets its `status` after, so a call read in
    flight differs from the same call read later: wait for this before comparing calls whole.
    """
    return calls if calls and all(call["status"] is not None for call in calls) else None


def texts_to(pipeline: Pipeline, phone: str) -> list[dict[str, Any]]:
    """The SMS End User Messaging's stand-in was asked to send to `phone` (in flight or answered)."""
    return [
        call
        for call in pipeline.fake("end_user_messaging").calls()
        if (call["body"] or {}).get("DestinationPhoneNumber") == phone
    ]


def wait_for(
    condition: Callable[[], T | None], timeout: float, what: str, interval: float = POLL_SECONDS
) -> T:
    """Poll `condition` until it returns something truthy (returned) or `timeout` passes (fails).

    `what` names the awaited state in the failure; it must not quote secrets or phone numbers.
    """
    deadline = time.monotonic() + timeout
    while True:
        result = condition()
        if result:
            return result
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(interval)


def wait_while_advancing(
    condition: Callable[[], T | None],
    progress: Callable[[], int],
    stalled_after: float,
    what: str,
    interval: float = POLL_SECONDS,
) -> T:
    """Poll `condition` until it returns something truthy (returned); fail only when `progress`
    (a count that grows as the awaited work is done) has not grown for `stalled_after` seconds.

    For work whose pace is the machine's (thousands of calls on cores other tests share): a slow
    run passes, a stuck one fails, however loaded the machine. `what` as in `wait_for`.
    """
    last = progress()
    last_moved = time.monotonic()
    while True:
        result = condition()
        if result:
            return result
        now, done = time.monotonic(), progress()
        if done != last:
            last, last_moved = done, now
        elif now - last_moved >= stalled_after:
            raise AssertionError(f"no progress for {stalled_after:g}s (at {done}) waiting for {what}")
        time.sleep(interval)


# -- HTTP -----------------------------------------------------------------------------------------
def http(
    method: str,
    url: str,
    body: bytes | None = None,
    headers: dict[str, str] | None = None,
    timeout: float = 30,
) -> tuple[int, Any]:
    """Status and parsed JSON body (None if not JSON); an error status is a result, not an exception."""
    request = urllib.request.Request(url, data=body, method=method, headers=headers or {})  # noqa: S310 - loopback http
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:  # noqa: S310 - loopback http
            status, raw = int(response.status), response.read()
    except urllib.error.HTTPError as error:
        with error:
            status, raw = int(error.code), error.read()
    try:
        return status, json.loads(raw) if raw else None
    except ValueError:
        return status, None


def is_refused(url: str) -> bool:
    """True while nothing listens at `url` (a fake `down_for` a while)."""
    try:
        http("GET", url, timeout=2)
    except urllib.error.URLError as error:
        return isinstance(error.reason, ConnectionRefusedError)
    except ConnectionRefusedError:
        return True
    except ConnectionResetError:
        # Accepted just before the fake closed its listening socket: not refused yet, ask again.
        return False
    return False


@dataclass(frozen=True)
class FakeClient:
    """A fake's control endpoints, over HTTP as a user would use them."""

    name: str
    url: str

    def calls(self, path_contains: str = "") -> list[dict[str, Any]]:
        status, calls = http("GET", f"{self.url}/_calls")
        assert status == 200, f"GET {self.name}/_calls answered {status}"
        return [call for call in calls if path_contains in call["path"]]

    def inject(self, **fault: Any) -> None:
        status, body = http(
            "POST", f"{self.url}/_faults", json.dumps(fault).encode(), {"Content-Type": "application/json"}
        )
        assert status == 200, f"{self.name} refused the fault {fault}: {body}"

    def control(self, path: str, document: dict[str, Any]) -> Any:
        """POST a JSON document to one of the fake's control routes (`/_webhook_faults`, ...)."""
        status, body = http(
            "POST", f"{self.url}{path}", json.dumps(document).encode(), {"Content-Type": "application/json"}
        )
        assert status == 200, f"{self.name} refused {path}: {body}"
        return body

    def clear_faults(self) -> None:
        status, _ = http("DELETE", f"{self.url}/_faults")
        assert status == 200, f"DELETE {self.name}/_faults answered {status}"

    def is_down(self) -> bool:
        return is_refused(f"{self.url}/_faults")


# -- the pipeline as its users see it ----------------------------------------------------------------
@dataclass
class Pipeline:
    runtime: Runtime
    ops_outputs: list[str] = field(default_factory=list)

    @property
    def settings(self) -> LocalSettings:
        return self.runtime.settings

    @property
    def deployment(self) -> PipelineSettings:
        """The deployment settings it runs (`local.overlay.local_deployment`)."""
        assert self.runtime.resources is not None
        return self.runtime.resources.deployment

    def fake(self, name: str) -> FakeClient:
        return FakeClient(name, self.runtime.fakes[name].url)

    def send_update(self, update: dict[str, Any]) -> int:
        status, _ = http(
            "POST",
            self.runtime.webhook_url,
            json.dumps(update).encode(),
            {"Content-Type": "application/json", TELEGRAM_SECRET_HEADER: self.settings.telegram_secret},
        )
        return status

    def send_crm_event(self, event: dict[str, Any]) -> int:
        body = json.dumps(event).encode()
        status, _ = http(
            "POST",
            self.runtime.crm_url,
            body,
            {"Content-Type": "application/json", SIGNATURE_HEADER: sign(self.settings.crm_signing_key, body)},
        )
        return status

    def send_crm_event_with_path_token(self, event: dict[str, Any], token: str | None = None) -> int:
        """An unsigned CRM event, the token in the URL path (`POST /crm/events/<token>`)."""
        status, _ = http(
            "POST",
            f"{self.runtime.crm_url}/{token or self.settings.crm_token}",
            json.dumps(event).encode(),
            {"Content-Type": "application/json"},
        )
        return status

    def event_id(self, update: dict[str, Any]) -> str:
        return f"telegram:{self.settings.telegram_bot_id}:{update['update_id']}"

    # -- AWS state (moto) ----------------------------------------------------------------------
    def status(self) -> dict[str, dict[str, Any]]:
        return self.runtime.status()

    def dlq_depth(self, consumer: str) -> int:
        return int(self.status()[consumer]["dlq_depth"])

    def dlq_messages(self, consumer: str) -> list[dict[str, Any]]:
        """The DLQ's messages, read without consuming them (released at once)."""
        assert self.runtime.resources is not None
        sqs, url = self.runtime.client("sqs"), self.runtime.resources.queues[consumer].dlq_url
        messages = sqs.receive_message(
            QueueUrl=url, MaxNumberOfMessages=10, VisibilityTimeout=5, MessageAttributeNames=["All"]
        ).get("Messages", [])
        for message in messages:
            sqs.change_message_visibility(
                QueueUrl=url, ReceiptHandle=message["ReceiptHandle"], VisibilityTimeout=0
            )
        return messages

    def subscribe_to_alarms(self, name: str) -> Callable[[], list[dict[str, Any]]]:
        """Subscribe a queue `name` to the alarm topic, as an e-mail address would be; returns
        what reads the notifications (SNS JSON: TopicArn, Subject, Message) arrived so far."""
        assert self.runtime.resources is not None
        sqs, sns = self.runtime.client("sqs"), self.runtime.client("sns")
        url = sqs.create_queue(QueueName=name)["QueueUrl"]
        arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
        sns.subscribe(TopicArn=self.runtime.resources.alarm_topic_arn, Protocol="sqs", Endpoint=arn)
        received: list[dict[str, Any]] = []

        def notices() -> list[dict[str, Any]]:
            messages = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10).get("Messages", [])
            for message in messages:
                received.append(json.loads(message["Body"]))
                sqs.delete_message(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"])
            return list(received)

        return notices

    def items(self, table: str, keys: list[dict[str, str]]) -> list[dict[str, Any]]:
        """The items at `keys` (plain Python values) that exist."""
        assert self.runtime.resources is not None
        name = self.runtime.resources.tables[table]
        dynamodb = self.runtime.client("dynamodb")
        found: list[dict[str, Any]] = []
        for start in range(0, len(keys), 100):
            request = {
                name: {
                    "Keys": [{k: {"S": v} for k, v in key.items()} for key in keys[start : start + 100]],
                    "ConsistentRead": True,
                }
            }
            while request:
                response = dynamodb.batch_get_item(RequestItems=request)
                found.extend(plain(item) for item in response["Responses"].get(name, []))
                request = response.get("UnprocessedKeys") or {}
        return found

    def item(self, table: str, key: dict[str, str]) -> dict[str, Any] | None:
        items = self.items(table, [key])
        return items[0] if items else None

    # -- logs ----------------------------------------------------------------------------------
    def log_records(self, function: str) -> list[dict[str, Any]]:
        """The function's structured (JSON) log lines so far, of each of its processes (a consumer's
        workers: `<function>.log`, `<function>#2.log`, ...)."""
        paths = [self.runtime.log_dir / f"{function}.log"]
        paths += sorted(self.runtime.log_dir.glob(f"{function}#*.log"))
        records = []
        for path in paths:
            for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
                if line.startswith("{"):
                    try:
                        records.append(json.loads(line))
                    except ValueError:
                        continue
        return records

    def all_logs(self) -> dict[str, str]:
        """Every log of the run: each function's stdout/stderr, moto's, the runtime's, the ops CLI's."""
        logs = {
            path.name: path.read_text(encoding="utf-8", errors="replace")
            for path in sorted(self.runtime.log_dir.iterdir())
            if path.is_file()
        }
        logs["ops CLI output"] = "\n".join(self.ops_outputs)
        logs["status JSON and lines"] = json.dumps(self.status()) + "\n".join(self.runtime.status_lines())
        return logs

    # -- the ops CLI -----------------------------------------------------------------------------
    def ops(self, *arguments: str) -> subprocess.CompletedProcess[str]:
        """`python -m ops <arguments> --local` against this runtime, as an operator runs it."""
        self.runtime.write_state()
        environment = {
            "PATH": os.environ.get("PATH", os.defpath),
            "LANG": "C.UTF-8",
            "PYTHONPATH": os.pathsep.join(
                str(p) for p in (PROJECT_ROOT / "functions", LAYER_DIR, PROJECT_ROOT)
            ),
            "AWS_CONFIG_FILE": os.devnull,
            "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
        }
        completed = subprocess.run(
            [sys.executable, "-m", "ops", *arguments, "--local", "--local-file", str(self.state_file)],
            env=environment,
            cwd=PROJECT_ROOT,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        self.ops_outputs.append(completed.stdout + completed.stderr)
        return completed

    @property
    def state_file(self) -> Path:
        return self.runtime.state_dir / "stack.json"


_DESERIALIZER = TypeDeserializer()


def plain(item: dict[str, Any]) -> dict[str, Any]:
    return {name: _DESERIALIZER.deserialize(value) for name, value in item.items()}


# -- Telegram updates, shaped as the Bot API sends them ------------------------------------------------
class Ids:
    """Ids of one scenario: `Ids(3)` hands out update, user, chat and message ids no other one uses."""

    def __init__(self, scenario: int) -> None:
        self.base = scenario * 1_000_000
        self._update_ids: Iterator[int] = iter(
            range(800_000_000 + self.base, 800_000_000 + self.base + 999_999)
        )
        self._next = iter(range(self.base + 1, self.base + 999_999))

    def update_id(self) -> int:
        return next(self._update_ids)

    def number(self) -> int:
        return next(self._next)


def user(user_id: int, first_name: str = "Test") -> dict[str, Any]:
    return {
        "id": user_id,
        "is_bot": False,
        "first_name": first_name,
        "last_name": f"User{user_id}",
        "username": f"user_{user_id}",
        "language_code": "en",
    }


def private_chat(sender: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": sender["id"],
        "type": "private",
        "first_name": sender["first_name"],
        "last_name": sender["last_name"],
        "username": sender["username"],
    }


def group_chat(chat_id: int) -> dict[str, Any]:
    return {"id": -chat_id, "type": "group", "title": f"Group {chat_id}"}


def message(
    message_id: int, chat: dict[str, Any], sender: dict[str, Any], text: str, date: int | None = None
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "message_id": message_id,
        "from": sender,
        "chat": chat,
        "date": date or int(time.time()),
        "text": text,
    }
    if text.startswith("/"):
        command = text.split()[0]
        body["entities"] = [
            {"offset": 0, "length": len(command.encode("utf-16-le")) // 2, "type": "bot_command"}
        ]
    return body


def contact_message(message_id: int, sender: dict[str, Any], phone: str) -> dict[str, Any]:
    """The sender shares their own number (the "share my phone" button)."""
    return {
        "message_id": message_id,
        "from": sender,
        "chat": private_chat(sender),
        "date": int(time.time()),
        "contact": {
            "phone_number": phone,
            "first_name": sender["first_name"],
            "last_name": sender["last_name"],
            "user_id": sender["id"],
        },
    }


def callback_query(query_id: str, sender: dict[str, Any], message_id: int) -> dict[str, Any]:
    bot = {"id": 123456, "is_bot": True, "first_name": "Local Pipeline Bot", "username": BOT_USERNAME}
    return {
        "id": query_id,
        "from": sender,
        "chat_instance": f"-{sender['id']}42",
        "data": "prices",
        "message": {
            "message_id": message_id,
            "from": bot,
            "chat": private_chat(sender),
            "date": int(time.time()) - 60,
            "text": "Pick one:",
            "reply_markup": {"inline_keyboard": [[{"text": "Prices", "callback_data": "prices"}]]},
        },
    }


# -- CRM events ----------------------------------------------------------------------------------------
def order_status_changed(
    event_id: str, order_id: str, status: str, previous: str, phone: str, name: str = "Test Customer"
) -> dict[str, Any]:
    return {
        "event_id": event_id,
        "type": "order.status_changed",
        "occurred_at": time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime()),
        "order": {"id": order_id, "status": status, "previous_status": previous},
        "customer": {"phone": phone, "name": name},
    }


def phone_number(scenario: int, index: int) -> str:
    """A distinctive, valid E.164 mobile number (+49 1577 ...), unique per scenario and index."""
    return f"+491577{scenario:02d}{index:05d}"


# The ordered consumers' pipelines run several Lambda execution environments from the start, so
# chats are handled side by side and a group's order is the queue's to keep, not one process's.
SEVERAL_WORKERS: dict[str, Any] = {"consumer_workers": 3, "scale_workers_on_demand": False}


@contextlib.contextmanager
def other_pipeline(
    tmp_path_factory: pytest.TempPathFactory,
    name: str,
    settings: LocalSettings,
    consumers: tuple[Consumer, ...],
    persist: bool = False,
) -> Iterator[Pipeline]:
    """A runtime of its own beside the session's (own state directory and ports), with only these
    consumers (`persist`: its state survives a restart); its logs join the session's in the final
    no-secret scan (`OTHER_PIPELINES`)."""
    state_dir: Path = tmp_path_factory.mktemp(f"local-runtime-{name}")
    runtime = Runtime(
        ports=Ports(), settings=settings, state_dir=state_dir, consumers=consumers, persist=persist
    )
    runtime.start()
    other = Pipeline(runtime)
    OTHER_PIPELINES.append(other)
    try:
        yield other
    finally:
        runtime.stop()
