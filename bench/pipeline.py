"""The whole pipeline through the local runtime (`local.Runtime` on free ports): end-to-end figures.

Every function runs in its own process as in `make local` (moto server, fakes of Telegram, the
CRM and Bedrock). The updates come from new users, alternately a bare /start and a first question
(`SAMPLE_TEXTS`). What each update should cause is asked, never listed (`expected_effects`): of
the enabled consumers the registry routes it to (`pipeline.registry.matches` on their filter
policies, with the attributes the webhook publishes), those whose own rule acts on it, read in
the consumer's environment. With the default settings: `store` saves both, `crm` makes a lead of
both (each user is new), `autoreply` answers the /start and not the question (no default reply),
`ai` analyses the question and not the bare /start. A rule changed in the registry or in a
consumer changes what is awaited instead of leaving the benchmark waiting. Phases:

- latency: updates posted one at a time at a steady pace (no backlog); for each, the time from
  the HTTP POST to each side effect it should cause (`EFFECTS`): `store` (its item in the
  conversations table), `ai` (the item's `ai` attribute), `autoreply` (`sendMessage` reached the
  Telegram fake), `crm` (the lead reached the CRM fake). `analytics` has no side effect outside
  its logs: not timed. Table items are polled every 20 ms; the fakes stamp each call on arrival.
  Afterwards no update may have caused an effect it was not expected to (else the expectation
  is wrong, and so would be the figures).
- ingress: several senders post as fast as the API answers; accepted requests per second.
- drain: how long the consumers take to work off what the ingress phase queued.

Also reported: start-up time, per-function counters, and log bytes each function wrote per
request or record (what CloudWatch Logs would ingest).
"""

from __future__ import annotations

import itertools
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

from ai.logic import Skipped, to_analyze
from autoreply.logic import message_reply
from crm.leads import lead_from_envelope

from bench import hops
from bench.common import (
    RESULTS_PATH,
    BenchError,
    Stats,
    compact,
    crm_status_change,
    draining_settings,
    environment,
    require,
    telegram_message,
)
from local.demo import TELEGRAM_TOKEN_HEADER, post
from local.runtime import Ports, Runtime
from pipeline.crm.contract import SIGNATURE_HEADER, sign
from pipeline.envelope import Envelope, sns_attributes, telegram_event_id
from pipeline.publication import publication
from pipeline.registry import Consumer, matches
from pipeline.telegram import TelegramUpdate

FIRST_UPDATE_ID = 700_000_000
FIRST_USER_ID = 9_000_000
ITEM_POLL_SECONDS = 0.02
EFFECT_TIMEOUT_SECONDS = 60.0
WARMUP_UPDATES = 5
# The load run's share of CRM events: one request in this many (bench.scale's campaign mix has 10%).
LOAD_CRM_EVERY = 10
# What the benchmark's new users send, in turn (a command gets its `bot_command` entity).
SAMPLE_TEXTS = ("/start", "How much does delivery to Berlin cost?")


@dataclass(frozen=True)
class Effect:
    """A consumer's side effect the benchmark times: its label in the report, and the consumer's
    own rule for whether an update (the webhook's envelope of it) gets it."""

    label: str
    acts: Callable[[Envelope], bool]


# The consumers whose side effect can be seen, in report order. Each rule is the consumer's code.
EFFECTS: dict[str, Effect] = {
    # store.logic.save_update writes every update routed to it.
    "store": Effect("store: item written", lambda envelope: True),
    "ai": Effect("ai: item analysed", lambda envelope: not isinstance(to_analyze(envelope), Skipped)),
    "autoreply": Effect(
        "autoreply: sendMessage", lambda envelope: not isinstance(message_reply(envelope), str)
    ),
    "crm": Effect("crm: lead at the CRM", lambda envelope: lead_from_envelope(envelope) is not None),
}


