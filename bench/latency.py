"""Reply and ack latency of the pipeline against the single-function bot it replaces (issue 12).

A `local.Runtime` on free ports (every function its own process, as `make local`): for the
replies the stack `cdk.json` deploys (`reply_settings`: without the `ai` consumer and the CRM
sources, which `make local` adds on its stand-ins and the default deployment has not), batching
windows on (store, crm and analytics gather their records, as in AWS, instead of working on the
same update as the reply on the one local moto server and the machine's CPUs, which in AWS they
never share); for the acks, which drain between bursts, a second one without the windows.
Beside each the baseline: `bench.inline_bot`, one handler doing the same work synchronously
(the store, the reply, the CRM lead), served by the same local API Gateway (`local.apigw`) in its
own process. The two are measured in the same run, their samples interleaved so machine load skews
them alike. Updates are /start messages from new users (real-shaped: `bench.common.telegram_start`);
the Telegram and CRM stand-ins stamp each call on arrival.

- first reply after idle: the webhook's and autoreply's processes (the baseline's) are replaced
  by fresh ones (`Runtime.restart_functions`), then one /start; the time from the POST to its
  `sendMessage` at the Telegram stand-in. The local function host imports the handler when its
  process starts, before any request, so the init phase (process start to handler loaded) is
  measured apart and added: a cold reply is init + first invocation, for each process on the
  path (webhook, then autoreply: Lambda starts the consumer's environment when the record comes).
- the same first reply at Lambda's CPU share (an estimate): Lambda runs a function's init at a full
  vCPU and its invocations at the memory's share of one (`bench.cost.cpu_factor`: one vCPU at
  1,769 MB), which this machine does not do. Each function host reports its invocations' CPU time
  (the handler's thread) when each kind of call left (`local.lambda_host.CallMarks`); the estimate
  adds to the cold reply what each first invocation's CPU time until its reply's call left
  (`REPLY_LEAVES`: the webhook's SNS publish, autoreply's and the inline bot's sendMessage) would
  take longer at its memory's share (the webhook 512 MB, autoreply 256 MB, the inline bot 256 MB),
  the inits left as measured. What an invocation does after that call (the journal's completion,
  its log line and metrics) runs while the reply is on its way, on either side.
- warm reply: the same with the processes warm (and at Lambda's CPU share, each invocation's CPU
  time stretched the same way); beside it a queue hop: from the webhook's HTTP
  answer (SNS has the event) to autoreply's poller handing the record to the handler (its `busy`
  status message), per update.
- ack with slow consumers: bursts of /start posted back to back, with the CRM stand-in answering
  at once, then holding each lead 2 s (`hang_next`); the webhook's HTTP answer time. Likewise the
  baseline, whose answer waits for its own CRM call.

Every request must be answered 200, every /start get exactly one `sendMessage` and one lead
(one per `Idempotency-Key`), or the benchmark fails.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Collection, Iterable
from dataclasses import asdict, dataclass, field, replace
from typing import Any, TypeVar

from bench.common import (
    RESULTS_PATH,
    BenchError,
    Stats,
    deployed_default_settings,
    draining_settings,
    require,
    table,
)
from bench.cost import cpu_factor
from bench.pipeline import Sender, Sent, log_bytes
from local import aws_calls
from local.apigw import INTEGRATION_TIMEOUT_SECONDS
from local.child_process import ChildProcess
from local.fakes.base import FakeService
from local.fakes.crm import LEADS_PATH
from local.runtime import STARTUP_TIMEOUT_SECONDS, WEBHOOK_MEMORY_MB, Ports, Runtime
from local.settings import LocalSettings
from pipeline.envelope import telegram_event_id
from pipeline.registry import by_name

T = TypeVar("T")

INLINE_HANDLER = "bench.inline_bot.lambda_handler"
INLINE_NAME = "inline_bot"
INLINE_MEMORY_MB = 256
# The call with which each function on a reply's path hands it on: the CPU an invocation spends
# after it (the journal's completion, the log line, the metrics) runs while the reply is on its
# way, so the estimate at Lambda's CPU share stretches only what came before it.
REPLY_LEAVES = {
    "webhook": "sns.Publish",
    "autoreply": "telegram.sendMessage",
    INLINE_NAME: "telegram.sendMessage",
}
# The baseline's users: far from the pipeline's (`bench.pipeline.Sender` numbers).
INLINE_FIRST = 50_000_000
CRM_SLOW_SECONDS = 2.0
# The legs of a pipeline reply (`Reply.path`).
LEGS = ("to_queue", "queue_hop", "autoreply")
EFFECT_TIMEOUT_SECONDS = 30.0
DRAIN_TIMEOUT_SECONDS = 60.0
# After a restart, before the first request: the new poller is in its first long poll (in AWS
# the poller is Lambda's, always running; only the function's environment is new).
SETTLE_SECONDS = 1.0
# Goals (issue 12).
COLD_RATIO_GOAL = 1.3
ACK_SLOW_RATIO_GOAL = 1.1
ACK_SPEEDUP_GOAL = 20.0


@dataclass(frozen=True)
class Sizes:
    # Cold samples: 9 pairs, each pipeline first reply beside an inline one. With 5 the ratio of the
    # p50s moved by up to 0.3x between runs here, the inline bot's init alone 291 to 395 ms.
    cold_samples: int = 9
    warm_samples: int = 20
    ack_rounds: int = 4  # each: a burst with the CRM answering at once, then one with it slow
    ack_burst: int = 25
    inline_fast_burst: int = 40
    inline_slow_burst: int = 8


QUICK = Sizes(
    cold_samples=1, warm_samples=3, ack_rounds=1, ack_burst=10, inline_fast_burst=10, inline_slow_burst=2
)


class Arrivals:
    """What reached the Telegram and CRM stand-ins: `sendMessage` per chat, lead calls per event id."""

    def __init__(self, runtime: Runtime) -> None:
        self.telegram: FakeService = runtime.fakes["telegram"]
        self.crm: FakeService = runtime.fakes["crm"]
        self.bot_id = runtime.settings.telegram_bot_id

    def replies(self) -> dict[int, list[float]]:
        found: dict[int, list[float]] = {}
        for call in self.telegram.calls():
            body = call.get("body")
            if call["path"].endswith("/sendMessage") and isinstance(body, dict):
                found.setdefault(int(body.get("chat_id", 0)), []).append(call["time"])
        return found

    def leads(self) -> dict[str, list[dict[str, Any]]]:
        found: dict[str, list[dict[str, Any]]] = {}
        for call in self.crm.calls():
            if call["path"] == LEADS_PATH:
                found.setdefault(call["headers"].get("idempotency-key", ""), []).append(call)
        return found

    def wait_reply(self, chat_id: int) -> float:
        """When the (first) sendMessage to `chat_id` arrived; polled, stamped by the stand-in."""
        deadline = time.monotonic() + EFFECT_TIMEOUT_SECONDS
        while time.monotonic() < deadline:
            times = self.replies().get(chat_id)
            if times:
                return min(times)
            time.sleep(0.01)
        raise BenchError(f"no sendMessage to chat {chat_id} within {EFFECT_TIMEOUT_SECONDS:.0f}s")

    def check(self, sent: Iterable[Sent], label: str) -> None:
        """Every update answered 200, one sendMessage and one lead call each."""
        sent = list(sent)
        statuses = Counter(s.status for s in sent)
        require(set(statuses) == {200}, f"{label}: HTTP statuses {dict(statuses)}")
        replies, leads = self.replies(), self.leads()
        wrong_replies = {s.user_id: len(replies.get(s.user_id, [])) for s in sent}
        wrong_replies = {user: n for user, n in wrong_replies.items() if n != 1}
        require(not wrong_replies, f"{label}: sendMessage count per /start is not 1: {wrong_replies}")
        keys = {telegram_event_id(self.bot_id, s.update_id): s.update_id for s in sent}
        wrong_leads = {
            uid: len(leads.get(key, [])) for key, uid in keys.items() if len(leads.get(key, [])) != 1
        }
        require(not wrong_leads, f"{label}: lead calls per /start are not 1: {wrong_leads}")

    def hung_leads(self, sent: Iterable[Sent]) -> int:
        leads = self.leads()
        keys = [telegram_event_id(self.bot_id, s.update_id) for s in sent]
        return sum(1 for key in keys for call in leads.get(key, []) if call["fault"] == "hang")


class BusyLog:
    """When a function's poller handed each batch to its handler (its `busy` status messages)."""

    def __init__(self, runtime: Runtime, name: str) -> None:
        self.events: list[tuple[float, list[float]]] = []
        self._lock = threading.Lock()
        runtime.on_status(name, self._on_status)

    def _on_status(self, message: dict[str, Any]) -> None:
        if message.get("event") == "busy":
            with self._lock:
                self.events.append((float(message["time"]), list(message.get("sent_at") or [])))

    def between(self, start: float, end: float) -> list[tuple[float, list[float]]]:
        """(handed to the handler at, [SentTimestamp of each record, s]) of batches in [start, end]."""
        with self._lock:
            return [event for event in self.events if start <= event[0] <= end]


