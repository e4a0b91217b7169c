"""The campaign's invariants, checked on what it sent (`Sent`) and what the pipeline did (`Observed`).

Pure: no AWS, no HTTP. Each violation names the campaign's seed and the path of the event it is
about (the planned step, then what happened to it at each hop), so `python -m local chaos --seed
N` replays the same workload and faults. The invariants, once the faults stop and the queues drain:

- `store`: every accepted update (answered 200 at least once) has its item, or is in store's DLQ;
- `autoreply` (ordered, FIFO by chat): each chat's replies are its accepted messages' answers,
  each exactly once, in the order the chat sent them (but for those the operator redrove from
  the DLQ: they come after); a message in the DLQ has none and holds
  nothing after it back forever; each button press is answered exactly once (or dead-lettered).
  A chat whose user blocked the bot (`user_blocks_bot`) is owed no reply the Bot API refused it
  with 403. Telegram has no idempotency key: a call whose answer never reached its worker (the answer lost
  or later than the client's timeout, or the worker killed holding the update) is made again, so
  a reply may come twice then, and only then (`pipeline.telegram_bot.calls`, README). Such a
  duplicate is a finding with its evidence (`excuse`), counted apart, not a violation; one
  without that evidence is a violation;
- `bot` (the example bot's conversations, FIFO by chat): each accepted step has its outputs
  exactly once, in the conversation's order (/start: the request for the phone; the contact:
  "Got it." then the question; [Yes]: the question edited into the thanks), or sits in the bot's
  DLQ (then the conversation's later steps are not owed theirs); a duplicate is Telegram's
  window only with its evidence, as for autoreply;
- `crm`: one lead per chat that sent an accepted message (the contact book's rule), never two;
- `sms`: at most one accepted SMS per run (an order's stay in a status, begun by a real move),
  none for a status without a rule; exactly one for the last run of each order when its status
  has a rule, unless a record a person must decide on says so (`failed`, `unknown`), a record
  ended unsent by a rule (`suppressed`, `expired`: outcomes, not losses) or the move is in
  sms's DLQ (earlier runs may be stale by the time their move is handled: at most one); once
  the operator has decided every such record (`bin/ops journal resolve`), none of those excuses;
- portal deals (`local.chaos.portals`): at most as many SMS as the deal's history has entries
  into a status with a rule (a move between two stages of one status is none), and at least one
  when the status the deal is in now has a rule, unless a record a person must decide on says
  so or one of the deal's transitions is in sms's DLQ; whatever became of the webhooks;
- `account`: no dead letter was refused for the whole account (a vendor's `account_blocked`: the
  record pauses and resumes once the account works, `pipeline.worker`), whether classified as
  such (`account refused`) or not (the vendors' own words for it in the reason);
- `hidden` (`deal_hidden`): an order the pipeline skipped as hidden from the integration's user is
  counted (`CrmOrdersHidden`) and named (the warning names the order), and is one the campaign hid;
  once visible again its moves are texted when something reads them (the sweep's overlap, the
  deal's next move: the portal invariant above); a deal whose SMS is missing is excused only by
  such a named skip (README: nothing is marked handled, the order's next event reads it whole);
- `catch-up` (`portal_outage`, and every lost webhook): each portal's catch-up sweep has read its
  history past the campaign's last move there (its cursor's `read_to`), however long the outage;
- the journal: no idempotency record left `INPROGRESS`, no SMS record left `pending` or `sending`,
  nor `failed` or `unknown` once the operator has decided.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any

from local.chaos.conversations import BOT_KINDS, STEP_OUTPUTS, outputs
from local.chaos.portals import FIRST_STAGE, NOUNS, status_transitions
from local.chaos.workload import Step
from pipeline.sms.journal import State

# The SMS records a person decides on (`ops journal`): a visible outcome, not a loss.
DECIDE_STATES = frozenset({State.FAILED, State.UNKNOWN})
INTERMEDIATE_SMS_STATES = frozenset({State.PENDING, State.SENDING})
# Notifications that ended unsent by a rule (`pipeline.sms.endstates`): outcomes, not losses. A run
# whose number opted out, or whose move was past its rule's maximum age when it could be sent, owes
# no SMS; `superseded` ends only a run the order has left (never the last), which owes at most one.
ENDED_SMS_STATES = frozenset({State.SUPPRESSED, State.EXPIRED, State.SUPERSEDED})


# What a dead letter's reason says when a whole account was refused: the worker's pause reason, and
# the stand-ins' answers for `account_blocked` (`local.fakes.accounts`), were one misread as a
# refusal of the message.
ACCOUNT_REFUSAL_WORDS = (
    "account refused",
    "REST API is available only on commercial plans",
    "Portal was deleted",
    "REST API is blocked due to overload",
    "Functional not paid",
    "Account is blocked",
    "Unauthorized",
    "monthly spend limit",
    "The account is disabled",
)


@dataclass
class Sent:
    """What the campaign sent, by event id: the step, and each answer it got (status, seconds)."""

    steps: dict[str, Step] = field(default_factory=dict)
    answers: dict[str, list[int]] = field(default_factory=lambda: defaultdict(list))
    # The first POST (wall clock) of each Telegram update, for the end-to-end latency.
    first_posted: dict[str, float] = field(default_factory=dict)
    # Each portal deal's id in its stand-in, by the plan's key (`local.chaos.portals`).
    portal_ids: dict[str, int] = field(default_factory=dict)
    # Each portal's last move (wall clock), and the orders the campaign hid ("bitrix24 deal 7").
    portal_moved_at: dict[str, float] = field(default_factory=dict)
    hidden: set[str] = field(default_factory=set)

    def accepted(self, event_id: str) -> bool:
        return 200 in self.answers.get(event_id, [])


@dataclass
class Observed:
    """What the pipeline did, read once it drained (`local.chaos.observe`)."""

    # (chat, text, time) of each sendMessage the Bot API accepted, in the order it received them.
    replies: list[tuple[int, str, float]] = field(default_factory=list)
    # (chat, text) of each editMessageText the Bot API accepted.
    edits: list[tuple[int, str]] = field(default_factory=list)
    # callback_query_id of each answerCallbackQuery the Bot API accepted.
    callback_answers: list[str] = field(default_factory=list)
    # Telegram update ids with an item in the conversations table.
    stored: set[int] = field(default_factory=set)
    # The chat of each lead in the CRM.
    leads: list[int] = field(default_factory=list)
    # The text of each SMS the gateway accepted.
    sms: list[str] = field(default_factory=list)
    # (key, state, the run its text names) of each SMS journal record; (key, status) of each
    # idempotency record.
    sms_records: list[tuple[str, str, str]] = field(default_factory=list)
    idempotency_records: list[tuple[str, str]] = field(default_factory=list)
    # Per consumer: event id -> the reason it was dead-lettered.
    dead: dict[str, dict[str, str]] = field(default_factory=dict)
    # Telegram's at-least-once window, the evidence: per consumer, each event a killed worker
    # held (`local.chaos.inflight`), once per kill; (chat, text) of each sendMessage and the id of
    # each answerCallbackQuery that took effect while its caller never got the answer.
    undecided: dict[str, list[str]] = field(default_factory=dict)
    unanswered_replies: list[tuple[int, str]] = field(default_factory=list)
    unanswered_callbacks: list[str] = field(default_factory=list)
    # Per consumer, the events the operator redrove from its DLQ: their effects come after the
    # ones behind them, by the operator's decision, not out of the chat's order.
    # With the reason each was dead-lettered for (the `account` invariant reads it too).
    redriven: dict[str, dict[str, str]] = field(default_factory=dict)
    # The operator decided every SMS record that waited on a person (`local.chaos.operator`):
    # none may wait any more, and none excuses a missing SMS.
    decided_by_operator: bool = False
    # The orders the CRM consumers' warnings name as hidden, and their CrmOrdersHidden count.
    hidden_named: list[str] = field(default_factory=list)
    hidden_counted: int = 0
    # Per portal: up to when its catch-up sweep has read the history (unix seconds), if at all.
    sweep_read_to: dict[str, float] = field(default_factory=dict)
    # (chat, text) of each sendMessage the Bot API refused with 403 (the user blocked the bot), and
    # the chats whose users the campaign had block it (`local.chaos.actions`).
    refused_replies: set[tuple[int, str]] = field(default_factory=set)
    blocked_chats: set[int] = field(default_factory=set)


@dataclass(frozen=True)
class Violation:
    invariant: str
    detail: str
    path: str
    seed: int
    # Not empty: a duplicate in Telegram's at-least-once window, and the evidence for it.
    excuse: str = ""

    def line(self) -> str:
        # Excused: a reply in Telegram's at-least-once window, or a broadcast's chat `unknown`.
        head = (
            "VIOLATION"
            if not self.excuse
            else "UNKNOWN"
            if self.invariant == "broadcast"
            else "AT-LEAST-ONCE"
        )
        because = f"\n    because: {self.excuse}" if self.excuse else ""
        return f"{head} {self.invariant} (seed {self.seed}): {self.detail}\n    path: {self.path}{because}"

    def as_dict(self) -> dict[str, Any]:
        found = {"invariant": self.invariant, "detail": self.detail, "path": self.path, "seed": self.seed}
        return {**found, "excuse": self.excuse} if self.excuse else found


def split(found: list[Violation]) -> tuple[list[Violation], list[Violation]]:
    """(violations, duplicates in Telegram's at-least-once window with their evidence)."""
    return [f for f in found if not f.excuse], [f for f in found if f.excuse]


def reply_text(step: int) -> str:
    return f"step {step}"


def customer_name(order: str, run: int) -> str:
    """The customer's name in a move: it carries the run, so each SMS names the run it is for."""
    return f"Chaos {order} r{run}"


def run_of(text: str) -> str:
    """The run an SMS (or its journal record's body) is for: the customer name it starts with."""
    return text.split(",", 1)[0]


def _path(sent: Sent, event_id: str, *hops: str) -> str:
    step = sent.steps.get(event_id)
    planned = step.path() if step is not None else f"(unplanned {event_id})"
    answers = sent.answers.get(event_id, [])
    return " -> ".join([planned, f"webhook answered {answers}", *hops])


def check(seed: int, sent: Sent, observed: Observed, rules: frozenset[str]) -> list[Violation]:
    """Every invariant (module docstring); `rules`: the statuses with an SMS rule."""
    found: list[Violation] = []

    def violation(invariant: str, detail: str, event_id: str, *hops: str, excuse: str = "") -> None:
        dead = [
            f"{name}'s DLQ ({events[event_id]})"
            for name, events in observed.dead.items()
            if event_id in events
        ]
        found.append(Violation(invariant, detail, _path(sent, event_id, *hops, *dead), seed, excuse))

    _check_store(sent, observed, violation)
    _check_replies(sent, observed, violation)
    _check_conversations(sent, observed, violation)
    _check_leads(sent, observed, violation)
    _check_sms(sent, observed, rules, violation)
    _check_portals(sent, observed, rules, violation)
    found.extend(_check_edges(seed, sent, observed))
    # What the DLQs hold at the end, and what the operator redrove from them before (seed 40's 14
    # autoreply replies paused past their queue's receives were redriven, and went unseen).
    dead_lettered = {
        (name, event_id): reason
        for letters in (observed.redriven, observed.dead)
        for name, events in letters.items()
        for event_id, reason in events.items()
    }
    for (name, event_id), reason in dead_lettered.items():
        if any(word.lower() in (reason or "").lower() for word in ACCOUNT_REFUSAL_WORDS):
            violation("account", f"dead-lettered by {name} for a refusal of the whole account", event_id)
    for key, status in observed.idempotency_records:
        if status == "INPROGRESS":
            found.append(Violation("journal", f"idempotency record {key} left INPROGRESS", key, seed))
    for key, state, _ in observed.sms_records:
        if state in INTERMEDIATE_SMS_STATES:
            found.append(Violation("journal", f"SMS record {key} left {state}", key, seed))
        elif state in DECIDE_STATES and observed.decided_by_operator:
            found.append(
                Violation("journal", f"SMS record {key} still {state} after the operator decided", key, seed)
            )
    return found


def _telegram(sent: Sent) -> dict[str, Step]:
    return {
        event_id: step
        for event_id, step in sent.steps.items()
        if step.kind in ("message", "concurrent", "edit", "callback", *BOT_KINDS) and sent.accepted(event_id)
    }


def _check_store(sent: Sent, observed: Observed, violation: Any) -> None:
    dead = observed.dead.get("store", {})
    for event_id, step in _telegram(sent).items():
        if step.args["update"] not in observed.stored and event_id not in dead:
            violation(
                "store", f"update {step.args['update']} has no item and is not in store's DLQ", event_id
            )


def _unanswered(observed: Observed, event_id: str, lost_answers: int, consumer: str = "autoreply") -> str:
    """Why a reply to `event_id` may have been made again, or "" (`Observed.undecided`)."""
    kills = observed.undecided.get(consumer, []).count(event_id)
    reasons = [f"{lost_answers} answer(s) lost or late"] if lost_answers else []
    reasons += [f"{kills} {consumer} worker(s) killed or timed out holding it"] if kills else []
    return "; ".join(reasons)


def _window(observed: Observed, event_id: str, lost: int, count: int, consumer: str = "autoreply") -> str:
    """The evidence that `count` copies are Telegram's at-least-once window, or "": one copy more
    per lost or late answer and per kill of a `consumer` worker holding the event, no more."""
    allowed = 1 + lost + observed.undecided.get(consumer, []).count(event_id)
    return _unanswered(observed, event_id, lost, consumer) if 1 < count <= allowed else ""


def _check_replies(sent: Sent, observed: Observed, violation: Any) -> None:
    dead = observed.dead.get("autoreply", {})
    redriven = observed.redriven.get("autoreply", {})
    lost_replies = Counter(observed.unanswered_replies)
    lost_answers = Counter(observed.unanswered_callbacks)
    by_chat: dict[int, list[str]] = defaultdict(list)
    for chat, text, _ in observed.replies:
        by_chat[chat].append(text)
    expected: dict[int, list[tuple[str, str]]] = defaultdict(list)

    def blocked(chat: int, text: str) -> bool:
        """The user blocked the bot, and the Bot API refused this reply so (403): owed no more."""
        return chat in observed.blocked_chats and (chat, text) in observed.refused_replies

    for event_id, step in _telegram(sent).items():
        if step.kind in ("message", "concurrent"):
            expected[step.args["chat"]].append((event_id, reply_text(step.args["step"])))
    for chat, messages in expected.items():
        messages.sort(key=lambda pair: sent.steps[pair[0]].index)
        got = by_chat.get(chat, [])
        counts = Counter(got)
        for event_id, text in messages:
            if counts[text] > 1:
                lost = lost_replies[(chat, text)]
                detail = f"chat {chat} got {text!r} {counts[text]} times"
                violation(
                    "autoreply", detail, event_id, excuse=_window(observed, event_id, lost, counts[text])
                )
            elif counts[text] == 0 and event_id not in dead and not blocked(chat, text):
                violation("autoreply", f"chat {chat} never got {text!r}, nor is it in the DLQ", event_id)
        late = {text for event_id, text in messages if event_id in redriven}
        wanted = [text for _, text in messages if text in counts and text not in late]
        seen = list(dict.fromkeys(got))
        if [t for t in seen if t in set(wanted)] != wanted:
            violation("order", f"chat {chat} got its replies out of order: {seen}", messages[0][0])
        stray = set(counts) - {text for _, text in messages}
        if stray:
            violation(
                "autoreply",
                f"chat {chat} got replies to no accepted message: {sorted(stray)}",
                messages[0][0],
            )
    answers = Counter(observed.callback_answers)
    for event_id, step in _telegram(sent).items():
        if step.kind == "callback":
            query = step.args["query"]
            count = answers[query]
            if count > 1 or (count == 0 and event_id not in dead):
                detail = f"button press {query} answered {count} times"
                violation(
                    "autoreply",
                    detail,
                    event_id,
                    excuse=_window(observed, event_id, lost_answers[query], count),
                )


def _check_leads(sent: Sent, observed: Observed, violation: Any) -> None:
    dead = observed.dead.get("crm", {})
    leads = Counter(observed.leads)
    chats: dict[int, list[str]] = defaultdict(list)
    for event_id, step in _telegram(sent).items():
        if step.kind in ("message", "concurrent", "edit", "bot_start", "bot_contact"):
            chats[step.args["chat"]].append(event_id)
    for chat, events in chats.items():
        first = min(events, key=lambda e: sent.steps[e].index)
        if leads[chat] > 1:
            violation("crm", f"chat {chat} has {leads[chat]} leads", first)
        elif leads[chat] == 0 and not any(e in dead for e in events):
            violation("crm", f"chat {chat} has no lead, and none of its events is in crm's DLQ", first)


def _check_sms(sent: Sent, observed: Observed, rules: frozenset[str], violation: Any) -> None:
    dead = observed.dead.get("sms", {})
    per_run = Counter(run_of(text) for text in observed.sms)
    decided = _awaiting_a_person(observed)
    last: dict[str, Step] = {}
    moves = {e: s for e, s in sent.steps.items() if s.kind == "crm_move" and sent.accepted(e)}
    for step in moves.values():
        order = step.args["order"]
        if order not in last or step.args["run"] > last[order].args["run"]:
            last[order] = step
    for event_id, step in moves.items():
        name = customer_name(step.args["order"], step.args["run"])
        count = per_run[name]
        status = step.args["status"]
        if count > 1:
            violation("sms", f"{count} SMS for one run ({status})", event_id)
        if count and status not in rules:
            violation("sms", f"an SMS for {status}, which has no rule", event_id)
        is_last = last[step.args["order"]] is step
        if is_last and status in rules and count == 0 and event_id not in dead and name not in decided:
            violation("sms", f"no SMS for the move into {status}, nor a record to decide on", event_id)


def _awaiting_a_person(observed: Observed) -> set[str]:
    """The runs (customer names) with an SMS record a person must decide on, until they have, or
    one that ended unsent by a rule (suppressed, expired)."""
    ended = {run for _, state, run in observed.sms_records if state in ENDED_SMS_STATES - {State.SUPERSEDED}}
    if observed.decided_by_operator:
        return ended
    return ended | {run for _, state, run in observed.sms_records if state in DECIDE_STATES}


def _check_portals(sent: Sent, observed: Observed, rules: frozenset[str], violation: Any) -> None:
    dead = observed.dead.get("sms", {})
    per_name = Counter(run_of(text) for text in observed.sms)
    decided = _awaiting_a_person(observed)
    deals: dict[str, list[tuple[str, Step]]] = defaultdict(list)
    for event_id, step in sent.steps.items():
        if step.kind == "portal_move":
            deals[step.args["deal"]].append((event_id, step))
    for key, moves in deals.items():
        moves.sort(key=lambda pair: pair[1].index)
        portal, name = moves[0][1].args["portal"], moves[0][1].args["name"]
        stages = [FIRST_STAGE[portal], *(stage for _, step in moves for stage in step.args["stages"])]
        entered = status_transitions(portal, stages)
        due = sum(1 for status in entered if status in rules)
        count = per_name[name]
        deal_id = sent.portal_ids.get(key)
        where = f"{portal} deal {deal_id}"
        in_dlq = deal_id is not None and any(event.startswith(f"{portal}:{deal_id}:") for event in dead)
        last_event = moves[-1][0]
        if count > due:
            violation(
                "portal", f"{count} SMS for {due} entries into a status with a rule ({where})", last_event
            )
        # Skipped as hidden, counted and named: README's rule texts it at the order's next event only.
        skipped = f"{portal} {NOUNS[portal]} {deal_id}" in observed.hidden_named
        if (
            entered
            and entered[-1] in rules
            and count == 0
            and not in_dlq
            and name not in decided
            and not skipped
        ):
            violation(
                "portal", f"no SMS for {where}, now {entered[-1]}, nor a record to decide on", last_event
            )


def _check_conversations(sent: Sent, observed: Observed, violation: Any) -> None:
    dead = observed.dead.get("bot", {})
    lost = Counter(observed.unanswered_replies)
    said: dict[int, list[tuple[str, str]]] = defaultdict(list)  # chat -> (output, text), in order
    for chat, text, _ in observed.replies:
        said[chat].append((outputs("bot_start", text) or outputs("bot_contact", text) or "", text))
    for chat, text in observed.edits:
        said[chat].append((outputs("bot_yes", text) or "", text))
    conversations: dict[int, list[tuple[str, Step]]] = defaultdict(list)
    for event_id, step in sent.steps.items():
        if step.kind in BOT_KINDS and sent.accepted(event_id):
            conversations[step.args["chat"]].append((event_id, step))
    for chat, steps in conversations.items():
        steps.sort(key=lambda pair: pair[1].index)
        got = [output for output, _ in said.get(chat, []) if output]
        counts = Counter(got)
        owed: list[str] = []
        for event_id, step in steps:
            if event_id in dead:
                break  # the conversation stopped there: what comes after is not owed
            for output in STEP_OUTPUTS[step.kind]:
                owed.append(output)
                count = counts[output]
                if count == 1:
                    continue
                texts = [text for name, text in said.get(chat, []) if name == output]
                extra = sum(lost[(chat, text)] for text in set(texts))
                detail = f"chat {chat}: the bot's {output!r} came {count} times"
                violation("bot", detail, event_id, excuse=_window(observed, event_id, extra, count, "bot"))
        seen = list(dict.fromkeys(got))
        if [output for output in seen if output in owed] != [output for output in owed if output in seen]:
            violation("order", f"chat {chat}: the bot's outputs out of order: {seen}", steps[0][0])


def _check_edges(seed: int, sent: Sent, observed: Observed) -> list[Violation]:
    """`hidden` and `catch-up` (module docstring)."""
    found = []
    for what in sorted(set(observed.hidden_named) - sent.hidden):
        found.append(
            Violation("hidden", f"{what} skipped as hidden, but the campaign never hid it", what, seed)
        )
    if observed.hidden_counted < len(observed.hidden_named):
        detail = f"{len(observed.hidden_named)} orders skipped as hidden, {observed.hidden_counted} counted"
        found.append(Violation("hidden", detail, "CrmOrdersHidden", seed))
    for portal, moved_at in sorted(sent.portal_moved_at.items()):
        read_to = observed.sweep_read_to.get(portal)
        # The portals date their history in whole seconds.
        if read_to is None or read_to < moved_at - 1:
            detail = (
                f"{portal}'s sweep read its history to {read_to}, not past the last move at {moved_at:.0f}"
            )
            found.append(Violation("catch-up", detail, f"crm-sweep-cursor#{portal}", seed))
    return found