@dataclass(frozen=True)
class Sizes:
    latency_updates: int = 100
    latency_interval_seconds: float = 0.15
    ingress_seconds: float = 8.0
    ingress_senders: int = 4
    drain_timeout_seconds: float = 75.0
    load_updates: int = 300
    load_warmup: int = LOAD_CRM_EVERY  # a CRM event among them: `sms` has handled one before the count


# Quick: a smoke run of every phase, the load run without its warm-up (CI's time).
QUICK = Sizes(latency_updates=10, ingress_seconds=2.0, ingress_senders=2, load_updates=10, load_warmup=0)


@dataclass
class Sent:
    update_id: int
    user_id: int
    posted_at: float  # wall clock: the fakes stamp calls with time.time()
    answered_at: float
    status: int


def routed(
    update: dict[str, Any], consumers: Iterable[Consumer], bot_id: str
) -> tuple[Envelope, list[Consumer]]:
    """The webhook's envelope of `update`, and the consumers the registry's filter policies route
    it to, with the attributes the webhook publishes it with (`pipeline.publication`)."""
    envelope, published = publication(
        TelegramUpdate.parse(update), update, bot_id=bot_id, correlation_id="bench"
    )
    attributes = {name: value["StringValue"] for name, value in sns_attributes(published).items()}
    return envelope, [consumer for consumer in consumers if matches(consumer.filter_policy, attributes)]


def expected_effects(
    update: dict[str, Any],
    consumers: Iterable[Consumer],
    bot_id: str,
    environments: Mapping[str, Mapping[str, str]] | None = None,
) -> tuple[str, ...]:
    """The side effects `update` should cause, in `EFFECTS` order: of the `consumers` (the enabled
    ones) it is routed to, those whose rule acts on it, each rule read with its consumer's
    environment (`environments`, by consumer name: reply tables, the bot's username) set."""
    envelope, receivers = routed(update, consumers, bot_id)
    names = {consumer.name for consumer in receivers}
    expected = []
    for name, effect in EFFECTS.items():
        if name in names:
            with environment((environments or {}).get(name, {})):
                if effect.acts(envelope):
                    expected.append(name)
    return tuple(expected)


class Sender:
    """Posts updates from new users to the local API; numbers are reserved across threads.

    `url` is another endpoint taking Telegram's webhook calls (default: the runtime's webhook);
    senders in one run start their numbers `first` apart, so their users never meet. Each user
    sends one of `texts`, in turn by number (default: a bare /start).
    """

    def __init__(
        self, runtime: Runtime, url: str | None = None, first: int = 0, texts: tuple[str, ...] = ("/start",)
    ) -> None:
        self.url = url or runtime.webhook_url
        self.headers = {TELEGRAM_TOKEN_HEADER: runtime.settings.telegram_secret}
        self.texts = texts
        self._numbers = itertools.count(first)
        self._lock = threading.Lock()

    def reserve(self) -> tuple[int, int]:
        """A fresh (update_id, user_id): every update comes from a new user."""
        with self._lock:
            n = next(self._numbers)
        return FIRST_UPDATE_ID + n, FIRST_USER_ID + n

    def update(self, ids: tuple[int, int]) -> dict[str, Any]:
        """The update these numbers send."""
        update_id, user_id = ids
        return telegram_message(
            update_id, user_id, self.texts[(update_id - FIRST_UPDATE_ID) % len(self.texts)]
        )

    def send(self, ids: tuple[int, int] | None = None) -> Sent:
        update_id, user_id = ids or self.reserve()
        body = compact(self.update((update_id, user_id)))
        posted = time.time()
        status = post(self.url, body, self.headers)
        return Sent(update_id, user_id, posted, time.time(), status)


