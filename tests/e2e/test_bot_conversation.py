"""Issue 14: the example python-telegram-bot bot (functions/bot/examples/lead_bot.py) as the
`bot` consumer, through the local HTTP endpoint, in a pipeline of its own (`bot_pipeline`).

Its conversation (/start -> shared contact -> [Yes]) completes, also when its worker process
dies in the middle of a step (the Telegram stand-in's `/_crash_after`: right after a journaled
sendMessage answer, before the step's state is committed): every reply is sent once, no step is
lost, and every call it made is a valid Bot API call (aiogram's models). Beside it runs the `crm`
consumer (on by default), which makes the contact's lead at /start; issue 22: the conversation
still ends with one lead in the CRM stand-in, carrying the phone it collected.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from local.demo import telegram_updates
from local.fakes.telegram import API_METHODS, strict_refusal
from local.policy_check import StackSynthesis, check_directory, read_recorded
from pipeline.observability import mask_phones
from pipeline.telegram_bot.state import conversation_key
from tests.e2e.browser import cells, chromium, console_of, opened_page, origin, screenshot
from tests.e2e.support import (
    SENT_PHONES,
    Ids,
    Pipeline,
    callback_query,
    contact_message,
    http,
    message,
    phone_number,
    private_chat,
    user,
    wait_for,
)

pytestmark = pytest.mark.minutes(2)  # started first (tests/conftest.py)

BOT_SCENARIO = 41
CRASH_SCENARIO = 42
POISON_SCENARIO = 43
RACE_SCENARIO = 44
CONSOLE_SCENARIO = 48
ASK_PHONE = "Hi! Share your phone number and we will call you back."
THANKS = "Thanks, we will call you soon."
# A crashed step comes back after the queue's visibility timeout (6x the bot's timeout).
REPLAY_TIMEOUT_SECONDS = 120.0


def form_params(body: Any) -> dict[str, Any]:
    """A recorded form-encoded call's parameters, JSON values decoded as Telegram does."""
    params = dict(body or {})
    for name, value in params.items():
        if isinstance(value, str) and value[:1] in ("[", "{"):
            params[name] = json.loads(value)
    return params


def bot_calls(pipeline: Pipeline, chat_id: int) -> list[tuple[str, dict[str, Any]]]:
    """(method, parameters) of each successful call the bot made about this chat, in order."""
    calls = []
    for call in pipeline.fake("telegram").calls("/bot"):
        method = call["path"].rsplit("/", 1)[-1]
        params = form_params(call["body"])
        if (call["fault"] is None and str(params.get("chat_id", "")) == str(chat_id)) or (
            call["fault"] is None
            and method == "answerCallbackQuery"
            and str(params.get("callback_query_id", "")).endswith(f"-{chat_id}")
        ):
            calls.append((method, params))
    return calls


def sent_texts(calls: list[tuple[str, dict[str, Any]]]) -> list[str]:
    return [params["text"] for method, params in calls if method in ("sendMessage", "editMessageText")]


def leads_for(pipeline: Pipeline, user_id: int) -> list[dict[str, Any]]:
    """The leads created for this user, as they stand in the CRM stand-in now (updates applied)."""
    status, leads = http("GET", f"{pipeline.fake('crm').url}/_leads")
    assert status == 200
    return [lead for lead in leads.values() if lead["telegram_user_id"] == user_id]


def conversation_state(pipeline: Pipeline, user_id: int) -> Any:
    item = pipeline.item("bot_state", {"pk": conversation_key("lead", (user_id, user_id))})
    return None if item is None else json.loads(item["data"])