class InvocationLog:
    """The CPU time of each invocation a function's host reported (its `invocation` status
    messages), in order, until the call that carries the reply on left (`REPLY_LEAVES`: the host's
    `cpu_ms_at`, `local.lambda_host.CallMarks`); the inline bot's process reports the same way
    (`InlineBot`)."""

    def __init__(self, leaves_with: str) -> None:
        self.leaves_with = leaves_with
        self.cpu_ms: list[float] = []
        self._lock = threading.Lock()

    def on_status(self, message: dict[str, Any]) -> None:
        if message.get("event") == "invocation":
            marks = message.get("cpu_ms_at") or {}
            with self._lock:
                # A missing mark (a reply that never left) fails `at`, never stretches the rest.
                self.cpu_ms.append(float(marks[self.leaves_with]) if self.leaves_with in marks else -1.0)

    def count(self) -> int:
        with self._lock:
            return len(self.cpu_ms)

    def at(self, index: int) -> float:
        """The CPU ms the invocation numbered `index` (from 0) spent until its reply's call left."""
        deadline = time.monotonic() + EFFECT_TIMEOUT_SECONDS
        while self.count() <= index:
            require(time.monotonic() < deadline, f"invocation {index} was not reported")
            time.sleep(0.01)
        with self._lock:
            cpu_ms = self.cpu_ms[index]
        require(cpu_ms >= 0, f"invocation {index} reported no {self.leaves_with} call")
        return cpu_ms

    @classmethod
    def of(cls, runtime: Runtime, name: str) -> InvocationLog:
        log = cls(REPLY_LEAVES[name])
        runtime.on_status(name, log.on_status)
        return log