class ItemWatcher(threading.Thread):
    """Polls the conversations table: when each update's item was written by `store`, and by `ai`,
    while an update still awaits either (`awaited`: update ids by effect)."""

    def __init__(
        self, runtime: Runtime, ids: Iterable[tuple[int, int]], awaited: Mapping[str, set[int]]
    ) -> None:
        super().__init__(name="bench-item-watcher", daemon=True)
        if runtime.resources is None:
            raise BenchError("the runtime has not created its resources")
        self.dynamodb = runtime.client("dynamodb")
        self.table = runtime.resources.tables["conversations"]
        self.pending: dict[tuple[str, str], int] = {
            (f"chat#{user_id}", f"update#{update_id:012d}"): update_id for update_id, user_id in ids
        }
        self.awaited = {name: awaited.get(name, set()) for name in ("store", "ai")}
        self.seen: dict[str, dict[int, float]] = {name: {} for name in self.awaited}
        self.stop = threading.Event()

    def waiting(self) -> list[tuple[str, str]]:
        return [
            key
            for key, update_id in self.pending.items()
            if any(
                update_id in ids and update_id not in self.seen[name] for name, ids in self.awaited.items()
            )
        ]

    def run(self) -> None:
        while not self.stop.is_set() and (waiting := self.waiting()):
            self.check(waiting)
            self.stop.wait(ITEM_POLL_SECONDS)

    def check(self, keys: list[tuple[str, str]]) -> None:
        for start in range(0, len(keys), 100):
            self._check(keys[start : start + 100])

    def _check(self, keys: list[tuple[str, str]]) -> None:
        response = self.dynamodb.batch_get_item(
            RequestItems={
                self.table: {
                    "Keys": [{"pk": {"S": pk}, "sk": {"S": sk}} for pk, sk in keys],
                    "ProjectionExpression": "pk, sk, event_id, #ai",
                    "ExpressionAttributeNames": {"#ai": "ai"},
                }
            }
        )
        now = time.time()
        for item in response["Responses"].get(self.table, []):
            update_id = self.pending[(item["pk"]["S"], item["sk"]["S"])]
            if "event_id" in item:
                self.seen["store"].setdefault(update_id, now)
            if "ai" in item:
                self.seen["ai"].setdefault(update_id, now)


def _fake_effects(runtime: Runtime, sent: list[Sent]) -> dict[str, dict[int, float]]:
    """When each update's reply reached the Telegram fake and its lead the CRM fake."""
    by_user = {s.user_id: s.update_id for s in sent}
    by_event = {telegram_event_id(runtime.settings.telegram_bot_id, s.update_id): s.update_id for s in sent}
    replies: dict[int, float] = {}
    for call in runtime.fakes["telegram"].calls():
        body = call.get("body")
        if call["path"].endswith("/sendMessage") and isinstance(body, dict):
            update_id = by_user.get(int(body.get("chat_id", 0)))
            if update_id is not None:
                replies.setdefault(update_id, call["time"])
    leads: dict[int, float] = {}
    for call in runtime.fakes["crm"].calls():
        update_id = by_event.get(call["headers"].get("idempotency-key", ""))
        if update_id is not None:
            leads.setdefault(update_id, call["time"])
    return {"autoreply": replies, "crm": leads}


