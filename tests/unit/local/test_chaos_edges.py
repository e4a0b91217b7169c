"""The campaign's faults at the edges (`local.chaos.edges`): planned from the seed, and the
invariants they are checked by (`hidden`, `catch-up`), on what the pipeline's logs and journal say."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from local.chaos.checks import Observed, Sent, check
from local.chaos.edges import CREDENTIALS, KINDS, EdgeFaults
from local.chaos.observe import HIDDEN_MESSAGE, hidden_orders
from local.chaos.shape import campaign_consumers
from local.chaos.workload import FAULT_WEIGHTS, LONGEST_REFUSAL_SECONDS, ROTATED_VENDORS, Step, plan
from local.fakes.amocrm import AmoCrmFake
from local.fakes.bitrix24 import Bitrix24PortalFake
from local.fakes.telegram import TelegramFake
from local.resources import LOCAL_SECRET_VALUES
from local.settings import LocalSettings
from pipeline import aws
from pipeline.crm.sources import HIDDEN_METRIC
from pipeline.secrets import REFRESH_ON_MISMATCH_INTERVAL_SECONDS

SEED = 2095
RULES = frozenset({"shipped"})


def test_each_edge_fault_is_planned_from_the_seed_with_what_replays_it() -> None:
    steps = plan(SEED, 3000)
    assert steps == plan(SEED, 3000)
    edges = [step for step in steps if step.kind in KINDS]
    assert {step.kind for step in edges} == KINDS and set(FAULT_WEIGHTS) >= KINDS
    assert set(ROTATED_VENDORS) == set(CREDENTIALS)
    for step in edges:
        if step.kind == "token_rotated":
            assert step.args["vendor"] in ROTATED_VENDORS and 0 <= step.args["gap"] <= 3
        if step.kind in ("token_rotated", "bot_token_revoked"):
            assert len(step.args["value"]) >= 20 and step.args["value"].replace("_", "").isalnum()
        if step.kind == "portal_outage":
            assert step.args["periods"] > 1  # longer than one sweep's window
    # Each rotation issues its own credential.
    values = [step.args["value"] for step in edges if "value" in step.args]
    assert len(values) == len(set(values))


def edge_check(sent: Sent, observed: Observed) -> list[tuple[str, str]]:
    return [(v.invariant, v.detail) for v in check(SEED, sent, observed, RULES)]


def test_an_order_skipped_as_hidden_must_be_one_the_campaign_hid_and_be_counted() -> None:
    sent = Sent(hidden={"bitrix24 deal 7"})
    assert edge_check(sent, Observed(hidden_named=["bitrix24 deal 7"], hidden_counted=1)) == []

    assert edge_check(sent, Observed(hidden_named=["bitrix24 deal 8"], hidden_counted=1)) == [
        ("hidden", "bitrix24 deal 8 skipped as hidden, but the campaign never hid it")
    ]
    assert edge_check(sent, Observed(hidden_named=["bitrix24 deal 7"] * 2, hidden_counted=1)) == [
        ("hidden", "2 orders skipped as hidden, 1 counted")
    ]


def test_a_portal_whose_sweep_never_read_past_its_last_move_breaks_catch_up() -> None:
    sent = Sent(portal_moved_at={"amocrm": 1000.4, "bitrix24": 2000.0})
    caught_up = Observed(sweep_read_to={"amocrm": 1000.0, "bitrix24": 2005.0})
    assert edge_check(sent, caught_up) == []

    behind = edge_check(sent, Observed(sweep_read_to={"amocrm": 990.0}))
    assert [invariant for invariant, _ in behind] == ["catch-up", "catch-up"]
    assert "amocrm's sweep read its history to 990.0" in behind[0][1]
    assert "bitrix24's sweep read its history to None" in behind[1][1]


def test_the_observer_reads_the_hidden_orders_the_crm_consumers_logged_and_counted(tmp_path: Path) -> None:
    """The warning names the order; the metric is Powertools' EMF line beside it (`pipeline.crm.sources`)."""
    lines = [
        {"level": "WARNING", "message": HIDDEN_MESSAGE, "what": "bitrix24 deal 7", "missing_right": "Read"},
        {"_aws": {"CloudWatchMetrics": []}, HIDDEN_METRIC: [1.0]},
        {"level": "INFO", "message": "Order status published", "order_id": "7"},
    ]
    (tmp_path / "bitrix24#2.log").write_text(
        "".join(json.dumps(line) + "\n" for line in lines) + "not json\n"
    )
    amo = [{"level": "WARNING", "message": HIDDEN_MESSAGE, "what": "amocrm lead 3"}, {HIDDEN_METRIC: 1.0}]
    (tmp_path / "amocrm.log").write_text("".join(json.dumps(line) + "\n" for line in amo))
    (tmp_path / "sms.log").write_text(json.dumps({"message": HIDDEN_MESSAGE, "what": "not a CRM's"}) + "\n")

    named, counted = hidden_orders(SimpleNamespace(log_dir=tmp_path))  # type: ignore[arg-type]

    assert sorted(named) == ["amocrm lead 3", "bitrix24 deal 7"] and counted == 2


