"""The invariants of the campaign's actions (`local.chaos.actions`): broadcasts, opt-outs, old
redrives. Pure, like `local.chaos.checks`: what the actions did (`Acted`), what the pipeline did
(`Seen`, read by `local.chaos.steering`), and the violations, each with the seed and its path.

- `broadcast`: each job ends `done` or `cancelled`; its counters add up to its total and equal its
  chats' entries (a claim without an outcome counts `unknown`); every audience chat has an entry
  and is a chat of the campaign; per chat, never two messages; `sent`: exactly one; `blocked`,
  `failed`, `cancelled`: none; a chat that blocked the bot gets none and nothing else does
  (a 403 for a chat that never blocked it, a `failed`, a `cancelled` of a job never cancelled
  are violations). `unknown` (the claim's answer was lost, the worker died during the call) is
  at most one message and never sent again: counted apart with its evidence (the Bot API's answer
  to that message lost or late, a `broadcast` worker killed or timed out holding its page, a
  DynamoDB answer lost while the job was sending); without evidence it is a violation. A job whose
  create was interrupted (the operator then cancelled it and created again, docs/broadcast.md)
  owes its unpublished pages nothing, but never two messages either;
- `opt-out`: no SMS reaches a number after it opted out (for `ops sms opt-out`, the suppression
  list's write: a send checked against the list just before, `CHECK_TO_SEND_SECONDS`, is the
  check-then-send window), and each move into a status with a rule the order makes after it ends
  `suppressed` (or `superseded`, for a run the order left), never sent, never dead-lettered;
- `expired`: an old redrive (a move days old) ends `expired`, unsent, not dead-lettered again;
- `ended`: no SMS for a run whose record ended `suppressed` or `expired`.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from local.chaos.checks import Sent, Violation, customer_name, run_of
from local.chaos.workload import Step
from pipeline.broadcast import PAGE_SIZE, page_event_id

# A send checked against the suppression list just before the opt-out's write may reach the gateway
# just after it: the claim and the gateway call between (milliseconds; seconds on a loaded machine).
CHECK_TO_SEND_SECONDS = 2.0
# An entry's state -> the outcome it counts as (a claim without an outcome is `unknown`).
COUNTED_AS = {"sending": "unknown"}


@dataclass
class Created:
    """One `ops broadcast create` the operator ran: its id and recipients as printed, or its error."""

    number: int
    attempt: int
    text: str
    started_at: float
    broadcast_id: str | None = None
    recipients: int | None = None
    error: str = ""
    steered: list[str] = field(default_factory=list)  # "pause", "resume", "cancel" that took effect


@dataclass
class Acted:
    """What the campaign's actions did, as the campaign saw it."""

    creates: list[Created] = field(default_factory=list)
    # Chats whose user blocked the bot, when.
    blocked: dict[int, float] = field(default_factory=dict)
    # Opted-out phone -> (the action's step, when it took effect: the list's write or the STOP's answer).
    opted_out: dict[str, tuple[Step, float]] = field(default_factory=dict)
    old_redrives: list[Step] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


@dataclass
class Seen:
    """What the pipeline did about them, read once it drained."""

    # broadcast id -> its job item; broadcast id -> chat -> its entry's state.
    jobs: dict[str, dict[str, Any]] = field(default_factory=dict)
    entries: dict[str, dict[int, str]] = field(default_factory=dict)
    # (chat, text, answer lost or late) of each broadcast message the Bot API took.
    messages: list[tuple[int, str, bool]] = field(default_factory=list)
    # Chats the Bot API answered 403 for a broadcast message.
    refused: set[tuple[int, str]] = field(default_factory=set)
    # (to, text, accepted_at) of each SMS the gateway took.
    sms: list[tuple[str, str, float]] = field(default_factory=list)
    # When a DynamoDB answer was lost (the campaign's faults).
    dynamodb_lost: list[float] = field(default_factory=list)
    # Per consumer, the events killed or timed-out workers held (`local.chaos.inflight`).
    undecided: dict[str, list[str]] = field(default_factory=dict)