class InlineBot:
    """The baseline handler behind `local.apigw`, one process, as the runtime runs the webhook."""

    def __init__(self, runtime: Runtime) -> None:
        require(runtime.resources is not None, "the runtime has not created its resources")
        assert runtime.resources is not None
        environments = runtime.function_environments(runtime.resources)
        lambda_name = f"{runtime.settings.stack_name}-{INLINE_NAME}"
        # What its work needs: the webhook's secret and bot id, store's table, autoreply's bot
        # token and Telegram base URL, crm's CRM secret; Lambda's variables of its own.
        environment = {
            **environments["store"],
            **environments["crm"],
            **environments["autoreply"],
            **environments["webhook"],
            "AWS_LAMBDA_FUNCTION_NAME": lambda_name,
            "AWS_LAMBDA_LOG_GROUP_NAME": f"/aws/lambda/{lambda_name}",
            "POWERTOOLS_SERVICE_NAME": INLINE_NAME,
            aws_calls.ENV_VAR: str(runtime.aws_calls_dir / f"{INLINE_NAME}.jsonl"),
        }
        self.port = 0
        self.state: str | None = None
        self.invocations = InvocationLog(REPLY_LEAVES[INLINE_NAME])
        self._listening = threading.Event()
        self.child = ChildProcess(
            name=INLINE_NAME,
            module="local.apigw",
            args=lambda: [
                *("--port", "0", "--handler", INLINE_HANDLER, "--function-name", lambda_name),
                *("--timeout", str(INTEGRATION_TIMEOUT_SECONDS), "--memory", str(INLINE_MEMORY_MB)),
                *("--route", "POST /telegram/webhook"),
            ],
            env=environment,
            log_path=runtime.log_dir / f"{INLINE_NAME}.log",
            on_message=self._on_message,
        )

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/telegram/webhook"

    def _on_message(self, child: ChildProcess, message: dict[str, Any]) -> None:
        self.invocations.on_status(message)
        if message.get("event") == "state":
            self.state = str(message.get("state"))
        if message.get("event") == "listening":
            self.port = int(message["port"])
            self._listening.set()

    def start(self) -> float:
        """Start a fresh process; seconds until its handler is loaded and it listens (its init)."""
        self._listening.clear()
        started = time.monotonic()
        self.child.start()
        if not self._listening.wait(STARTUP_TIMEOUT_SECONDS):
            raise BenchError(f"the inline bot did not start; see {self.child.log_path}")
        require(self.state == "ready", f"the inline bot's handler did not load ({self.state}); see its log")
        return time.monotonic() - started

    def restart(self) -> float:
        self.child.stop()
        return self.start()

    def stop(self) -> None:
        self.child.stop()