class Conversation:
    def __init__(self, pipeline: Pipeline, scenario: int) -> None:
        self.pipeline, self.ids = pipeline, Ids(scenario)
        self.sender = user(self.ids.number(), "Lead")
        self.phone = phone_number(scenario, 1)
        SENT_PHONES.add(self.phone)
        self.event_ids: list[str] = []

    @property
    def chat_id(self) -> int:
        return int(self.sender["id"])

    def send(self, update_body: dict[str, Any], kind: str = "message") -> None:
        update = {"update_id": self.ids.update_id(), kind: update_body}
        assert self.pipeline.send_update(update) == 200
        self.event_ids.append(self.pipeline.event_id(update))

    def start(self) -> None:
        self.send(message(self.ids.number(), private_chat(self.sender), self.sender, "/start"))

    def share_contact(self) -> None:
        self.send(contact_message(self.ids.number(), self.sender, self.phone))

    def press_yes(self) -> None:
        query = callback_query(f"{self.ids.number()}-{self.chat_id}", self.sender, self.ids.number())
        query["data"] = "confirm"
        self.send(query, kind="callback_query")

    def wait_for_texts(self, count: int, timeout: float = 60.0) -> list[str]:
        return wait_for(
            lambda: (
                (texts := sent_texts(bot_calls(self.pipeline, self.chat_id)))
                and len(texts) >= count
                and texts
            ),
            timeout,
            f"{count} bot replies",
        )

    def wait_for_the_crm_claim(self) -> None:
        """The crm consumer's queue is a standard one: under load its /start can come after the
        contact (then the contact's lead is the one made, with the trigger "contact"). Tests that
        check the /start lead wait for the crm consumer's claim of the contact at /start first."""
        wait_for(
            lambda: self.pipeline.item("journal", {"id": f"contact#{self.chat_id}"}),
            timeout=60,
            what="the crm consumer's claim of the contact at /start",
        )

    def wait_for_state(self, state: Any, timeout: float) -> None:
        wait_for(
            lambda: conversation_state(self.pipeline, self.chat_id) == state or None,
            timeout,
            f"conversation state {state}",
        )


def assert_valid_bot_api_calls(calls: list[tuple[str, dict[str, Any]]]) -> None:
    for method, params in calls:
        refusal = strict_refusal(API_METHODS[method.lower()]["name"], params)
        assert refusal is None, f"{method}: {refusal}"


def assert_completed_once(chat: Conversation) -> None:
    calls = bot_calls(chat.pipeline, chat.chat_id)
    assert [method for method, _ in calls] == [
        "sendMessage",
        "sendMessage",
        "sendMessage",
        "answerCallbackQuery",
        "editMessageText",
    ]
    assert sent_texts(calls) == [ASK_PHONE, "Got it.", f"Shall we call you at {chat.phone}?", THANKS]
    assert_valid_bot_api_calls(calls)
    # One lead, made by the crm consumer at /start, with the phone the conversation collected.
    [lead] = leads_for(chat.pipeline, chat.chat_id)
    assert lead["trigger"] == "start"
    has_the_phone = lead["phone"] == chat.phone  # compared apart: a failure prints no number
    assert has_the_phone, "the lead has no phone, or another one"
    assert conversation_state(chat.pipeline, chat.chat_id) is None  # ended


def test_the_example_bot_completes_its_conversation_and_creates_one_lead(bot_pipeline: Pipeline) -> None:
    chat = Conversation(bot_pipeline, BOT_SCENARIO)
    chat.start()
    chat.wait_for_texts(1)
    chat.wait_for_state(0, timeout=30)
    chat.wait_for_the_crm_claim()
    chat.share_contact()
    chat.wait_for_texts(3)
    chat.wait_for_state(1, timeout=30)
    chat.press_yes()
    chat.wait_for_texts(4)
    assert bot_pipeline.runtime.wait_until_drained(timeout=60)
    assert_completed_once(chat)


def test_the_bots_phone_reaches_the_lead_while_the_crm_consumer_is_still_creating_it(
    bot_pipeline: Pipeline,
) -> None:
    """Two consumers of one stream: the CRM holds the crm consumer's /start lead for 6 s, and
    the conversation is over before it answers. The bot's [Yes] waits (retried) for the lead;
    the end state is still one lead with the phone."""
    chat = Conversation(bot_pipeline, RACE_SCENARIO)
    bot_pipeline.fake("crm").inject(hang_next=1, seconds=6, match="/leads")
    chat.start()
    chat.wait_for_state(0, timeout=30)
    # The scenario is the contact arriving while /start's lead is being made.
    chat.wait_for_the_crm_claim()
    chat.share_contact()
    chat.wait_for_state(1, timeout=30)
    record = bot_pipeline.item("journal", {"id": f"contact#{chat.chat_id}"})
    assert record is not None and record["status"] == "pending"  # the lead is not made yet
    chat.press_yes()
    chat.wait_for_texts(4, timeout=60)
    assert bot_pipeline.runtime.wait_until_drained(timeout=60)
    assert_completed_once(chat)


