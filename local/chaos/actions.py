"""The campaign's operator and customer actions among its events (pure, seeded): broadcasts, opt-outs
and old redrives, inserted into the plan `local.chaos.workload.plan` made.

Drawn from a random stream of their own, so a seed's events and faults stay what they were (the
short campaign's seed keeps its edge faults); played by `local.chaos.steering`, checked by
`local.chaos.outcomes`:

- `broadcast_create`: `bin/ops broadcast create --text ... --yes` mid-campaign, over the private
  chats the campaign's messages and conversations made (the store's audience); just before it,
  `user_blocks_bot`: one to three chats whose steps are done block the bot (the stand-in answers
  their messages 403 from then on). The create's `faults` are injected once it returned, so they
  meet its pages: a Telegram answer lost, a 429, a 5xx, a `broadcast` worker killed mid-page.
  Then, by the seed, nothing, `broadcast_pause` and `broadcast_resume` a few events later, or
  `broadcast_cancel`;
- `sms_opt_out`: the customer of a generic-route order with a move still to come opts out, by
  `bin/ops sms opt-out` (the suppression list) or a STOP reply to End User Messaging (its own list);
- `old_redrive`: a notification dead-lettered days ago (its move that old) lies in sms's DLQ, and
  the operator redrives that DLQ (`bin/ops dlq redrive`'s move), mid-campaign.
"""

from __future__ import annotations

import random
from collections import defaultdict

from local.chaos.workload import Step

# One broadcast, and one more per this many events.
BROADCAST_EVERY = 2500
# One opt-out per this many events (at least one), one old redrive per this many (at least one).
OPT_OUT_EVERY = 400
OLD_REDRIVE_EVERY = 1000
# Where among the events a broadcast is created (a share of them): chats exist, events follow.
BROADCAST_SPAN = (0.35, 0.75)
# What `pause`/`resume`/`cancel` a broadcast gets, by weight.
STEERING = {"none": 2, "pause": 1, "cancel": 1}
# How many days old an old redrive's move is.
OLD_DAYS = (2.0, 6.0)
OLD_STATUS, OLD_PREVIOUS = "ready_for_pickup", "shipped"
BROADCAST_TEXT = "Chaos broadcast"


def broadcast_text(text: str, attempt: int = 1) -> str:
    """A create tried again (`local.chaos.steering`) names its attempt in the text."""
    return f"{text} (attempt {attempt})" if attempt > 1 else text


def with_actions(seed: int, steps: list[Step]) -> list[Step]:
    """`steps` with the actions inserted (indices renumbered; kinds and args unchanged)."""
    pick = random.Random(f"chaos-actions-{seed}")
    events = [position for position, step in enumerate(steps) if not step.is_fault]
    if not events:
        return list(steps)
    inserted: dict[int, list[Step]] = defaultdict(list)  # before the step at this position

    def at(share: float) -> int:
        return events[min(len(events) - 1, int(share * len(events)))]

    quiet = _quiet_chats(steps)
    for number in range(1, 2 + len(events) // BROADCAST_EVERY):
        share = pick.uniform(*BROADCAST_SPAN)
        position = at(share)
        done = sorted(chat for chat, last in quiet.items() if last < position)
        blocked = pick.sample(done, min(len(done), pick.randint(1, 3)))
        if blocked:
            inserted[position].append(Step(-1, "user_blocks_bot", {"chats": blocked}))
        faults = [
            {"kind": "telegram_lost_answer", "count": 1},
            {"kind": "telegram_429", "count": 1, "retry_after": 1},
            {"kind": "telegram_5xx", "count": pick.randint(1, 2), "status": pick.choice((500, 502))},
            {"kind": "kill_worker", "function": "broadcast", "after": round(pick.uniform(0.2, 1.5), 2)},
        ]
        text = f"{BROADCAST_TEXT} {seed}-{number}: our summer sale starts today!"
        inserted[position].append(
            Step(-1, "broadcast_create", {"number": number, "text": text, "faults": faults})
        )
        steering = pick.choices(list(STEERING), list(STEERING.values()))[0]
        later = at(min(0.99, share + pick.randint(1, 8) / len(events)))
        if steering == "pause":
            inserted[later].append(Step(-1, "broadcast_pause", {"number": number}))
            resumed = at(min(0.99, share + pick.randint(9, 16) / len(events)))
            inserted[max(resumed, later)].append(Step(-1, "broadcast_resume", {"number": number}))
        elif steering == "cancel":
            inserted[later].append(Step(-1, "broadcast_cancel", {"number": number}))
    moves = _moves(steps)
    for _ in range(max(1, len(events) // OPT_OUT_EVERY)):
        position = at(pick.uniform(0.2, 0.8))
        open_orders = sorted(order for order, (_, at_) in moves.items() if max(at_) > position)
        if open_orders:
            order = pick.choice(open_orders)
            phone = moves[order][0]
            via = pick.choice(("ops", "stop"))
            inserted[position].append(Step(-1, "sms_opt_out", {"order": order, "phone": phone, "via": via}))
    for number in range(1, 1 + max(1, len(events) // OLD_REDRIVE_EVERY)):
        position = at(pick.uniform(0.1, 0.9))
        order = f"CHOLD{seed}-{number}"
        args = {
            "order": order,
            "phone": f"+4915775{number % 1_000_000:06d}",
            "status": OLD_STATUS,
            "previous": OLD_PREVIOUS,
            "run": 1,
            "days": round(pick.uniform(*OLD_DAYS), 2),
            "event_id": f"evt-{order}-1",
        }
        inserted[position].append(Step(-1, "old_redrive", args))
    merged: list[Step] = []
    for position, step in enumerate(steps):
        merged.extend(inserted.get(position, ()))
        merged.append(step)
    return [Step(index, step.kind, step.args) for index, step in enumerate(merged)]


def _quiet_chats(steps: list[Step]) -> dict[int, int]:
    """Autoreply chats and the position of their last message (a chat quiet after it)."""
    return {
        step.args["chat"]: position
        for position, step in enumerate(steps)
        if step.kind in ("message", "concurrent")
    }


def _moves(steps: list[Step]) -> dict[str, tuple[str, list[int]]]:
    """Per generic-route order: its phone and the positions of its moves."""
    found: dict[str, tuple[str, list[int]]] = {}
    for position, step in enumerate(steps):
        if step.kind == "crm_move":
            found.setdefault(step.args["order"], (step.args["phone"], []))[1].append(position)
    return found
