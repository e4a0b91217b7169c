"""The consumer registry: invalid declarations fail at import, and Telegram's allowed_updates."""

from __future__ import annotations

from typing import Any

import pytest

from pipeline.registry import (
    CONSUMERS,
    MIN_MAX_RECEIVE_COUNT,
    Consumer,
    RetryPolicy,
    by_name,
    enabled,
    matches,
    telegram_allowed_updates,
)
from pipeline.telegram import UPDATE_KINDS

TELEGRAM = {"source": ["telegram"]}


def consumer(**overrides: Any) -> Consumer:
    fields: dict[str, Any] = {"name": "sample", "description": "a test consumer", "filter_policy": TELEGRAM}
    return Consumer(**{**fields, **overrides})


@pytest.mark.parametrize("name", ["Store", "my-consumer", "1st", "", "with space", "crm.v2"])
def test_consumer_names_must_be_lowercase_identifiers(name: str) -> None:
    with pytest.raises(ValueError, match="lowercase Python identifier"):
        consumer(name=name)


@pytest.mark.parametrize("max_concurrency", [0, 1, 1001])
def test_max_concurrency_outside_the_sqs_event_source_range_is_refused(max_concurrency: int) -> None:
    with pytest.raises(ValueError, match="max_concurrency"):
        consumer(max_concurrency=max_concurrency)


def test_batch_above_ten_needs_a_batching_window() -> None:
    with pytest.raises(ValueError, match="batching window"):
        consumer(batch_size=11)
    assert consumer(batch_size=11, batching_window_seconds=1).batch_size == 11


@pytest.mark.parametrize(
    "overrides",
    [
        {"batch_size": 0},
        {"batch_size": 10_001, "batching_window_seconds": 5},
        {"timeout_seconds": 0},
        {"timeout_seconds": 901},
    ],
)
def test_out_of_range_limits_are_refused(overrides: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        consumer(**overrides)


@pytest.mark.parametrize(
    "retry",
    [
        {"max_receive_count": 0},
        {"base_delay_seconds": -1},
        {"base_delay_seconds": 10, "max_delay_seconds": 5},
        {"max_delay_seconds": 43_201},
    ],
)
def test_invalid_retry_policies_are_refused(retry: dict[str, int]) -> None:
    with pytest.raises(ValueError):
        RetryPolicy(**retry)


def test_a_retry_policy_dead_lettering_before_five_receives_is_refused_with_the_minimum() -> None:
    with pytest.raises(ValueError, match=rf"^max_receive_count must be at least {MIN_MAX_RECEIVE_COUNT} "):
        RetryPolicy(max_receive_count=MIN_MAX_RECEIVE_COUNT - 1)
    assert RetryPolicy().max_receive_count == MIN_MAX_RECEIVE_COUNT
    assert all(c.retry.max_receive_count >= MIN_MAX_RECEIVE_COUNT for c in CONSUMERS)


def test_visibility_timeout_is_six_times_the_function_timeout() -> None:
    assert consumer(timeout_seconds=45).visibility_timeout_seconds == 270


def test_registry_entries_are_unique_and_resolvable() -> None:
    names = [c.name for c in CONSUMERS]
    assert len(names) == len(set(names))
    for c in CONSUMERS:
        assert by_name(c.name) is c
        assert c.handler == f"{c.name}.app.lambda_handler"
        assert "journal" in c.tables
    with pytest.raises(KeyError, match="no consumer named"):
        by_name("nope")


def test_consumers_needing_a_setting_exist_only_when_it_is_set() -> None:
    gated = [c for c in CONSUMERS if c.requires_setting]
    assert gated, "the registry gates at least one consumer (ai) behind a setting"
    gated_names = {c.name for c in gated}
    assert not {c.name for c in enabled({})} & gated_names
    settings = {c.requires_setting: "on" for c in gated if c.requires_setting}
    stood_down = {c.name for c in CONSUMERS if c.unless_setting in settings}
    assert [c.name for c in enabled(settings)] == [c.name for c in CONSUMERS if c.name not in stood_down]


def test_autoreply_stands_down_when_the_users_bot_answers() -> None:
    """Both answering would answer each callback query twice; Telegram refuses the second."""
    assert "autoreply" in {c.name for c in enabled({})}
    assert "bot" not in {c.name for c in enabled({})}
    names = {c.name for c in enabled({"bot_application": "bot.examples.lead_bot:build"})}
    assert "bot" in names and "autoreply" not in names
    # A blank setting is unset: autoreply stays.
    assert "autoreply" in {c.name for c in enabled({"bot_application": ""})}


def test_the_bot_consumer_needs_per_chat_order_and_only_its_own_state() -> None:
    bot = by_name("bot")
    assert bot.ordered
    assert bot.filter_policy == {"source": ["telegram"]}
    assert set(bot.tables) == {"journal", "bot_state"}
    assert [c.name for c in CONSUMERS if "bot_state" in c.tables] == ["bot"]


def test_every_telegram_type_filter_names_real_update_kinds() -> None:
    for c in CONSUMERS:
        if c.filter_policy.get("source") == ["telegram"]:
            assert set(c.filter_policy.get("type", [])) <= set(UPDATE_KINDS), c.name


def test_allowed_updates_is_every_kind_while_a_consumer_takes_all_telegram_updates() -> None:
    assert any(c.filter_policy == TELEGRAM for c in CONSUMERS)
    assert telegram_allowed_updates() is None


def test_allowed_updates_is_the_union_of_the_telegram_consumers_types() -> None:
    consumers = [
        consumer(name="a", filter_policy={"source": ["telegram"], "type": ["message", "callback_query"]}),
        consumer(name="b", filter_policy={"source": ["telegram"], "type": ["message", "inline_query"]}),
        consumer(name="c", filter_policy={"source": ["crm"], "type": ["order.status_changed"]}),
    ]
    assert telegram_allowed_updates(consumers) == ["callback_query", "inline_query", "message"]
    assert telegram_allowed_updates(consumers[2:]) == []
    assert telegram_allowed_updates([*consumers, consumer(name="d")]) is None


@pytest.mark.parametrize(
    ("policy", "attributes", "expected"),
    [
        ({"source": ["telegram"]}, {"source": "telegram", "type": "poll"}, True),
        ({"source": ["telegram"]}, {"source": "crm"}, False),
        (
            {"source": ["telegram"], "type": ["message", "callback_query"]},
            {"source": "telegram", "type": "poll"},
            False,
        ),
        ({"source": ["telegram"], "command": [{"exists": True}]}, {"source": "telegram"}, False),
        (
            {"source": ["telegram"], "command": [{"exists": True}]},
            {"source": "telegram", "command": "/a"},
            True,
        ),
        ({"source": ["telegram"], "command": [{"exists": False}]}, {"source": "telegram"}, True),
    ],
)
def test_matches_follows_sns_filter_semantics(
    policy: dict[str, Any], attributes: dict[str, str], expected: bool
) -> None:
    assert matches(policy, attributes) is expected


def test_matches_refuses_rules_it_does_not_understand() -> None:
    with pytest.raises(ValueError, match="unsupported filter rule"):
        matches({"status": [{"prefix": "ship"}]}, {"status": "shipped"})
