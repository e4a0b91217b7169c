"""The whole pipeline on this machine: moto, the fakes, and every function in its own process.

    with Runtime(ports=Ports()) as runtime:      # free ports everywhere
        post(runtime.webhook_url, ...)
        runtime.wait_until_drained()

`Runtime` starts a moto server (own process), the fakes of the outside services (threads of
this process), creates the stack's resources in moto from the registry, then starts the
webhook behind a local API Gateway and SQS pollers for each enabled consumer (up to its
`max_concurrency`, added while messages wait: `local.worker_pool`) (plus the SMS
reconciler on its schedule when it exists, and with End User Messaging `sms_events` on the
delivery events its stand-in publishes to SNS), each a subprocess whose environment is its Lambda
environment. A supervisor restarts a process that dies or times out, as Lambda replaces an
execution environment. `stop()` ends everything; nothing is left running.

Besides, for a person at `make local`: each event published to the topic is explained in one line
(`local.routing`: which consumers it reached, and why not the others), a change under `functions/`
or the shared layer restarts the functions it affects (`reload=True`, `local.reload`), and the
queues' messages and the tables' items can outlive a restart (`persist=True`, `local.snapshot`).
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from infra.environment import (
    AMOCRM_PATH,
    BITRIX24_PATH,
    CRM_SWEEP,
    RECONCILER,
    SMS_EVENTS,
    WEBHOOK,
    FunctionSpec,
    webhook_routes,
)
from local import aws_calls, loaded_code, routing, snapshot
from local.child_process import ChildProcess
from local.fakes.amocrm import AmoCrmFake
from local.fakes.base import LOOPBACK, FakeService
from local.fakes.bedrock import BedrockFake
from local.fakes.bitrix24 import Bitrix24PortalFake
from local.fakes.crm import CrmFake
from local.fakes.end_user_messaging import EndUserMessagingFake
from local.fakes.sms import SmsGatewayFake
from local.fakes.sns import SnsFaultProxy
from local.fakes.telegram import TelegramFake
from local.lambda_host import EXIT_STOPPED, EXIT_TIMED_OUT
from local.reload import ChangeDetector, affected_functions
from local.resources import LocalResources, create_resources
from local.settings import PROJECT_ROOT, LocalSettings
from local.status import (
    INIT_ERROR,
    MISSING,
    READY,
    RESTARTING,
    STARTING,
    STOPPED,
    FunctionStatus,
    QueueDepth,
)
from local.worker_pool import WorkerPool, worker_name
from pipeline.registry import Consumer

FUNCTIONS_DIR = PROJECT_ROOT / "functions"
LAYER_DIR = PROJECT_ROOT / "layers" / "shared" / "python"
DEFAULT_STATE_DIR = PROJECT_ROOT / ".local"
# Fake credentials: moto accepts anything; these make sure no real account is ever used.
FAKE_CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_SESSION_TOKEN": "testing",
}
# The webhook's limits, as deployed (`infra.environment.WEBHOOK`); the benchmarks use them too.
WEBHOOK_TIMEOUT_SECONDS = WEBHOOK.timeout_seconds
WEBHOOK_MEMORY_MB = WEBHOOK.memory_mb
STARTUP_TIMEOUT_SECONDS = 60.0
MAX_RESTART_DELAY_SECONDS = 10.0
# How often the reloader looks at the code's files, and how long it lets an editor finish saving.
RELOAD_POLL_SECONDS = 1.0
RELOAD_SETTLE_SECONDS = 0.3


@dataclass(frozen=True)
class Ports:
    """Ports on loopback; 0 picks a free one (the default everywhere except `make local`'s API)."""

    api: int = 0
    moto: int = 0
    telegram: int = 0
    crm: int = 0
    bedrock: int = 0
    sms: int = 0
    end_user_messaging: int = 0
    sns: int = 0
    bitrix24: int = 0
    amocrm: int = 0


class LocalRuntimeError(RuntimeError):
    """The local runtime could not start or lost a part it cannot do without (moto)."""


class Runtime:
    """See the module docstring. Every attribute that names a URL is valid after `start()`."""

    def __init__(
        self,
        ports: Ports | None = None,
        settings: LocalSettings | None = None,
        state_dir: Path | None = None,
        consumers: tuple[Consumer, ...] | None = None,
        *,
        reload: bool = False,
        persist: bool = False,
        functions_dir: Path = FUNCTIONS_DIR,
        layer_dir: Path = LAYER_DIR,
    ) -> None:
        self.ports = ports or Ports()
        # Where the handlers and the shared layer are imported from (and, with `reload`, watched).
        self.functions_dir = functions_dir
        self.layer_dir = layer_dir
        self.reload = reload
        # Keep the queues' messages and the tables' items across restarts, in `persist_dir`.
        self.persist = persist
        self.settings = settings or LocalSettings.from_cdk_json()
        self.state_dir = state_dir or DEFAULT_STATE_DIR
        self.log_dir = self.state_dir / "logs"
        # The runtime's own log (what it started, restarted and saw fail), beside the functions' logs.
        self.runtime_log = self.log_dir / "runtime.log"
        # One JSONL file per function of the AWS calls it made (`local.aws_calls`, `local.policy_check`).
        self.aws_calls_dir = self.state_dir / "aws-calls"
        # With `persist`: the queues' messages and the tables' items saved at stop (`local.snapshot`).
        self.persist_dir = self.state_dir / snapshot.STATE_DIR
        self._runtime_log_lock = threading.Lock()
        self._consumers = consumers
        self.fakes: dict[str, FakeService] = {
            "telegram": TelegramFake(port=self.ports.telegram, token=self.settings.telegram_bot_token),
            "crm": CrmFake(port=self.ports.crm, auth_header=self.settings.crm_auth_header),
            "bedrock": BedrockFake(port=self.ports.bedrock),
            "sms": SmsGatewayFake(port=self.ports.sms, token=self.settings.sms_gateway_token),
            # AWS End User Messaging SMS; its delivery events go to SNS (moto).
            "end_user_messaging": EndUserMessagingFake(
                port=self.ports.end_user_messaging, publish=self._publish_sms_event
            ),
            # The webhook's way to SNS (moto), where publishing can be made to fail.
            "sns": SnsFaultProxy(
                upstream=lambda: self.aws_endpoint, port=self.ports.sns, on_publish=self._explain_routing
            ),
            # CRMs that post their own webhooks (to the API, once it listens) and answer the
            # consumers' reads.
            "bitrix24": Bitrix24PortalFake(
                port=self.ports.bitrix24,
                webhook_code=self.settings.bitrix24_webhook_code,
                application_token=self.settings.bitrix24_application_token,
            ),
            "amocrm": AmoCrmFake(port=self.ports.amocrm, token=self.settings.amocrm_token),
        }
        self.resources: LocalResources | None = None
        self.functions: dict[str, FunctionStatus] = {}
        # Every process by its name (`moto`, `webhook`, `bot`, `bot#2`, ...; `local.worker_pool`).
        self.children: dict[str, ChildProcess] = {}
        # Each function's processes: a queue consumer's workers, one process for the others.
        self.pools: dict[str, WorkerPool] = {}
        self.failure: str | None = None
        self.moto_port = 0
        self.api_port = self.ports.api
        self._api_listening = False
        self._lock = threading.RLock()
        self._changed = threading.Condition(self._lock)
        self._stopping = threading.Event()
        self._supervisor: threading.Thread | None = None
        # Held by each supervision pass, and by `restart_functions` while it replaces processes.
        self._supervision = threading.Lock()
        self._clients: dict[str, Any] = {}
        # Who hears the lines a person watching wants (routing, reloads): `python -m local` prints them.
        self._announcement_listeners: list[Callable[[str], None]] = []
        self._reloader: threading.Thread | None = None
        # The files of functions/ each function process has imported, as it reports them.
        self._loaded_code = loaded_code.LoadedCode()

    # -- URLs -------------------------------------------------------------------------------------
    @property
    def aws_endpoint(self) -> str:
        return f"http://{LOOPBACK}:{self.moto_port}"

    @property
    def api_url(self) -> str:
        return f"http://{LOOPBACK}:{self.api_port}"

    @property
    def webhook_url(self) -> str:
        return f"{self.api_url}/telegram/webhook"

    @property
    def crm_url(self) -> str:
        return f"{self.api_url}/crm/events"

    def fake_urls(self) -> dict[str, str]:
        return {name: fake.url for name, fake in self.fakes.items()}

    def client(self, service: str) -> Any:
        """A boto3 client on the local moto server (never a real account)."""
        if service not in self._clients:
            self._clients[service] = boto3.session.Session().client(  # type: ignore[call-overload]
                service,
                endpoint_url=self.aws_endpoint,
                region_name=self.settings.region,
                aws_access_key_id=FAKE_CREDENTIALS["AWS_ACCESS_KEY_ID"],
                aws_secret_access_key=FAKE_CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
                aws_session_token=FAKE_CREDENTIALS["AWS_SESSION_TOKEN"],
                config=Config(
                    retries={"mode": "standard", "max_attempts": 2}, connect_timeout=2, read_timeout=10
                ),
            )
        return self._clients[service]

    # -- lifecycle ----------------------------------------------------------------------------------
    def __enter__(self) -> Runtime:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def start(self, timeout: float = STARTUP_TIMEOUT_SECONDS) -> Runtime:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.runtime_log.write_text("")
        self.aws_calls_dir.mkdir(parents=True, exist_ok=True)
        for previous in self.aws_calls_dir.glob("*.jsonl"):
            previous.unlink()
        try:
            self._start_moto(timeout)
            self.log(f"moto listening at {self.aws_endpoint}")
            for fake in self.fakes.values():
                fake.start()
                self.log(f"fake {fake.name} listening at {fake.url}")
            self.resources = create_resources(self.client, self.settings, self.fake_urls(), self._consumers)
            if self.persist:
                self.log(snapshot.restore(self.client, self.persist_dir))
            events = self.resources.delivery_events
            if events is not None:
                end_user_messaging = self.fakes["end_user_messaging"]
                assert isinstance(end_user_messaging, EndUserMessagingFake)
                end_user_messaging.add_configuration_set(events.configuration_set, events.topic_arn)
            self._start_functions(self.resources)
            self._supervisor = threading.Thread(target=self._supervise, name="local-supervisor", daemon=True)
            self._supervisor.start()
            self._wait_started(timeout)
            self._connect_crm_stand_ins()
            if self.reload:
                self._start_reloader()
        except BaseException as error:
            self.log(f"start failed: {type(error).__name__}: {error}")
            self.stop()
            raise
        self.log(f"started; API at {self.api_url}")
        self.write_state()
        return self

    @property
    def bitrix24_url(self) -> str:
        return f"{self.api_url}{BITRIX24_PATH}"

    @property
    def amocrm_url(self) -> str:
        """amoCRM's webhook URL, with the crm_token in its path as the operator pastes it."""
        return f"{self.api_url}{AMOCRM_PATH.replace('{token}', self.settings.crm_token)}"

    @property
    def bitrix24(self) -> Bitrix24PortalFake:
        fake = self.fakes["bitrix24"]
        assert isinstance(fake, Bitrix24PortalFake)
        return fake

    @property
    def amocrm(self) -> AmoCrmFake:
        fake = self.fakes["amocrm"]
        assert isinstance(fake, AmoCrmFake)
        return fake

    def _connect_crm_stand_ins(self) -> None:
        """Point the CRM stand-ins' webhooks at the API, as the operator does in each CRM."""
        self.bitrix24.configure_handler(self.bitrix24_url, self.settings.bitrix24_application_token)
        self.amocrm.configure_handler(self.amocrm_url)

    def log(self, message: str) -> None:
        """One timestamped line in `logs/runtime.log` (never secrets: names, URLs, exit codes, counters)."""
        stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        with self._runtime_log_lock, self.runtime_log.open("a", encoding="utf-8") as log:
            log.write(f"{stamp} {message}\n")

    def on_announcement(self, listener: Callable[[str], None]) -> None:
        """Call `listener` with each line for the person watching (a routing explanation, a reload),
        on the thread that made it (the SNS proxy's, the reloader's): keep it short."""
        self._announcement_listeners.append(listener)

    def announce(self, message: str) -> None:
        """A line for `runtime.log` and for whoever watches (`on_announcement`)."""
        self.log(message)
        for listener in list(self._announcement_listeners):
            listener(message)

    def _explain_routing(self, published: list[routing.Publish]) -> None:
        """The SNS proxy saw moto accept these: explain each event published to the events topic."""
        resources = self.resources
        if resources is None:
            return
        for message in published:
            if message.topic_arn != resources.topic_arn:
                continue
            try:
                self.announce(routing.explain(message, resources.consumers))
            except Exception as error:  # an explanation never changes the publish's answer: say it
                reason = f"{type(error).__name__}: {error}"
                print(f"local runtime: routing not explained ({reason})", file=sys.stderr)

    def stop(self) -> None:
        """Stop functions first (they may still be calling moto and the fakes), then fakes, then moto."""
        self._stopping.set()
        if self._supervisor is not None:
            self._supervisor.join(2)
        if self._reloader is not None:
            self._reloader.join(2)
        with self._supervision:
            pass  # a restart in progress (a reload's) has started its process: stopped below
        _stop_together([child for child in list(self.children.values()) if child.name != "moto"])
        for fake in self.fakes.values():
            fake.stop()
        moto = self.children.get("moto")
        if self.persist and self.resources is not None and moto is not None and moto.exit_code is None:
            self._save_tables(self.resources)
        if "moto" in self.children:
            self.children["moto"].stop()
        with self._lock:
            for status in self.functions.values():
                status.state = STOPPED
                status.busy_workers.clear()
        if self.runtime_log.parent.is_dir():
            self.log("stopped; last status:\n" + "\n".join(self.status_lines()))

    def _save_tables(self, resources: LocalResources) -> None:
        """The tables' items, while moto still runs (it saves the queues itself as it stops)."""
        path = self.persist_dir / snapshot.TABLES_FILE
        try:
            count = snapshot.save_tables(self.client, sorted(resources.tables.values()), path)
        except (BotoCoreError, ClientError, OSError) as error:  # said in the log; stopping goes on
            self.log(f"persist: could not save the tables ({type(error).__name__}: {error})")
            return
        self.log(f"persist: saved {count} items of {len(resources.tables)} tables to {path}; the queues next")

    def _start_moto(self, timeout: float) -> None:
        child = ChildProcess(
            name="moto",
            module="local.moto_process",
            args=lambda: [
                "--port",
                str(self.ports.moto),
                *(("--save-queues", str(self.persist_dir / snapshot.QUEUES_FILE)) if self.persist else ()),
            ],
            env=self._base_environment(),
            log_path=self.log_dir / "moto.log",
            on_message=self._on_moto_message,
        )
        self.children["moto"] = child
        child.start()
        deadline = time.monotonic() + timeout
        with self._changed:
            while not self.moto_port:
                if child.exit_code is not None:
                    raise LocalRuntimeError(f"the moto server exited at start; see {child.log_path}")
                if time.monotonic() > deadline:
                    raise LocalRuntimeError(
                        f"the moto server did not start within {timeout:.0f}s; see {child.log_path}"
                    )
                self._changed.wait(0.1)

    def _publish_sms_event(self, topic_arn: str, message: str) -> None:
        """End User Messaging publishing an SMS event to the configuration set's SNS destination."""
        self.client("sns").publish(TopicArn=topic_arn, Message=message)

    def _on_moto_message(self, child: ChildProcess, message: dict[str, Any]) -> None:
        if message.get("event") == "listening":
            with self._changed:
                self.moto_port = int(message["port"])
                self._changed.notify_all()

    # -- functions ----------------------------------------------------------------------------------
    def function_environments(self, resources: LocalResources) -> dict[str, dict[str, str]]:
        """Each function process's whole environment, by function name: the variables Lambda itself
        sets, then the stack's environment plus the local overlay (`LocalResources.local_environments`)."""
        memory = {
            WEBHOOK.service_name: WEBHOOK.memory_mb,
            RECONCILER.service_name: RECONCILER.memory_mb,
            SMS_EVENTS.service_name: SMS_EVENTS.memory_mb,
            CRM_SWEEP.service_name: CRM_SWEEP.memory_mb,
            **{consumer.name: consumer.memory_mb for consumer in resources.consumers},
        }
        return {
            name: self._function_environment(name, memory[name], environment)
            for name, environment in resources.local_environments(self.aws_endpoint).items()
        }

    def _start_functions(self, resources: LocalResources) -> None:
        environments = self.function_environments(resources)
        self._add_function(
            FunctionStatus("webhook", "api"),
            module="local.apigw",
            args=lambda: [
                "--port",
                str(self.api_port),
                "--handler",
                WEBHOOK.handler,
                "--function-name",
                self._lambda_name("webhook"),
                "--timeout",
                str(WEBHOOK_TIMEOUT_SECONDS),
                "--memory",
                str(WEBHOOK_MEMORY_MB),
                *(
                    argument
                    for route in webhook_routes(resources.deployment)
                    for argument in ("--route", route)
                ),
            ],
            env=environments[WEBHOOK.service_name],
        )
        for consumer in resources.consumers:
            queue = resources.queues[consumer.name]
            self._add_function(
                FunctionStatus(consumer.name, "consumer"),
                module="local.worker_process",
                args=_consumer_args(consumer, self._lambda_name(consumer.name), queue.url, queue.arn),
                env=environments[consumer.name],
                max_workers=self.consumer_workers(consumer),
            )
        # The reconciler closes the `sms` consumer's unknown outcomes; it runs when that consumer does.
        # The catch-up sweep reads the connected CRMs' histories; it runs where a CRM is connected.
        for spec, every in (
            (RECONCILER, self.settings.reconcile_every_seconds),
            (CRM_SWEEP, self.settings.crm_sweep_every_seconds),
        ):
            if spec.service_name in environments:
                self._add_scheduled(spec, every, environments[spec.service_name])
        # With End User Messaging: the delivery events, as the topic's Lambda subscription delivers them.
        events = resources.delivery_events
        if SMS_EVENTS.service_name in environments and events is not None:
            arguments = [
                "sns",
                "--handler",
                SMS_EVENTS.handler,
                "--function-name",
                self._lambda_name(SMS_EVENTS.service_name),
                "--timeout",
                str(SMS_EVENTS.timeout_seconds),
                "--memory",
                str(SMS_EVENTS.memory_mb),
                "--queue-url",
                events.queue.url,
                "--subscription-arn",
                events.subscription_arn,
            ]
            self._add_function(
                FunctionStatus(SMS_EVENTS.service_name, "subscription"),
                module="local.worker_process",
                args=lambda: list(arguments),
                env=environments[SMS_EVENTS.service_name],
            )

    def _add_scheduled(self, spec: FunctionSpec, every_seconds: float, env: dict[str, str]) -> None:
        """A function EventBridge runs on a schedule: its own process, invoking it every `every_seconds`."""
        self._add_function(
            FunctionStatus(spec.service_name, "schedule"),
            module="local.worker_process",
            args=lambda: [
                "schedule",
                "--handler",
                spec.handler,
                "--function-name",
                self._lambda_name(spec.service_name),
                "--timeout",
                str(spec.timeout_seconds),
                "--memory",
                str(spec.memory_mb),
                "--every",
                str(every_seconds),
            ],
            env=env,
        )

    def _add_function(
        self,
        status: FunctionStatus,
        module: str,
        args: Callable[[], list[str]],
        env: dict[str, str],
        max_workers: int = 1,
    ) -> None:
        """Start a function's process (a queue consumer's first workers, `local.worker_pool`)."""
        self.functions[status.name] = status
        listeners: list[Callable[[dict[str, Any]], None]] = []

        def make_worker(index: int) -> ChildProcess:
            return ChildProcess(
                name=worker_name(status.name, index),
                function=status.name,
                module=module,
                args=args,
                env=env,
                # One log per process: workers writing one file would interleave their lines.
                log_path=self.log_dir / f"{worker_name(status.name, index)}.log",
                on_message=self._on_function_message,
                _listeners=listeners,
            )

        pool = WorkerPool(
            status.name, max_workers, make_worker, on_demand=self.settings.scale_workers_on_demand
        )
        self.pools[status.name] = pool
        status.max_workers = max_workers
        for worker in pool.start():
            self.children[worker.name] = worker
        status.workers = len(pool.workers)

    def _scale_up(self, pool: WorkerPool) -> None:
        """Another worker for a consumer whose workers are all busy while messages wait."""
        status = self.functions[pool.function]
        if status.state != READY or self._stopping.is_set():
            return
        with self._lock:
            busy = set(status.busy_workers)
        worker = pool.scale_up(busy, lambda: self._visible_messages(pool.function))
        if worker is None:
            return
        self.children[worker.name] = worker
        with self._lock:
            status.workers = len(pool.workers)
        self.log(f"{worker.name} started: every {pool.function} worker busy, messages waiting")

    def _visible_messages(self, name: str) -> int:
        if self.resources is None or name not in self.resources.queues:
            return 0
        try:
            attributes = self.client("sqs").get_queue_attributes(
                QueueUrl=self.resources.queues[name].url, AttributeNames=["ApproximateNumberOfMessages"]
            )["Attributes"]
        except (BotoCoreError, ClientError):
            return 0
        return int(attributes.get("ApproximateNumberOfMessages", 0))

    def consumer_workers(self, consumer: Consumer) -> int:
        """How many worker processes a queue consumer runs at most: the local setting, else the
        deployed `max_concurrency` (its event source's MaximumConcurrency)."""
        return self.settings.consumer_workers or consumer.max_concurrency

    def restart_functions(self, *names: str, timeout: float = STARTUP_TIMEOUT_SECONDS) -> dict[str, float]:
        """Replace the named functions' processes with fresh ones, one after the other, as Lambda
        gives a function a new execution environment after it sat idle: the next invocation of
        each is its first (no client, connection or cached secret yet).

        Each old process is stopped as at `stop()` (it finishes its invocation or long poll), not
        counted as a crash. Returns, per name, the seconds from its new process's start until it
        said its handler loaded (and, for the webhook, that the API listens): interpreter start
        and the handler's import, Lambda's init phase.
        """
        unknown = [name for name in names if name not in self.functions]
        if unknown:
            raise ValueError(f"no such function(s): {unknown}")
        init_seconds: dict[str, float] = {}
        for name in names:
            workers = self.pools[name].workers
            with self._supervision:
                if self._stopping.is_set():  # `stop()` ends them all; never start one behind it
                    break
                _stop_together(workers)
                with self._changed:
                    status = self.functions[name]
                    status.state, status.detail = STARTING, None
                    status.busy_workers.clear()
                    if status.kind == "api":
                        self._api_listening = False
                started = time.monotonic()
                for worker in workers:
                    worker.start()
            self.log(f"{name} restarted on request ({len(workers)} process(es))")
            self._wait_started(timeout)
            init_seconds[name] = time.monotonic() - started
        return init_seconds

    # -- reload on code changes ---------------------------------------------------------------------
    def _start_reloader(self) -> None:
        detector = ChangeDetector((self.functions_dir, self.layer_dir))
        self._reloader = threading.Thread(
            target=self._watch, args=(detector,), name="local-reloader", daemon=True
        )
        self._reloader.start()
        self.log(f"watching {self._shown(self.functions_dir)} and {self._shown(self.layer_dir)} for changes")

    def _watch(self, detector: ChangeDetector) -> None:
        while not self._stopping.wait(RELOAD_POLL_SECONDS):
            # Also what a process reported it imported in a version already replaced on disk.
            changed = detector.changes() + self._loaded_code.take_stale()
            if not changed:
                continue
            # An editor may save in several writes (or several files at once): take them together.
            if self._stopping.wait(RELOAD_SETTLE_SECONDS):
                return
            self.reload_changed(sorted({*changed, *detector.changes()}))

    def reload_changed(self, changed: list[Path]) -> list[str]:
        """Restart the functions these changed files affect (`local.reload`); the names restarted."""
        packages = {
            name: handler.split(".", 1)[0]
            for name, handler in self._handlers().items()
            if name in self.functions
        }
        live = {c.process.pid for c in self.children.values() if c.process is not None}
        loaded = self._loaded_code.by_function(live)
        plan = affected_functions(changed, self.functions_dir, self.layer_dir, packages, loaded)
        reloaded: list[str] = []
        for name, path in plan.items():
            if self._stopping.is_set():
                break
            try:
                self.restart_functions(name)
            except LocalRuntimeError as error:
                self.announce(f"reload of {name} failed ({self._shown(path)} changed): {error}")
                continue
            status = self.functions[name]
            problem = f"; {status.state}: {status.detail}" if status.state in (INIT_ERROR, MISSING) else ""
            self.announce(f"reloaded {name} ({self._shown(path)} changed){problem}")
            reloaded.append(name)
        return reloaded

    def _handlers(self) -> dict[str, str]:
        """Each function's handler string (`<package>.app.lambda_handler`)."""
        consumers = self.resources.consumers if self.resources is not None else self._consumers or ()
        return {
            WEBHOOK.service_name: WEBHOOK.handler,
            RECONCILER.service_name: RECONCILER.handler,
            SMS_EVENTS.service_name: SMS_EVENTS.handler,
            **{consumer.name: consumer.handler for consumer in consumers},
        }

    def _shown(self, path: Path) -> str:
        """A path as a person reads it: relative to the project (or to the watched root's parent)."""
        for base in (PROJECT_ROOT, self.functions_dir.parent, self.layer_dir.parent):
            if path.is_relative_to(base):
                return str(path.relative_to(base))
        return str(path)

    def on_status(self, name: str, listener: Callable[[dict[str, Any]], None]) -> None:
        """Call `listener` with each status message of function `name`'s processes, this one and
        those that replace it (`{"event": "busy" | "invocation" | "state" | ..., "time": <unix>, ...}`),
        on the thread reading them: keep it short."""
        self.children[name]._listeners.append(listener)  # shared by all of the function's workers

    def _on_function_message(self, child: ChildProcess, message: dict[str, Any]) -> None:
        with self._changed:
            status = self.functions[child.function]
            if message.get("event") == "listening":
                self.api_port = int(message["port"])
                self._api_listening = True
            # The function's state is its first worker's (the others load the same handler).
            if message.get("event") != "state" or child.name == child.function:
                status.apply(message, worker=child.name)
            if message.get("event") == loaded_code.EVENT:
                self._loaded_code.record(child.function, message)
            if message.get("event") == "invocation":
                child.crashes_in_a_row = 0
            self._changed.notify_all()

    def _lambda_name(self, name: str) -> str:
        return f"{self.settings.stack_name}-{name}"

    def _base_environment(self) -> dict[str, str]:
        """What every child gets: no variables of the user's shell, so no real AWS profile leaks in."""
        return {
            "PATH": os.environ.get("PATH", os.defpath),
            "LANG": "C.UTF-8",
            "TZ": "UTC",
            "PYTHONPATH": os.pathsep.join(
                str(path) for path in (self.functions_dir, self.layer_dir, PROJECT_ROOT)
            ),
            "PYTHONUNBUFFERED": "1",
            "AWS_REGION": self.settings.region,
            "AWS_DEFAULT_REGION": self.settings.region,
            "AWS_CONFIG_FILE": os.devnull,
            "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
            **FAKE_CREDENTIALS,
        }

    def _function_environment(self, name: str, memory_mb: int, own: dict[str, str]) -> dict[str, str]:
        """The variables Lambda itself sets, then the function's own."""
        lambda_name = self._lambda_name(name)
        return {
            **self._base_environment(),
            "AWS_LAMBDA_FUNCTION_NAME": lambda_name,
            "AWS_LAMBDA_FUNCTION_VERSION": "$LATEST",
            "AWS_LAMBDA_FUNCTION_MEMORY_SIZE": str(memory_mb),
            "AWS_LAMBDA_LOG_GROUP_NAME": f"/aws/lambda/{lambda_name}",
            # Not Lambda's: where the function host records the function's AWS calls.
            aws_calls.ENV_VAR: str(self.aws_calls_dir / f"{name}.jsonl"),
            # Not Lambda's: whose imported files it reports to the reloader (`local.loaded_code`).
            loaded_code.ENV_VAR: str(self.functions_dir),
            **own,
        }

    # -- supervision --------------------------------------------------------------------------------
    def _supervise(self) -> None:
        while not self._stopping.wait(0.2):
            with self._supervision:
                for child in list(self.children.values()):
                    self._check(child)
                for pool in list(self.pools.values()):
                    if len(pool.workers) < pool.maximum:
                        self._scale_up(pool)

    def _check(self, child: ChildProcess) -> None:
        code = child.exit_code
        if code is None or self._stopping.is_set():
            return
        if child.name == "moto":
            with self._changed:
                if self.failure is None:
                    self.failure = f"the moto server exited (code {code}); see {child.log_path}"
                    self.log(self.failure)
                self._changed.notify_all()
            return
        now = time.monotonic()
        if child.restart_at is None:
            # A timeout is Lambda discarding the environment: start a new one at once. A crash
            # backs off, so a handler that dies on import does not spin.
            if code == EXIT_TIMED_OUT:
                delay = 0.0
            else:
                child.crashes_in_a_row += 1
                delay = min(MAX_RESTART_DELAY_SECONDS, 0.5 * 2 ** (child.crashes_in_a_row - 1))
            child.restart_at = now + delay
            self.log(f"{child.name} exited with code {code}; starting a new one in {delay:.1f}s")
            with self._changed:
                status = self.functions[child.function]
                status.restarts += 1
                status.busy_workers.discard(child.name)
                if child.name == child.function:
                    status.state = RESTARTING
                if code not in (EXIT_STOPPED, EXIT_TIMED_OUT):
                    status.detail = f"exit code {code}; see {child.log_path}"
                    status.crashed(code)
                self._changed.notify_all()
            child.stop()
        if child.restart_at is not None and now >= child.restart_at:
            child.start()

    def _wait_started(self, timeout: float) -> None:
        """Until the API listens and every function has said whether its handler loaded."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while True:
                settled = all(
                    status.state in (READY, MISSING, INIT_ERROR) for status in self.functions.values()
                )
                if settled and self._api_listening:
                    return
                if self.failure:
                    raise LocalRuntimeError(self.failure)
                webhook = self.functions["webhook"]
                if webhook.state == INIT_ERROR and not self._api_listening:
                    raise LocalRuntimeError(f"the API could not start: {webhook.detail}")
                if time.monotonic() > deadline:
                    waiting = [
                        s.name for s in self.functions.values() if s.state not in (READY, MISSING, INIT_ERROR)
                    ]
                    raise LocalRuntimeError(
                        f"not started within {timeout:.0f}s: {waiting}; see {self.log_dir}"
                    )
                self._changed.wait(0.2)

    # -- status -------------------------------------------------------------------------------------
    def refresh_queue_depths(self) -> None:
        resources = self.resources
        if resources is None or self._stopping.is_set():
            return
        sqs = self.client("sqs")
        names = [
            "ApproximateNumberOfMessages",
            "ApproximateNumberOfMessagesNotVisible",
            "ApproximateNumberOfMessagesDelayed",
        ]
        depths: dict[str, tuple[QueueDepth, QueueDepth]] = {}
        queues = dict(resources.queues)
        if resources.delivery_events is not None and SMS_EVENTS.service_name in self.functions:
            queues[SMS_EVENTS.service_name] = resources.delivery_events.queue
        for name, queue in queues.items():
            main = sqs.get_queue_attributes(QueueUrl=queue.url, AttributeNames=names)["Attributes"]
            dlq = sqs.get_queue_attributes(QueueUrl=queue.dlq_url, AttributeNames=names)["Attributes"]
            depths[name] = (QueueDepth.from_attributes(main), QueueDepth.from_attributes(dlq))
        with self._lock:
            for name, (main_depth, dlq_depth) in depths.items():
                self.functions[name].queue = main_depth
                self.functions[name].dlq = dlq_depth

    def status(self, refresh: bool = True) -> dict[str, dict[str, Any]]:
        """Per function: state, counters and, for consumers, queue and DLQ depth."""
        if refresh:
            self.refresh_queue_depths()
        with self._lock:
            return {name: status.as_dict() for name, status in self.functions.items()}

    def status_lines(self) -> list[str]:
        with self._lock:
            return [status.line() for status in self.functions.values()]

    def stack_info(self) -> dict[str, Any]:
        """What `.local/stack.json` holds: where everything listens and the local secrets."""
        info: dict[str, Any] = {
            "webhook_url": self.webhook_url,
            "crm_url": self.crm_url,
            "telegram_secret": self.settings.telegram_secret,
            "crm_signing_key": self.settings.crm_signing_key,
            "crm_token": self.settings.crm_token,
            "crm_auth": self.settings.deployment.crm_auth,
            "bitrix24_connected": bool(self.resources and self.resources.deployment.bitrix24_stages),
            "bitrix24_url": self.bitrix24_url,
            "bitrix24_application_token": self.settings.bitrix24_application_token,
            "amocrm_url": self.amocrm_url,
            "telegram_bot_token": self.settings.telegram_bot_token,
            "aws_endpoint": self.aws_endpoint,
            "region": self.settings.region,
            "fakes": self.fake_urls(),
            "logs": str(self.log_dir),
        }
        if self.resources is not None:
            info.update(self.resources.describe())
            # The settings the stack it stands for is synthesized with (`bin/ops doctor` reads them).
            info["deployment"] = self.resources.deployment.to_context()
        return info

    def write_state(self, status: dict[str, dict[str, Any]] | None = None) -> Path:
        """Write `stack.json` atomically (readers never see half a file)."""
        path = self.state_dir / "stack.json"
        document = {
            **self.stack_info(),
            "functions": status if status is not None else self.status(refresh=False),
        }
        temporary = path.with_suffix(".json.tmp")
        temporary.write_text(json.dumps(document, indent=2) + "\n")
        temporary.replace(path)
        return path

    def wait_until_drained(
        self, timeout: float = 60.0, settle_seconds: float = 1.0, cancel: threading.Event | None = None
    ) -> bool:
        """True once every consumer with a handler has had an empty queue and been idle for `settle_seconds`.

        Consumers whose handler is missing are left out: their messages wait for them.
        """
        deadline = time.monotonic() + timeout
        quiet_since: float | None = None
        while time.monotonic() < deadline and not (cancel is not None and cancel.is_set()):
            self.refresh_queue_depths()
            with self._lock:
                drained = all(
                    status.queue is not None and status.queue.total == 0 and not status.busy
                    for status in self.functions.values()
                    if status.kind in ("consumer", "subscription")
                    and status.state not in (MISSING, INIT_ERROR)
                )
            if drained:
                quiet_since = quiet_since or time.monotonic()
                if time.monotonic() - quiet_since >= settle_seconds:
                    return True
            else:
                quiet_since = None
            time.sleep(0.25)
        return False


def _stop_together(children: list[ChildProcess]) -> None:
    """Stop these processes side by side (each may finish an invocation first)."""
    stoppers = [threading.Thread(target=child.stop) for child in children]
    for thread in stoppers:
        thread.start()
    for thread in stoppers:
        thread.join()


def _consumer_args(
    consumer: Consumer, lambda_name: str, queue_url: str, queue_arn: str
) -> Callable[[], list[str]]:
    arguments = [
        "sqs",
        "--handler",
        consumer.handler,
        "--function-name",
        lambda_name,
        "--timeout",
        str(consumer.timeout_seconds),
        "--memory",
        str(consumer.memory_mb),
        "--queue-url",
        queue_url,
        "--queue-arn",
        queue_arn,
        "--batch-size",
        str(consumer.batch_size),
        "--batching-window",
        str(consumer.batching_window_seconds),
    ]
    return lambda: list(arguments)
