"""`make local` for a person changing code: routing explained, a failing consumer shown as failing,
a fix picked up without a restart, state kept across restarts.

Each scenario starts its own small runtime (webhook + one or two consumers) on a temporary copy of
`functions/` (never the repository's files), so the session pipeline of `test_pipeline.py` is not
needed here: the autouse `isolated_scenario` of the conftest is replaced by a no-op.
"""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import infra.config
from local import child_process
from local.runtime import FUNCTIONS_DIR, Ports, Runtime
from local.settings import LocalSettings
from pipeline.registry import by_name
from tests.e2e.support import SHORT_BOT_TIMEOUT_SECONDS, Pipeline, message, private_chat, user, wait_for
from tests.e2e.test_bot_conversation import bot_calls, sent_texts
from tests.unit.consumer_support import telegram_envelope

pytestmark = pytest.mark.e2e

# The store's effects are waited for step by step: without its 20 s batching window.
NO_WINDOWS = LocalSettings.from_cdk_json(batching_windows=False)

BROKEN_STORE = '''"""The store consumer, broken on purpose: every record raises."""
from pipeline.worker import ConsumerWorker


def save_update(envelope):
    raise RuntimeError("broken on purpose")


worker = ConsumerWorker(save_update)


def lambda_handler(event, context):
    return worker.handle(event, context)
'''


@pytest.fixture(autouse=True)
def isolated_scenario() -> Iterator[None]:
    """Replaces the conftest's: these scenarios do not use the session pipeline."""
    yield


@pytest.fixture
def functions_copy(tmp_path: Path) -> Path:
    copy = tmp_path / "functions"
    shutil.copytree(FUNCTIONS_DIR, copy, ignore=shutil.ignore_patterns("__pycache__"))
    return copy


def runtime_log(runtime: Runtime) -> str:
    return runtime.runtime_log.read_text(encoding="utf-8")


def store_runtime(tmp_path: Path, *more: str, **options: Any) -> Runtime:
    """A runtime of the webhook and `store` (and the `more` consumers), its state under `tmp_path`."""
    return Runtime(
        ports=Ports(),
        settings=NO_WINDOWS,
        state_dir=tmp_path / "state",
        consumers=tuple(by_name(name) for name in ("store", *more)),
        **options,
    )


def say_hi(pipeline: Pipeline) -> dict[str, Any]:
    """Ann's "hi" (update 7101), accepted; Ann."""
    ann = user(7101, "Ann")
    assert (
        pipeline.send_update({"update_id": 7101, "message": message(1, private_chat(ann), ann, "hi")}) == 200
    )
    return ann


def line_with(runtime: Runtime, *parts: str) -> str | None:
    return next((line for line in runtime_log(runtime).splitlines() if all(p in line for p in parts)), None)