def measure_latency(runtime: Runtime, sender: Sender, sizes: Sizes) -> dict[str, Any]:
    resources = runtime.resources
    if resources is None:
        raise BenchError("the runtime has not created its resources")
    ids = [sender.reserve() for _ in range(sizes.latency_updates)]
    updates = [sender.update(update_ids) for update_ids in ids]
    environments = runtime.function_environments(resources)
    bot_id = runtime.settings.telegram_bot_id
    awaited: dict[str, set[int]] = {name: set() for name in EFFECTS}
    for update in updates:
        for name in expected_effects(update, resources.consumers, bot_id, environments):
            awaited[name].add(update["update_id"])
    untimed = sorted(
        {consumer.name for update in updates for consumer in routed(update, resources.consumers, bot_id)[1]}
        - set(EFFECTS)
    )
    watcher = ItemWatcher(runtime, ids, awaited)
    watcher.start()
    sent: list[Sent] = []
    for update_ids in ids:
        slot = time.monotonic() + sizes.latency_interval_seconds
        sent.append(sender.send(update_ids))
        time.sleep(max(0.0, slot - time.monotonic()))
    require(all(s.status == 200 for s in sent), f"statuses {Counter(s.status for s in sent)}")

    def missing() -> dict[str, int]:
        effects = {**watcher.seen, **_fake_effects(runtime, sent)}
        return {name: n for name, due in awaited.items() if (n := len(due - set(effects[name])))}

    deadline = time.monotonic() + EFFECT_TIMEOUT_SECONDS
    while missing() and time.monotonic() < deadline:
        time.sleep(0.25)
    watcher.stop.set()
    watcher.join()
    late = missing()
    require(not late, f"side effects missing after {EFFECT_TIMEOUT_SECONDS:.0f}s: {late}")
    # Every record handled, then every item read once more: an effect no rule predicted fails the run.
    require(runtime.wait_until_drained(timeout=60), "latency updates not processed within 60 s")
    watcher.check(list(watcher.pending))
    effects = {**watcher.seen, **_fake_effects(runtime, sent)}
    unexpected = {name: n for name, due in awaited.items() if (n := len(set(effects[name]) - due))}
    require(
        not unexpected, f"side effects no consumer's rule predicted (bench.pipeline.EFFECTS): {unexpected}"
    )
    posted = {s.update_id: s.posted_at for s in sent}
    figures: dict[str, Any] = {
        "updates": len(sent),
        "texts": list(sender.texts),
        "interval_seconds": sizes.latency_interval_seconds,
        "untimed": untimed,
        "http": asdict(Stats.of_seconds([s.answered_at - s.posted_at for s in sent])),
    }
    for name, due in awaited.items():
        if due:
            figures[name] = asdict(Stats.of_seconds([effects[name][uid] - posted[uid] for uid in due]))
    return figures