def check(
    seed: int,
    sent: Sent,
    acted: Acted,
    seen: Seen,
    sms_records: list[tuple[str, str, str]],
    dead: dict[str, dict[str, str]],
    rules: frozenset[str],
) -> list[Violation]:
    """Every invariant of the module docstring; `dead`: per consumer, its dead letters held at
    the end or redriven before."""
    found: list[Violation] = []
    campaign_chats = {int(s.args["chat"]) for s in sent.steps.values() if "chat" in s.args}
    for created in acted.creates:
        if created.broadcast_id is not None or created.error:
            found.extend(_broadcast(seed, created, acted, seen, campaign_chats))
    states: dict[str, list[str]] = {}
    for _, state, run in sms_records:
        states.setdefault(run, []).append(state)
    per_run = Counter(run_of(text) for _, text, _ in seen.sms)
    for run, ended in states.items():
        for state in ended:
            if state in ("suppressed", "expired") and per_run[run]:
                detail = f"{per_run[run]} SMS for a run that ended {state}"
                found.append(Violation("ended", detail, run, seed))
    found.extend(_opt_outs(seed, sent, acted, seen, states, dead, rules))
    for step in acted.old_redrives:
        run = customer_name(step.args["order"], step.args["run"])
        got = states.get(run, [])
        if got != ["expired"]:
            detail = f"an old redrive ({step.args['days']} days) ended {got or 'with no record'}, not expired"
            found.append(Violation("expired", detail, step.path(), seed))
    return found


