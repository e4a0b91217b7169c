"""`python -m local` (make local): the pipeline on this machine until Ctrl-C.
`python -m local demo` (make demo): the same, plus a scripted burst of events and a summary.
`python -m local chaos --seed N --events N` (make chaos): a seeded fault campaign (`local.chaos`).

The demo runs beside a running `make local`: by default it has its own state directory
(`.local/demo`) and a free API port, so neither overwrites the other's logs or stack.json.
`--stage prod` runs that stage's settings (cdk.json's "stages") with its own state directory
(`.local/stages/prod`, `infra.config.local_state_dir`).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import queue
import signal
import socket
import sys
import threading
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from infra.config import SettingsError, local_state_dir, settings_error_lines, valid_stage
from local.runtime import DEFAULT_STATE_DIR, LocalRuntimeError, Ports, Runtime
from local.settings import PROJECT_ROOT, LocalSettings

DEFAULT_API_PORT = 8080
# `make demo` beside `make local`: its own state directory (in the stage's), and any free port.
DEMO_STATE_DIR = DEFAULT_STATE_DIR / "demo"
DEMO_DIR_NAME = DEMO_STATE_DIR.name
DEMO_API_PORT = 0
REFRESH_SECONDS = 1.0
EXAMPLE_UPDATE = json.dumps(
    {
        "update_id": 1,
        "message": {
            "message_id": 1,
            "date": 1700000000,
            "chat": {"id": 42, "type": "private", "first_name": "Ann"},
            "from": {"id": 42, "is_bot": False, "first_name": "Ann"},
            "text": "/start",
            "entities": [{"type": "bot_command", "offset": 0, "length": 6}],
        },
    },
    separators=(",", ":"),
)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m local", description=__doc__)
    parser.add_argument("command", nargs="?", choices=("run", "demo"), default="run")
    parser.add_argument(
        "--stage",
        type=_stage,
        help="the stage whose settings to run (cdk.json's stages.<stage>; default: cdk.json's stage, "
        "else dev), with its own state directory (.local/stages/<stage>; dev: .local/)",
    )
    parser.add_argument(
        "--port",
        type=int,
        help=f"API port (0: any free port; default {DEFAULT_API_PORT}, for demo {DEMO_API_PORT})",
    )
    parser.add_argument(
        "--no-ai", action="store_true", help="leave the ai consumer off (no Bedrock fake use)"
    )
    bot = parser.add_mutually_exclusive_group()
    bot.add_argument(
        "--bot",
        metavar="MODULE:CALLABLE",
        help="run this python-telegram-bot bot (e.g. mybot.main:build, the module under functions/) "
        "instead of cdk.json's bot_application or the example bot; cdk.json is not changed",
    )
    bot.add_argument(
        "--no-bot",
        action="store_true",
        help="leave the bot consumer (the example python-telegram-bot bot) off; the autoreply answers",
    )
    parser.add_argument(
        "--no-crm-leads",
        action="store_true",
        help="leave the crm consumer (leads from new Telegram contacts) as cdk.json says: off by default",
    )
    parser.add_argument(
        "--no-crm-sources",
        action="store_true",
        help="leave Bitrix24 and amoCRM unconnected (no stand-in webhooks, no bitrix24/amocrm consumers)",
    )
    parser.add_argument(
        "--sms-gateway",
        choices=("end_user_messaging", "http"),
        help="the SMS gateway (default: the deployment's, End User Messaging unless cdk.json says otherwise)",
    )
    parser.add_argument(
        "--workers",
        type=int,
        help="worker processes per queue consumer at most (default: its deployed max_concurrency)",
    )
    parser.add_argument(
        "--all-workers-at-once",
        action="store_true",
        help="start every consumer's workers at once (default: one, more while all busy and messages wait)",
    )
    parser.add_argument(
        "--no-batching-windows",
        action="store_true",
        help="invoke every consumer with what one receive returns (default: store, crm and analytics"
        " gather their batching window first, as in AWS)",
    )
    parser.add_argument("--keep-running", action="store_true", help="demo: stay up after the summary")
    parser.add_argument(
        "--state-dir",
        type=Path,
        help="where stack.json and logs go (default the stage's: .local/ for dev, for demo .local/demo/)",
    )
    parser.add_argument(
        "--no-reload",
        action="store_true",
        help="do not restart a function when its code (functions/, the shared layer) changes",
    )
    parser.add_argument(
        "--persist",
        action="store_true",
        help="keep the queues' messages and the tables' items across restarts (in <state dir>/persisted/)",
    )
    args = parser.parse_args(argv)
    if args.port is None:
        args.port = DEMO_API_PORT if args.command == "demo" else DEFAULT_API_PORT
    # cdk.json's settings of the stage (refused ones end here, one line each, exit 2).
    try:
        args.settings = LocalSettings.from_cdk_json(context={"stage": args.stage} if args.stage else None)
    except (ValidationError, SettingsError) as error:
        parser.error("invalid deployment settings (cdk.json): " + "; ".join(settings_error_lines(error)))
    if args.state_dir is None:
        args.state_dir = state_dir(args.settings.deployment.stage, args.command)
    return args


def _stage(text: str) -> str:
    try:
        return valid_stage(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def state_dir(stage: str, command: str) -> Path:
    """The stage's state directory (`infra.config.local_state_dir`), the demo's inside it."""
    base = PROJECT_ROOT / local_state_dir(stage)
    return base / DEMO_DIR_NAME if command == "demo" else base


def port_is_free(port: int) -> bool:
    if port == 0:
        return True
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def crm_token_line(info: dict[str, Any]) -> str:
    """The CRM token, shown only when the deployment accepts it (`crm_auth`)."""
    if info["crm_auth"] == "signature":
        return ""
    where = f"Authorization: Bearer, X-Crm-Token, or {info['crm_url']}/<token>"
    return f"\n      token ({where}): {info['crm_token']}"


def crm_sources_lines(runtime: Runtime, info: dict[str, Any]) -> str:
    """Where the Bitrix24 and amoCRM stand-ins post, when they are connected."""
    deployment = runtime.resources.deployment if runtime.resources is not None else None
    if deployment is None or not (deployment.bitrix24_stages or deployment.amocrm_statuses):
        return ""
    bitrix24, amocrm = info["fakes"]["bitrix24"], info["fakes"]["amocrm"]
    return f"""
  Bitrix24 webhook  {info["bitrix24_url"]}  (from the portal stand-in {bitrix24})
      application token: {info["bitrix24_application_token"]}
  amoCRM webhook    {info["amocrm_url"]}  (from the account stand-in {amocrm})"""


def sms_inbound_line(info: dict[str, Any]) -> str:
    """Where the HTTP SMS gateway stand-in posts customers' replies, when the route exists."""
    if "sms_inbound_url" not in info:
        return ""
    sms = info["fakes"]["sms"]
    return f"""
  SMS replies       {info["sms_inbound_url"]}  (STOP/START: POST {sms}/_inbound {{"from", "text"}})"""


