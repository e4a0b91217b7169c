"""The DynamoDB persistence against python-telegram-bot's documented `BasePersistence` contract
(issue 40): the bot consumer's real handler runs a real `Application` (tests/unit/consumers/
data_bot.py) against the Telegram stand-in and moto's DynamoDB; each test reads the table."""

from __future__ import annotations

import asyncio
import itertools
import json
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from telegram.ext import ApplicationBuilder

from local.fakes.telegram import TelegramFake
from pipeline import aws
from pipeline.telegram_bot.persistence import DynamoDBPersistence
from pipeline.telegram_bot.state import STATE_SCHEMA_VERSION, StateTable
from tests.unit.consumer_support import BOT_STATE_TABLE, telegram_envelope, telegram_update
from tests.unit.consumers.conftest import BOT_TOKEN, DeployedConsumer

DATA_BOT = "tests.unit.consumers.data_bot:build"
GROUP = -4012345678
SUPERGROUP = -1004012345678
JONAS = 987654321  # in the group
ANNA = 123456789  # in her private chat with the bot
_update_ids = itertools.count(920001)


def message(chat_id: int, text: str | None = None, **fields: Any) -> dict[str, Any]:
    """A message update in `chat_id` (a group; Anna's private chat for ANNA)."""
    update = telegram_update("private_start" if chat_id == ANNA else "group_command")
    update["update_id"] = next(_update_ids)
    body = update["message"]
    body.pop("text"), body.pop("entities")
    if chat_id != ANNA:
        kind = "supergroup" if chat_id == SUPERGROUP else "group"
        body["chat"] = {"id": chat_id, "title": "Shop Team", "type": kind}
    if text is not None:
        body["text"] = text
        body["entities"] = [{"offset": 0, "length": len(text.split()[0]), "type": "bot_command"}]
    body.update(fields)
    return update


def stored(pk: str) -> Any:
    return StateTable(BOT_STATE_TABLE).get(pk).value


def written_elsewhere(pk: str, value: Any) -> None:
    """Another instance's commit of `pk` (the table's own conditional write)."""
    table = StateTable(BOT_STATE_TABLE)
    table.commit({pk: (json.dumps(value), table.get(pk).version)}, "elsewhere")


def replies(telegram: TelegramFake) -> list[str]:
    calls = [c for c in telegram.calls() if c["fault"] is None]
    return [c["body"]["text"] for c in calls if c["path"].endswith("/sendMessage")]


@pytest.fixture
def bot(deploy_bot: Callable[[str], DeployedConsumer]) -> DeployedConsumer:
    return deploy_bot(DATA_BOT)


def deliver(bot: DeployedConsumer, update: dict[str, Any]) -> None:
    assert bot.deliver(telegram_envelope(update)).failed == []


def test_migrate_chat_data_moves_the_group_s_data_to_the_supergroup_in_the_table(
    bot: DeployedConsumer,
) -> None:
    deliver(bot, message(GROUP, "/note hello"))
    assert stored(f"chat#{GROUP}") == {"note": "hello"}
    # Another instance moved the group's data on: the migration moves what is stored now.
    written_elsewhere(f"chat#{GROUP}", {"note": "newer"})

    deliver(bot, message(GROUP, migrate_to_chat_id=SUPERGROUP))

    assert stored(f"chat#{SUPERGROUP}") == {"note": "newer"}
    assert stored(f"chat#{GROUP}") is None
    bot.app.runner.__init__()  # a cold instance finds it under the new id
    deliver(bot, message(SUPERGROUP, "/count"))
    assert stored(f"chat#{SUPERGROUP}") == {"note": "newer", "count": 1, "seen": 1}


def test_data_marked_for_update_persistence_reaches_the_table(bot: DeployedConsumer) -> None:
    deliver(bot, message(GROUP, "/count"))
    deliver(bot, message(ANNA, f"/tell {GROUP} meet at five"))
    assert stored(f"chat#{GROUP}") == {"count": 1, "seen": 1, "note": "meet at five"}


def test_drop_chat_data_deletes_the_item(bot: DeployedConsumer) -> None:
    deliver(bot, message(GROUP, "/note hello"))
    deliver(bot, message(ANNA, "/note mine"))
    deliver(bot, message(ANNA, f"/forgetchat {GROUP}"))  # another chat's
    assert stored(f"chat#{GROUP}") is None
    deliver(bot, message(ANNA, f"/forgetchat {ANNA}"))  # the update's own chat
    assert stored(f"chat#{ANNA}") is None