def _broadcast(
    seed: int, created: Created, acted: Acted, seen: Seen, campaign_chats: set[int]
) -> list[Violation]:
    found: list[Violation] = []
    path = f"#{created.number} broadcast_create attempt {created.attempt} id={created.broadcast_id}"

    def violation(detail: str, excuse: str = "") -> None:
        found.append(Violation("broadcast", detail, path, seed, excuse))

    delivered = Counter(chat for chat, text, _ in seen.messages if text == created.text)
    unanswered = {chat for chat, text, lost in seen.messages if text == created.text and lost}
    job = seen.jobs.get(created.broadcast_id or "")
    entries = seen.entries.get(created.broadcast_id or "", {})
    for chat, count in sorted(delivered.items()):
        if count > 1:
            violation(f"chat {chat} got the broadcast {count} times")
        if chat not in entries:
            violation(f"chat {chat} got the broadcast without an entry")
    if job is None:
        if not created.error:
            violation("no job in the journal")
        return found
    interrupted = bool(created.error)
    total = int(job.get("total", 0))
    counters = {o: int(job.get(o, 0)) for o in ("sent", "blocked", "failed", "unknown", "cancelled")}
    tally = Counter(COUNTED_AS.get(state, state) for state in entries.values())
    if job.get("state") not in ("done", "cancelled"):
        violation(f"the job ended {job.get('state')}")
    if not interrupted:
        if created.recipients != total or len(entries) != total:
            printed = f"create printed {created.recipients} recipients"
            violation(f"{printed}, the job has {total}, the journal {len(entries)} entries")
        if sum(counters.values()) != total or {k: v for k, v in counters.items() if v} != dict(tally):
            violation(f"the job counted {counters}, its entries are {dict(tally)}")
    audience = sorted(entries)
    kills = Counter(seen.undecided.get("broadcast", []))
    ended = float(job.get("updated_at") or float("inf")) + 1  # whole seconds
    lost_while = [at for at in seen.dynamodb_lost if created.started_at <= at <= ended]
    for position, chat in enumerate(audience):
        state, count = entries[chat], delivered[chat]
        if chat not in campaign_chats:
            violation(f"chat {chat} is in the audience but no chat of the campaign")
        if chat in acted.blocked and count:
            violation(f"chat {chat} blocked the bot and got the broadcast")
        if state == "sent" and count != 1:
            violation(f"chat {chat} is counted sent and got it {count} times")
        elif state == "blocked" and chat not in acted.blocked:
            violation(f"chat {chat} is counted blocked but never blocked the bot")
        elif state in ("blocked", "failed", "cancelled") and count:
            violation(f"chat {chat} is counted {state} and got it {count} times")
        elif state == "failed":
            violation(f"chat {chat} is counted failed: no fault of the campaign refuses a chat for good")
        elif state == "cancelled" and "cancel" not in created.steered:
            violation(f"chat {chat} is counted cancelled, but the job was never cancelled")
        elif state in ("unknown", "sending"):
            evidence = []
            if chat in unanswered:
                evidence.append("the Bot API's answer to it lost or late")
            page = page_event_id(str(created.broadcast_id), position // PAGE_SIZE)
            if kills[page]:
                evidence.append(f"{kills[page]} broadcast worker(s) killed or timed out holding its page")
            if lost_while:
                evidence.append(f"{len(lost_while)} DynamoDB answer(s) lost while it was sending")
            detail = f"chat {chat} is unknown and got it {count} times (never sent again)"
            violation(detail, excuse="; ".join(evidence) or "")
    return found


def _opt_outs(
    seed: int,
    sent: Sent,
    acted: Acted,
    seen: Seen,
    states: dict[str, list[str]],
    dead: dict[str, dict[str, str]],
    rules: frozenset[str],
) -> list[Violation]:
    found: list[Violation] = []
    for phone, (step, at) in sorted(acted.opted_out.items()):
        window = CHECK_TO_SEND_SECONDS if step.args["via"] == "ops" else 0.0
        late = [accepted for to, _, accepted in seen.sms if to == phone and accepted > at + window]
        if late:
            detail = (
                f"{len(late)} SMS after the number opted out ({step.args['via']}),"
                f" the first {late[0] - at:.1f}s after"
            )
            found.append(Violation("opt-out", detail, step.path(), seed))
        moves = [
            (event_id, move)
            for event_id, move in sent.steps.items()
            if move.kind == "crm_move"
            and move.args["order"] == step.args["order"]
            and sent.accepted(event_id)
            and sent.first_posted.get(event_id, 0.0) > at
        ]
        last = max((move.args["run"] for _, move in moves), default=None)
        for event_id, move in moves:
            if move.args["status"] not in rules:
                continue
            run = customer_name(move.args["order"], move.args["run"])
            allowed = {"suppressed"} if move.args["run"] == last else {"suppressed", "superseded"}
            got = states.get(run, [])
            if not got or set(got) - allowed:
                ended = got or "with no record"
                detail = f"a move into {move.args['status']} after the opt-out ended {ended}"
                found.append(Violation("opt-out", detail, f"{step.path()} -> {move.path()}", seed))
            if event_id in dead.get("sms", {}):
                detail = f"a move after the opt-out was dead-lettered ({dead['sms'][event_id]})"
                found.append(Violation("opt-out", detail, f"{step.path()} -> {move.path()}", seed))
    return found


def figures(acted: Acted, seen: Seen, sms_records: list[tuple[str, str, str]]) -> dict[str, Any]:
    """The report's figures of the actions: per broadcast its outcomes, and the SMS ended unsent."""
    broadcasts = []
    for created in acted.creates:
        job = seen.jobs.get(created.broadcast_id or "", {})
        entries = seen.entries.get(created.broadcast_id or "", {})
        broadcasts.append(
            {
                "number": created.number,
                "attempt": created.attempt,
                "id": created.broadcast_id,
                "error": created.error or None,
                "steered": created.steered,
                "state": job.get("state"),
                "recipients": created.recipients,
                **{o: int(job.get(o, 0)) for o in ("sent", "blocked", "failed", "unknown", "cancelled")},
                "entries": len(entries),
                "messages": sum(1 for _, text, _ in seen.messages if text == created.text),
            }
        )
    ended = Counter(state for _, state, _ in sms_records if state in ("suppressed", "expired", "superseded"))
    return {
        "broadcasts": broadcasts,
        "blocked_chats": len(acted.blocked),
        "opted_out": len(acted.opted_out),
        "old_redrives": len(acted.old_redrives),
        "sms_ended_unsent": dict(sorted(ended.items())),
        "action_errors": acted.errors[:20],
    }
