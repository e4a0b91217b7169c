"""The campaign's plan: a seeded, timed list of events a user's world sends and of faults.

Pure: `plan(seed, events)` is the same list for the same arguments, so a rerun replays the
same workload and the same faults (their timing against the pipeline's own still varies: the
pipeline runs real processes; what reproduces is what was sent and injected, and when).

Events (the world): Telegram updates from many private chats (each chat's messages `/stepN` in
order, N = 1..STEPS, so each reply names its update), resends of an update Telegram already
delivered, the same update posted twice at once, edits, button presses; CRM orders moving
through statuses on the generic CRM route (`POST /crm/events`), a move sometimes resent; deals
in the Bitrix24 and amoCRM stand-ins moved between stages, sometimes several within a second
(`local.chaos.portals`); conversations with the example bot (`local.chaos.conversations`).

Faults (at the hops the stand-ins and the runtime have hooks for): Telegram 5xx, 429, slow
answers, answers later than the client waits and answers lost (those two after the call took
effect); SMS gateway errors, refusals and timeouts; the CRM's outages; a vendor refusing the whole
account for seconds (a portal unpaid, deleted or blocked, amoCRM unpaid or blocked, the bot token
revoked, the SMS account out of balance or blocked), then working again; and the edges
(`local.chaos.edges`): a credential rotated mid-run (the vendor first, the secret `gap` seconds
later), the bot token revoked then a new one issued, a deal hidden from the integration's user
for seconds, a portal's API down and its webhooks lost for longer than a catch-up sweep's period;
the portals' webhooks lost or posted late; SNS publish errors (the
webhook's hop); DynamoDB throttling and lost answers, SQS receive and delete failures (at
moto's door, `local.moto_faults`); a worker process killed (SIGKILL, between any two of its
calls); a function's processes replaced at once; the whole pipeline stopped and started again
with its state (`Runtime.restart_pipeline`, as `python -m local --persist`).
"""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from local.chaos.conversations import ConversationPlanner
from local.chaos.portals import PORTALS, DealPlanner
from pipeline.bot_api import TIMEOUT_SECONDS as BOT_API_TIMEOUT_SECONDS

# Each chat's messages: `/step1` .. `/stepN`; the consumer answers `/stepK` with `step K`.
STEPS = 12
FIRST_CHAT = 5_100_000_000
FIRST_UPDATE = 880_000_000
# Statuses an order moves through, never back (each move is a real transition), some with an SMS rule.
STATUSES = ("new", "paid", "packed", "shipped", "ready_for_pickup", "delivered")
FIRST_STATUS = "new"

EVENT_WEIGHTS: dict[str, int] = {
    "message": 50,
    "resend": 6,
    "concurrent": 5,
    "edit": 5,
    "callback": 6,
    "crm_move": 22,
    "crm_resend": 6,
    "portal_move": 8,
    "bot": 6,
}
FAULT_WEIGHTS: dict[str, int] = {
    "telegram_5xx": 8,
    "telegram_429": 6,
    "telegram_slow": 6,
    "telegram_timeout": 2,
    "telegram_lost_answer": 2,
    "sms_error": 5,
    "sms_refusal": 3,
    "sms_timeout": 2,
    "crm_outage": 4,
    "account_blocked": 2,
    # The edges (`local.chaos.edges`): credentials rotated or revoked, orders hidden, long outages.
    "token_rotated": 2,
    "bot_token_revoked": 1,
    "deal_hidden": 2,
    "portal_outage": 1,
    "portal_webhook_lost": 2,
    "portal_webhook_late": 2,
    "sns_publish_error": 5,
    "sns_publish_timeout": 2,
    "sns_publish_lost_answer": 2,
    "dynamodb_throttle": 4,
    "dynamodb_lost_answer": 4,
    "sqs_receive_error": 3,
    "sqs_delete_error": 3,
    "kill_worker": 6,
    "restart_function": 1,
    "restart_runtime": 1,
}
# A vendor refusing the whole account for a while (`local.fakes.accounts`), by stand-in, with the
# causes it answers: the consumers that call it pause their records, and resume once unblocked.
ACCOUNT_CAUSES: dict[str, tuple[str, ...]] = {
    "bitrix24": ("unpaid", "deleted", "blocked"),
    "amocrm": ("unpaid", "blocked"),
    "telegram": ("revoked",),
    "end_user_messaging": ("out_of_balance", "blocked"),
}
# How long a vendor refuses a whole account at most (`account_blocked`, `bot_token_revoked`).
LONGEST_REFUSAL_SECONDS = 12.0
# The vendors whose credential `token_rotated` rotates (`local.chaos.edges.CREDENTIALS`).
ROTATED_VENDORS = ("amocrm", "bitrix24", "telegram")
# A restart of the whole pipeline saves and restores every queue and table (`local.snapshot`):
# seconds early in a campaign, longer as the journal grows; at most one per this many events.
RESTART_RUNTIME_SPACING = 1500
# Faults per event, on average.
FAULT_RATE = 0.06
# The operator's and customers' actions among the events (`local.chaos.actions`): neither events of
# the world's stream nor faults; played in order by `local.chaos.steering`.
ACTION_KINDS = frozenset(
    {
        "user_blocks_bot",
        "broadcast_create",
        "broadcast_pause",
        "broadcast_resume",
        "broadcast_cancel",
        "sms_opt_out",
        "old_redrive",
    }
)
# How many chats and orders are open at once (new ones replace finished ones).
OPEN_CHATS = 24
OPEN_ORDERS = 16


