"""Plays the campaign's actions (`local.chaos.actions`) as an operator and customers would, one
after the other on a thread of their own (the events go on meanwhile), and reads what became of
them once the pipeline drained (`Seen`, checked by `local.chaos.outcomes`).

The operator's commands are `bin/ops` run as a user runs it against the local stack
(`local.chaos.operator.ops`): `broadcast create|pause|resume|cancel`, `sms opt-out`. A create that
fails (an SNS fault of the campaign met its publish) leaves a job with some pages published: as
docs/broadcast.md says, the operator cancels it and creates again (the text names the attempt).
A customer's STOP goes to End User Messaging's stand-in as the carrier hands it to AWS. An old
redrive is a notification the pipeline dead-lettered days ago, shaped as the webhook publishes a
generic CRM move (`functions/webhook/ingest.py`), lying in sms's DLQ; the operator moves that
DLQ back (`bin/ops dlq redrive`'s move) at once.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import signal
import threading
import time
import urllib.request
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from local.chaos import operator
from local.chaos.actions import BROADCAST_TEXT, broadcast_text
from local.chaos.checks import customer_name
from local.chaos.inflight import InFlight
from local.chaos.observe import dead_letters, took_effect
from local.chaos.outcomes import Acted, Created, Seen
from local.chaos.workload import Step
from local.fakes.telegram import TelegramFake
from local.runtime import Runtime
from ops.dlq import move_by_hand
from ops.stack import ConsumerQueues
from pipeline import broadcast as jobs
from pipeline.bot_api import TIMEOUT_SECONDS
from pipeline.crm import event_model
from pipeline.envelope import Envelope, crm_event_id, fifo_keys, sns_attributes
from pipeline.registry import JOURNAL
from pipeline.sms.clock import parse_iso
from pipeline.sms.endstates import suppression_id

# A create interrupted is cancelled and tried again, at most this many times in all.
CREATE_ATTEMPTS = 2


class Steering:
    def __init__(
        self,
        runtime: Callable[[], Runtime | None],
        pipeline_down: threading.Lock,
        inject: Callable[[Step], None],
        inflight: InFlight,
        faults: Counter[str],
        redriven: dict[str, dict[str, str]],
        say: Callable[[str], None],
    ) -> None:
        self._runtime = runtime
        self._pipeline_down = pipeline_down
        self._inject = inject
        self._inflight = inflight
        self._faults = faults
        self._redriven = redriven
        self._say = say
        self.acted = Acted()
        self.dynamodb_lost: list[float] = []
        self._steps: queue.Queue[Step | None] = queue.Queue()
        self._thread: threading.Thread | None = None
        self._timers: list[threading.Timer] = []

    def runtime(self) -> Runtime:
        runtime = self._runtime()
        assert runtime is not None and runtime.resources is not None
        return runtime

    # -- in order, on a thread of their own -------------------------------------------------------------
    def enqueue(self, step: Step) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._play_all, name="chaos-steering", daemon=True)
            self._thread.start()
        self._steps.put(step)

    def join(self) -> None:
        if self._thread is not None:
            self._steps.put(None)
            self._thread.join()
        for timer in self._timers:
            timer.join()

    def _play_all(self) -> None:
        while (step := self._steps.get()) is not None:
            try:
                self.play(step)
            except Exception as error:  # an action's own failure: shown in the report, the rest go on
                self.acted.errors.append(f"{step.path()}: {type(error).__name__}: {error}"[:500])

    def play(self, step: Step) -> None:
        args = step.args
        if step.kind == "user_blocks_bot":
            telegram = self.runtime().fakes["telegram"]
            assert isinstance(telegram, TelegramFake)
            telegram.block_chats(args["chats"])
            for chat in args["chats"]:
                self.acted.blocked[int(chat)] = time.time()
        elif step.kind == "broadcast_create":
            self._create(step)
        elif step.kind in ("broadcast_pause", "broadcast_resume", "broadcast_cancel"):
            self._steer(args["number"], step.kind.removeprefix("broadcast_"))
        elif step.kind == "sms_opt_out":
            self._opt_out(step)
        elif step.kind == "old_redrive":
            self._old_redrive(step)

    def _ops(self, *arguments: str) -> str:
        """`bin/ops` against the local stack; a restart of the pipeline is waited out."""
        with self._pipeline_down:
            return operator.ops(*arguments, stack_file=self.runtime().state_dir / "stack.json")

    # -- broadcasts -----------------------------------------------------------------------------------
    def _create(self, step: Step) -> None:
        number = step.args["number"]
        for attempt in range(1, CREATE_ATTEMPTS + 1):
            text = broadcast_text(step.args["text"], attempt)
            created = Created(number, attempt, text, time.time())
            self.acted.creates.append(created)
            try:
                printed = json.loads(self._ops("broadcast", "create", "--text", text, "--yes", "--json"))
            except (operator.OperatorError, ValueError) as error:
                created.error = str(error)[:300]
                for broadcast_id in self._jobs_with(text):  # published in part: cancelled, as docs say
                    created.broadcast_id = broadcast_id
                    self._steer_job(created, "cancel")
                self._say(f"chaos: broadcast {number} create failed (cancelled, again): {created.error}")
                continue
            created.broadcast_id, created.recipients = str(printed["id"]), int(printed["recipients"])
            self._say(f"chaos: broadcast {number} created: {created.recipients} recipients")
            for fault in step.args["faults"]:
                self._fault(fault)
            return

    def _fault(self, fault: dict[str, Any]) -> None:
        """A fault for the broadcast's pages, once they are on their way."""
        kind = fault["kind"]
        if kind != "kill_worker":
            self._inject(Step(-1, kind, {key: value for key, value in fault.items() if key != "kind"}))
            return
        timer = threading.Timer(fault["after"], self._kill_sender, args=(fault["function"],))
        timer.daemon = True
        self._timers.append(timer)
        timer.start()

    def _kill_sender(self, function: str) -> None:
        """SIGKILL a worker of `function`, one holding a page if any does (mid-page)."""
        runtime = self.runtime()
        alive = sorted(
            (name, child.process.pid)
            for name, child in runtime.children.items()
            if child.function == function and child.process is not None and child.exit_code is None
        )
        busy = [(name, pid) for name, pid in alive if self._inflight.holding(name)]
        if not (busy or alive):
            return
        name, pid = (busy or alive)[0]
        self._inflight.killed(name, function)
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        self._faults["kill_worker"] += 1

    def _steer(self, number: int, action: str) -> None:
        created = next((c for c in reversed(self.acted.creates) if c.number == number and not c.error), None)
        if created is not None and created.broadcast_id is not None:
            self._steer_job(created, action)

    def _steer_job(self, created: Created, action: str) -> None:
        try:
            self._ops("broadcast", action, str(created.broadcast_id))
        except operator.OperatorError as error:  # finished before it: the command says so
            created.steered.append(f"{action} refused: {str(error)[-120:]}")
            return
        created.steered.append(action)

    def _jobs_with(self, text: str) -> list[str]:
        return sorted(
            str(item["broadcast_id"])
            for item in self._scan_journal(jobs.JOB_PREFIX)
            if item.get("text") == text and "broadcast_id" in item
        )

    def _scan_journal(self, prefix: str) -> list[dict[str, Any]]:
        runtime = self.runtime()
        table = runtime.resources.tables[JOURNAL]  # type: ignore[union-attr]
        dynamodb = runtime.client("dynamodb")
        request: dict[str, Any] = {
            "TableName": table,
            "FilterExpression": "begins_with(id, :prefix)",
            "ExpressionAttributeValues": {":prefix": {"S": prefix}},
        }
        items: list[dict[str, Any]] = []
        while True:
            page = dynamodb.scan(**request)
            items.extend({key: _plain(value) for key, value in i.items()} for i in page.get("Items", []))
            if "LastEvaluatedKey" not in page:
                return items
            request["ExclusiveStartKey"] = page["LastEvaluatedKey"]

    # -- SMS ------------------------------------------------------------------------------------------
    def _opt_out(self, step: Step) -> None:
        phone = step.args["phone"]
        runtime = self.runtime()
        if step.args["via"] == "ops":
            self._ops("sms", "opt-out", phone)
            item = runtime.client("dynamodb").get_item(
                TableName=runtime.resources.tables[JOURNAL],  # type: ignore[union-attr]
                Key={"id": {"S": suppression_id(phone)}},
                ConsistentRead=True,
            )
            at = parse_iso(item["Item"]["opted_out_at"]["S"]).timestamp()
        else:  # the customer's STOP reply, as the carrier hands it to AWS
            url = f"{runtime.fakes['end_user_messaging'].url}/_inbound"
            body = json.dumps({"from": phone, "text": "STOP"}).encode()
            request = urllib.request.Request(url, data=body, method="POST")  # noqa: S310 - loopback
            with urllib.request.urlopen(request, timeout=30) as response:  # noqa: S310 - loopback
                response.read()
            at = time.time()
        self.acted.opted_out.setdefault(phone, (step, at))  # from the first opt-out on

    def _old_redrive(self, step: Step) -> None:
        """Days ago the pipeline dead-lettered this move's notification; the operator redrives it now."""
        args = step.args
        moved_at = datetime.now(UTC) - timedelta(days=args["days"])
        payload = {
            "event_id": args["event_id"],
            "type": "order.status_changed",
            "occurred_at": moved_at.isoformat(timespec="milliseconds"),
            "order": {"id": args["order"], "status": args["status"], "previous_status": args["previous"]},
            "customer": {"phone": args["phone"], "name": customer_name(args["order"], args["run"])},
        }
        event = event_model.CrmEvent.parse(payload)
        envelope = Envelope(
            event_id=crm_event_id(event.event_id),
            source="crm",
            type=event.type,
            correlation_id=f"chaos-old-{args['order']}",
            received_at=moved_at,
            payload=event.normalised_payload(payload),
        )
        attributes = sns_attributes({"source": "crm", "type": event.type, "status": args["status"]})
        with self._pipeline_down:
            runtime = self.runtime()
            queues = runtime.resources.queues["sms"]  # type: ignore[union-attr]
            sqs = runtime.client("sqs")
            message: dict[str, Any] = {
                "QueueUrl": queues.dlq_url,
                "MessageBody": envelope.to_json(),
                "MessageAttributes": attributes,
            }
            if queues.dlq_url.endswith(".fifo"):
                keys = fifo_keys(envelope)
                message.update(MessageGroupId=keys.group_id, MessageDeduplicationId=keys.deduplication_id)
            sqs.send_message(**message)
            self.acted.old_redrives.append(step)
            held = dead_letters(runtime).get("sms", {})
            self._redriven.setdefault("sms", {}).update(held)
            moved = move_by_hand(ConsumerQueues("sms", queues.url, queues.dlq_url), sqs)
        self._say(f"chaos: an old notification ({args['days']} days) in sms's DLQ; redrove {moved}")

    # -- afterwards -----------------------------------------------------------------------------------
    def observe(self) -> Seen:
        runtime = self.runtime()
        seen = Seen(dynamodb_lost=list(self.dynamodb_lost), undecided=self._inflight.undecided())
        for item in self._scan_journal(jobs.JOB_PREFIX):
            rest = str(item["id"]).removeprefix(jobs.JOB_PREFIX)
            if "#" in rest:
                broadcast_id, chat = rest.rsplit("#", 1)
                seen.entries.setdefault(broadcast_id, {})[int(chat)] = str(item.get("state"))
            else:
                seen.jobs[rest] = item
        for call in runtime.fakes["telegram"].calls():
            body = call.get("body")
            if not call["path"].endswith("/sendMessage") or not isinstance(body, dict):
                continue
            message = str(body.get("text"))
            if not message.startswith(BROADCAST_TEXT):
                continue
            to = int(body["chat_id"])
            if took_effect(call):
                lost = call["fault"] == "drop_answer" or (call.get("fault_seconds") or 0) >= TIMEOUT_SECONDS
                seen.messages.append((to, message, lost))
            elif call.get("status") == 403:
                seen.refused.add((to, message))
        seen.sms = [
            (str(m["to"]), str(m["text"]), float(m["accepted_at"]))
            for m in runtime.fakes["end_user_messaging"].messages()  # type: ignore[attr-defined]
        ]
        return seen


def _plain(value: dict[str, Any]) -> Any:
    """A DynamoDB attribute value as a plain one (the few types the journal's items use)."""
    if "S" in value:
        return value["S"]
    if "N" in value:
        return int(float(value["N"]))
    if "SS" in value:
        return set(value["SS"])
    if "M" in value:
        return {key: _plain(inner) for key, inner in value["M"].items()}
    return next(iter(value.values()))
