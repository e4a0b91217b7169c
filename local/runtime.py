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

Its parts live beside it, each usable without it: the stand-ins, ports and clients
(`local.stack`), the processes and their supervision (`local.fleet`), the queue and status views
(`local.status_views`) and the reloader (`local.live_reload`); `Runtime` wires them together.
"""

from __future__ import annotations

import dataclasses
import json
import sys
import threading
import time
from collections.abc import Callable, Collection
from pathlib import Path
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from infra.environment import (
    AMOCRM_PATH,
    BITRIX24_PATH,
    CRM_SWEEP,
    RECONCILER,
    SMS_EVENTS,
    SMS_INBOUND_PATH,
    WEBHOOK,
    webhook_paths,
    webhook_routes,
)
from infra.version import release_version
from local import aws_calls, loaded_code, routing, snapshot, status_views
from local.child_process import ChildProcess
from local.fakes.amocrm import AmoCrmFake
from local.fakes.base import LOOPBACK, FakeService
from local.fakes.bitrix24 import Bitrix24PortalFake
from local.fakes.end_user_messaging import EndUserMessagingFake
from local.fakes.sms import SmsGatewayFake
from local.fleet import MAX_RESTART_DELAY_SECONDS, Fleet
from local.function_args import consumer_args, host_args, scheduled_args, subscription_args, window_seconds
from local.live_reload import RELOAD_POLL_SECONDS, RELOAD_SETTLE_SECONDS, Reloader
from local.resources import LocalResources, create_resources
from local.settings import PROJECT_ROOT, LocalSettings
from local.stack import (
    DEFAULT_STATE_DIR,
    FAKE_CREDENTIALS,
    FUNCTIONS_DIR,
    LAYER_DIR,
    LocalRuntimeError,
    Ports,
    base_environment,
    build_fakes,
    moto_client,
)
from local.status import FunctionStatus
from local.worker_pool import WorkerPool
from pipeline import snapstart
from pipeline.registry import Consumer

__all__ = [
    "DEFAULT_STATE_DIR",
    "FAKE_CREDENTIALS",
    "FUNCTIONS_DIR",
    "LAYER_DIR",
    "MAX_RESTART_DELAY_SECONDS",
    "PROJECT_ROOT",
    "RELOAD_POLL_SECONDS",
    "RELOAD_SETTLE_SECONDS",
    "STARTUP_TIMEOUT_SECONDS",
    "WEBHOOK_MEMORY_MB",
    "WEBHOOK_TIMEOUT_SECONDS",
    "LocalRuntimeError",
    "Ports",
    "Runtime",
]

# The webhook's limits, as deployed (`infra.environment.WEBHOOK`); the benchmarks use them too.
WEBHOOK_TIMEOUT_SECONDS = WEBHOOK.timeout_seconds
WEBHOOK_MEMORY_MB = WEBHOOK.memory_mb
STARTUP_TIMEOUT_SECONDS = 60.0


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
        self.fakes: dict[str, FakeService] = build_fakes(
            self.ports,
            self.settings,
            aws_endpoint=lambda: self.aws_endpoint,
            publish_sms_event=self._publish_sms_event,
            on_publish=self._explain_routing,
        )
        self.resources: LocalResources | None = None
        # The processes (moto's, each function's) and their supervision (`local.fleet`).
        self.fleet = Fleet(
            self.log_dir,
            self.log,
            visible_messages=self._visible_messages,
            scale_on_demand=self.settings.scale_workers_on_demand,
        )
        self.fleet.api_port = self.ports.api
        self._clients: dict[str, Any] = {}
        # Who hears the lines a person watching wants (routing, reloads): `python -m local` prints them.
        self._announcement_listeners: list[Callable[[str], None]] = []
        self.reloader = Reloader(
            functions_dir,
            layer_dir,
            functions=lambda: self.functions,
            handlers=self._handlers,
            live_pids=self.fleet.live_pids,
            loaded=self.fleet.loaded_code,
            restart=lambda name: self.restart_functions(name),
            announce=self.announce,
            stopping=self.fleet.stopping,
        )

    # -- the fleet's state, as the runtime's --------------------------------------------------------
    @property
    def functions(self) -> dict[str, FunctionStatus]:
        return self.fleet.functions

    @functions.setter
    def functions(self, value: dict[str, FunctionStatus]) -> None:
        self.fleet.functions = value

    @property
    def children(self) -> dict[str, ChildProcess]:
        """Every process by its name (`moto`, `webhook`, `bot`, `bot#2`, ...; `local.worker_pool`)."""
        return self.fleet.children

    @children.setter
    def children(self, value: dict[str, ChildProcess]) -> None:
        self.fleet.children = value

    @property
    def pools(self) -> dict[str, WorkerPool]:
        """Each function's processes: a queue consumer's workers, one process for the others."""
        return self.fleet.pools

    @property
    def failure(self) -> str | None:
        return self.fleet.failure

    @property
    def moto_port(self) -> int:
        return self.fleet.moto_port

    @property
    def api_port(self) -> int:
        return self.fleet.api_port

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
            self._clients[service] = moto_client(service, self.aws_endpoint, self.settings.region)
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
                self.log(snapshot.restore(self.client, self.persist_dir, self._put_items_back))
            self._connect_delivery_events(self.resources)
            self._start_functions(self.resources)
            self.fleet.start_supervisor()
            self.fleet.wait_started(timeout, self.log_dir)
            self._connect_crm_stand_ins()
            if self.reload:
                self.log(self.reloader.start())
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

    @property
    def sms_inbound_url(self) -> str:
        """The HTTP SMS gateway's inbound callback, with its token in the path as the operator pastes it."""
        return f"{self.api_url}{SMS_INBOUND_PATH.replace('{token}', self.settings.sms_inbound_token)}"

    def _connect_crm_stand_ins(self) -> None:
        """Point the CRM stand-ins' webhooks at the API, as the operator does in each CRM, and
        the HTTP SMS gateway's inbound messages, where the API has that route."""
        self.bitrix24.configure_handler(self.bitrix24_url, self.settings.bitrix24_application_token)
        self.amocrm.configure_handler(self.amocrm_url)
        sms = self.fakes.get("sms")
        if isinstance(sms, SmsGatewayFake) and self.resources is not None:
            inbound = SMS_INBOUND_PATH in webhook_paths(self.resources.deployment)
            sms.configure_inbound(self.sms_inbound_url if inbound else None)

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
        self.fleet.stopping.set()
        self.reloader.join(2)
        self.fleet.stop_functions()
        for fake in self.fakes.values():
            fake.stop()
        if self.persist and self.resources is not None and self.fleet.moto_running():
            try:
                self.log(self._save_state())
            except snapshot.SnapshotError as error:  # said where the user looks; stopping goes on
                self.log(str(error))
                print(f"local runtime: {error}", file=sys.stderr)
        self.fleet.stop_moto()
        if self.runtime_log.parent.is_dir():
            self.log("stopped; last status:\\n" + "\\n".join(self.status_lines()))

    def _connect_delivery_events(self, resources: LocalResources) -> None:
        """End User Messaging's stand-in publishes its delivery events to the pipeline's topic."""
        events = resources.delivery_events
        if events is not None:
            end_user_messaging = self.fakes["end_user_messaging"]
            assert isinstance(end_user_messaging, EndUserMessagingFake)
            end_user_messaging.add_configuration_set(events.configuration_set, events.topic_arn)

    def _save_state(self) -> str:
        """Have the moto process save the queues and tables; answered once written (`local.snapshot`)."""
        saved = snapshot.ask_moto(self.aws_endpoint, snapshot.SAVE_STATE_PATH, STARTUP_TIMEOUT_SECONDS)
        return f"persist: saved {saved['messages']} messages and {saved['items']} items to {self.persist_dir}"

    def _put_items_back(self) -> str:
        answer = snapshot.ask_moto(self.aws_endpoint, snapshot.RESTORE_TABLES_PATH, STARTUP_TIMEOUT_SECONDS)
        return str(answer["said"])

    def _start_moto(self, timeout: float) -> None:
        self.fleet.start_moto(
            lambda: [
                "--port",
                str(self.ports.moto),
                *(("--persist-dir", str(self.persist_dir)) if self.persist else ()),
            ],
            self._base_environment(),
            timeout,
        )

    def _publish_sms_event(self, topic_arn: str, message: str) -> None:
        """End User Messaging publishing an SMS event to the configuration set's SNS destination."""
        self.client("sns").publish(TopicArn=topic_arn, Message=message)

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
        routes = [arg for route in webhook_routes(resources.deployment) for arg in ("--route", route)]
        self.fleet.add_function(
            FunctionStatus("webhook", "api"),
            module="local.apigw",
            args=lambda: [
                "--port",
                str(self.api_port),
                *host_args(
                    "",
                    WEBHOOK.handler,
                    self._lambda_name("webhook"),
                    WEBHOOK_TIMEOUT_SECONDS,
                    WEBHOOK_MEMORY_MB,
                ),
                *routes,
            ],
            env=environments[WEBHOOK.service_name],
        )
        for consumer in resources.consumers:
            queue = resources.queues[consumer.name]
            self.fleet.add_function(
                FunctionStatus(consumer.name, "consumer"),
                module="local.worker_process",
                args=consumer_args(
                    consumer,
                    self._lambda_name(consumer.name),
                    queue.url,
                    queue.arn,
                    batching_window=self.settings.batching_windows,
                ),
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
                # A function EventBridge runs on a schedule: its own process, invoking it every `every`.
                self.fleet.add_function(
                    FunctionStatus(spec.service_name, "schedule"),
                    module="local.worker_process",
                    args=scheduled_args(spec, self._lambda_name(spec.service_name), every),
                    env=environments[spec.service_name],
                )
        # With End User Messaging: the delivery events, as the topic's Lambda subscription delivers them.
        events = resources.delivery_events
        if SMS_EVENTS.service_name in environments and events is not None:
            self.fleet.add_function(
                FunctionStatus(SMS_EVENTS.service_name, "subscription"),
                module="local.worker_process",
                args=self._delivery_events_args,
                env=environments[SMS_EVENTS.service_name],
            )

    def _delivery_events_args(self) -> list[str]:
        """Read at each start: a restarted pipeline's subscription has a new ARN (`restart_pipeline`)."""
        events = self.resources.delivery_events if self.resources is not None else None
        assert events is not None
        name = self._lambda_name(SMS_EVENTS.service_name)
        return subscription_args(SMS_EVENTS, name, events.queue.url, events.subscription_arn)()

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
        return self.fleet.restart(names, timeout)

    def restart_pipeline(self, timeout: float = STARTUP_TIMEOUT_SECONDS) -> float:
        """Stop the whole pipeline and start it again with its state, as `python -m local
        --persist` stopped and run again does (`local.snapshot`: what survives and what does not);
        the stand-ins, the world outside, run on. Seconds until it answers again."""
        if not self.persist or self.resources is None:
            raise LocalRuntimeError("a restart keeps the queues and tables only with persist")
        started = time.monotonic()
        # The same endpoint: the functions' environments and the clients name moto's port.
        self.ports = dataclasses.replace(self.ports, moto=self.moto_port)

        def restore() -> None:
            self.resources = create_resources(self.client, self.settings, self.fake_urls(), self._consumers)
            self.log(snapshot.restore(self.client, self.persist_dir, self._put_items_back))
            self._connect_delivery_events(self.resources)
            # Made again, a secret's ARN has a new random suffix: the functions get the new ones.
            environments = self.function_environments(self.resources)
            for child in self.fleet.children.values():
                if child.function in environments:
                    child.env = environments[child.function]

        # Saved and confirmed before moto stops; a failed save fails the restart (nothing restored).
        self.fleet.restart_all(
            lambda: self.log(self._save_state()), lambda: self._start_moto(timeout), restore
        )
        self.fleet.wait_started(timeout, self.log_dir)
        self.log(f"restarted with its state in {time.monotonic() - started:.1f}s")
        self.write_state()
        return time.monotonic() - started

    # -- reload on code changes ---------------------------------------------------------------------
    def reload_changed(self, changed: list[Path]) -> list[str]:
        """Restart the functions these changed files affect (`local.reload`); the names restarted."""
        return self.reloader.reload_changed(changed)

    def _handlers(self) -> dict[str, str]:
        """Each function's handler string (`<package>.app.lambda_handler`)."""
        consumers = self.resources.consumers if self.resources is not None else self._consumers or ()
        return {
            WEBHOOK.service_name: WEBHOOK.handler,
            RECONCILER.service_name: RECONCILER.handler,
            SMS_EVENTS.service_name: SMS_EVENTS.handler,
            **{consumer.name: consumer.handler for consumer in consumers},
        }

    def on_status(self, name: str, listener: Callable[[dict[str, Any]], None]) -> None:
        """Call `listener` with each status message of function `name`'s processes, this one and
        those that replace it (`{"event": "busy" | "invocation" | "state" | ..., "time": <unix>, ...}`),
        on the thread reading them: keep it short."""
        self.fleet.on_status(name, listener)

    def _on_function_message(self, child: ChildProcess, message: dict[str, Any]) -> None:
        self.fleet.on_function_message(child, message)

    def _lambda_name(self, name: str) -> str:
        return f"{self.settings.stack_name}-{name}"

    def _base_environment(self) -> dict[str, str]:
        """What every child gets: no variables of the user's shell, so no real AWS profile leaks in."""
        return base_environment(self.functions_dir, self.layer_dir, self.settings.region)

    def init_type(self, name: str) -> str:
        """How Lambda runs the function's init: for a snapshot where the `snapstart` setting names
        it (its host then runs the SnapStart runtime hooks, `local.lambda_host`), else on demand."""
        return (
            snapstart.SNAPSHOT_INIT
            if name in self.settings.deployment.snapstart
            else snapstart.ON_DEMAND_INIT
        )

    def _function_environment(self, name: str, memory_mb: int, own: dict[str, str]) -> dict[str, str]:
        """The variables Lambda itself sets, then the function's own."""
        lambda_name = self._lambda_name(name)
        return {
            **self._base_environment(),
            "AWS_LAMBDA_FUNCTION_NAME": lambda_name,
            "AWS_LAMBDA_FUNCTION_VERSION": "$LATEST",
            "AWS_LAMBDA_FUNCTION_MEMORY_SIZE": str(memory_mb),
            "AWS_LAMBDA_LOG_GROUP_NAME": f"/aws/lambda/{lambda_name}",
            # A SnapStart function's host runs its runtime hooks after the init, as Lambda does.
            snapstart.INIT_TYPE_ENV: self.init_type(name),
            # Not Lambda's: where the function host records the function's AWS calls.
            aws_calls.ENV_VAR: str(self.aws_calls_dir / f"{name}.jsonl"),
            # Not Lambda's: whose imported files it reports to the reloader (`local.loaded_code`).
            loaded_code.ENV_VAR: str(self.functions_dir),
            **own,
        }

    # -- status -------------------------------------------------------------------------------------
    def refresh_queue_depths(self) -> None:
        resources = self.resources
        if resources is None or self.fleet.stopping.is_set():
            return
        depths = status_views.queue_depths(self.client("sqs"), resources, self.functions)
        with self.fleet.lock:
            status_views.apply_depths(self.functions, depths)

    def status(self, refresh: bool = True) -> dict[str, dict[str, Any]]:
        """Per function: state, counters and, for consumers, queue and DLQ depth."""
        if refresh:
            self.refresh_queue_depths()
        with self.fleet.lock:
            return {name: status.as_dict() for name, status in self.functions.items()}

    def status_lines(self) -> list[str]:
        with self.fleet.lock:
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
            "version": release_version(),
            "fakes": self.fake_urls(),
            "logs": str(self.log_dir),
        }
        if self.resources is not None and SMS_INBOUND_PATH in webhook_paths(self.resources.deployment):
            # The HTTP SMS gateway's inbound callback, its token in the path (the stand-in posts there).
            info["sms_inbound_url"] = self.sms_inbound_url
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

    def batching_windows(self) -> dict[str, int]:
        """Each consumer's batching window as this runtime gathers it, in seconds, by consumer: 0
        for none, and for every one with `LocalSettings.batching_windows` off."""
        if self.resources is None:
            return {}
        gathering = self.settings.batching_windows
        return {c.name: window_seconds(c, gathering) for c in self.resources.consumers}

    def wait_until_drained(
        self,
        timeout: float = 60.0,
        settle_seconds: float = 1.0,
        cancel: threading.Event | None = None,
        only: Collection[str] | None = None,
    ) -> bool:
        """True once every consumer with a handler (or those named in `only`) has had an empty queue
        and been idle for `settle_seconds`.

        Consumers whose handler is missing are left out: their messages wait for them.
        """

        def is_drained() -> bool:
            with self.fleet.lock:
                return status_views.drained(self.functions, only)

        return status_views.wait_until_drained(
            self.refresh_queue_depths, is_drained, timeout, settle_seconds, cancel
        )