@dataclass
class Reply:
    """One /start: its HTTP answer and its reply's arrival; for the pipeline, when SQS took the
    record (`queued_at`, its SentTimestamp) and when autoreply's poller handed it to the handler."""

    sent: Sent
    replied_at: float
    queued_at: float = 0.0
    received_at: float = 0.0
    init_seconds: dict[str, float] = field(default_factory=dict)
    # Per function on the path: the CPU ms of its invocation for this update, and its memory (MB).
    cpu_ms: dict[str, tuple[float, int]] = field(default_factory=dict)

    @property
    def ack(self) -> float:
        return self.sent.answered_at - self.sent.posted_at

    @property
    def reply(self) -> float:
        return self.replied_at - self.sent.posted_at

    @property
    def cold_reply(self) -> float:
        return self.reply + sum(self.init_seconds.values())

    @property
    def reply_at_cpu_share(self) -> float:
        """The reply with each invocation's CPU time on its path stretched to its memory's share of
        a vCPU (the module docstring): what this machine's full cores did not charge."""
        return self.reply + sum(
            cpu_ms / 1000 * (cpu_factor(memory_mb) - 1) for cpu_ms, memory_mb in self.cpu_ms.values()
        )

    @property
    def cold_reply_at_cpu_share(self) -> float:
        """The same for a cold reply: the inits as measured (Lambda runs them at a full vCPU)."""
        return self.reply_at_cpu_share + sum(self.init_seconds.values())

    def path(self) -> dict[str, float]:
        """The pipeline's reply in three legs: the webhook until SNS delivered to the queue, the
        queue hop (SQS send -> the poller hands the record over), autoreply until sendMessage."""
        return {
            "to_queue": self.queued_at - self.sent.posted_at,
            "queue_hop": self.received_at - self.queued_at,
            "autoreply": self.replied_at - self.received_at,
        }


def one_reply(sender: Sender, arrivals: Arrivals, busy: BusyLog | None = None) -> Reply:
    sent = sender.send()
    require(sent.status == 200, f"HTTP {sent.status} for a /start")
    reply = Reply(sent, arrivals.wait_reply(sent.user_id))
    if busy is not None:
        batches = busy.between(sent.posted_at, reply.replied_at)
        require(len(batches) == 1 and len(batches[0][1]) == 1, f"autoreply batches for one update: {batches}")
        reply.received_at, (reply.queued_at,) = batches[0]
    return reply


def quiet(runtime: Runtime, only: Collection[str] | None = None) -> None:
    """Until every consumer (or those named in `only`) has worked off the last updates (the next
    sample starts on an idle machine), waiting out their batching windows if they gather any."""
    gathered = [s for name, s in runtime.batching_windows().items() if only is None or name in only]
    timeout = DRAIN_TIMEOUT_SECONDS + 2 * max(gathered, default=0)
    require(
        runtime.wait_until_drained(timeout=timeout, settle_seconds=0.2, only=only),
        f"updates not processed within {timeout:.0f}s",
    )


def reply_path(runtime: Runtime) -> list[str]:
    """The consumers that gather no batching window (autoreply, ai, bot): what a reply may wait for."""
    return [name for name, seconds in runtime.batching_windows().items() if not seconds]


def measure_replies(
    runtime: Runtime, inline: InlineBot, arrivals: Arrivals, sizes: Sizes
) -> dict[str, list[Reply]]:
    pipeline = Sender(runtime)
    baseline = Sender(runtime, url=inline.url, first=INLINE_FIRST)
    busy = BusyLog(runtime, "autoreply")
    invocations = {name: InvocationLog.of(runtime, name) for name in ("webhook", "autoreply")}
    memory = {"webhook": WEBHOOK_MEMORY_MB, "autoreply": by_name("autoreply").memory_mb}
    path = reply_path(runtime)
    samples: dict[str, list[Reply]] = {
        "pipeline_cold": [],
        "inline_cold": [],
        "pipeline_warm": [],
        "inline_warm": [],
    }

    def pipeline_reply(restart: bool) -> Reply:
        """One pipeline reply (after fresh processes if `restart`), with its invocations' CPU."""
        index = {name: log.count() for name, log in invocations.items()}
        init = runtime.restart_functions("webhook", "autoreply") if restart else {}
        if restart:
            time.sleep(SETTLE_SECONDS)
        reply = one_reply(pipeline, arrivals, busy)
        reply.init_seconds = init
        reply.cpu_ms = {name: (log.at(index[name]), memory[name]) for name, log in invocations.items()}
        quiet(runtime, path)
        return reply

    def inline_reply(restart: bool) -> Reply:
        index = inline.invocations.count()
        init = {INLINE_NAME: inline.restart()} if restart else {}
        if restart:
            baseline.url = inline.url  # a fresh process, a new port
            time.sleep(SETTLE_SECONDS)
        reply = one_reply(baseline, arrivals)
        reply.init_seconds = init
        reply.cpu_ms = {INLINE_NAME: (inline.invocations.at(index), INLINE_MEMORY_MB)}
        quiet(runtime, path)
        return reply

    for _ in range(sizes.cold_samples):
        samples["pipeline_cold"].append(pipeline_reply(restart=True))
        samples["inline_cold"].append(inline_reply(restart=True))
    for _ in range(sizes.warm_samples):
        samples["pipeline_warm"].append(pipeline_reply(restart=False))
        samples["inline_warm"].append(inline_reply(restart=False))
    quiet(runtime, [*path, "crm"])  # every lead made: its window waited out
    arrivals.check([r.sent for r in samples["pipeline_cold"] + samples["pipeline_warm"]], "pipeline replies")
    arrivals.check([r.sent for r in samples["inline_cold"] + samples["inline_warm"]], "inline replies")
    return samples