# -- played against the stand-ins and moto's Secrets Manager (`EdgeFaults`) ------------------------------
class World:
    """What `EdgeFaults` plays on: the stand-ins, the settings and the secrets of a runtime."""

    def __init__(self, fakes: dict[str, Any]) -> None:
        self.fakes = fakes
        self.settings = LocalSettings.from_cdk_json(crm_sweep_every_seconds=0.2)
        client = aws.client("secretsmanager")
        secrets = {}
        for name, (secret, _) in CREDENTIALS.items():
            value = LOCAL_SECRET_VALUES[secret](self.settings, self.fake_urls()) if name in fakes else "-"
            secrets[secret] = client.create_secret(Name=f"chaos-{secret}", SecretString=value)["ARN"]
        self.resources = SimpleNamespace(secrets=secrets)

    def fake_urls(self) -> dict[str, str]:
        return {name: fake.url for name, fake in self.fakes.items()}

    def client(self, service: str) -> Any:
        return aws.client(service)

    def secret(self, name: str) -> str:
        value: str = aws.client("secretsmanager").get_secret_value(SecretId=self.resources.secrets[name])[
            "SecretString"
        ]
        return value


def edge_faults(world: World, sent: Sent | None = None) -> tuple[EdgeFaults, set[str], list[str]]:
    sent = sent or Sent()
    errors: list[str] = []
    return EdgeFaults(lambda: world, threading.Lock(), sent, errors), sent.hidden, errors


def test_a_revoked_bot_token_is_replaced_in_the_stand_in_and_the_secret_and_kept_across_a_restart(
    moto_aws: None,
) -> None:
    with TelegramFake(token=LocalSettings.from_cdk_json().telegram_bot_token) as telegram:
        world = World({"telegram": telegram})
        faults, _, errors = edge_faults(world)
        old = telegram.token

        faults.inject(Step(1, "bot_token_revoked", {"value": "AAchaosTestRevokedThenNew01", "seconds": 0.05}))
        assert telegram.account.state()["blocked"] == "revoked"
        time.sleep(0.3)

        new = f"{telegram.bot_id}:AAchaosTestRevokedThenNew01"
        assert telegram.token == new != old and telegram.account.state()["blocked"] is None
        assert world.secret("telegram_bot_token") == new
        # A restart makes the secrets again with their local values; the operator's is put back.
        aws.client("secretsmanager").put_secret_value(
            SecretId=world.resources.secrets["telegram_bot_token"], SecretString=old
        )
        faults.restore_secrets()
        assert world.secret("telegram_bot_token") == new and errors == []


def test_a_rotation_reaches_the_secret_only_after_its_gap_or_when_the_faults_are_cleared(
    moto_aws: None,
) -> None:
    with AmoCrmFake(
        token=LocalSettings.from_cdk_json().amocrm_token, handler_url="http://127.0.0.1:9/"
    ) as amo:
        world = World({"amocrm": amo})
        faults, _, errors = edge_faults(world)
        before = world.secret("amocrm_api")

        faults.inject(
            Step(1, "token_rotated", {"vendor": "amocrm", "value": "AAchaosNewAmoToken0001", "gap": 60})
        )

        assert amo.token == "AAchaosNewAmoToken0001" and world.secret("amocrm_api") == before
        faults.finish()
        assert json.loads(world.secret("amocrm_api"))["token"] == "AAchaosNewAmoToken0001" and errors == []


