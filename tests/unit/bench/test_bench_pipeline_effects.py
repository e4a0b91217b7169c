"""The pipeline benchmark waits for what the registry routes each update to and the consumer acts on.

`bench.pipeline.expected_effects` decides it per update: the enabled consumers whose filter
policy (`pipeline.registry.matches`) takes the attributes the webhook publishes the update with,
and of those, the ones whose own rule acts on it (ai's `to_analyze`, autoreply's `message_reply`,
crm's `lead_from_envelope`), each read in its consumer's environment. A rule changed in the
registry or in a consumer changes what the benchmark waits for, instead of making it wait forever.
No runtime is started here and no timing is asserted.
"""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from bench.common import telegram_message, telegram_start
from bench.pipeline import EFFECTS, SAMPLE_TEXTS, expected_effects
from pipeline.registry import Consumer, enabled

BOT_ID = "7000000001"
# The benchmark's stack: cdk.json's defaults, where the local runtime runs `ai` on the Bedrock
# fake (a model id) and `crm` on the CRM stand-in (`crm_leads`), and the canned `autoreply`
# answers (no `bot_application`).
STACK = enabled({"bedrock_model_id": "anthropic.claude-3-haiku-20240307-v1:0", "crm_leads": True})
QUESTION = "How much does delivery to Berlin cost?"


def with_policy(consumers: tuple[Consumer, ...], name: str, **policy: list[str]) -> tuple[Consumer, ...]:
    """The registry with one consumer's filter policy narrowed (a future rule change)."""
    return tuple(
        replace(c, filter_policy={**c.filter_policy, **policy}) if c.name == name else c for c in consumers
    )


def test_a_bare_start_is_not_expected_to_be_analysed_by_ai() -> None:
    """ai receives /start (its filter policy takes every message) but does not send it to Bedrock."""
    assert expected_effects(telegram_start(1, 501), STACK, BOT_ID) == ("store", "autoreply", "crm")


def test_a_new_user_s_question_is_analysed_and_gets_no_canned_reply() -> None:
    assert expected_effects(telegram_message(2, 502, QUESTION), STACK, BOT_ID) == ("store", "ai", "crm")


def test_a_consumer_the_registry_does_not_route_the_update_to_is_not_expected() -> None:
    groups_only = with_policy(STACK, "ai", chat_type=["group", "supergroup"])
    callbacks_only = with_policy(STACK, "crm", type=["callback_query"])

    assert expected_effects(telegram_message(3, 503, QUESTION), groups_only, BOT_ID) == ("store", "crm")
    assert expected_effects(telegram_start(4, 504), callbacks_only, BOT_ID) == ("store", "autoreply")


def test_a_consumer_that_is_not_enabled_is_not_expected() -> None:
    without_ai = enabled({})  # no Bedrock model id: the stack has no ai consumer
    with_the_bot = enabled({"bedrock_model_id": "m", "bot_application": "mybot.main:application"})

    assert "ai" not in expected_effects(telegram_message(5, 505, QUESTION), without_ai, BOT_ID)
    # The user's own bot replaces the canned autoreply (whose reply the benchmark would wait for).
    assert "autoreply" not in expected_effects(telegram_start(6, 506), with_the_bot, BOT_ID)


@pytest.mark.parametrize(
    ("replies", "text", "expected"),
    [
        ({"default": "We'll be in touch."}, QUESTION, ("store", "ai", "autoreply", "crm")),
        ({"/start": None}, "/start", ("store", "crm")),
    ],
)
def test_a_consumer_s_rule_is_read_in_its_own_environment(
    replies: dict[str, str | None], text: str, expected: tuple[str, ...]
) -> None:
    environments = {"autoreply": {"AUTOREPLY_REPLIES": json.dumps(replies)}}

    assert expected_effects(telegram_message(7, 507, text), STACK, BOT_ID, environments) == expected


def test_the_benchmark_s_updates_give_every_consumer_it_can_observe_work() -> None:
    """Else a consumer's figure would silently drop out of the report."""
    expected = [
        expected_effects(telegram_message(n, 600 + n, text), STACK, BOT_ID)
        for n, text in enumerate(SAMPLE_TEXTS)
    ]

    assert set().union(*expected) == set(EFFECTS)