@dataclass(frozen=True)
class Step:
    """One planned action: an event the world sends or a fault; `args` say which."""

    index: int
    kind: str
    args: dict[str, Any] = field(default_factory=dict)

    @property
    def is_fault(self) -> bool:
        return self.kind in FAULT_WEIGHTS

    @property
    def is_action(self) -> bool:
        return self.kind in ACTION_KINDS

    def path(self) -> str:
        """What it is, as a violation names it: `#12 message chat=... update=...` (never the phone)."""
        shown = " ".join(f"{key}={value}" for key, value in sorted(self.args.items()) if key != "phone")
        return f"#{self.index} {self.kind} {shown}".rstrip()


@dataclass
class _Chat:
    chat: int
    next_step: int = 1
    sent: list[int] = field(default_factory=list)  # update ids of its messages
    message_ids: list[int] = field(default_factory=list)


@dataclass
class _Order:
    order: str
    phone: str
    status: str = FIRST_STATUS
    moves: int = 0
    last_event: dict[str, Any] | None = None


class _Planner:
    def __init__(self, seed: int) -> None:
        self.random = random.Random(seed)
        self.seed = seed
        self.update_id = FIRST_UPDATE + (seed % 1000) * 1_000_000
        self.chat_number = 0
        self.order_number = 0
        self.callback_number = 0
        self.chats: list[_Chat] = []
        self.orders: list[_Order] = []
        self.deals = DealPlanner(seed, self.random)
        self.conversations = ConversationPlanner(seed, FIRST_CHAT + (seed % 1000) * 100_000, self.random)

    def next_update(self) -> int:
        self.update_id += 1
        return self.update_id

    def chat(self) -> _Chat:
        self.chats = [c for c in self.chats if c.next_step <= STEPS]
        while len(self.chats) < OPEN_CHATS:
            self.chat_number += 1
            self.chats.append(_Chat(FIRST_CHAT + (self.seed % 1000) * 100_000 + self.chat_number))
        return self.random.choice(self.chats)

    def order(self) -> _Order:
        self.orders = [o for o in self.orders if o.status != STATUSES[-1] and o.moves < 3]
        while len(self.orders) < OPEN_ORDERS:
            self.order_number += 1
            number = self.order_number
            self.orders.append(_Order(f"CH{self.seed}-{number}", f"+4915779{number % 1_000_000:06d}"))
        return self.random.choice(self.orders)

    def event(self, kind: str, index: int) -> Step:
        if kind in ("resend", "edit", "callback"):
            chat = self.random.choice([c for c in self.chats if c.sent] or [self.chat()])
            if not chat.sent:
                kind = "message"
        if kind in ("message", "concurrent"):
            chat = self.chat()
            step = chat.next_step
            chat.next_step += 1
            update = self.next_update()
            chat.sent.append(update)
            chat.message_ids.append(step)
            return Step(index, kind, {"chat": chat.chat, "update": update, "step": step})
        if kind == "resend":
            return Step(index, kind, {"chat": chat.chat, "update": self.random.choice(chat.sent)})
        if kind == "edit":
            message_id = self.random.choice(chat.message_ids)
            return Step(
                index, kind, {"chat": chat.chat, "update": self.next_update(), "message_id": message_id}
            )
        if kind == "callback":
            self.callback_number += 1
            query = f"cb{self.seed}-{self.callback_number}"
            return Step(index, kind, {"chat": chat.chat, "update": self.next_update(), "query": query})
        if kind == "portal_move":
            return Step(index, kind, self.deals.move())
        if kind == "bot":  # a conversation's next step: bot_start, bot_contact or bot_yes
            step_kind, args = self.conversations.step(self.next_update())
            return Step(index, step_kind, args)
        if kind == "crm_resend":
            sent = [o for o in self.orders if o.last_event is not None]
            if sent:
                return Step(index, kind, dict(self.random.choice(sent).last_event or {}))
            kind = "crm_move"
        order = self.order()
        later = STATUSES[STATUSES.index(order.status) + 1 :]
        # Mostly the next status, sometimes one further (a CRM skipping a stage).
        status = later[0] if len(later) == 1 or self.random.random() < 0.7 else self.random.choice(later[1:])
        order.moves += 1
        args = {
            "order": order.order,
            "previous": order.status,
            "status": status,
            "run": order.moves,
            "phone": order.phone,
            "event_id": f"evt-{order.order}-{order.moves}",
        }
        order.status = status
        order.last_event = args
        return Step(index, "crm_move", args)

    def fault(self, kind: str, index: int) -> Step:
        pick = self.random
        if kind == "telegram_5xx":
            return Step(index, kind, {"count": pick.randint(1, 3), "status": pick.choice((500, 502, 503))})
        if kind == "telegram_429":
            return Step(index, kind, {"count": pick.randint(1, 3), "retry_after": 1})
        if kind == "telegram_slow":
            return Step(
                index, kind, {"count": pick.randint(1, 4), "seconds": round(pick.uniform(0.2, 2.0), 2)}
            )
        if kind == "telegram_timeout":  # answered after the client gave up: the call took effect
            return Step(index, kind, {"count": 1, "seconds": BOT_API_TIMEOUT_SECONDS + 1})
        if kind == "telegram_lost_answer":  # the call took effect; its answer never arrives
            return Step(index, kind, {"count": 1})
        if kind == "portal_webhook_lost":
            return Step(index, kind, {"portal": pick.choice(PORTALS), "count": pick.randint(1, 2)})
        if kind == "portal_webhook_late":
            seconds = round(pick.uniform(2.0, 20.0), 1)
            return Step(index, kind, {"portal": pick.choice(PORTALS), "count": 1, "seconds": seconds})
        if kind == "sms_error":
            return Step(index, kind, {"count": pick.randint(1, 2), "status": pick.choice((500, 503))})
        if kind == "sms_refusal":
            return Step(index, kind, {"count": 1, "status": 400})
        if kind == "sms_timeout":
            return Step(index, kind, {"count": 1, "seconds": 12.0})
        if kind == "account_blocked":
            vendor = pick.choice(sorted(ACCOUNT_CAUSES))
            cause = pick.choice(ACCOUNT_CAUSES[vendor])
            return Step(
                index,
                kind,
                {
                    "vendor": vendor,
                    "cause": cause,
                    "seconds": round(pick.uniform(2.0, LONGEST_REFUSAL_SECONDS), 1),
                },
            )
        if kind in ("token_rotated", "bot_token_revoked"):
            # A credential each vendor accepts (a bot token's part after the id: 20+ [A-Za-z0-9_-]).
            value = f"AAchaos{self.seed}r{index}x{pick.getrandbits(64):016x}"
            if kind == "bot_token_revoked":
                return Step(
                    index,
                    kind,
                    {"value": value, "seconds": round(pick.uniform(2.0, LONGEST_REFUSAL_SECONDS), 1)},
                )
            vendor = pick.choice(ROTATED_VENDORS)
            return Step(
                index, kind, {"vendor": vendor, "value": value, "gap": round(pick.uniform(0.0, 3.0), 1)}
            )
        if kind == "deal_hidden":
            seconds = round(pick.uniform(2.0, 20.0), 1)
            return Step(
                index,
                kind,
                {"portal": pick.choice(PORTALS), "pick": pick.randrange(1_000_000), "seconds": seconds},
            )
        if kind == "portal_outage":  # in periods of the catch-up sweep: longer than one run's window
            return Step(
                index, kind, {"portal": pick.choice(PORTALS), "periods": round(pick.uniform(1.5, 3.0), 2)}
            )
        if kind == "crm_outage":
            return Step(index, kind, {"seconds": round(pick.uniform(0.5, 4.0), 1)})
        if kind == "sns_publish_error":
            return Step(index, kind, {"count": pick.randint(1, 6), "status": pick.choice((500, 503, 429))})
        if kind == "sns_publish_timeout":  # answered late: the webhook's client gave up, SNS has it
            return Step(index, kind, {"count": 1, "seconds": 11.0})
        if kind == "sns_publish_lost_answer":  # published; the answer never arrives
            return Step(index, kind, {"count": pick.randint(1, 2)})
        if kind == "dynamodb_throttle":
            return Step(index, kind, {"target": "DynamoDB", "kind": "throttle", "count": pick.randint(1, 3)})
        if kind == "dynamodb_lost_answer":
            operation = pick.choice(("PutItem", "UpdateItem", "DeleteItem", "TransactWriteItems", "GetItem"))
            target = f"DynamoDB_20120810.{operation}"
            return Step(index, kind, {"target": target, "kind": "lost_answer", "count": 1})
        if kind == "sqs_receive_error":
            return Step(index, kind, {"target": "AmazonSQS.ReceiveMessage", "kind": "error", "count": 1})
        if kind == "sqs_delete_error":
            target = pick.choice(("AmazonSQS.DeleteMessage", "AmazonSQS.DeleteMessageBatch"))
            return Step(index, kind, {"target": target, "kind": "error", "count": 1})
        if kind == "kill_worker":
            return Step(index, kind, {"pick": pick.randrange(1_000_000)})
        if kind == "restart_runtime":
            return Step(index, kind, {})
        return Step(index, kind, {"pick": pick.randrange(1_000_000)})