# The ops console is not started here: the command that opens it on this runtime.
CONSOLE_LINE = "Ops console in a browser (events' paths, DLQ redrive, SMS journal): bin/ops --local console"


def banner(runtime: Runtime) -> str:
    info = runtime.stack_info()
    # Where the CRM stand-ins and the HTTP SMS gateway stand-in post, each when connected.
    crm_sources = crm_sources_lines(runtime, info) + sms_inbound_line(info)
    width = max(len(name) for name in info["fakes"])
    fakes = "\n".join(f"  {name:<{width}} {url}" for name, url in info["fakes"].items())
    return f"""
Local pipeline is up, on loopback only. Details: {runtime.state_dir / "stack.json"}; logs: {info["logs"]}

  Telegram webhook  {info["webhook_url"]}
      header X-Telegram-Bot-Api-Secret-Token: {info["telegram_secret"]}
  CRM events        {info["crm_url"]}
      signing key (X-Signature HMAC): {info["crm_signing_key"]}{crm_token_line(info)}{crm_sources}
  AWS (moto)        {info["aws_endpoint"]}  region {info["region"]}

Fakes of the outside services (GET /_calls, POST /_faults; see local/README.md):
{fakes}

Try:  curl -s {info["webhook_url"]} -H 'X-Telegram-Bot-Api-Secret-Token: {info["telegram_secret"]}' \\
        -H 'Content-Type: application/json' -d '{EXAMPLE_UPDATE}'

{crm_sources_try(info)}{dev_loop_lines(runtime)}{CONSOLE_LINE}
Ctrl-C stops everything.
"""


def dev_loop_lines(runtime: Runtime) -> str:
    """What the runtime does for a person editing code: the bot it runs, reloads, and whether
    state persists."""
    reload = "restarts a function when its code changes" if runtime.reload else "no reload (--no-reload)"
    persisted = (
        f"kept across restarts in {runtime.persist_dir}"
        if runtime.persist
        else "queues and tables start empty (--persist keeps them)"
    )
    deployment = runtime.resources.deployment if runtime.resources is not None else None
    application = deployment.bot_application if deployment is not None else None
    bot = f"Bot: {application} (--bot MODULE:CALLABLE runs another). " if application else ""
    return f"{bot}Code: {reload}. State: {persisted}.\n"


