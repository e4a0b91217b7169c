"""Orders in the CRM stand-ins' own terms: Bitrix24 deals and amoCRM leads moved between stages.

The campaign's other orders come through the generic route, where the CRM says which move it
made. These ones come the way a portal tells them (`local.fakes.bitrix24`, `local.fakes.amocrm`):
a webhook that says only "look at deal 42", sometimes several moves within one second and one
webhook for all of them (collapsed), webhooks lost or posted late (`local.fakes.webhook_faults`).
What happened is in the portal's stage history, which the pipeline reads (`pipeline.crm.sync`,
and the catch-up sweep for what no webhook announced). So every move is real whatever became of
its webhook, and the checker (`local.chaos.checks`) counts SMS against the history the plan made.

Planned here (pure, seeded): which deal, which stages (`stages`: one move, or a burst of two or
three within a second), `collapse`d or not. Played by the campaign (`apply`): the first move of a
deal creates its contact (a one-word name the SMS begins with, a phone of its own) and the deal.
"""

from __future__ import annotations

import itertools
import random
from dataclasses import dataclass, field
from typing import Any

from local.overlay import LOCAL_AMOCRM_PIPELINE, LOCAL_AMOCRM_STATUSES, LOCAL_BITRIX24_STAGES

PORTALS = ("bitrix24", "amocrm")
# Stage (Bitrix24's id, amoCRM's status id as text) -> order status, as the local deployment maps them.
STATUSES: dict[str, dict[str, str]] = {
    "bitrix24": dict(LOCAL_BITRIX24_STAGES["0"]),
    "amocrm": dict(LOCAL_AMOCRM_STATUSES[str(LOCAL_AMOCRM_PIPELINE)]),
}
FIRST_STAGE = {"bitrix24": "NEW", "amocrm": "70011"}
# How the pipeline names an order it logs (`pipeline.crm.sync`: "<crm> <noun> <id>").
NOUNS = {"bitrix24": "deal", "amocrm": "lead"}
# A deal in one of these is done: no more moves are planned for it.
FINAL_STAGES = {"bitrix24": frozenset({"WON", "LOSE", "APOLOGY"}), "amocrm": frozenset({"142", "143"})}
OPEN_DEALS = 8
MOST_MOVES = 5
BURST_SHARE = 0.2


@dataclass
class _Deal:
    portal: str
    key: str
    number: int
    stage: str
    moves: int = 0
    path: list[str] = field(default_factory=list)


class DealPlanner:
    """The deals open at once and their next moves, on the campaign's seeded `random`."""

    def __init__(self, seed: int, pick: random.Random) -> None:
        self.seed, self.random = seed, pick
        self.number = 0
        self.deals: list[_Deal] = []

    def _deal(self) -> _Deal:
        self.deals = [d for d in self.deals if d.stage not in FINAL_STAGES[d.portal] and d.moves < MOST_MOVES]
        while len(self.deals) < OPEN_DEALS:
            self.number += 1
            portal = PORTALS[self.number % len(PORTALS)]
            key = f"{portal[0]}{self.seed}x{self.number}"
            self.deals.append(_Deal(portal, key, self.number, FIRST_STAGE[portal]))
        return self.random.choice(self.deals)

    def move(self) -> dict[str, Any]:
        """The args of a `portal_move` step."""
        deal = self._deal()
        previous = deal.stage
        count = 1 if self.random.random() >= BURST_SHARE else self.random.choice((2, 3))
        stages: list[str] = []
        for position in range(count):
            last = position == count - 1
            allowed = [
                s
                for s in STATUSES[deal.portal]
                if s != deal.stage
                and s != FIRST_STAGE[deal.portal]
                and (last or s not in FINAL_STAGES[deal.portal])
            ]
            deal.stage = self.random.choice(allowed)
            stages.append(deal.stage)
        deal.moves += 1
        args: dict[str, Any] = {
            "portal": deal.portal,
            "deal": deal.key,
            "name": customer(deal.key),
            "phone": f"+4915778{deal.number % 1_000_000:06d}",
            "previous": previous,
            "stages": stages,
            "create": deal.moves == 1,
        }
        if count > 1:
            args["collapse"] = self.random.random() < 0.5
        return args


def customer(deal_key: str) -> str:
    """The deal's contact name: one word, the first of its SMS (`local.chaos.checks.run_of`)."""
    return f"Portal{deal_key}"


def status_transitions(portal: str, stages: list[str]) -> list[str]:
    """The order statuses a deal entered along `stages` (its first stage first): a move between
    two stages of one status is no transition (`pipeline.crm.sync`)."""
    statuses = [STATUSES[portal][stage] for stage in stages]
    return [status for before, status in itertools.pairwise(statuses) if status != before]


def apply(runtime: Any, args: dict[str, Any], ids: dict[str, int]) -> int:
    """Make the planned moves in the stand-in; `ids`: deal key -> its id there (filled on
    creation). The status of the last webhook posted for them (0: lost or held)."""
    portal = args["portal"]
    stages = list(args["stages"])
    if portal == "bitrix24":
        portal_fake = runtime.bitrix24
        if args["create"]:
            contact = portal_fake.create_contact(args["name"], args["phone"])
            ids[args["deal"]] = portal_fake.create_deal(f"Chaos {args['deal']}", contact_id=contact).deal_id
        deal_id = ids[args["deal"]]
        if len(stages) == 1:
            deliveries = [portal_fake.move_deal(deal_id, stages[0])]
        else:
            deliveries = portal_fake.burst_moves(deal_id, stages, collapse=bool(args.get("collapse")))
    else:
        account = runtime.amocrm
        if args["create"]:
            contact = account.create_contact(args["name"], args["phone"])
            ids[args["deal"]] = account.create_lead(
                f"Chaos {args['deal']}", LOCAL_AMOCRM_PIPELINE, int(FIRST_STAGE["amocrm"]), contact
            )
        lead_id = ids[args["deal"]]
        if len(stages) == 1:
            deliveries = [account.change_statuses([(lead_id, int(stages[0]))])]
        else:
            statuses = [int(stage) for stage in stages]
            deliveries = account.burst_statuses(lead_id, statuses, collapse=bool(args.get("collapse")))
    return int(deliveries[-1].status or 0)


def webhook_faults(runtime: Any, portal: str, document: dict[str, Any]) -> None:
    """Lose or hold the portal's next webhooks (`local.fakes.webhook_faults`)."""
    runtime.fakes[portal].webhook_faults.add(document)


def clear_webhook_faults(runtime: Any) -> None:
    """No more lost or held webhooks; the held ones posted now."""
    for portal in PORTALS:
        fake = runtime.fakes.get(portal)
        if fake is not None:
            fake.webhook_faults.clear()
            fake.webhook_faults.flush()