def plan(seed: int, events: int, fault_rate: float = FAULT_RATE) -> list[Step]:
    """`events` events of the world, with faults among them (about `fault_rate` per event)."""
    planner = _Planner(seed)
    event_kinds, event_weights = zip(*EVENT_WEIGHTS.items(), strict=True)
    fault_kinds, fault_weights = zip(*FAULT_WEIGHTS.items(), strict=True)
    steps: list[Step] = []
    made = 0
    last_restart = -1
    while made < events:
        index = len(steps)
        if fault_rate > 0 and planner.random.random() < fault_rate:
            kind = planner.random.choices(fault_kinds, fault_weights)[0]
            if kind == "restart_runtime":
                if made - last_restart < RESTART_RUNTIME_SPACING and last_restart >= 0:
                    kind = "kill_worker"
                else:
                    last_restart = made
            steps.append(planner.fault(kind, index))
            continue
        steps.append(planner.event(planner.random.choices(event_kinds, event_weights)[0], index))
        made += 1
    return steps


def counted(steps: list[Step]) -> tuple[dict[str, int], dict[str, int]]:
    """(events by kind, faults by kind); actions are neither (`local.chaos.actions`)."""
    events = Counter(s.kind for s in steps if not s.is_fault and not s.is_action)
    faults = Counter(s.kind for s in steps if s.is_fault)
    return dict(sorted(events.items())), dict(sorted(faults.items()))
