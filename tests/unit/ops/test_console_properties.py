"""Generated console inputs (issue 40): a filter keeps an event only for its own whole value, a
chat's bot state key only for its own chat, and a login redirect never leaves the console,
whatever decoding a browser applies to the path."""

from __future__ import annotations

from urllib.parse import unquote, urljoin, urlsplit

from hypothesis import example, given, settings
from hypothesis import strategies as st

from ops.console import events
from ops.console.app import LANDING_PATH, same_site_path
from pipeline.envelope import fifo_id
from pipeline.telegram_bot.state import CHAT_ATTRIBUTE, conversation_key, item_attributes

GENERATED = settings(max_examples=300, deadline=None)
BASE = "http://127.0.0.1:8765/"
chat_ids = st.integers(-(10**13), 10**13)
order_ids = st.text(alphabet="0123456789abcdefAB-_", min_size=1, max_size=12)
crm_sources = st.sampled_from([("crm", "order"), ("bitrix24", "deal"), ("amocrm", "lead")])


def telegram_path(chat: int, kind: str = "chat") -> events.EventPath:
    return events.EventPath("telegram:1:2", "telegram", "message", group=f"telegram:default:{kind}:{chat}")


@GENERATED
@given(asked=chat_ids, chat=chat_ids, kind=st.sampled_from(["chat", "user"]))
@example(asked=12, chat=123, kind="chat")
@example(asked=12, chat=112, kind="chat")
@example(asked=12, chat=-12, kind="user")
def test_a_chat_filter_keeps_an_event_only_of_that_very_chat(asked: int, chat: int, kind: str) -> None:
    kept = events.Filters(chat=str(asked)).keep(telegram_path(chat, kind))
    assert kept == (asked == chat)


@GENERATED
@given(asked=order_ids, order=order_ids, source=crm_sources, qualified=st.booleans())
@example(asked="4", order="42", source=("crm", "order"), qualified=False)
@example(asked="2", order="42", source=("bitrix24", "deal"), qualified=True)
def test_an_order_filter_keeps_an_event_only_of_that_very_order(
    asked: str, order: str, source: tuple[str, str], qualified: bool
) -> None:
    name, noun = source
    path = events.EventPath("e", name, "t", group=fifo_id(f"{name}:{noun}:{order}", prefix=f"{name}:"))
    filters = events.Filters(order=f"{name}:{asked}" if qualified else asked)
    assert filters.keep(path) == (asked == order)
    assert not filters.keep(telegram_path(int(order) if order.isdigit() else 7))


@GENERATED
@given(asked=chat_ids, chat=chat_ids, user=chat_ids, name=st.text(min_size=1, max_size=10))
@example(asked=12, chat=123, user=12, name="order")
def test_a_conversation_item_is_indexed_under_its_own_chat_only(
    asked: int, chat: int, user: int, name: str
) -> None:
    """The console queries the `by_chat` index on the asked chat: an item is found for it only if
    its index value, as the bot writes it, is that chat's whole id."""
    item = item_attributes(conversation_key(name, [chat, user]), '"STATE"', 1)
    assert (item[CHAT_ATTRIBUTE]["S"] == str(asked)) == (asked == chat)


# Paths built from the pieces open redirects are made of.
PIECES = [
    "/",
    "//",
    "\\",
    "%2F",
    "%2f",
    "%5C",
    "%25",
    "2F",
    "5C",
    "%09",
    "\t",
    "evil.example",
    "https:",
    "a",
    ".",
    "@",
    ":",
]
paths = st.lists(st.sampled_from(PIECES), max_size=8).map("".join)


@GENERATED
@given(path=st.one_of(paths, st.text(max_size=20)))
@example(path="//evil.example")
@example(path="/\\evil.example")
@example(path="/%2F%2Fevil.example")
@example(path="/%252F%252Fevil.example")
def test_a_redirect_target_stays_on_the_console_through_every_decoding(path: str) -> None:
    target = same_site_path(path)

    assert target in (path, LANDING_PATH)
    shown = target
    for _ in range(4):  # as a browser reads it: backslashes as slashes, %-escapes decoded
        resolved = urlsplit(urljoin(BASE, shown.replace("\\", "/")))
        assert (resolved.scheme, resolved.netloc) == ("http", "127.0.0.1:8765"), path
        assert shown.startswith("/") and not shown.startswith("//")
        shown = unquote(shown)