def test_a_bot_worker_crash_mid_step_repeats_no_reply_and_loses_no_step(bot_pipeline: Pipeline) -> None:
    chat = Conversation(bot_pipeline, CRASH_SCENARIO)
    telegram = bot_pipeline.fake("telegram")
    restarts = int(bot_pipeline.status()["bot"]["restarts"])
    assert bot_pipeline.status()["bot"]["workers"] == 3  # the step is replayed by any of them
    chat.start()
    chat.wait_for_state(0, timeout=30)
    chat.wait_for_the_crm_claim()
    # The contact step sends "Got it." then the question: die right after the question's answer
    # is journaled, before the step's new state is committed.
    status, _ = http(
        "POST",
        f"{telegram.url}/_crash_after",
        json.dumps({"method": "sendMessage", "nth": 2}).encode(),
        {"Content-Type": "application/json"},
    )
    assert status == 200
    chat.share_contact()
    chat.wait_for_texts(3)
    wait_for(
        lambda: int(bot_pipeline.status()["bot"]["restarts"]) > restarts or None, 30, "the bot worker's crash"
    )
    assert conversation_state(bot_pipeline, chat.chat_id) == 0  # the crashed step did not commit
    # The user presses "Yes" at once, while the crashed step waits out its visibility timeout:
    # the chat's FIFO group holds the button press behind it. Redelivered, the step runs again
    # from the journal, then the press finds the conversation in its confirm state.
    chat.press_yes()
    chat.wait_for_texts(4, timeout=REPLAY_TIMEOUT_SECONDS)
    assert bot_pipeline.runtime.wait_until_drained(timeout=60)
    assert_completed_once(chat)


def test_the_console_shows_a_conversation_its_masked_phone_and_each_step_s_calls_in_a_browser(
    bot_pipeline: Pipeline,
) -> None:
    """The ops console's Bot conversations page (docs/operate.md), in Chromium, mid-conversation: the
    conversation's state, the user's data with the phone masked, each step's Bot API calls."""
    chat = Conversation(bot_pipeline, CONSOLE_SCENARIO)
    chat.start()
    chat.wait_for_state(0, timeout=30)
    chat.wait_for_the_crm_claim()
    chat.share_contact()
    chat.wait_for_texts(3)
    chat.wait_for_state(1, timeout=30)
    start_event, contact_event = chat.event_ids
    with console_of(bot_pipeline) as url, chromium() as browser, opened_page(browser, url) as page:
        conversation_page = f"{origin(page.url)}/bot?chat={chat.chat_id}"

        def both_steps_shown() -> bool:
            page.goto(conversation_page)
            return bool(cells(page, start_event) and cells(page, contact_event))

        wait_for(both_steps_shown, 60, "the console to show both steps", interval=1.0)
        assert page.locator("h2").inner_text() == "Bot conversations"
        assert cells(page, start_event)[1::2] == ["message", "sendMessage (200)"]
        assert cells(page, contact_event)[1::2] == ["message", "sendMessage (200), sendMessage (200)"]
        assert cells(page, conversation_key("lead", (chat.chat_id, chat.chat_id)))[1] == "1"
        [user_data] = cells(page, f"user#{chat.chat_id}")[1:]
        assert mask_phones(chat.phone) in user_data
        assert chat.phone not in page.content()
        screenshot(page, "bot-conversation")
    chat.press_yes()
    chat.wait_for_texts(4)
    assert bot_pipeline.runtime.wait_until_drained(timeout=60)
    assert_completed_once(chat)