def burst(sender: Sender, count: int) -> list[Sent]:
    """`count` /start updates posted back to back, each as soon as the previous one is answered."""
    return [sender.send() for _ in range(count)]


def slow_crm(runtime: Runtime, count: int) -> Callable[[], None]:
    """Make the CRM stand-in hold the next `count` lead calls; returns what ends it."""
    crm = runtime.fakes["crm"]
    crm.add_faults({"hang_next": count, "seconds": CRM_SLOW_SECONDS, "match": LEADS_PATH})
    return crm.clear_faults


def measure_acks(runtime: Runtime, inline: InlineBot, arrivals: Arrivals, sizes: Sizes) -> dict[str, Any]:
    pipeline = Sender(runtime, first=1_000_000)
    baseline = Sender(runtime, url=inline.url, first=INLINE_FIRST + 1_000_000)
    fast: list[Sent] = []
    slow: list[Sent] = []
    for _ in range(sizes.ack_rounds):
        fast += burst(pipeline, sizes.ack_burst)
        quiet(runtime)
        end_slowness = slow_crm(runtime, sizes.ack_burst)
        round_sent = burst(pipeline, sizes.ack_burst)
        # What the burst met: the consumer held by its first lead calls for the whole burst. The
        # rest answer at once, so the round drains in seconds instead of ack_burst x 2 s.
        end_slowness()
        slow += round_sent
        quiet(runtime)
    arrivals.check(fast + slow, "pipeline acks")
    hung = arrivals.hung_leads(slow)
    require(hung >= sizes.ack_rounds, f"the CRM stand-in held only {hung} lead calls of the slow bursts")
    inline_fast = burst(baseline, sizes.inline_fast_burst)
    quiet(runtime)
    end_slowness = slow_crm(runtime, sizes.inline_slow_burst)
    inline_slow = burst(baseline, sizes.inline_slow_burst)
    end_slowness()
    quiet(runtime)
    arrivals.check(inline_fast + inline_slow, "inline acks")
    inline_hung = arrivals.hung_leads(inline_slow)
    require(
        inline_hung == len(inline_slow), f"the inline bot's lead calls held: {inline_hung}/{len(inline_slow)}"
    )

    def stats(sent: list[Sent]) -> dict[str, Any]:
        return asdict(Stats.of_seconds([s.answered_at - s.posted_at for s in sent]))

    return {
        "pipeline_fast": stats(fast),
        "pipeline_slow": stats(slow),
        "pipeline_slow_leads_held": hung,
        "inline_fast": stats(inline_fast),
        "inline_slow": stats(inline_slow),
    }


def _with_inline(runtime: Runtime, measure: Callable[[InlineBot, Arrivals], T]) -> T:
    """`measure(inline, arrivals)` with the inline bot started beside `runtime`, both warmed up
    (their first calls to moto and the stand-ins are not measured)."""
    arrivals = Arrivals(runtime)
    inline = InlineBot(runtime)
    try:
        inline.start()
        for sender in (
            Sender(runtime, first=2_000_000),
            Sender(runtime, inline.url, INLINE_FIRST + 2_000_000),
        ):
            one_reply(sender, arrivals)
        quiet(runtime, reply_path(runtime))
        return measure(inline, arrivals)
    finally:
        inline.stop()


def _restarts(status: dict[str, dict[str, Any]]) -> dict[str, int]:
    return {name: f["restarts"] for name, f in status.items() if f.get("restarts")}


def reply_settings() -> LocalSettings:
    """The replies' runtime: the stack `cdk.json` deploys, and the `crm` consumer, whose lead the
    inline bot makes too. Not what `make local` adds on its stand-ins beyond that: `ai` (the default
    deployment has no Bedrock model, so no `ai`; locally it would claim and read every /start on
    the one moto server and the machine's CPUs while autoreply answers it, which in AWS it never
    shares) and the CRM sources with their sweep (no CRM is connected by default)."""
    return replace(deployed_default_settings(), ai_consumer=False, crm_sources=False)