def measure_ingress(sender: Sender, sizes: Sizes) -> dict[str, Any]:
    deadline = time.monotonic() + sizes.ingress_seconds
    sent: list[Sent] = []

    def keep_sending() -> None:
        while time.monotonic() < deadline:
            sent.append(sender.send())  # list.append is atomic

    threads = [
        threading.Thread(target=keep_sending, name=f"bench-sender-{i}") for i in range(sizes.ingress_senders)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    statuses = Counter(str(s.status) for s in sent)
    elapsed = max(s.answered_at for s in sent) - min(s.posted_at for s in sent)
    return {
        "senders": sizes.ingress_senders,
        "seconds": round(elapsed, 2),
        "requests": len(sent),
        "statuses": dict(statuses),
        "accepted_per_second": round(statuses["200"] / elapsed, 1),
        "http": asdict(Stats.of_seconds([s.answered_at - s.posted_at for s in sent])),
    }


def load_sender(runtime: Runtime, sender: Sender) -> Callable[[], int]:
    """What the load run posts: of every LOAD_CRM_EVERY requests one signed CRM order-status
    change (an SMS rule's status: the `sms` consumer sends one), the rest `sender`'s updates."""
    numbers = itertools.count(1)
    key = runtime.settings.crm_signing_key

    def send() -> int:
        number = next(numbers)
        if number % LOAD_CRM_EVERY:
            return sender.send().status
        body = compact(crm_status_change(FIRST_UPDATE_ID + number))
        return post(runtime.crm_url, body, {SIGNATURE_HEADER: sign(key, body)})

    return send


def log_bytes(runtime: Runtime, status: dict[str, dict[str, Any]]) -> dict[str, float]:
    """Bytes each function wrote to its logs, per request (webhook) or per record handled (consumers).

    A function's counts cover all its processes, so its bytes do too: `<name>.log` and the logs of
    the processes added beside it (`<name>#2.log`, ...)."""
    per_unit: dict[str, float] = {}
    for name, function in status.items():
        paths = [runtime.log_dir / f"{name}.log", *runtime.log_dir.glob(f"{name}#*.log")]
        size = sum(path.stat().st_size for path in paths if path.is_file())
        units = function.get("requests") or (function.get("processed", 0) + function.get("duplicates", 0))
        if size and units:
            per_unit[name] = round(size / units, 1)
    return per_unit


def run(quick: bool = False) -> dict[str, Any]:
    sizes = QUICK if quick else Sizes()
    started = time.monotonic()
    with Runtime(
        ports=Ports(), settings=draining_settings(), state_dir=RESULTS_PATH.parent / "runtime"
    ) as runtime:
        startup = time.monotonic() - started
        sender = Sender(runtime, texts=SAMPLE_TEXTS)
        warmup = [sender.send() for _ in range(WARMUP_UPDATES)]
        require(all(s.status == 200 for s in warmup), "warm-up updates refused")
        require(runtime.wait_until_drained(timeout=60), "warm-up updates not processed within 60 s")
        latency = measure_latency(runtime, sender, sizes)
        ingress = measure_ingress(sender, sizes)
        drain_started = time.monotonic()
        drained = runtime.wait_until_drained(timeout=sizes.drain_timeout_seconds, settle_seconds=0.5)
        drain_seconds = time.monotonic() - drain_started
        # The load run (issue 26): with the workers the ingress phase scaled up still running.
        load = hops.measure(
            runtime, load_sender(runtime, sender), sizes.load_updates, senders=1, warmup=sizes.load_warmup
        )
        status = runtime.status()
    keys = ("requests", "processed", "duplicates", "retried", "dead_lettered", "errors", "timeouts")
    functions = {name: {k: f[k] for k in keys if k in f} for name, f in status.items()}
    dead = {name: f["dead_lettered"] for name, f in functions.items() if f.get("dead_lettered")}
    require(not dead, f"records dead-lettered: {dead}")
    return {
        "sizes": asdict(sizes),
        "startup_seconds": round(startup, 1),
        "latency": latency,
        "ingress": ingress,
        # Settling (0.5 s of empty queues) is part of the figure.
        "drain": {"drained": drained, "seconds": round(drain_seconds, 1)},
        "functions": functions,
        "log_bytes_per_unit": log_bytes(runtime, status),
        "load": load,
    }


def report(results: dict[str, Any]) -> list[str]:
    latency, ingress, drain = results["latency"], results["ingress"], results["drain"]
    texts = " / ".join(repr(text) for text in latency["texts"])
    lines = [
        f"local pipeline (every function its own process; moto server; fakes) started in"
        f" {results['startup_seconds']:.1f} s",
        f"  end-to-end latency, {latency['updates']} updates from new users ({texts} in turn) one every"
        f" {latency['interval_seconds'] * 1000:.0f} ms, from the POST to each effect it should cause:",
        f"    {'HTTP answer':<22} {Stats.from_dict(latency['http']).line()}",
    ]
    lines += [
        f"    {effect.label:<22} {Stats.from_dict(latency[name]).line()}"
        for name, effect in EFFECTS.items()
        if name in latency
    ]
    not_awaited = [name for name in EFFECTS if name not in latency]
    if not_awaited:
        lines.append(f"    no update routed to and acted on by: {', '.join(not_awaited)}")
    if latency["untimed"]:
        lines.append(f"    not timed (no side effect outside their logs): {', '.join(latency['untimed'])}")
    lines.append(
        f"  ingress: {ingress['senders']} senders, {ingress['requests']} requests"
        f" in {ingress['seconds']:.1f} s:"
        f" {ingress['accepted_per_second']:.1f} accepted/s (statuses {ingress['statuses']});"
        f" HTTP p50 {ingress['http']['p50']:.0f} ms p95 {ingress['http']['p95']:.0f} ms"
    )
    state = "drained" if drain["drained"] else "NOT drained"
    lines.append(f"  backlog of the ingress phase {state} after {drain['seconds']:.1f} s")
    counters = ", ".join(
        f"{name} {f.get('processed', f.get('requests'))}"
        + (f" (retried {f['retried']})" if f.get("retried") else "")
        for name, f in results["functions"].items()
    )
    lines.append(f"  handled: {counters}")
    lines.append(
        "  log bytes per request/record: "
        + ", ".join(f"{name} {size:.0f}" for name, size in results["log_bytes_per_unit"].items())
    )
    lines += hops.report(results["load"])
    return lines