def test_the_demo_updates_leave_the_example_bot_nothing_to_dead_letter(bot_pipeline: Pipeline) -> None:
    """`make demo`'s scripted Telegram updates (edits, a group, a callback, a channel post...)
    reach the example bot as in `make local`: none fails or is dead-lettered."""
    before, dead_letters_before = bot_pipeline.status()["bot"], bot_pipeline.dlq_depth("bot")
    updates = telegram_updates(first_update_id=4_100_000)
    for _, update in updates:
        assert bot_pipeline.send_update(update) == 200
    assert bot_pipeline.runtime.wait_until_drained(timeout=60)
    after = bot_pipeline.status()["bot"]
    # Its resends (the same update_id) are dropped at the FIFO topic: each update once.
    assert after["processed"] - before["processed"] == len({u["update_id"] for _, u in updates})
    assert (after["retried"], after["dead_lettered"]) == (before["retried"], before["dead_lettered"])
    assert bot_pipeline.dlq_depth("bot") == dead_letters_before


def test_a_refused_reply_dead_letters_its_update_and_the_alarm_topic_names_its_chat(
    bot_pipeline: Pipeline,
) -> None:
    chat = Conversation(bot_pipeline, POISON_SCENARIO)
    notices = bot_pipeline.subscribe_to_alarms("bot-alarm-inbox")
    # Telegram refuses the bot's reply for good (400): the update is poison, dead-lettered at once.
    bot_pipeline.fake("telegram").inject(fail_next=1, status=400, match=f"chat_id={chat.chat_id}&")
    start = message(chat.ids.number(), private_chat(chat.sender), chat.sender, "/start")
    update = {"update_id": chat.ids.update_id(), "message": start}
    assert bot_pipeline.send_update(update) == 200
    event_id = bot_pipeline.event_id(update)
    group = f"telegram:{bot_pipeline.settings.telegram_bot_id}:chat:{chat.chat_id}"
    wait_for(notices, 60, "the dead letter's notice")
    assert bot_pipeline.runtime.wait_until_drained(timeout=60)

    [letter] = [m for m in bot_pipeline.dlq_messages("bot") if json.loads(m["Body"])["event_id"] == event_id]
    reason = letter["MessageAttributes"]["dead_letter_reason"]["StringValue"]
    assert reason.startswith("telegram sendMessage: HTTP 400 ")
    [notice] = [n for n in notices() if event_id in n["Subject"]]
    assert notice["Subject"] == f"bot: chat {group} dead-lettered update {event_id}"
    assert f"chat (message group): {group}" in notice["Message"]
    assert f"update type: {json.loads(letter['Body'])['type']}" in notice["Message"]
    assert f"reason: {reason}" in notice["Message"]
    assert "/start" not in notice["Message"]  # never the update itself


@pytest.mark.after_scenarios
def test_every_aws_call_of_the_bot_is_allowed_by_its_role_in_the_synthesized_stack(
    bot_pipeline: Pipeline, tmp_path_factory: pytest.TempPathFactory
) -> None:
    runtime = bot_pipeline.runtime
    assert runtime.resources is not None
    synthesis = StackSynthesis(runtime.resources.deployment, tmp_path_factory.mktemp("cdk-e2e-bot"))
    try:
        template = synthesis.template()
    finally:
        synthesis.stop()
    report = check_directory(
        template,
        runtime.aws_calls_dir,
        runtime.function_environments(runtime.resources),
        region=runtime.settings.region,
        stack_name=runtime.settings.stack_name,
    )
    assert report.ok, report.text()
    assert "bot" in report.functions
    # Issue 23: the functions this pipeline runs are granted nothing no call used (or explained).
    assert report.unexplained(sorted(runtime.functions)) == [], report.text()
    # Among the calls allowed: the poison scenario's notice on the alarm topic (and, implied, its
    # KMS key's actions).
    assert any(
        (check.function, check.action, check.resource)
        == ("bot", "sns:Publish", runtime.resources.alarm_topic_arn)
        for check in read_recorded(runtime.aws_calls_dir).checks
    )