def run(quick: bool = False) -> dict[str, Any]:
    sizes = QUICK if quick else Sizes()
    # The replies as deployed: store, crm and analytics gather their batching windows, so they are
    # not working on the same update, on the one local moto server and the machine's CPUs, while
    # its reply is on its way (in AWS they never share either).
    with Runtime(
        ports=Ports(), settings=reply_settings(), state_dir=RESULTS_PATH.parent / "runtime"
    ) as runtime:
        samples = _with_inline(
            runtime, lambda inline, arrivals: measure_replies(runtime, inline, arrivals, sizes)
        )
        restarts = _restarts(runtime.status())
    # The acks drain between bursts: without the windows (each burst would wait them out).
    with Runtime(
        ports=Ports(), settings=draining_settings(), state_dir=RESULTS_PATH.parent / "runtime-acks"
    ) as runtime:
        acks = _with_inline(runtime, lambda inline, arrivals: measure_acks(runtime, inline, arrivals, sizes))
        status = runtime.status()
        logs = log_bytes(runtime, status)
        restarts |= _restarts(status)
    require(not restarts, f"function processes crashed or timed out: {restarts}")

    def stats(values: Iterable[float]) -> dict[str, Any]:
        return asdict(Stats.of_seconds(list(values)))

    cold_p, cold_i = samples["pipeline_cold"], samples["inline_cold"]
    warm_p, warm_i = samples["pipeline_warm"], samples["inline_warm"]
    replies = {
        "pipeline_cold": stats(r.cold_reply for r in cold_p),
        "pipeline_cold_first_invocation": stats(r.reply for r in cold_p),
        **{f"pipeline_cold_{leg}": stats(r.path()[leg] for r in cold_p) for leg in LEGS},
        "pipeline_init_webhook": stats(r.init_seconds["webhook"] for r in cold_p),
        "pipeline_init_autoreply": stats(r.init_seconds["autoreply"] for r in cold_p),
        "inline_cold": stats(r.cold_reply for r in cold_i),
        "inline_cold_first_invocation": stats(r.reply for r in cold_i),
        "inline_init": stats(r.init_seconds[INLINE_NAME] for r in cold_i),
        # At Lambda's CPU share (an estimate: the module docstring).
        "pipeline_cold_at_cpu_share": stats(r.cold_reply_at_cpu_share for r in cold_p),
        "inline_cold_at_cpu_share": stats(r.cold_reply_at_cpu_share for r in cold_i),
        **{
            f"pipeline_cold_cpu_{name}": stats(r.cpu_ms[name][0] / 1000 for r in cold_p)
            for name in ("webhook", "autoreply")
        },
        "inline_cold_cpu": stats(r.cpu_ms[INLINE_NAME][0] / 1000 for r in cold_i),
        "pipeline_warm": stats(r.reply for r in warm_p),
        "pipeline_warm_ack": stats(r.ack for r in warm_p),
        **{f"pipeline_warm_{leg}": stats(r.path()[leg] for r in warm_p) for leg in LEGS},
        "inline_warm": stats(r.reply for r in warm_i),
        "pipeline_warm_at_cpu_share": stats(r.reply_at_cpu_share for r in warm_p),
        **{
            f"pipeline_warm_cpu_{name}": stats(r.cpu_ms[name][0] / 1000 for r in warm_p)
            for name in ("webhook", "autoreply")
        },
        "inline_warm_at_cpu_share": stats(r.reply_at_cpu_share for r in warm_i),
        "inline_warm_cpu": stats(r.cpu_ms[INLINE_NAME][0] / 1000 for r in warm_i),
    }
    return {
        "sizes": asdict(sizes),
        "replies": replies,
        "acks": acks,
        "goals": goals(replies, acks),
        # What each function logged per request or record (`bench.cost` prices it when `pipeline`
        # has not measured it): every update here is a /start.
        "log_bytes_per_unit": logs,
    }


