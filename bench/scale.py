"""A scale model: where the pipeline stops keeping up at 10 to 10,000 updates a second (issue 26).

`python -m bench scale` (the four rates) or `python -m bench scale --rate N`: for a campaign's mix
of Telegram updates and CRM order-status events arriving at a steady rate, each hop's load and
the limit it meets (`infra.limits`, each with its page and date), the first limit reached, the
queues that grow where a consumer cannot keep up, the reply delay after an hour of it, and the
cost per hour (`bench.cost`'s model, `infra.prices`). Twice: as deployed by default (`DEFAULT`),
and with README's "Before a campaign" changes made (`CAMPAIGN`: the stage throttle, Telegram's
connections and the consumers' concurrency raised).

What it reads, not restates: the consumers, their filter policies, `max_concurrency`, memory and
batch size (`pipeline.registry`, with the deployment's defaults plus `crm_leads`); the HTTP API's
stage throttle (`infra.config.PipelineSettings`); the Telegram pacing's budget
(`pipeline.pacing`); the webhook's `max_connections` (`ops.telegram`). Each function's CPU per
request or record comes from the load run (`bench.pipeline`'s `load` phase, `bench.hops`):
`MEASURED` below, as measured at the commit it names, so README's table is reproducible;
`--measured` takes the latest run's from `.local/bench/results.json` instead.

How a hop's capacity is modelled: a consumer runs at most `max_concurrency` environments, each
working its batch's records one after another, a record taking its CPU time (scaled to its
memory's vCPU share, `bench.cost.cpu_factor`) plus the calls it waits on (`bench.cost`'s
latencies), so `max_concurrency x 1000 / ms` records a second; a sending consumer is also held
to Telegram's budget (`pipeline.pacing`), the SMS consumer to its origination identity's rate,
which counts message parts: each SMS is the parts its rule's text makes (`sms_parts`: the team's
rules file, each text at its longest as `ops sms preview` counts it, by language).
Where load exceeds capacity the queue grows by the difference; after `HOUR` seconds the last
record waits `backlog / capacity`. Ingress that API Gateway throttles (429) is not lost: Telegram
keeps an undelivered update and retries, so it is a queue too, at Telegram.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from dataclasses import asdict, dataclass, replace
from functools import cache
from typing import Any

from bench import cost
from bench.common import load_results, table
from infra.config import PipelineSettings
from infra.environment import WEBHOOK
from infra.limits import LIMITS, Limit
from infra.prices import TRAFFIC
from ops.telegram import DEFAULT_MAX_CONNECTIONS
from pipeline import pacing
from pipeline.registry import Consumer, enabled, matches
from pipeline.sms.rules import SmsRules, load_rules, rules_file

RATES = (10, 100, 1_000, 10_000)
HOUR = 3600
# The deployment modelled: the defaults, with new contacts becoming CRM leads (the campaign's
# point); no AI, no bot application (autoreply answers).
SETTINGS: dict[str, Any] = {**PipelineSettings().model_dump(), "crm_leads": True}

# A campaign's traffic, per event arriving: Telegram updates by kind (a new user's /start, a
# message, a button press, the rest) and CRM order-status events. Change it to yours.
CAMPAIGN_MIX: dict[str, float] = {
    "start": 0.40,
    "message": 0.40,
    "callback_query": 0.08,
    "edited_message": 0.02,
    "crm": 0.10,
}
# The SNS attributes of each kind (what the filter policies see).
ATTRIBUTES: dict[str, dict[str, str]] = {
    "start": {"source": "telegram", "type": "message", "chat_type": "private", "command": "/start"},
    "message": {"source": "telegram", "type": "message", "chat_type": "private"},
    "callback_query": {"source": "telegram", "type": "callback_query", "chat_type": "private"},
    "edited_message": {"source": "telegram", "type": "edited_message", "chat_type": "private"},
    "crm": {"source": "crm", "type": "order.status_changed"},
}
# Of the CRM events, those whose status has an SMS rule (team/sms_rules.json): assumed.
SMS_RULE_SHARE = 0.5
# The SMS by the language they are written in (a language of the rules file; another one is
# its fallback language's text). None: each language of the rules file alike. Change it to yours.
SMS_LANGUAGE_MIX: dict[str, float] | None = None
SMS_SEND_MS = 100.0  # End User Messaging's SendTextMessage, assumed
# Round trip of one webhook delivery from Telegram's servers (network + API Gateway + the
# function), assumed; with `max_connections` it bounds Telegram's delivery rate.
WEBHOOK_ROUND_TRIP_MS = 80.0

# CPU ms per request (webhook) or record (consumers) on this repository's machine (2 CPUs, crowded:
# upper bounds), from `python -m bench pipeline`'s load run of MEASURED_AT: 300 requests, one in ten
# a CRM event (bench/README.md quotes the run). `--measured` reads the latest run instead.
MEASURED_AT = "the load run of 2026-12-02 (bench/README.md, pipeline)"
MEASURED: dict[str, float] = {
    "webhook": 5.83,
    "store": 15.41,
    "crm": 13.67,
    "autoreply": 12.78,
    "analytics": 12.48,
    "ai": 9.74,
    "sms": 55.67,
}
DEFAULT_CPU_MS = 15.0  # a consumer without a measured figure


def sms_parts(rules: SmsRules | None = None, mix: Mapping[str, float] | None = None) -> float:
    """Billed parts per SMS (End User Messaging's MPS counts parts): each rule's text in each
    language at its longest (`SmsRules.sizes`, what `ops sms preview` shows and the synth bounds),
    the rules alike, the languages weighted by `mix` (None: alike). The longest, as a carrier's
    throttle is planned for the texts that may come, not the typical one."""
    rules = rules if rules is not None else _team_rules()
    by_language: dict[str, list[int]] = {}
    for sized in rules.sizes():
        by_language.setdefault(sized.language, []).append(sized.size.parts)
    weights = dict(mix) if mix is not None else dict.fromkeys(by_language, 1.0)
    fallback = by_language[rules.fallback_language]

    def mean(parts: list[int]) -> float:
        return sum(parts) / len(parts)

    total = sum(weights.values())
    return (
        sum(weight * mean(by_language.get(language, fallback)) for language, weight in weights.items())
        / total
    )


@cache
def _team_rules() -> SmsRules:
    return load_rules(str(rules_file()))


@dataclass(frozen=True)
class Hop:
    """One hop at one rate: its load, its capacity, and the limit that sets it."""

    name: str
    load: float  # per second
    capacity: float  # per second
    limit: str  # a key of infra.limits.LIMITS, or a setting
    note: str = ""

    @property
    def use(self) -> float:
        return self.load / self.capacity if self.capacity else float("inf")

    @property
    def growth(self) -> float:
        """How fast its queue grows, per second (0 when it keeps up)."""
        return max(0.0, self.load - self.capacity)

    @property
    def delay_after(self) -> float:
        """Seconds the last item waits after HOUR seconds at this load (0 when it keeps up)."""
        return HOUR * self.growth / self.capacity if self.capacity else float("inf")


@dataclass(frozen=True)
class Deployment:
    """What the model deploys: the stage throttle, the webhook's `max_connections`, and
    `max_concurrency` per consumer where it differs from the registry's."""

    label: str
    api_rate_limit: float
    api_burst_limit: int
    max_connections: int
    max_concurrency: tuple[tuple[str, int], ...] = ()

    def consumers(self) -> tuple[Consumer, ...]:
        """The enabled consumers, with this deployment's `max_concurrency` (a sending consumer's
        Telegram share following it, as `pacing.paced_environment` gives it)."""
        raised = dict(self.max_concurrency)
        chosen = []
        for consumer in enabled(SETTINGS):
            n = raised.get(consumer.name, consumer.max_concurrency)
            environment = dict(consumer.environment)
            if pacing.SEND_RATE_ENV in environment:
                environment.update(pacing.paced_environment(n))
            chosen.append(replace(consumer, max_concurrency=n, environment=environment))
        return tuple(chosen)


_DEFAULTS = PipelineSettings()
DEFAULT = Deployment(
    "as deployed by default", _DEFAULTS.api_rate_limit, _DEFAULTS.api_burst_limit, DEFAULT_MAX_CONNECTIONS
)
# README's "Before a campaign" changes, as the model's second table shows them: the stage throttle
# at 2,000 requests a second, Telegram's 100 connections, the consumers' concurrency raised.
CAMPAIGN = Deployment(
    "with the changes before a campaign",
    api_rate_limit=2_000,
    api_burst_limit=4_000,
    max_connections=100,
    max_concurrency=(("store", 50), ("crm", 20), ("autoreply", 20), ("analytics", 50)),
)


def kinds_routed(consumer: Consumer) -> list[str]:
    return [kind for kind, attributes in ATTRIBUTES.items() if matches(consumer.filter_policy, attributes)]


def record_ms(consumer: Consumer, cpu: Mapping[str, float]) -> float:
    """Wall time of one record: CPU at the memory's vCPU share, plus the calls it waits on."""
    shares = {kind: CAMPAIGN_MIX[kind] for kind in kinds_routed(consumer)}
    total = sum(shares.values()) or 1.0
    work = cost.CONSUMER_WORK.get(consumer.name, cost.ConsumerWork())
    waits = (2 + work.table_calls) * cost.DYNAMODB_CALL_MS  # the journal's claim and completion
    if consumer.name == "autoreply":
        waits += (shares.get("start", 0) + shares.get("callback_query", 0)) / total * cost.TELEGRAM_CALL_MS
    elif consumer.name == "crm":
        waits += shares.get("start", 0) / total * cost.CRM_PUSH_MS  # each /start is a new contact
    elif consumer.name == "sms":
        waits += SMS_RULE_SHARE * SMS_SEND_MS
    else:
        waits += work.outside_ms
    return cpu.get(consumer.name, DEFAULT_CPU_MS) * cost.cpu_factor(consumer.memory_mb) + waits


def consumer_hop(
    consumer: Consumer, load: float, cpu: Mapping[str, float], parts: float | None = None
) -> Hop:
    """`parts`: billed parts per SMS (None: the team's rules, `sms_parts`)."""
    ms = record_ms(consumer, cpu)
    capacity = consumer.max_concurrency * 1000 / ms
    limit, note = (
        "max_concurrency",
        f"{consumer.max_concurrency} x {consumer.batch_size}-record batches, {ms:.0f} ms a record",
    )
    shares = {kind: CAMPAIGN_MIX[kind] for kind in kinds_routed(consumer)}
    # Only a /start gets a message (the default replies); a button press gets an answer, which
    # Telegram's message limits do not count. (A broadcast's pages are not in the campaign mix.)
    messages = shares.get("start", 0) / (sum(shares.values()) or 1.0)
    if pacing.SEND_RATE_ENV in consumer.environment and messages > 0:
        paced = float(consumer.environment[pacing.SEND_RATE_ENV]) * consumer.max_concurrency / messages
        if paced < capacity:
            capacity, limit = paced, "telegram_messages_per_second"
            note = f"paced at {pacing.HEADROOM:.0%} of Telegram's 30/s ({messages:.0%} of records send one)"
    if consumer.name == "sms":
        parts = sms_parts(mix=SMS_LANGUAGE_MIX) if parts is None else parts
        sms_rate = LIMITS.sms_mps_long_code.value / (SMS_RULE_SHARE * parts)
        if sms_rate < capacity:
            capacity, limit = sms_rate, "sms_mps_long_code"
            note = (
                f"{SMS_RULE_SHARE:.0%} of events send an SMS of {parts:.3g} parts, one origination identity"
            )
    return Hop(consumer.name, load, capacity, limit, note)


def hops_at(rate: float, cpu: Mapping[str, float], deployment: Deployment = DEFAULT) -> list[Hop]:
    """Every hop at `rate` events a second (CAMPAIGN_MIX): ingress, the topic, each consumer,
    then the account-wide ones (Lambda concurrency, the journal table)."""
    webhook_ms = cpu.get("webhook", DEFAULT_CPU_MS) * cost.cpu_factor(WEBHOOK.memory_mb) + cost.SNS_PUBLISH_MS
    telegram = rate * (1 - CAMPAIGN_MIX["crm"])
    delivery = deployment.max_connections * 1000 / WEBHOOK_ROUND_TRIP_MS
    arriving = min(telegram, delivery) + rate * CAMPAIGN_MIX["crm"]
    hops = [
        Hop(
            "telegram delivery",
            telegram,
            delivery,
            "telegram_webhook_connections",
            f"max_connections {deployment.max_connections}, {WEBHOOK_ROUND_TRIP_MS:.0f} ms a delivery",
        ),
        Hop(
            "api stage throttle",
            arriving,
            deployment.api_rate_limit,
            "api_rate_limit (setting)",
            f"cdk.json; burst {deployment.api_burst_limit}; past it 429, Telegram retries later",
        ),
        Hop("api account quota", arriving, LIMITS.apigw_account_rps.value, "apigw_account_rps"),
    ]
    accepted = min(arriving, deployment.api_rate_limit, LIMITS.apigw_account_rps.value)
    consumers = deployment.consumers()
    loads = {c.name: accepted * sum(CAMPAIGN_MIX[k] for k in kinds_routed(c)) for c in consumers}
    hops.append(
        Hop(
            "events topic (SNS FIFO)",
            accepted,
            LIMITS.sns_fifo_group_scope_account_mps.value,
            "sns_fifo_group_scope_account_mps",
            "MessageGroup scope; a chat or order is a group",
        )
    )
    consumer_hops = [consumer_hop(c, loads[c.name], cpu) for c in consumers]
    hops += consumer_hops
    # A consumer that cannot keep up holds all its environments (a paced one sleeping in them).
    concurrency = accepted * webhook_ms / 1000 + sum(
        c.max_concurrency if h.growth else h.load * record_ms(c, cpu) / 1000
        for h, c in zip(consumer_hops, consumers, strict=True)
    )
    hops.append(
        Hop(
            "Lambda concurrency",
            concurrency,
            LIMITS.lambda_account_concurrency.value,
            "lambda_account_concurrency",
            "webhook + consumers' environments in use",
        )
    )
    journal_wcu = 2 * sum(min(h.load, h.capacity) for h in consumer_hops)
    hops.append(
        Hop(
            "journal table writes",
            journal_wcu,
            LIMITS.dynamodb_on_demand_warm_wcu.value,
            "dynamodb_on_demand_warm_wcu",
            "2 writes a record; a new on-demand table, before it adapts",
        )
    )
    return hops


def reached_at(
    name: str, rate: float, cpu: Mapping[str, float], deployment: Deployment = DEFAULT
) -> float | None:
    """The lowest rate (up to `rate`) at which hop `name` is at its limit, or None."""

    def use(at: float) -> float:
        return next(hop.use for hop in hops_at(at, cpu, deployment) if hop.name == name)

    if use(rate) < 1:
        return None
    low, high = 0.0, rate
    for _ in range(24):  # to 1/16,777,216 of the rate
        middle = (low + high) / 2
        low, high = (low, middle) if use(middle) >= 1 else (middle, high)
    return high


def model(rate: float, cpu: Mapping[str, float], deployment: Deployment = DEFAULT) -> dict[str, Any]:
    """Every hop at `rate` events a second, the first limit it reaches on the way up, the queues
    that grow, the reply delay after an hour, and the cost per hour."""
    hops = hops_at(rate, cpu, deployment)
    reached = {
        hop.name: at for hop in hops if (at := reached_at(hop.name, rate, cpu, deployment)) is not None
    }
    first = min(reached, key=lambda name: reached[name]) if reached else None
    closest = max(hops, key=lambda hop: hop.use)
    autoreply = next(hop for hop in hops if hop.name == "autoreply")
    # A reply waits for its update's delivery (queued at Telegram) and for autoreply's queue.
    ingress_delay = max(hop.delay_after for hop in hops[:3])
    telegram = rate * (1 - CAMPAIGN_MIX["crm"])
    per_million = cost.estimate(cost_inputs(cpu), with_ai=False).total
    return {
        "rate": rate,
        "hops": [asdict(hop) | {"use": round(hop.use, 3)} for hop in hops],
        "first_limit": first,
        "first_limit_at": round(reached[first], 1) if first else None,
        "closest": closest.name,
        "growing": {hop.name: round(hop.growth, 1) for hop in hops if hop.growth and hop.limit in _QUEUES},
        "reply_delay_seconds": round(ingress_delay + autoreply.delay_after, 1),
        "cost_per_hour": round(cost_per_hour(telegram, rate * CAMPAIGN_MIX["crm"], per_million), 2),
        "sms_parts_per_hour": sms_parts_sent(hops, HOUR),
    }


def sms_parts_sent(hops: list[Hop], seconds: float) -> int:
    """Parts the sms hop sends in `seconds` (billed per part, priced per country: not in the cost
    per hour; at most the rules' `max_price` each): at most its capacity, the origination
    identity's MPS. What waits longer than its rule's maximum age ends `expired`, never sent."""
    sms = next((hop for hop in hops if hop.name == "sms"), None)
    if sms is None:
        return 0
    return round(min(sms.load, sms.capacity) * SMS_RULE_SHARE * sms_parts(mix=SMS_LANGUAGE_MIX) * seconds)


def cost_inputs(cpu: Mapping[str, float]) -> cost.Inputs:
    """`bench.cost`'s inputs with the load run's CPU figures (the consumers' mean for a worker)."""
    inputs = cost.Inputs.from_results({})
    consumers = [ms for name, ms in cpu.items() if name != "webhook"]
    return replace(
        inputs,
        webhook_cpu_ms=cost.Figure(cpu.get("webhook", DEFAULT_CPU_MS), "measured: load run"),
        worker_cpu_ms=cost.Figure(
            sum(consumers) / len(consumers) if consumers else DEFAULT_CPU_MS, "load run"
        ),
    )


def cost_per_hour(telegram: float, crm: float, per_million_updates: float) -> float:
    """USD an hour: `bench.cost`'s bill per million Telegram updates, plus each CRM event's own
    units (API request, webhook, SNS publish and delivery, SQS, the sms invocation, its journal
    writes). SMS messages themselves are priced per country: not included."""
    p = TRAFFIC
    per_event = (
        p.http_api_request.usd
        + 2 * p.lambda_request.usd
        + p.sns_fifo_publish.usd
        + p.sns_fifo_sqs_delivery.usd
        + 3 * p.sqs_request.usd
        + 6 * p.dynamodb_write_unit.usd
        + 0.15 * (WEBHOOK.memory_mb / 1024) * p.lambda_arm_gb_second.usd
    )
    return telegram * HOUR * per_million_updates / 1e6 + crm * HOUR * per_event


def measured_cpu(results: Mapping[str, Any]) -> dict[str, float]:
    hops = results.get("pipeline", {}).get("load", {}).get("hops", {})
    return {name: float(hop["cpu_ms_per_unit"]) for name, hop in hops.items() if name != "moto"} or dict(
        MEASURED
    )


def run(quick: bool = False, rates: tuple[float, ...] = RATES, measured: bool = False) -> dict[str, Any]:
    """`quick` changes nothing: the model is arithmetic."""
    cpu = measured_cpu(load_results()) if measured else dict(MEASURED)
    return {
        "cpu_ms": cpu,
        "sms_parts": sms_parts(mix=SMS_LANGUAGE_MIX),
        "cpu_source": ".local/bench/results.json (pipeline load run)" if measured else MEASURED_AT,
        "consumers": [c.name for c in enabled(SETTINGS)],
        "mix": CAMPAIGN_MIX,
        "deployments": {
            deployment.label: [model(rate, cpu, deployment) for rate in rates]
            for deployment in (DEFAULT, CAMPAIGN)
        },
    }


# Where a hop past its limit keeps what it cannot take: Telegram (undelivered or refused
# updates, retried) and the consumers' queues. Past the others, calls are throttled and retried.
_QUEUES = frozenset(
    {
        "telegram_webhook_connections",
        "api_rate_limit (setting)",
        "apigw_account_rps",
        "max_concurrency",
        "telegram_messages_per_second",
        "sms_mps_long_code",
    }
)


def _rate(value: float) -> str:
    return f"{value:,.0f}" if value >= 10 else f"{value:.1f}"


def _delay(seconds: float) -> str:
    if seconds < 1:
        return "< 1 s"
    if seconds < 120:
        return f"{seconds:.0f} s"
    return f"{seconds / 60:,.0f} min" if seconds < 7200 else f"{seconds / 3600:,.1f} h"


def summary_rows(results: Mapping[str, Any], deployment: Deployment = DEFAULT) -> list[list[str]]:
    """docs/at-scale.md's tables: rate, first limit, growing queues, reply delay, cost per hour."""
    rows = []
    for at in results["deployments"][deployment.label]:
        first = (
            f"{at['first_limit']} (from {at['first_limit_at']:,.3g}/s)"
            if at["first_limit"]
            else f"none (closest: {at['closest']})"
        )
        growing = ", ".join(f"{name} +{_rate(n)}/s" for name, n in at["growing"].items()) or "none"
        rows.append(
            [
                f"{_rate(at['rate'])}/s",
                first,
                growing,
                _delay(at["reply_delay_seconds"]),
                f"${at['cost_per_hour']:,.2f}",
                f"{at['sms_parts_per_hour']:,}",
            ]
        )
    return rows


SUMMARY_HEADER = (
    "Rate",
    "First limit reached",
    "Queues growing",
    "Reply delay after 1 h",
    "Cost per hour",
    "SMS parts sent per hour",
)


def report(results: dict[str, Any]) -> list[str]:
    lines = [
        f"scale model: consumers {', '.join(results['consumers'])}; mix {results['mix']};"
        f" CPU per request/record from {results['cpu_source']}; {results['sms_parts']:.3g} parts an SMS"
        " (team/sms_rules.json at its longest)",
    ]
    for label, rates in results["deployments"].items():
        lines += _detail(label, rates)
    for deployment in (DEFAULT, CAMPAIGN):
        lines.append(f"  summary, {deployment.label}:")
        lines += ["    " + line for line in table(SUMMARY_HEADER, summary_rows(results, deployment))]
    lines.append(
        "  limits (infra/limits.py): "
        + "; ".join(
            f"{name} {limit.value:,g} {limit.unit} ({limit.how} {limit.recorded})"
            for name, limit in _used(results).items()
        )
    )
    return lines


def _detail(label: str, rates: list[dict[str, Any]]) -> list[str]:
    lines = []
    for at in rates:
        lines.append(f"  at {_rate(at['rate'])} events/s, {label}:")
        rows = [
            [
                hop["name"],
                _rate(hop["load"]),
                _rate(hop["capacity"]),
                f"{hop['use']:.0%}",
                hop["limit"],
                hop["note"],
            ]
            for hop in at["hops"]
        ]
        lines += [
            "    " + line for line in table(("hop", "load/s", "capacity/s", "use", "limit", "note"), rows)
        ]
    return lines


def _used(results: Mapping[str, Any]) -> dict[str, Limit]:
    known = LIMITS.all()
    names = {hop["limit"] for rates in results["deployments"].values() for at in rates for hop in at["hops"]}
    return {name: known[name] for name in sorted(names) if name in known}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench scale", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--rate", type=float, action="append", help="events a second (repeatable); default: 10 100 1000 10000"
    )
    parser.add_argument(
        "--measured",
        action="store_true",
        help="CPU figures of the latest load run (.local/bench/results.json)",
    )
    parser.add_argument(
        "--quick", action="store_true", help="accepted for make bench-smoke; the model is instant anyway"
    )
    args = parser.parse_args(argv)
    rates = tuple(args.rate) if args.rate else RATES
    print("\n".join(report(run(rates=rates, measured=args.measured))))
    return 0
