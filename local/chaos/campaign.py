"""Run a seeded plan (`local.chaos.workload`) through the whole local pipeline, then check it.

The pipeline is a `local.runtime.Runtime` with several worker processes per queue consumer (Lambda's
concurrency shape) and the consumers whose effects can be seen from outside: `store` (its
items), `autoreply` declared ordered (a FIFO queue by chat, as a registry entry would; each
`/stepN` answered `step N`, so every reply names its update), `crm` (leads in the CRM
stand-in) and `sms` (End User Messaging's stand-in, its journal, delivery events and the
reconciler), with retry delays of seconds. Senders post in lanes (each chat's and each order's
steps in order, as Telegram and a CRM do); an answer other than 200 is posted again, as Telegram
resends. Faults are injected from the main thread as the plan reaches them; then every fault is
cleared, the queues drain, the operator redrives the dead letters and decides the SMS records that
wait on a person (`local.chaos.operator`), and `local.chaos.checks` checks the invariants.
"""

from __future__ import annotations

import json
import os
import queue
import shutil
import signal
import statistics
import threading
import time
import urllib.error
import urllib.request
import zlib
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from local.chaos import operator, outcomes, portals
from local.chaos.actions import with_actions
from local.chaos.checks import INTERMEDIATE_SMS_STATES, Sent, Violation, check, reply_text, split
from local.chaos.edges import KINDS as EDGE_FAULTS
from local.chaos.edges import EdgeFaults
from local.chaos.inflight import InFlight
from local.chaos.observe import dead_letters, observe
from local.chaos.posts import crm_move, telegram_update
from local.chaos.shape import campaign_consumers, campaign_settings, rule_statuses
from local.chaos.steering import Steering
from local.chaos.workload import Step, counted, plan
from local.fleet import SUPERVISION_SECONDS
from local.moto_faults import PATH as AWS_FAULTS_PATH
from local.runtime import STARTUP_TIMEOUT_SECONDS, Ports, Runtime
from local.stack import DEFAULT_STATE_DIR, moto_resource
from pipeline.crm.contract import SIGNATURE_HEADER, sign
from pipeline.envelope import crm_event_id, telegram_event_id
from pipeline.registry import JOURNAL
from pipeline.sms.journal import Journal

TELEGRAM_SECRET_HEADER = "X-Telegram-Bot-Api-Secret-Token"  # noqa: S105 - a header name
REPORT_NAME = "chaos-report.json"
LANES = 12
# Telegram resends an update the webhook did not answer 200, for hours; so do the campaign's
# senders, at least this many times and for longer than any outage the campaign makes (a whole
# pipeline restart answers again within its start timeout), so that each event is accepted as
# Telegram's would be. Giving up sooner (8 tries, 12 s, against restarts of up to 36 s) left
# events the checks counted as never sent, whose replies then looked unowed or out of order.
DELIVERY_ATTEMPTS = 8
DELIVERY_WINDOW_SECONDS = 2 * STARTUP_TIMEOUT_SECONDS
DELIVERY_BACKOFF_MAX_SECONDS = 3.0
HTTP_TIMEOUT_SECONDS = 30.0
PROGRESS_SECONDS = 5.0
FUNCTION_FIGURES = ("processed", "duplicates", "retried", "dead_lettered", "crashes", "restarts")
# After the queues drain: the catch-up sweep's period and this, for moves whose webhook was lost.
SWEEP_MARGIN_SECONDS = 5.0


@dataclass
class Options:
    seed: int
    events: int
    minutes: float | None = None
    workers: int = 3
    state_dir: Path = DEFAULT_STATE_DIR / "chaos"
    drain_timeout: float = 300.0
    fault_rate: float | None = None


def post(url: str, body: bytes, headers: dict[str, str]) -> int:
    """The status of a POST; a connection refused or reset (a restarting API) is 0."""
    request = urllib.request.Request(url, data=body, method="POST", headers=headers)  # noqa: S310 - loopback
    try:
        with urllib.request.urlopen(request, timeout=HTTP_TIMEOUT_SECONDS) as response:  # noqa: S310 - loopback
            response.read()
            return int(response.status)
    except urllib.error.HTTPError as error:
        with error:
            return int(error.code)
    except (urllib.error.URLError, OSError):
        return 0