def goals(replies: dict[str, Any], acks: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Each goal of issue 12: the measured value, the bound, and whether it is met."""
    cold_ratio = replies["pipeline_cold"]["p50"] / replies["inline_cold"]["p50"]
    share_ratio = replies["pipeline_cold_at_cpu_share"]["p50"] / replies["inline_cold_at_cpu_share"]["p50"]
    warm_bound = replies["inline_warm"]["p50"] + replies["pipeline_warm_queue_hop"]["p50"]
    share_bound = replies["inline_warm_at_cpu_share"]["p50"] + replies["pipeline_warm_queue_hop"]["p50"]
    slow_ratio = acks["pipeline_slow"]["p99"] / acks["pipeline_fast"]["p99"]
    speedup = acks["inline_slow"]["p99"] / acks["pipeline_slow"]["p99"]
    return {
        "cold_reply_ratio": {
            "value": round(cold_ratio, 2),
            "goal": f"<= {COLD_RATIO_GOAL}",
            "met": cold_ratio <= COLD_RATIO_GOAL,
        },
        "cold_reply_ratio_at_cpu_share": {
            "value": round(share_ratio, 2),
            "goal": f"<= {COLD_RATIO_GOAL} (estimate)",
            "met": share_ratio <= COLD_RATIO_GOAL,
        },
        "warm_reply_ms": {
            "value": replies["pipeline_warm"]["p50"],
            "goal": f"<= {warm_bound:.1f} (inline warm p50 + queue hop p50)",
            "met": replies["pipeline_warm"]["p50"] <= warm_bound,
        },
        "warm_reply_ms_at_cpu_share": {
            "value": replies["pipeline_warm_at_cpu_share"]["p50"],
            "goal": f"<= {share_bound:.1f} (the same at Lambda's CPU share, an estimate)",
            "met": replies["pipeline_warm_at_cpu_share"]["p50"] <= share_bound,
        },
        "ack_p99_slow_over_fast": {
            "value": round(slow_ratio, 2),
            "goal": f"<= {ACK_SLOW_RATIO_GOAL}",
            "met": slow_ratio <= ACK_SLOW_RATIO_GOAL,
        },
        "ack_p99_speedup_over_inline_slow": {
            "value": round(speedup, 1),
            "goal": f">= {ACK_SPEEDUP_GOAL:.0f}",
            "met": speedup >= ACK_SPEEDUP_GOAL,
        },
    }


def summary(results: dict[str, Any]) -> list[dict[str, Any]]:
    """Issue 44's goals of this benchmark, each with what was measured."""
    replies, goal = results["replies"], results["goals"]

    def p50(name: str) -> float:
        return float(replies[name]["p50"])

    cold = goal["cold_reply_ratio"]
    share = goal["cold_reply_ratio_at_cpu_share"]
    warm = goal["warm_reply_ms"]
    warm_share = goal["warm_reply_ms_at_cpu_share"]
    return [
        {
            "goal": f"first reply after idle <= {COLD_RATIO_GOAL}x the inline bot (p50)",
            "met": cold["met"],
            "measured": f"{cold['value']:.2f}x: pipeline {p50('pipeline_cold'):.0f} ms (init webhook"
            f" {p50('pipeline_init_webhook'):.0f} + autoreply {p50('pipeline_init_autoreply'):.0f}, first"
            f" invocation {p50('pipeline_cold_first_invocation'):.0f}: to the queue"
            f" {p50('pipeline_cold_to_queue'):.0f}, hop {p50('pipeline_cold_queue_hop'):.0f}, autoreply"
            f" {p50('pipeline_cold_autoreply'):.0f}) vs inline {p50('inline_cold'):.0f} ms (init"
            f" {p50('inline_init'):.0f} + {p50('inline_cold_first_invocation'):.0f})",
        },
        {
            "goal": f"first reply after idle at Lambda's CPU share <= {COLD_RATIO_GOAL}x the inline bot"
            " (p50, an estimate)",
            "met": share["met"],
            "measured": f"{share['value']:.2f}x: pipeline {p50('pipeline_cold_at_cpu_share'):.0f} ms (first"
            f" invocations' CPU until the reply's call left: webhook"
            f" {p50('pipeline_cold_cpu_webhook'):.0f} ms at {WEBHOOK_MEMORY_MB} MB,"
            f" autoreply {p50('pipeline_cold_cpu_autoreply'):.0f} ms at {by_name('autoreply').memory_mb} MB)"
            f" vs inline {p50('inline_cold_at_cpu_share'):.0f} ms ({p50('inline_cold_cpu'):.0f} ms at"
            f" {INLINE_MEMORY_MB} MB); one vCPU at 1,769 MB, the inits at a full vCPU",
        },
        {
            "goal": "warm reply p50 <= the inline bot's + one queue hop",
            "met": warm["met"],
            "measured": f"{p50('pipeline_warm'):.1f} ms (webhook to the queue"
            f" {p50('pipeline_warm_to_queue'):.1f},"
            f" hop {p50('pipeline_warm_queue_hop'):.1f}, autoreply {p50('pipeline_warm_autoreply'):.1f}) vs"
            f" inline {p50('inline_warm'):.1f} + hop {p50('pipeline_warm_queue_hop'):.1f}",
        },
        {
            "goal": "warm reply p50 at Lambda's CPU share <= the inline bot's + one queue hop (an estimate)",
            "met": warm_share["met"],
            "measured": f"{p50('pipeline_warm_at_cpu_share'):.1f} ms (invocations' CPU until the reply's call"
            " left: webhook"
            f" {p50('pipeline_warm_cpu_webhook'):.1f} ms at {WEBHOOK_MEMORY_MB} MB, autoreply"
            f" {p50('pipeline_warm_cpu_autoreply'):.1f} ms at {by_name('autoreply').memory_mb} MB) vs inline"
            f" {p50('inline_warm_at_cpu_share'):.1f} ({p50('inline_warm_cpu'):.1f} ms at"
            f" {INLINE_MEMORY_MB} MB) + hop {p50('pipeline_warm_queue_hop'):.1f}",
        },
    ]


def report(results: dict[str, Any]) -> list[str]:
    replies, acks, goal = results["replies"], results["acks"], results["goals"]

    def line(label: str, document: dict[str, Any]) -> str:
        return f"    {label:<44} {Stats.from_dict(document).line()}"

    def legs(prefix: str) -> list[str]:
        labels = {
            "to_queue": "POST -> in autoreply's queue",
            "queue_hop": "queue hop: SQS send -> poller hands over",
            "autoreply": "autoreply: handed over -> sendMessage",
        }
        return [line(f"    {labels[leg]}", replies[f"{prefix}_{leg}"]) for leg in LEGS]

    def verdict(name: str) -> str:
        g = goal[name]
        return f"  goal {g['goal']}: {g['value']}  {'met' if g['met'] else 'NOT MET'}"

    def at_cpu_share(phase: str, invocation: str) -> list[str]:
        """The `phase` ("cold", "warm") reply at Lambda's CPU share, with each invocation's CPU."""
        return [
            line(f"pipeline {phase} at CPU share", replies[f"pipeline_{phase}_at_cpu_share"]),
            *(
                line(
                    f"  CPU of {name}'s {invocation} until {REPLY_LEAVES[name]}",
                    replies[f"pipeline_{phase}_cpu_{name}"],
                )
                for name in ("webhook", "autoreply")
            ),
            line(f"inline {phase} at CPU share", replies[f"inline_{phase}_at_cpu_share"]),
            line(
                f"  CPU of its {invocation} until {REPLY_LEAVES[INLINE_NAME]}", replies[f"inline_{phase}_cpu"]
            ),
        ]

    lines = [
        "reply and ack latency: the pipeline (local runtime) vs one inline handler (bench.inline_bot),"
        " same run, samples interleaved",
        "  first reply after idle (fresh processes; cold = init + first invocation, init = process start"
        " to handler loaded):",
        line("pipeline cold: POST -> sendMessage + inits", replies["pipeline_cold"]),
        line("  first invocation: POST -> sendMessage", replies["pipeline_cold_first_invocation"]),
        *legs("pipeline_cold"),
        line("  init webhook", replies["pipeline_init_webhook"]),
        line("  init autoreply", replies["pipeline_init_autoreply"]),
        line("inline cold: POST -> sendMessage + init", replies["inline_cold"]),
        line("  first invocation: POST -> sendMessage", replies["inline_cold_first_invocation"]),
        line("  init inline_bot", replies["inline_init"]),
        f"  cold p50 pipeline / inline{verdict('cold_reply_ratio')}",
        "  the same at Lambda's CPU share (an estimate: each first invocation's CPU time at its memory's"
        " share of a vCPU):",
        *at_cpu_share("cold", "first invocation"),
        f"  cold p50 at CPU share pipeline / inline{verdict('cold_reply_ratio_at_cpu_share')}",
        "  warm reply:",
        line("pipeline warm: POST -> sendMessage", replies["pipeline_warm"]),
        line("  webhook answered", replies["pipeline_warm_ack"]),
        *legs("pipeline_warm"),
        line("inline warm: POST -> sendMessage", replies["inline_warm"]),
        f"  warm p50 pipeline, ms{verdict('warm_reply_ms')}",
        *at_cpu_share("warm", "invocation"),
        f"  warm p50 at CPU share pipeline, ms{verdict('warm_reply_ms_at_cpu_share')}",
        f"  ack (HTTP answer) of /start bursts, CRM answering at once vs holding each lead"
        f" {CRM_SLOW_SECONDS:.0f} s:",
        line("pipeline, CRM fast", acks["pipeline_fast"]),
        line(f"pipeline, CRM slow ({acks['pipeline_slow_leads_held']} leads held)", acks["pipeline_slow"]),
        line("inline, CRM fast", acks["inline_fast"]),
        line("inline, CRM slow", acks["inline_slow"]),
        f"  ack p99 pipeline slow / fast{verdict('ack_p99_slow_over_fast')}",
        f"  ack p99 inline slow / pipeline slow{verdict('ack_p99_speedup_over_inline_slow')}",
    ]
    rows = [[name, g["value"], g["goal"], "met" if g["met"] else "NOT MET"] for name, g in goal.items()]
    return [*lines, *("  " + row for row in table(["goal", "measured", "bound", ""], rows))]
