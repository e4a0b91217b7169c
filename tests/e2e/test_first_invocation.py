"""A function's first invocation builds no AWS client and imports no module: its init made them.

Lambda runs a function's init at a full vCPU and each invocation at the memory's share of one
(1,769 MB a vCPU: the webhook's 512 MB about 0.29, a consumer's 256 MB 0.14), so a client or a
module a first invocation builds costs it several times what it costs the init (`pipeline.aws`).
The function host reports, per invocation, the botocore clients the handler's thread built and
the modules it imported (`local.lambda_host.Invocation`). Every function the scenario reaches is
restarted first (a new execution environment), so each report read here is of a first invocation,
on the stack's default configuration, as `make local` runs it.
"""

from __future__ import annotations

from typing import Any

from local.overlay import LOCAL_BOT_APPLICATION
from tests.e2e.support import (
    SENT_PHONES,
    Ids,
    Pipeline,
    answered,
    order_status_changed,
    phone_number,
    user,
    wait_for,
)
from tests.e2e.test_bot_conversation import Conversation
from tests.e2e.test_pipeline import (
    END_USER_MESSAGING,
    TELEGRAM_CONSUMERS,
    send_all,
    start,
    wait_for_effects,
)

FIRST_INVOCATION = 81


def loaded_on_first_use(module: str) -> bool:
    """What a first invocation may still import, each well under a millisecond: a codec the
    standard library loads when a text is first encoded in it (`encodings.utf_16_le`: Telegram
    counts text in UTF-16 units), and libphonenumber's numbering data of one region, which it
    loads with the first number of that region (the default region's is loaded at the init).
    Nothing of ours, of Powertools or of the SDK."""
    return module.startswith(("encodings.", "phonenumbers.data.region_", "phonenumbers.data.alt_format_"))


def test_a_first_invocation_builds_no_client_and_imports_nothing(pipeline: Pipeline) -> None:
    runtime, ids = pipeline.runtime, Ids(FIRST_INVOCATION)
    consumers = [name for name in (*TELEGRAM_CONSUMERS, "sms") if name in runtime.children]
    assert {"autoreply", "store", "sms"} <= set(consumers), "the default stack's reply and SMS paths"
    names = ["webhook", *consumers]
    heard: dict[str, list[dict[str, Any]]] = {name: [] for name in names}
    for name in names:
        runtime.on_status(name, heard[name].append)
    runtime.restart_functions(*names)

    sent = [start(ids, user(ids.number()))]
    phone = phone_number(FIRST_INVOCATION, 1)
    SENT_PHONES.add(phone)
    order_id = f"E2E-{FIRST_INVOCATION}-1"
    send_all(pipeline, sent)
    event = order_status_changed(f"evt-e2e-{FIRST_INVOCATION}-1", order_id, "ready_for_pickup", "paid", phone)
    assert pipeline.send_crm_event(event) == 200
    wait_for_effects(pipeline, sent, timeout=30)
    wait_for(lambda: answered(END_USER_MESSAGING.sends(pipeline, order_id)), 30, "the order SMS")
    assert runtime.wait_until_drained(timeout=30)

    def first_invocation(name: str) -> dict[str, Any]:
        reports = [message for message in heard[name] if message["event"] == "invocation"]
        assert reports, f"{name} was not invoked"
        return reports[0]

    work = {name: first_invocation(name) for name in names}
    assert all(report["failed"] == 0 for report in work.values()), work
    extra = {
        name: (
            report["clients_built"],
            [module for module in report["imported"] if not loaded_on_first_use(module)],
        )
        for name, report in work.items()
    }
    assert extra == {name: (0, []) for name in names}
    # Each report is of the handler's own thread: it did its work there.
    assert all(report["cpu_ms"] > 0 for report in work.values())


BOT_FIRST_INVOCATION = 82


def test_the_bots_first_update_builds_no_client_and_imports_only_the_teams_module(
    bot_pipeline: Pipeline,
) -> None:
    """The example bot, as `make local` runs it: its first update builds the team's Application
    with the token it reads then (an AWS call, which no init makes), so it imports the team's
    module; python-telegram-bot, the Bot API request (`pipeline.telegram_bot.transport`) with its
    TLS context, the clients and the event loop are the init's (`BotEngine.prepare`)."""
    runtime = bot_pipeline.runtime
    heard: list[dict[str, Any]] = []
    runtime.on_status("bot", heard.append)
    runtime.restart_functions("webhook", "bot")
    # "bot.examples.lead_bot": its packages below the handler's own (`bot`), and itself.
    parts = LOCAL_BOT_APPLICATION.partition(":")[0].split(".")
    team_modules = {".".join(parts[:depth]) for depth in range(2, len(parts) + 1)}

    chat = Conversation(bot_pipeline, BOT_FIRST_INVOCATION)
    chat.start()
    chat.wait_for_texts(1)
    assert runtime.wait_until_drained(timeout=60)

    first = next(message for message in heard if message["event"] == "invocation")
    assert first["failed"] == 0 and first["clients_built"] == 0
    imported = [module for module in first["imported"] if not loaded_on_first_use(module)]
    assert set(imported) == team_modules