def test_a_consumer_failing_on_every_record_shows_failing_and_a_fixed_file_is_reloaded(
    functions_copy: Path, tmp_path: Path
) -> None:
    store_app = functions_copy / "store" / "app.py"
    store_app.write_text(BROKEN_STORE)
    seen: list[str] = []
    runtime = Runtime(
        ports=Ports(),
        settings=NO_WINDOWS,
        state_dir=tmp_path / "state",
        consumers=(by_name("store"), by_name("crm")),
        reload=True,
        functions_dir=functions_copy,
    )
    runtime.on_announcement(seen.append)
    with runtime:
        pipeline = Pipeline(runtime)
        ann = user(7001, "Ann")
        first = {"update_id": 7001, "message": message(1, private_chat(ann), ann, "/start")}
        edited = {
            "update_id": 7002,
            "edited_message": {**message(1, private_chat(ann), ann, "hi"), "edit_date": 1},
        }
        assert pipeline.send_update(first) == 200
        assert pipeline.send_update(edited) == 200

        # One routing line per accepted event, from the registry's filter policies.
        routed = wait_for(
            lambda: line_with(runtime, f"event {pipeline.event_id(first)} "), 10, "the routing line of /start"
        )
        assert "(telegram message) -> store, crm" in routed and "; not" not in routed
        routed_edit = wait_for(
            lambda: line_with(runtime, f"event {pipeline.event_id(edited)} "),
            10,
            "the routing line of the edit",
        )
        assert "(telegram edited_message) -> store; not crm: type 'edited_message' is not in [message, " in (
            routed_edit
        )
        # Also told to whoever watches (the console), the same line without the log's timestamp.
        assert any(routed.endswith(f" {line}") for line in seen)
        assert any(routed_edit.endswith(f" {line}") for line in seen)

        # The consumer that raises on every record is failing, not "ready".
        def failing_line() -> str | None:
            runtime.refresh_queue_depths()
            line = next(line for line in runtime.status_lines() if line.startswith("store "))
            return line if "failing" in line and "last RuntimeError" in line else None

        line = wait_for(failing_line, 30, "store shown as failing")
        assert runtime.status()["store"]["failing"] is True
        assert "processed 0 " in line
        assert re.search(r"retried [1-9]", line) and re.search(r"failed [1-9]", line), line
        crm = next(line for line in runtime.status_lines() if line.startswith("crm "))
        assert "failing" not in crm

        # The fix, saved: the runtime restarts store (only store), and store processes again.
        started = time.time()
        shutil.copy(FUNCTIONS_DIR / "store" / "app.py", store_app)
        reloaded = wait_for(lambda: line_with(runtime, "reloaded store"), 20, "the reload line")
        assert "reloaded store (functions/store/app.py changed)" in reloaded
        assert line_with(runtime, "reloaded crm") is None and line_with(runtime, "reloaded webhook") is None
        later = {"update_id": 7003, "message": message(2, private_chat(ann), ann, "hello")}
        assert pipeline.send_update(later) == 200

        def healthy() -> dict[str, Any] | None:
            status = runtime.status()["store"]
            return status if status["processed"] >= 1 and not status["failing"] else None

        assert wait_for(healthy, 30, "store processing again after the fix")
        assert time.time() - started < 60