def test_drop_user_data_deletes_the_item(bot: DeployedConsumer) -> None:
    deliver(bot, message(GROUP, "/note hello"))
    deliver(bot, message(ANNA, "/note mine"))
    assert stored(f"user#{JONAS}") == {"notes": 1}
    deliver(bot, message(ANNA, f"/forgetuser {JONAS}"))  # another user's
    assert stored(f"user#{JONAS}") is None
    deliver(bot, message(ANNA, f"/forgetuser {ANNA}"))  # the update's own user
    assert stored(f"user#{ANNA}") is None


def test_a_failed_step_s_drop_reaches_neither_the_table_nor_the_next_update(bot: DeployedConsumer) -> None:
    """PTB keeps what a handler dropped for the next `update_persistence`; the failed step's
    changes are discarded, and its drop must not be carried into the next update's commit."""
    deliver(bot, message(GROUP, "/note hello"))
    assert bot.deliver(telegram_envelope(message(ANNA, f"/forgetbroken {GROUP}"))).failed != []
    assert stored(f"chat#{GROUP}") == {"note": "hello"}
    deliver(bot, message(GROUP, "/count"))  # the same warm instance's next update (Anna's waits)
    assert stored(f"chat#{GROUP}") == {"note": "hello", "count": 1, "seen": 1}


def test_another_chat_s_data_is_what_the_table_holds_now(
    bot: DeployedConsumer, telegram: TelegramFake
) -> None:
    """PTB's `get_chat_data` contract (the stored data, not an empty dict), read per id on use."""
    deliver(bot, message(GROUP, "/note hello"))
    written_elsewhere(f"chat#{GROUP}", {"note": "newer"})
    deliver(bot, message(ANNA, f"/peek {GROUP}"))  # warm: not the copy this instance read before
    bot.app.runner.__init__()
    deliver(bot, message(ANNA, f"/peek {GROUP}"))  # cold
    assert replies(telegram) == ["note: newer", "note: newer"]


def test_items_carry_their_schema_version_and_items_without_one_are_read(
    bot: DeployedConsumer, telegram: TelegramFake
) -> None:
    aws.client("dynamodb").put_item(  # written before schema versions: version 0
        TableName=BOT_STATE_TABLE,
        Item={"pk": {"S": f"chat#{GROUP}"}, "data": {"S": '{"note": "old"}'}, "version": {"N": "4"}},
    )
    deliver(bot, message(ANNA, f"/peek {GROUP}"))
    deliver(bot, message(ANNA, f"/tell {GROUP} new"))
    assert replies(telegram) == ["note: old"]
    key = {"pk": {"S": f"chat#{GROUP}"}}
    item = aws.client("dynamodb").get_item(TableName=BOT_STATE_TABLE, Key=key)["Item"]
    assert item["schema_version"] == {"N": str(STATE_SCHEMA_VERSION)} and item["version"] == {"N": "5"}


def test_an_item_of_a_newer_schema_version_is_refused_with_its_reason(bot: DeployedConsumer) -> None:
    aws.client("dynamodb").put_item(
        TableName=BOT_STATE_TABLE,
        Item={
            "pk": {"S": f"chat#{GROUP}"},
            "data": {"S": "{}"},
            "version": {"N": "1"},
            "schema_version": {"N": str(STATE_SCHEMA_VERSION + 1)},
        },
    )
    bot.deliver(telegram_envelope(message(GROUP, "/count")))
    [reason] = bot.dead_letter_reasons()
    assert "bot_state has schema_version 2; this code reads 0 to 1" in reason


def test_a_flush_outside_an_update_writes_what_is_staged(
    moto_aws: None, telegram: TelegramFake, monkeypatch: pytest.MonkeyPatch
) -> None:
    """PTB's `Application.shutdown` (and `stop`) run `update_persistence` and then `flush`."""
    monkeypatch.setenv("BOT_STATE_TABLE", BOT_STATE_TABLE)
    persistence = DynamoDBPersistence(StateTable(BOT_STATE_TABLE))

    async def run() -> None:
        application = (
            ApplicationBuilder()
            .token(BOT_TOKEN)
            .base_url(f"{telegram.url}/bot")
            .updater(None)
            .job_queue(None)
            .persistence(persistence)
            .build()
        )
        await application.initialize()
        application.chat_data[GROUP]["note"] = "at shutdown"
        application.mark_data_for_update_persistence(chat_ids=GROUP)
        application.drop_user_data(JONAS)
        await application.shutdown()

    written_elsewhere(f"user#{JONAS}", {"notes": 3})
    asyncio.run(run())
    assert stored(f"chat#{GROUP}") == {"note": "at shutdown"}
    assert stored(f"user#{JONAS}") is None