def crm_sources_try(info: dict[str, Any]) -> str:
    if "bitrix24" not in info["fakes"] or not info.get("bitrix24_connected"):
        return ""
    bitrix24, messages = info["fakes"]["bitrix24"], f"{info['fakes']['end_user_messaging']}/_messages"
    deal = '{"title": "Order 1", "contact": {"name": "Ann", "phone": "+375291234567"}}'
    return f"""A Bitrix24 deal moved to "ready" (one SMS; see {messages}):
      curl -s -XPOST {bitrix24}/_deals -d '{deal}'
      curl -s -XPOST {bitrix24}/_deals/1/move -d '{{"stage_id": "EXECUTING"}}'

"""


class StatusPrinter:
    """Status lines, redrawn in place on a terminal, printed on change otherwise; announcements
    (routing, reloads) scroll above them."""

    def __init__(self, stream: Any = sys.stdout) -> None:
        self.stream = stream
        self.tty = stream.isatty()
        self.previous: list[str] = []

    def show(self, lines: list[str], announcements: list[str] | None = None) -> None:
        if lines == self.previous and not announcements:
            return
        if self.tty and self.previous:
            self.stream.write(f"\x1b[{len(self.previous)}F\x1b[J")
        for line in announcements or ():
            self.stream.write(f"{line}\n")
        if lines != self.previous or self.tty:
            self.stream.write("\n".join(lines) + "\n")
        self.stream.flush()
        self.previous = lines


def serve(runtime: Runtime, stop: threading.Event, announcements: queue.SimpleQueue[str]) -> None:
    printer = StatusPrinter()
    while not stop.is_set():
        if runtime.failure:
            print(f"\n{runtime.failure}", file=sys.stderr)
            return
        status = runtime.status()
        runtime.write_state(status)
        printer.show(runtime.status_lines(), drain(announcements))
        stop.wait(REFRESH_SECONDS)


def drain(announcements: queue.SimpleQueue[str]) -> list[str]:
    lines = []
    while True:
        try:
            lines.append(announcements.get_nowait())
        except queue.Empty:
            return lines


def main(argv: list[str] | None = None) -> int:
    arguments = sys.argv[1:] if argv is None else argv
    if arguments[:1] == ["chaos"]:  # a campaign has its own options (`local.chaos.cli`)
        from local.chaos.cli import main as chaos

        return chaos(arguments[1:])
    args = parse_args(argv)
    if not port_is_free(args.port):
        print(
            f"Port {args.port} is in use. Stop what uses it, or pick another: python -m local --port 0",
            file=sys.stderr,
        )
        return 2
    settings: LocalSettings = args.settings
    if args.bot:
        try:
            settings = settings.with_bot(args.bot)
        except ValueError as error:
            print(f"--bot {args.bot}: {error}", file=sys.stderr)
            return 2
    if args.no_ai:
        settings = dataclasses.replace(settings, ai_consumer=False)
    if args.no_bot:
        settings = dataclasses.replace(settings, bot_consumer=False)
    if args.sms_gateway:
        settings = dataclasses.replace(settings, sms_gateway=args.sms_gateway)
    if args.no_crm_leads:
        settings = dataclasses.replace(settings, crm_leads=False)
    if args.no_crm_sources:
        settings = dataclasses.replace(settings, crm_sources=False)
    if args.workers is not None:
        settings = dataclasses.replace(settings, consumer_workers=args.workers)
    if args.all_workers_at_once:
        settings = dataclasses.replace(settings, scale_workers_on_demand=False)
    if args.no_batching_windows:
        settings = dataclasses.replace(settings, batching_windows=False)
    stop = threading.Event()

    def on_signal(signum: int, frame: Any) -> None:
        stop.set()

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)

    runtime = Runtime(
        ports=Ports(api=args.port),
        settings=settings,
        state_dir=args.state_dir,
        reload=not args.no_reload,
        persist=args.persist,
    )
    # Routing and reload lines: printed at once while the demo prints its own, then above the status lines.
    announcements: queue.SimpleQueue[str] = queue.SimpleQueue()
    serving = threading.Event()
    runtime.on_announcement(
        lambda line: announcements.put(line) if serving.is_set() else print(line, flush=True)
    )
    print("Starting the local pipeline (moto, fakes, functions)...", flush=True)
    try:
        runtime.start()
    except LocalRuntimeError as error:
        print(f"Could not start: {error}", file=sys.stderr)
        return 1
    try:
        print(banner(runtime), flush=True)
        if args.command == "demo":
            from local.demo import run_demo

            run_demo(runtime, stop)
            if not args.keep_running:
                return 0
        serving.set()
        serve(runtime, stop, announcements)
        return 1 if runtime.failure else 0
    finally:
        print("\nStopping...", flush=True)
        runtime.stop()
        print("Stopped.", flush=True)


if __name__ == "__main__":
    sys.exit(main())