class CampaignStopped(RuntimeError):
    """A part of the pipeline the campaign cannot go on without was lost (the moto server killed,
    say): one line with the seed and how far it got, instead of a traceback and no figures."""


class Campaign:
    def __init__(self, options: Options, say: Callable[[str], None] = print) -> None:
        self.options = options
        self.say = say
        rate = () if options.fault_rate is None else (options.fault_rate,)
        self.steps = with_actions(options.seed, plan(options.seed, options.events, *rate))
        self.sent = Sent()
        self.bodies: dict[str, tuple[str, bytes, dict[str, str]]] = {}
        self.faults: Counter[str] = Counter()
        self.dispatched = 0
        self.errors: list[str] = []
        self._lock = threading.Lock()
        self._restarting = threading.Lock()
        # Held while the whole pipeline restarts: moto's fault points wait for it to be back.
        self._pipeline_down = threading.Lock()
        self._background: list[threading.Thread] = []
        self.pipeline_restarts: list[float] = []
        self.runtime: Runtime | None = None
        self.redriven: Counter[str] = Counter()
        self.decisions: Counter[str] = Counter()
        self.operator_errors: list[str] = []
        self.inflight = InFlight()
        # Per consumer, the events the operator redrove (their effects come late, by their decision).
        self.redriven_events: dict[str, dict[str, str]] = {}
        self.edges = EdgeFaults(lambda: self.runtime, self._pipeline_down, self.sent, self.errors)
        # Broadcasts, opt-outs, old redrives: played in order on a thread of their own.
        self.steering = Steering(
            lambda: self.runtime, self._pipeline_down, self.inject, self.inflight, self.faults,
            self.redriven_events, say,
        )  # fmt: skip

    # -- sending -------------------------------------------------------------------------------------
    def event_id(self, step: Step) -> str:
        assert self.runtime is not None
        if step.kind in ("crm_move", "crm_resend"):
            return crm_event_id(step.args["event_id"])
        if step.kind == "portal_move":  # the campaign's name for it: the pipeline's come from the history
            return f"portal:{step.args['deal']}:{step.index}"
        return telegram_event_id(self.runtime.settings.telegram_bot_id, step.args["update"])

    def _request(self, step: Step) -> tuple[str, bytes, dict[str, str]]:
        runtime = self.runtime
        assert runtime is not None
        if step.kind == "crm_move":
            body = json.dumps(crm_move(step)).encode()
            headers = {
                "Content-Type": "application/json",
                SIGNATURE_HEADER: sign(runtime.settings.crm_signing_key, body),
            }
            return runtime.crm_url, body, headers
        body = json.dumps(telegram_update(step, int(time.time()))).encode()
        headers = {
            "Content-Type": "application/json",
            TELEGRAM_SECRET_HEADER: runtime.settings.telegram_secret,
        }
        return runtime.webhook_url, body, headers

    def _answer(self, event_id: str, status: int) -> None:
        with self._lock:
            self.sent.answers[event_id].append(status)

    def send(self, step: Step) -> None:
        event_id = self.event_id(step)
        if step.kind == "portal_move":
            with self._lock:
                self.sent.steps[event_id] = step
            self._answer(event_id, portals.apply(self.runtime, step.args, self.sent.portal_ids))
            self.sent.portal_moved_at[step.args["portal"]] = time.time()
            return
        if step.kind in ("resend", "crm_resend"):
            with self._lock:
                request = self.bodies.get(event_id)
            if request is not None:
                self._answer(event_id, post(*request))
            return
        request = self._request(step)
        with self._lock:
            self.sent.steps[event_id] = step
            self.bodies[event_id] = request
            self.sent.first_posted[event_id] = time.time()
        if step.kind == "concurrent":  # Telegram delivering one update twice at once
            results: list[int] = []
            twin = threading.Thread(target=lambda: results.append(post(*request)))
            twin.start()
            status = post(*request)
            twin.join()
            for each in (status, *results):
                self._answer(event_id, each)
            if 200 in (status, *results):
                return
        started, attempt = time.monotonic(), 0
        while True:
            status = post(*request)
            self._answer(event_id, status)
            attempt += 1
            if status == 200:
                return
            if attempt >= DELIVERY_ATTEMPTS and time.monotonic() - started >= DELIVERY_WINDOW_SECONDS:
                return  # left unaccepted: the checks owe it nothing, the report counts its answers
            time.sleep(min(DELIVERY_BACKOFF_MAX_SECONDS, 0.2 * 2 ** (attempt - 1)))

    def _lane(self, lane: queue.Queue[Step | None]) -> None:
        while (step := lane.get()) is not None:
            try:
                self.send(step)
            except Exception as error:  # a sender's own bug: counted and shown, the others go on
                self.errors.append(f"{step.path()}: {type(error).__name__}: {error}")

    # -- faults --------------------------------------------------------------------------------------
    def inject(self, step: Step) -> None:
        runtime = self.runtime
        assert runtime is not None
        fakes = runtime.fakes
        args = step.args
        kind = step.kind
        if kind == "telegram_5xx":
            fakes["telegram"].add_faults({"fail_next": args["count"], "status": args["status"]})
        elif kind == "telegram_429":
            fakes["telegram"].add_faults(
                {"rate_limit_next": args["count"], "retry_after": args["retry_after"]}
            )
        elif kind in ("telegram_slow", "telegram_timeout"):
            fakes["telegram"].add_faults({"hang_next": args["count"], "seconds": args["seconds"]})
        elif kind == "telegram_lost_answer":
            fakes["telegram"].add_faults({"drop_answer_next": args["count"]})
        elif kind in ("sms_error", "sms_refusal"):
            fakes["end_user_messaging"].add_faults({"fail_next": args["count"], "status": args["status"]})
        elif kind == "sms_timeout":
            fakes["end_user_messaging"].add_faults({"hang_next": args["count"], "seconds": args["seconds"]})
        elif kind == "portal_webhook_lost":
            portals.webhook_faults(runtime, args["portal"], {"lose_next_webhooks": args["count"]})
        elif kind == "portal_webhook_late":
            late = {"delay_next_webhooks": args["count"], "seconds": args["seconds"]}
            portals.webhook_faults(runtime, args["portal"], late)
        elif kind == "crm_outage":
            fakes["crm"].go_down(args["seconds"])
        elif kind in EDGE_FAULTS:
            self.edges.inject(step)
        elif kind.startswith("sns_publish_"):  # at SNS's Publish: an error, a late or a lost answer
            name = {"sns_publish_error": "fail_next", "sns_publish_timeout": "hang_next"}.get(
                kind, "drop_answer_next"
            )
            options = {key: value for key, value in args.items() if key != "count"}
            fakes["sns"].add_faults({name: args["count"], **options, "match": "Publish"})
        elif kind.startswith(("dynamodb_", "sqs_")):
            if kind == "dynamodb_lost_answer":
                self.steering.dynamodb_lost.append(time.time())
            self._aws_faults("POST", {key: args[key] for key in ("target", "kind", "count")})
        elif kind == "kill_worker":
            processes = sorted(
                (name, child.function, child.process.pid)
                for name, child in runtime.children.items()
                if name != "moto" and child.process is not None and child.exit_code is None
            )
            if processes:
                name, function, pid = processes[args["pick"] % len(processes)]
                self.inflight.killed(name, function)
                os.kill(pid, signal.SIGKILL)
        elif kind == "restart_function":
            names = sorted(consumer.name for consumer in campaign_consumers())
            name = names[args["pick"] % len(names)]
            self._in_background(self._restart, name)
        elif kind == "restart_runtime":
            self._in_background(self._restart_pipeline)
        self.faults[kind] += 1

    def _in_background(self, target: Callable[..., None], *args: Any) -> None:
        thread = threading.Thread(target=target, args=args, daemon=True)
        self._background.append(thread)
        thread.start()

    def _aws_faults(self, method: str, document: dict[str, Any] | None = None) -> None:
        """Ask moto's fault points (`local.moto_faults`) for a fault, or to clear them."""
        assert self.runtime is not None
        body = json.dumps(document).encode() if document is not None else None
        url = f"{self.runtime.aws_endpoint}{AWS_FAULTS_PATH}"
        request = urllib.request.Request(url, data=body, method=method)  # noqa: S310 - loopback
        try:
            with (
                self._pipeline_down,
                urllib.request.urlopen(request, timeout=HTTP_TIMEOUT_SECONDS) as response,  # noqa: S310 - loopback
            ):
                response.read()
        except OSError:
            time.sleep(5 * SUPERVISION_SECONDS)  # the supervisor's turn to notice a dead server
            self._still_running()
            raise

    def _restart_pipeline(self) -> None:
        """The whole pipeline stopped and started again with its state; the world goes on sending."""
        if not self._restarting.acquire(blocking=False):
            return
        try:
            assert self.runtime is not None
            with self._pipeline_down:
                self.pipeline_restarts.append(round(self.runtime.restart_pipeline(), 1))
            self.edges.restore_secrets()  # the operator's, which a restart made again with local values
        except Exception as error:  # the campaign goes on; the report shows it
            self.errors.append(f"restart of the pipeline: {type(error).__name__}: {error}")
        finally:
            self._restarting.release()

    def _restart(self, name: str) -> None:
        if not self._restarting.acquire(blocking=False):
            return
        try:
            assert self.runtime is not None
            self.runtime.restart_functions(name)
        except Exception as error:  # the campaign goes on; the report shows it
            self.errors.append(f"restart of {name}: {type(error).__name__}: {error}")
        finally:
            self._restarting.release()

    def clear_faults(self) -> None:
        assert self.runtime is not None
        self._aws_faults("DELETE")
        self.edges.finish()
        for name, fake in self.runtime.fakes.items():
            fake.clear_faults()
            if (switch := getattr(fake, "account", None)) is not None:
                switch.unblock()
            if name == "crm":
                fake.come_back()
        portals.clear_webhook_faults(self.runtime)

    # -- the run -------------------------------------------------------------------------------------
    def run(self) -> dict[str, Any]:
        options = self.options
        options.state_dir.mkdir(parents=True, exist_ok=True)
        started = time.monotonic()
        runtime = Runtime(
            ports=Ports(),
            settings=campaign_settings(options.workers),
            state_dir=options.state_dir,
            consumers=campaign_consumers(),
            persist=True,  # for `restart_runtime`; an earlier campaign's state is never read
        )
        shutil.rmtree(runtime.persist_dir, ignore_errors=True)
        for fake in runtime.fakes.values():
            fake.keep_every_call()
        self.runtime = runtime
        with runtime:
            for consumer in campaign_consumers():
                runtime.on_status(consumer.name, self.inflight.listener)
            startup = time.monotonic() - started
            self.say(
                f"chaos seed {options.seed}: {options.events} events; pipeline started in {startup:.1f}s"
            )
            sending = self._drive()
            self.steering.join()
            for thread in self._background:
                thread.join()
            self.clear_faults()
            drain_started = time.monotonic()
            drained = self._drain(time.monotonic() + options.drain_timeout)
            # Moves whose webhook was lost reach the pipeline through the next catch-up sweep.
            time.sleep(runtime.settings.crm_sweep_every_seconds + SWEEP_MARGIN_SECONDS)
            drained = self._drain(time.monotonic() + options.drain_timeout) and drained
            settled = self._wait_journal_settled(time.monotonic() + 60)
            drained, settled = self._operator(drained, settled)
            drain_seconds = time.monotonic() - drain_started
            observed = observe(runtime, self.inflight.undecided())
            seen = self.steering.observe()
            status = runtime.status()
        observed.decided_by_operator = not self.operator_errors
        observed.redriven = self.redriven_events
        observed.blocked_chats = set(self.steering.acted.blocked)
        violations, in_window = split(check(options.seed, self.sent, observed, rule_statuses()))
        sms_dead = {"sms": {**observed.redriven.get("sms", {}), **observed.dead.get("sms", {})}}
        acted = self.steering.acted
        found = outcomes.check(
            options.seed, self.sent, acted, seen, observed.sms_records, sms_dead, rule_statuses()
        )
        more, unknowns = split(found)
        violations.extend(more)
        violations.extend(Violation("operator", error, "-", options.seed) for error in self.operator_errors)
        if not drained:
            violations.append(
                Violation("drain", f"queues not drained in {options.drain_timeout:.0f}s", "-", options.seed)
            )
        figures = (observed, status, sending, drain_seconds, startup, settled)
        document = self.report(violations, in_window, *figures)
        document["actions"] = outcomes.figures(acted, seen, observed.sms_records)
        document["broadcast_unknown"] = [finding.as_dict() for finding in unknowns]
        document["broadcast_unknown_total"] = len(unknowns)
        Path(document["report_path"]).write_text(json.dumps(document, indent=2) + "\n")
        return document

    def _drive(self) -> float:
        # Short lanes: a step is sent soon after the plan reaches it, so faults land among the
        # events planned around them (not all at once ahead of a backlog).
        lanes: list[queue.Queue[Step | None]] = [queue.Queue(maxsize=2) for _ in range(LANES)]
        threads = [
            threading.Thread(target=self._lane, args=(lane,), name=f"chaos-lane-{i}", daemon=True)
            for i, lane in enumerate(lanes)
        ]
        for thread in threads:
            thread.start()
        events = sum(1 for step in self.steps if not step.is_fault and not step.is_action)
        pace = events / (self.options.minutes * 60) if self.options.minutes else None
        started = time.monotonic()
        last_progress = started
        sent_events = 0
        for step in self.steps:
            self._still_running()
            if step.is_fault:
                self.inject(step)
                continue
            if step.is_action:
                self.steering.enqueue(step)
                continue
            if pace is not None:
                time.sleep(max(0.0, started + sent_events / pace - time.monotonic()))
            key = step.args.get("chat") or step.args.get("order") or step.args.get("deal")
            lane = lanes[zlib.crc32(str(key).encode()) % LANES]
            while True:  # a timed wait, so that Ctrl-C stops the campaign while a lane is full
                try:
                    lane.put(step, timeout=1.0)
                    break
                except queue.Full:
                    continue
            sent_events += 1
            self.dispatched = sent_events
            now = time.monotonic()
            if now - last_progress >= PROGRESS_SECONDS:
                last_progress = now
                self.say(self.progress_line(now - started, events))
        for lane in lanes:
            lane.put(None)
        for thread in threads:
            thread.join()
        return time.monotonic() - started

    def progress_line(self, elapsed: float, events: int) -> str:
        with self._lock:
            accepted = sum(1 for answers in self.sent.answers.values() if 200 in answers)
        faults = sum(self.faults.values())
        return (
            f"chaos seed {self.options.seed}: {self.dispatched}/{events} events sent, {accepted} accepted,"
            f" {faults} faults, {elapsed:.0f}s"
        )

    def _operator(self, drained: bool, settled: bool) -> tuple[bool, bool]:
        """The operator, once the faults are gone (`local.chaos.operator`): every dead letter
        redriven; each SMS record that waits on a person decided; what that left in the DLQ (the
        decided records' messages) redriven too."""
        runtime = self.runtime
        assert runtime is not None
        drained, settled = self._redrive(drained, settled)
        try:
            self.decisions.update(operator.decide_sms_records(runtime, observe(runtime).sms_records))
        except operator.OperatorError as error:
            self.operator_errors.append(str(error))
        if self.decisions:
            self.say(f"chaos seed {self.options.seed}: decided SMS records {dict(self.decisions)}")
            settled = self._wait_journal_settled(time.monotonic() + 60) and settled
            drained, settled = self._redrive(drained, settled)
        return drained, settled

    def _redrive(self, drained: bool, settled: bool) -> tuple[bool, bool]:
        """Every DLQ redriven; the queues drain again and the journal settles."""
        assert self.runtime is not None
        held = dead_letters(self.runtime)
        moved = operator.redrive(self.runtime)
        for name, events in held.items():
            self.redriven_events.setdefault(name, {}).update(events)
        if moved:
            self.redriven.update(moved)
            self.say(f"chaos seed {self.options.seed}: redrove {moved}")
            drained = self._drain(time.monotonic() + self.options.drain_timeout) and drained
            settled = self._wait_journal_settled(time.monotonic() + 60) and settled
        return drained, settled

    def _still_running(self) -> None:
        failure = self.runtime.failure if self.runtime is not None else None
        if failure:
            raise CampaignStopped(
                f"chaos seed {self.options.seed}: stopped after {self.dispatched} events sent: {failure}"
            )

    def _drain(self, deadline: float) -> bool:
        """Until the queues drain (a progress line every few seconds), or the deadline."""
        runtime = self.runtime
        assert runtime is not None
        while time.monotonic() < deadline:
            self._still_running()
            if runtime.wait_until_drained(timeout=PROGRESS_SECONDS, settle_seconds=3.0):
                return True
            status = runtime.status(refresh=False)
            waiting = {name: f["queue_depth"] for name, f in status.items() if f.get("queue_depth")}
            self.say(f"chaos seed {self.options.seed}: faults cleared, draining: {waiting}")
        return False

    def _wait_journal_settled(self, deadline: float) -> bool:
        """Until no SMS record is pending or sending (a killed sender's lease runs out, or the
        reconciler runs)."""
        runtime = self.runtime
        assert runtime is not None and runtime.resources is not None
        dynamodb = moto_resource("dynamodb", runtime.aws_endpoint, runtime.settings.region)
        journal = Journal(runtime.resources.tables[JOURNAL], dynamodb=dynamodb)
        while time.monotonic() < deadline:
            # The `by_state` index, as the reconciler reads it: a scan of a long campaign's
            # journal (hundreds of thousands of items) takes the moto server many seconds.
            if not any(journal.count_in_state(state) for state in INTERMEDIATE_SMS_STATES):
                return True
            time.sleep(2)
        return False

    def report(
        self,
        violations: list[Violation],
        in_window: list[Violation],
        observed: Any,
        status: dict[str, dict[str, Any]],
        sending: float,
        drain_seconds: float,
        startup: float,
        settled: bool,
    ) -> dict[str, Any]:
        events, _ = counted(self.steps)
        latencies = self._latencies(observed)
        accepted = sum(1 for answers in self.sent.answers.values() if 200 in answers)
        document = {
            "seed": self.options.seed,
            "events": events,
            "events_total": sum(events.values()),
            "faults": dict(sorted(self.faults.items())),
            "faults_total": sum(self.faults.values()),
            "accepted_events": accepted,
            "webhook_answers": dict(
                Counter(str(s) for answers in self.sent.answers.values() for s in answers)
            ),
            "retries": sum(int(f.get("retried", 0)) for f in status.values()),
            "dead_letters": {name: len(events) for name, events in observed.dead.items() if events},
            "redriven": dict(self.redriven),
            "operator_decisions": dict(self.decisions),
            "dead_letter_reasons": dict(
                Counter(reason.split(":", 1)[0] for d in observed.dead.values() for reason in d.values())
            ),
            "violations": [v.as_dict() for v in violations],
            "violations_total": len(violations),
            # Replies made twice after their first answer was lost (`local.chaos.checks`).
            "at_least_once": [f.as_dict() for f in in_window],
            "at_least_once_total": len(in_window),
            "pipeline_restarts_seconds": self.pipeline_restarts,
            "workers_killed_holding_events": sum(
                1 for kill in self.inflight.kills if kill.events and kill.cause == "killed"
            ),
            "bot_timeouts_holding_events": sum(
                1 for kill in self.inflight.kills if kill.cause == "timed out"
            ),
            "sender_errors": self.errors[:20],
            "hidden_orders_skipped": observed.hidden_counted,  # `deal_hidden`: counted, named, then texted
            "journal_settled": settled,
            "startup_seconds": round(startup, 1),
            "sending_seconds": round(sending, 1),
            "drain_seconds": round(drain_seconds, 1),
            "throughput_events_per_second": round(accepted / max(sending + drain_seconds, 0.001), 1),
            "latency_ms": latencies,
            "functions": {
                name: {
                    k: f[k]
                    for k in ("processed", "retried", "dead_lettered", "crashes", "restarts")
                    if k in f
                }
                for name, f in status.items()
            },
            "workers_per_consumer": self.options.workers,
            "measured_at": datetime.now(UTC).isoformat(timespec="seconds"),
            "cpus": os.cpu_count(),
        }
        path = self.options.state_dir / REPORT_NAME
        path.write_text(json.dumps(document, indent=2) + "\n")
        document["report_path"] = str(path)
        return document

    def _latencies(self, observed: Any) -> dict[str, float]:
        """From an update's first POST to its reply at the Bot API (the first, when resent)."""
        assert self.runtime is not None
        first_reply: dict[tuple[int, str], float] = {}
        for chat, text, at in observed.replies:
            first_reply.setdefault((chat, text), at)
        samples = []
        for event_id, step in self.sent.steps.items():
            if step.kind in ("message", "concurrent") and self.sent.accepted(event_id):
                at = first_reply.get((step.args["chat"], reply_text(step.args["step"])))
                if at is not None:
                    samples.append((at - self.sent.first_posted[event_id]) * 1000)
        if len(samples) < 2:
            return {"samples": len(samples)}
        cuts = statistics.quantiles(samples, n=100, method="inclusive")
        return {
            "samples": len(samples),
            "p50": round(cuts[49], 1),
            "p99": round(cuts[98], 1),
            "max": round(max(samples), 1),
        }