def test_with_persist_dlq_messages_and_journal_items_survive_a_restart(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The state is saved, and the save confirmed, before moto is asked to stop: here moto is
    killed the moment it is (no grace), as a long campaign's save outlasting the grace was."""
    monkeypatch.setattr(child_process, "STOP_GRACE_SECONDS", 0.0)
    settings = NO_WINDOWS
    state_dir = tmp_path / "state"

    def runtime() -> Runtime:
        return Runtime(
            ports=Ports(), settings=settings, state_dir=state_dir, consumers=(by_name("store"),), persist=True
        )

    with runtime() as first:
        assert first.resources is not None
        sqs, dynamodb = first.client("sqs"), first.client("dynamodb")
        dlq = first.resources.queues["store"].dlq_url
        journal = first.resources.tables["journal"]
        sqs.send_message(
            QueueUrl=dlq,
            MessageBody='{"event_id": "telegram:default:1"}',
            MessageAttributes={"dead_letter_reason": {"DataType": "String", "StringValue": "broken"}},
        )
        sqs.send_message(QueueUrl=dlq, MessageBody='{"event_id": "telegram:default:2"}')
        # One of them in flight at the stop (being looked at): it comes back visible.
        assert sqs.receive_message(QueueUrl=dlq, VisibilityTimeout=600)["Messages"]
        keys = [k["AttributeName"] for k in dynamodb.describe_table(TableName=journal)["Table"]["KeySchema"]]
        item = {key: {"S": f"persisted-{key}"} for key in keys}
        dynamodb.put_item(TableName=journal, Item={**item, "n": {"N": "3"}, "blob": {"B": b"\x00\x01"}})

    assert (state_dir / "persisted" / "queues.json").is_file()
    assert (state_dir / "persisted" / "tables.json").is_file()

    with runtime() as second:
        assert second.resources is not None
        sqs, dynamodb = second.client("sqs"), second.client("dynamodb")
        dlq = second.resources.queues["store"].dlq_url
        messages = sqs.receive_message(
            QueueUrl=dlq, MaxNumberOfMessages=10, MessageAttributeNames=["All"], VisibilityTimeout=1
        )["Messages"]
        bodies = sorted(m["Body"] for m in messages)
        assert bodies == ['{"event_id": "telegram:default:1"}', '{"event_id": "telegram:default:2"}']
        reasons = [
            m.get("MessageAttributes", {}).get("dead_letter_reason", {}).get("StringValue") for m in messages
        ]
        assert "broken" in reasons
        items = dynamodb.scan(TableName=second.resources.tables["journal"])["Items"]
        assert {**item, "n": {"N": "3"}, "blob": {"B": b"\x00\x01"}} in items
        assert "persist: restored from" in runtime_log(second)


def test_a_restart_of_the_whole_pipeline_with_persist_keeps_its_state_and_goes_on(tmp_path: Path) -> None:
    """`Runtime.restart_pipeline` (the chaos campaign's `restart_runtime`): every process stopped,
    moto too, and started again on the same ports with the saved queues and tables; the stand-ins
    (the world outside) run on. A message waiting in a queue at the stop is processed after it."""
    runtime = store_runtime(tmp_path, "sms", persist=True)  # sms: its delivery events' subscription
    with runtime:
        pipeline = Pipeline(runtime)
        ann = say_hi(pipeline)
        assert runtime.wait_until_drained(timeout=30)
        assert runtime.resources is not None
        conversations = runtime.resources.tables["conversations"]
        webhook_url, store = runtime.webhook_url, runtime.status()["store"]["processed"]
        # Held back: a message the store queue delays past the stop (a snapshot's delayed message
        # comes back visible), so no worker takes it before the restart.
        sqs = runtime.client("sqs")
        waiting = {"update_id": 7102, "message": message(3, private_chat(ann), ann, "waiting")}
        body = telegram_envelope(waiting).envelope.to_json()
        sqs.send_message(QueueUrl=runtime.resources.queues["store"].url, MessageBody=body, DelaySeconds=120)

        seconds = runtime.restart_pipeline()

        assert runtime.webhook_url == webhook_url and seconds < 60
        # Made again, the subscription has a new ARN: the delivery events' poller is given it.
        events = runtime.resources.delivery_events
        assert events is not None and events.subscription_arn in runtime.children["sms_events"].args()

        def stored(update_id: int) -> bool:
            items = runtime.client("dynamodb").scan(TableName=conversations)["Items"]
            return any(item["sk"]["S"] == f"update#{update_id:012d}" for item in items)

        assert stored(7101)  # the table's items survived

        assert wait_for(lambda: stored(7102), 30, "the held message processed after the restart")
        later = {"update_id": 7103, "message": message(2, private_chat(ann), ann, "again")}
        assert pipeline.send_update(later) == 200
        assert runtime.wait_until_drained(timeout=30)
        assert runtime.status()["store"]["processed"] >= 2 and store >= 1
        assert "restarted with its state in" in runtime_log(runtime)


def test_an_order_event_a_crm_source_consumer_publishes_is_explained_too(tmp_path: Path) -> None:
    """bitrix24 publishes its order events itself, through the SNS proxy as the webhook does."""
    runtime = Runtime(
        ports=Ports(),
        settings=NO_WINDOWS,
        state_dir=tmp_path / "state",
        consumers=(by_name("bitrix24"), by_name("sms")),
    )
    with runtime:
        portal = runtime.bitrix24
        contact = portal.create_contact("Ann", "+375 29 123-45-67")
        deal = portal.create_deal("Order 1", contact_id=contact)
        assert portal.move_deal(deal.deal_id, "EXECUTING").status == 200

        vendor = wait_for(
            lambda: line_with(runtime, "(bitrix24 ONCRMDEALUPDATE) -> bitrix24; not sms: source 'bitrix24'"),
            30,
            "the routing line of the portal's webhook",
        )
        order = wait_for(
            lambda: line_with(runtime, "(crm order.status_changed) -> sms; not bitrix24: source 'crm'"),
            30,
            "the routing line of the order event the bitrix24 consumer published",
        )
        assert " event bitrix24:" in vendor and " event crm:bitrix24:" in order
        assert "+375" not in runtime_log(runtime)  # ids, source and type only: no body


def test_a_consumer_whose_process_dies_on_every_record_shows_failing_with_its_crashes(
    functions_copy: Path, tmp_path: Path
) -> None:
    (functions_copy / "store" / "app.py").write_text(
        '"""The store consumer, dying on purpose."""\nimport os\n\n\n'
        "def lambda_handler(event, context):\n    os._exit(3)\n"
    )
    runtime = store_runtime(tmp_path, functions_dir=functions_copy)
    with runtime:
        pipeline = Pipeline(runtime)
        say_hi(pipeline)

        def crashed_line() -> str | None:
            line = next(line for line in runtime.status_lines() if line.startswith("store "))
            return line if "crashes 1" in line else None

        line = wait_for(crashed_line, 30, "store's crash counted")
        assert "failing" in line and "last process exited with code 3" in line
        assert runtime.status()["store"]["failing"] is True


USER_BOT = '''"""A user's bot, as README's "Bring your python-telegram-bot bot" places it."""
from telegram.ext import CommandHandler


async def start(update, context):
    await update.message.reply_text("Hello from mybot, version {version}.")


def build(builder):
    application = builder.build()
    application.add_handler(CommandHandler("start", start))
    return application
'''


def test_editing_the_users_bot_module_restarts_the_bot_worker_with_the_new_code(
    functions_copy: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """functions/mybot/main.py is not the bot consumer's package (`bot`): the bot worker imported it
    at its first update and said so, so saving it restarts the worker (issue 22)."""
    user_bot = functions_copy / "mybot" / "main.py"
    user_bot.parent.mkdir()
    (user_bot.parent / "__init__.py").write_text("")
    user_bot.write_text(USER_BOT.format(version=1))
    # The synth's check (infra.config) looks for the module under functions/: here, the copy.
    monkeypatch.setattr(infra.config, "FUNCTIONS_DIR", functions_copy)
    settings = LocalSettings.from_cdk_json().with_bot("mybot.main:build")  # python -m local --bot
    runtime = Runtime(
        ports=Ports(),
        settings=settings,
        state_dir=tmp_path / "state",
        consumers=(dataclasses.replace(by_name("bot"), timeout_seconds=SHORT_BOT_TIMEOUT_SECONDS),),
        reload=True,
        functions_dir=functions_copy,
    )
    with runtime:
        pipeline = Pipeline(runtime)
        ann = user(7201, "Ann")

        def start_and_read_reply(update_id: int) -> str:
            update = {"update_id": update_id, "message": message(update_id, private_chat(ann), ann, "/start")}
            assert pipeline.send_update(update) == 200
            replies = len(sent_texts(bot_calls(pipeline, 7201)))
            texts = wait_for(
                lambda: (texts := sent_texts(bot_calls(pipeline, 7201))) and len(texts) > replies and texts,
                60,
                "the bot's reply",
            )
            return texts[-1]

        assert start_and_read_reply(7201) == "Hello from mybot, version 1."
        restarts_before = runtime.status()["bot"]["restarts"]

        user_bot.write_text(USER_BOT.format(version=2))
        later = time.time() + 5  # a different mtime even on a coarse clock
        os.utime(user_bot, (later, later))
        reloaded = wait_for(lambda: line_with(runtime, "reloaded bot"), 30, "the bot's reload line")
        assert "reloaded bot (functions/mybot/main.py changed)" in reloaded
        assert line_with(runtime, "reloaded webhook") is None

        assert start_and_read_reply(7202) == "Hello from mybot, version 2."
        assert runtime.status()["bot"]["restarts"] == restarts_before  # restarted on purpose, not a crash