def test_the_ptb_internals_begin_replaces_are_those_of_the_pinned_version(bot: DeployedConsumer) -> None:
    """`DynamoDBPersistence.begin` replaces Application's private `_chat_data`/`_user_data` (and
    their read-only views), which `migrate_chat_data`, `drop_*_data` and `update_persistence`
    use, as in 22.8."""
    import telegram as ptb

    from pipeline.telegram_bot.persistence import StoredData

    assert ptb.__version__ == "22.8"
    deliver(bot, message(GROUP, "/note hello"))
    application = bot.app.runner.engine._application
    assert isinstance(application._chat_data, StoredData) and isinstance(application._user_data, StoredData)
    assert application.chat_data[GROUP] is application._chat_data[GROUP] == {"note": "hello"}
    assert application.user_data[JONAS] is application._user_data[JONAS] == {"notes": 1}


# The generated sequences' steps: (chat the message comes from, its text or a migration).
STEPS = [
    (GROUP, "/note g"),
    (GROUP, "/count"),
    (SUPERGROUP, "/note s"),
    (SUPERGROUP, "/count"),
    (ANNA, "/note a"),
    (ANNA, f"/tell {GROUP} from anna"),
    (ANNA, f"/tell {SUPERGROUP} from anna"),
    (ANNA, f"/forgetchat {GROUP}"),
    (ANNA, f"/forgetchat {SUPERGROUP}"),
    (ANNA, f"/forgetuser {JONAS}"),
    (GROUP, f"/forgetuser {ANNA}"),
    (GROUP, "migrate_to"),  # the old group's service message
    (SUPERGROUP, "migrate_from"),  # the supergroup's
]


def step_update(chat_id: int, text: str) -> dict[str, Any]:
    if text == "migrate_to":
        return message(chat_id, migrate_to_chat_id=SUPERGROUP)
    if text == "migrate_from":
        return message(chat_id, migrate_from_chat_id=GROUP)
    return message(chat_id, text)


def reference_data(telegram: TelegramFake, updates: list[dict[str, Any]]) -> dict[str, Any]:
    """What PTB itself holds after `updates`: one Application in memory, no persistence."""
    from telegram import Update

    from tests.unit.consumers.data_bot import build

    async def run() -> dict[str, Any]:
        builder = ApplicationBuilder().token(BOT_TOKEN).base_url(f"{telegram.url}/bot")
        application = build(builder.updater(None).job_queue(None))
        await application.initialize()
        for update in updates:
            await application.process_update(Update.de_json(update, application.bot))
        await application.shutdown()
        kept = {f"chat#{k}": dict(v) for k, v in application.chat_data.items() if v}
        return kept | {f"user#{k}": dict(v) for k, v in application.user_data.items() if v}

    return asyncio.run(run())


def table_data() -> dict[str, Any]:
    items = aws.client("dynamodb").scan(TableName=BOT_STATE_TABLE)["Items"]  # the test's view
    return {
        i["pk"]["S"]: json.loads(i["data"]["S"]) for i in items if i["pk"]["S"].startswith(("chat#", "user#"))
    }


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    steps=st.lists(st.tuples(st.sampled_from(STEPS), st.integers(0, 2)), min_size=1, max_size=8),
)
@example(steps=[((GROUP, "/note g"), 0), ((GROUP, "migrate_to"), 1)])
@example(steps=[((GROUP, "/count"), 0), ((ANNA, f"/tell {GROUP} from anna"), 1), ((GROUP, "/count"), 0)])
def test_the_table_holds_what_ptb_itself_holds_after_any_sequence_on_any_instances(
    bot: DeployedConsumer, telegram: TelegramFake, steps: list[tuple[tuple[int, str], int]]
) -> None:
    """Each update run by one of two warm instances or a cold one (2); afterwards the table holds
    the chat and user data one in-memory PTB Application holds after the same updates."""
    from pipeline.telegram_bot.runner import BotRunner

    for item in aws.client("dynamodb").scan(TableName=BOT_STATE_TABLE)["Items"]:
        aws.client("dynamodb").delete_item(TableName=BOT_STATE_TABLE, Key={"pk": item["pk"]})
    instances = [BotRunner(), BotRunner()]
    updates = []
    for (chat_id, text), instance in steps:
        update = step_update(chat_id, text)
        updates.append(update)
        runner = instances[instance] if instance < 2 else BotRunner()
        runner.process(telegram_envelope(update).envelope)
    assert table_data() == reference_data(telegram, updates)