def test_a_hidden_deal_is_named_and_shown_again_and_a_portal_outage_ends_by_itself(moto_aws: None) -> None:
    with Bitrix24PortalFake(handler_url="http://127.0.0.1:9/") as portal:
        world = World({"bitrix24": portal})
        first, deal = (portal.create_deal(name, emit=False).deal_id for name in ("First", "Moved last"))
        sent = Sent(portal_ids={"b1x1": first, "b1x2": deal})
        move = {"portal": "bitrix24", "deal": "b1x2", "stages": ["PREPARATION"]}
        sent.steps["portal:b1x2:5"] = Step(5, "portal_move", move)
        faults, hidden, errors = edge_faults(world, sent)

        faults.inject(Step(1, "deal_hidden", {"portal": "bitrix24", "pick": 7, "seconds": 0.05}))
        assert not portal.access.may_read(deal, 0) and hidden == {f"bitrix24 deal {deal}"}
        assert portal.access.may_read(first, 0)  # the deal moved last is the one hidden
        faults.inject(Step(2, "portal_outage", {"portal": "bitrix24", "periods": 1.5}))  # 0.3 s here
        time.sleep(0.1)
        assert portal.is_down and portal.access.may_read(deal, 0)
        time.sleep(0.5)
        assert not portal.is_down and errors == []


def test_a_deal_left_untexted_is_excused_only_by_a_named_hidden_skip_of_it() -> None:
    """README: a hidden order is counted, named and alarmed, nothing marked handled; its next event
    texts it. A deal whose last move was skipped so, and which never moved again, owes no SMS; any
    other untexted deal is still a violation."""
    sent = Sent(portal_ids={"b1": 42}, hidden={"bitrix24 deal 42"})
    move = {"portal": "bitrix24", "deal": "b1", "name": "Portalb1", "phone": "+4915778000001"}
    sent.steps["portal:b1:0"] = Step(0, "portal_move", {**move, "stages": ["EXECUTING"], "create": True})
    rules = frozenset({"ready_for_pickup"})

    [untexted] = check(SEED, sent, Observed(), rules)
    assert untexted.detail.startswith("no SMS for bitrix24 deal 42")
    assert check(SEED, sent, Observed(hidden_named=["bitrix24 deal 42"], hidden_counted=1), rules) == []
    others = check(SEED, sent, Observed(hidden_named=["bitrix24 deal 43"], hidden_counted=1), rules)
    # Another deal's skip excuses nothing, and the campaign never hid that one.
    assert sorted(v.invariant for v in others) == ["hidden", "portal"]


def test_chaos_seed_40_an_ordered_consumers_pauses_outlast_a_revoked_token_and_a_re_read_interval() -> None:
    """Seed 40 (6,000 events): the bot token revoked for up to 12 s, then replaced; a worker that had
    re-read the secret while it was revoked may re-read it again only a minute later, and autoreply's
    ordered chats, paused 3 s at a time within their queue's 24 receives (72 s), dead-lettered 14
    replies as "paused ... the queue's retention". Each ordered consumer's pauses now outlast the
    longest refusal plus one re-read interval, twice over."""
    for consumer in campaign_consumers():
        if consumer.ordered:
            assert consumer.retry.pause_seconds is not None
            budget = consumer.retry.pause_seconds * consumer.redrive_max_receive_count
            assert budget >= 2 * (LONGEST_REFUSAL_SECONDS + REFRESH_ON_MISMATCH_INTERVAL_SECONDS), (
                consumer.name
            )


def test_chaos_seed_40_an_account_refusal_dead_lettered_then_redriven_is_still_a_violation() -> None:
    """Seed 40's 14 autoreply replies, dead-lettered as paused past their queue's receives, were
    redriven by the operator before the checks read the DLQs, and no invariant saw them."""
    reason = "paused 0.0 days, the queue's retention: account refused (unauthorized): telegram sendMessage"
    redriven = Observed(redriven={"autoreply": {"telegram:1:10": reason}})
    [found] = [v for v in check(SEED, Sent(), redriven, RULES) if v.invariant == "account"]
    assert found.detail == "dead-lettered by autoreply for a refusal of the whole account"
    transient = Observed(
        redriven={"bitrix24": {"look": "retries exhausted after 8 attempts: connection failed"}}
    )
    assert check(SEED, Sent(), transient, RULES) == []
