"""`python -m ops`: operate a deployed (or local) pipeline.

Every failure an operator can cause or fix (no stack, no credentials, a bad bot token, no local
runtime, a refused state change) ends as one line on stderr and exit code 2, never a traceback.
Exit codes: 0 done, 1 a problem asked about was found (`dlq list --fail-on-messages`, a `doctor`
FAIL), 2 usage,
configuration or refused change, 130 interrupted, 141 stdout closed early (`| head`).
Where-the-pipeline-is flags (--stack, --region, --local, --local-file) go before or after the command.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    EndpointConnectionError,
    NoCredentialsError,
    NoRegionError,
    PartialCredentialsError,
)

from infra.config import DEFAULT_STAGE, valid_stage
from infra.paths import CDK_JSON
from infra.region import apply_region
from ops import broadcast, dlq, forget, journal, outputs, scaffold, sms, sms_preview, webhook
from ops.configure import configure
from ops.context import Context
from ops.doctor import doctor
from ops.errors import OpsError
from ops.stack import LOCAL_STACK_FILE, local_runtime_running
from ops.telegram import API_BASE_ENV, BOT_TOKEN_ENV, DEFAULT_MAX_CONNECTIONS
from pipeline import aws

EXIT_OK = 0
EXIT_FOUND = 1  # the command worked and found a problem a script asked about (--fail-on-messages, doctor)
EXIT_ERROR = 2  # usage or configuration error, or a refused change: nothing was done
EXIT_INTERRUPTED = 130
EXIT_BROKEN_PIPE = 141  # stdout closed early (`| head`): 128 + SIGPIPE, as a shell reports it
Handler = Callable[[Context], int | None]


def _max_connections(text: str) -> int:
    value = int(text)
    if not 1 <= value <= 100:
        raise argparse.ArgumentTypeError("must be 1..100 (Telegram's limit)")
    return value


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    return value


def _stage(text: str) -> str:
    try:
        return valid_stage(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


# None: resolved from the stage (`Context.stack_name`, `Context.local_file`).
GLOBAL_DEFAULTS: dict[str, Any] = {
    "stage": None,
    "stack": None,
    "region": None,
    "local": False,
    "local_file": None,
}
STAGE_HELP = f"the stage (cdk deploy -c stage=...; default: cdk.json's stage, else {DEFAULT_STAGE})"


def _add_global_options(parser: argparse.ArgumentParser, suppress: bool) -> None:
    """The options that say where the pipeline is; accepted before or after the command.

    The top-level parser holds the defaults; every (sub)command's copy uses SUPPRESS, so a value
    given before the command is not overwritten by the subcommand's default."""

    def default(name: str) -> Any:
        return argparse.SUPPRESS if suppress else GLOBAL_DEFAULTS[name]

    where = parser.add_argument_group("where the pipeline is (before or after the command)")
    where.add_argument("--stage", type=_stage, default=default("stage"), help=STAGE_HELP)
    where.add_argument(
        "--stack",
        default=default("stack"),
        help="CloudFormation stack name (default: the stage's, e.g. TelegramCrmPipeline-prod for prod)",
    )
    where.add_argument(
        "--region",
        default=default("region"),
        help="AWS region (default: AWS_REGION / AWS_DEFAULT_REGION / profile)",
    )
    where.add_argument(
        "--local",
        action="store_true",
        default=default("local"),
        help="use the local runtime (moto server and fake Telegram) instead of AWS",
    )
    where.add_argument(
        "--local-file",
        default=default("local_file"),
        help="the local runtime's stack file (default: the stage's, .local/stack.json for dev)",
    )


def _common_options() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    _add_global_options(common, suppress=True)
    return common


def _telegram_options() -> argparse.ArgumentParser:
    telegram = argparse.ArgumentParser(add_help=False)
    group = telegram.add_argument_group("Telegram")
    group.add_argument(
        "--bot-token-secret",
        metavar="SECRET_ID",
        help=f"Secrets Manager secret holding the bot token (default: ${BOT_TOKEN_ENV}, "
        "else the stack's TelegramBotTokenSecretId output)",
    )
    group.add_argument("--show-secrets", action="store_true", help="print secret values (hidden by default)")
    return telegram


def _show_secrets_option() -> argparse.ArgumentParser:
    options = argparse.ArgumentParser(add_help=False)
    options.add_argument(
        "--show-secrets", action="store_true", help="print secret values (hidden by default)"
    )
    return options


def _max_connections_option(default: int | None, default_text: str) -> argparse.ArgumentParser:
    options = argparse.ArgumentParser(add_help=False)
    options.add_argument(
        "--max-connections",
        type=_max_connections,
        default=default,
        help=f"simultaneous HTTPS connections Telegram may open, 1..100 (default: {default_text})",
    )
    return options


def _drop_pending_option() -> argparse.ArgumentParser:
    options = argparse.ArgumentParser(add_help=False)
    options.add_argument(
        "--drop-pending-updates", action="store_true", help="have Telegram discard updates not yet delivered"
    )
    return options


def _json_option() -> argparse.ArgumentParser:
    options = argparse.ArgumentParser(add_help=False)
    options.add_argument(
        "--json", action="store_true", help="print one JSON document (stable keys) for scripts"
    )
    return options


def _confirm_options() -> argparse.ArgumentParser:
    options = argparse.ArgumentParser(add_help=False)
    group = options.add_argument_group("confirmation (this command sends or changes something)")
    group.add_argument(
        "--yes", "-y", action="store_true", help="do it without asking (scripts: required without a TTY)"
    )
    group.add_argument("--dry-run", action="store_true", help="say what would be done; change nothing")
    return options


def _phone_option() -> argparse.ArgumentParser:
    options = argparse.ArgumentParser(add_help=False)
    options.add_argument("--show-phone", action="store_true", help="print phone numbers unmasked")
    return options


def _new_consumer(context: Context) -> None:
    try:
        written = scaffold.new_consumer(context.args.name, description=context.args.description)
    except scaffold.ScaffoldError as error:
        raise OpsError(str(error)) from error
    for path in written.created:
        print(f"wrote {path}", file=context.out)
    print(
        f"next: fill in functions/{written.name}/logic.py and consumer.toml, then make test",
        file=context.out,
    )
    if local_runtime_running(scaffold.ROOT / LOCAL_STACK_FILE):
        # A running runtime made its queues at start: it would not run the new consumer.
        print(
            f"make local is running: restart it (Ctrl-C, then make local) to add {written.name}'s queue "
            "and worker; until then it does not run",
            file=context.out,
        )


def _console(context: Context) -> None:
    # Imported here: the web server stack loads only for this command.
    from ops.console.app import run

    run(context)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m ops",
        description="Operate the Telegram/CRM event pipeline: webhook, secret rotation, DLQs, SMS journal, "
        "stack outputs, doctor, forget a person.",
        epilog=f"AWS credentials come from the usual places (AWS_PROFILE, env, SSO). {API_BASE_ENV} "
        "overrides the Telegram Bot API base URL.",
    )
    _add_global_options(parser, suppress=False)
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    common, telegram = _common_options(), _telegram_options()
    json_option, confirm = _json_option(), _confirm_options()

    def command(
        group: argparse._SubParsersAction[argparse.ArgumentParser],
        name: str,
        handler: Handler,
        help_text: str,
        *parents: argparse.ArgumentParser,
    ) -> argparse.ArgumentParser:
        sub = group.add_parser(name, help=help_text, description=help_text, parents=[common, *parents])
        sub.set_defaults(handler=handler)
        return sub

    command(
        commands,
        "set-webhook",
        webhook.set_webhook,
        "Point Telegram at the stack's webhook URL with its secret_token and the consumers' update kinds.",
        telegram,
        confirm,
        _max_connections_option(DEFAULT_MAX_CONNECTIONS, str(DEFAULT_MAX_CONNECTIONS)),
        _drop_pending_option(),
    )
    command(
        commands,
        "webhook-info",
        webhook.webhook_info,
        "Show Telegram's view of the webhook (getWebhookInfo).",
        telegram,
        json_option,
    )
    command(
        commands,
        "delete-webhook",
        webhook.delete_webhook,
        "Remove the webhook (deleteWebhook).",
        telegram,
        confirm,
        _drop_pending_option(),
    )
    command(
        commands,
        "rotate-secret",
        webhook.rotate_secret,
        "Store a new Telegram secret_token as AWSCURRENT (the old one becomes AWSPREVIOUS), "
        "then setWebhook with it.",
        telegram,
        confirm,
        _max_connections_option(None, "keep Telegram's current setting"),
    )
    command(
        commands,
        "rotate-crm-token",
        webhook.rotate_crm_token,
        "Store a new CRM token (crm_auth token mode) as AWSCURRENT; the old one is accepted for the "
        "grace period while the CRM's templates are updated.",
        _show_secrets_option(),
        confirm,
    )

    outputs_command = command(
        commands,
        "outputs",
        outputs.show,
        "Show the stack's outputs: URLs, topic ARNs (alarms, SMS delivery events), queue and DLQ URLs, "
        "table names, secret ids.",
        json_option,
    )
    outputs_command.add_argument(
        "key", nargs="?", help="print only this output's value (e.g. AlarmTopicArn), for scripts"
    )

    doctor_command = command(
        commands,
        "doctor",
        doctor,
        "Check the stack is ready: secrets filled, Telegram webhook, CRMs answering, alarm "
        "subscriptions confirmed, DLQs empty, End User Messaging, Bedrock, the Powertools parameter. "
        "OK / WARN / FAIL per finding, with the command that fixes it.",
        json_option,
    )
    doctor_command.add_argument(
        "--strict", action="store_true", help=f"exit {EXIT_FOUND} on a WARN too (default: only on a FAIL)"
    )

    dlq_parser = commands.add_parser("dlq", help="Dead-letter queues of the consumers.", parents=[common])
    dlq_commands = dlq_parser.add_subparsers(dest="dlq_command", required=True, metavar="DLQ_COMMAND")
    dlq_list = command(
        dlq_commands,
        "list",
        dlq.list_dlqs,
        "Depth and oldest message age of every consumer's DLQ.",
        json_option,
    )
    dlq_list.add_argument(
        "--sample",
        action="store_true",
        help="receive up to 10 messages of each DLQ that holds some (visible again at once) for "
        "the oldest age when CloudWatch has no datapoint yet, and a FIFO DLQ's chats; adds one to "
        "their receive_count",
    )
    dlq_list.add_argument(
        "--fail-on-messages",
        action="store_true",
        help=f"exit {EXIT_FOUND} when any DLQ (or SNS delivery DLQ) holds messages (for monitoring scripts)",
    )
    peek = command(
        dlq_commands,
        "peek",
        dlq.peek,
        "Show DLQ messages (ids, type, dead_letter_reason) without removing them.",
        json_option,
    )
    peek.add_argument("consumer", help="consumer name from the registry (e.g. crm)")
    peek.add_argument("--max", type=_positive_int, default=10, help="messages to show (default 10)")
    peek.add_argument(
        "--visibility-timeout",
        type=_positive_int,
        default=30,
        help="seconds the shown messages are hidden at most; they are released right after (default 30)",
    )
    redrive = command(
        dlq_commands,
        "redrive",
        dlq.redrive,
        "Move every message of a consumer's DLQ back to its queue (or one: --message-id).",
        confirm,
    )
    redrive.add_argument(
        "--message-id", help="move only this message (its id as dlq peek shows it), by receive, send, delete"
    )
    redrive.add_argument("consumer", help="consumer name from the registry (e.g. crm)")
    redrive.add_argument(
        "--timeout", type=float, default=300, help="seconds to wait for the move task (default 300)"
    )

    journal_parser = commands.add_parser(
        "journal", help="SMS journal records (exactly-once sends).", parents=[common]
    )
    journal_commands = journal_parser.add_subparsers(
        dest="journal_command", required=True, metavar="JOURNAL_COMMAND"
    )
    show = command(
        journal_commands, "show", journal.show, "Show one SMS journal record.", _phone_option(), json_option
    )
    show.add_argument("key", help="the SMS idempotency key (record id without the 'sms#' prefix)")
    command(
        journal_commands,
        "unknown",
        journal.list_unknown,
        "List SMS records whose outcome is unknown (need a decision).",
        _phone_option(),
        json_option,
    )
    resolve = command(
        journal_commands,
        "resolve",
        journal.resolve,
        "Decide an 'unknown' or 'failed' SMS record: --accepted closes an unknown, --not-sent has"
        " it sent once more, --abandon closes it unsent.",
        confirm,
    )
    resolve.add_argument("key", help="the SMS idempotency key")
    outcome = resolve.add_mutually_exclusive_group(required=True)
    outcome.add_argument(
        "--accepted", action="store_true", help="the provider did accept it: close the record"
    )
    outcome.add_argument(
        "--not-sent",
        action="store_true",
        help="the provider never got it: the reconciler's next run sends it once, with the same key",
    )
    outcome.add_argument(
        "--abandon",
        action="store_true",
        help="never send it (e.g. the customer was told another way): close it, stop alarming",
    )
    forget_command = command(
        commands,
        "forget",
        forget.forget,
        "Erase or anonymise one person (--phone and/or --chat) in every table: prints what it "
        f"removed per table, identifiers masked; exit {EXIT_FOUND} if an item still names them.",
        confirm,
        json_option,
    )
    forget_command.add_argument(
        "--phone", help="the person's phone (international +..., or the stage's region)"
    )
    forget_command.add_argument(
        "--chat", type=int, help="the person's Telegram chat id (in a private chat, also their user id)"
    )
    sms_parser = commands.add_parser(
        "sms",
        help="SMS: the suppression list (opt-out) of HTTP gateways and local runs, and what each rule costs.",
        parents=[common],
    )
    sms_commands = sms_parser.add_subparsers(dest="sms_command", required=True, metavar="SMS_COMMAND")
    for name, handler, help_text in (
        ("opt-out", sms.opt_out, "Put a number on the suppression list: its order SMS end `suppressed`."),
        ("opt-in", sms.opt_in, "Take a number off the suppression list."),
    ):
        command(sms_commands, name, handler, help_text).add_argument("phone", help="E.164 number")
    sms_preview_command = command(
        sms_commands,
        "preview",
        sms_preview.preview,
        "Each SMS rule's encoding (GSM-7/UCS-2), billed parts, units and characters per language, "
        "its fields at their longest, against the rules' max_parts (exit 1 if one is over), with an example.",
        json_option,
    )
    sms_preview_command.add_argument(
        "--rules",
        metavar="FILE",
        help="the rules file (default: team/sms_rules.json, or PIPELINE_TEAM_DIR's)",
    )
    sms_preview_command.add_argument(
        "--max-parts", type=int, metavar="N", help="the part limit (default: the rules file's max_parts)"
    )
    _broadcast_commands(commands, command, confirm, json_option)
    console_command = command(
        commands,
        "console",
        _console,
        "The ops console: a local web page (127.0.0.1, a random token in its URL) with every event's "
        "path through the consumers, the queues, DLQs (redrive), the SMS journal (resolve), bot "
        "conversations, broadcasts (create, pause, resume, cancel) and alarms; actions run these "
        "same commands.",
    )
    console_command.add_argument(
        "--port", type=int, default=8765, help="port on 127.0.0.1 (default 8765; 0: any free one)"
    )
    scaffold_help = (
        "Scaffold a consumer (make consumer NAME=<name>): its folder functions/<name>/ with its "
        "declaration, handler package, requirements.txt and unit test; no other file changes."
    )
    new_consumer = commands.add_parser("new-consumer", help=scaffold_help, description=scaffold_help)
    new_consumer.add_argument("name", help="a lowercase Python identifier no folder under functions/ has yet")
    new_consumer.add_argument("--description", help="one line for its declaration (consumer.toml)")
    new_consumer.set_defaults(handler=_new_consumer, region=None)
    configure_help = (
        "Show or change the deploy settings kept in cdk.json (every synth and deploy reads them; "
        "-c stays for one-offs), validated as the synth validates them."
    )
    settings = commands.add_parser(
        "configure",
        help=configure_help,
        description=configure_help,
        parents=[json_option, confirm],
        epilog="example: bin/ops configure telegram_bot_id=mybot alarm_email=ops@example.com --yes",
    )
    settings.add_argument("assignments", nargs="*", metavar="KEY=VALUE", help="settings to write")
    settings.add_argument(
        "--unset", action="append", metavar="KEY", help="remove a setting (its default applies)"
    )
    settings.add_argument(
        "--stage",
        type=_stage,
        default=argparse.SUPPRESS,
        help="show or change this stage's own settings (cdk.json's stages.<stage>), laid over the others",
    )
    settings.set_defaults(handler=_configure, region=None)
    release_help = "Release chores (CHANGELOG.md, Releasing)."
    release_parser = commands.add_parser("release", help=release_help, description=release_help)
    release_commands = release_parser.add_subparsers(dest="release_command", required=True)
    capture_help = (
        "Capture a release's items of every table and the messages it publishes (its demo through "
        "the local pipeline) as the next release's upgrade-test fixtures."
    )
    capture = release_commands.add_parser("capture-fixtures", help=capture_help, description=capture_help)
    capture.add_argument("--ref", help="a git commit or tag to capture (default: this checkout)")
    capture.add_argument("--version", help="the release it is (default: its pyproject.toml's)")
    capture.add_argument("--out", type=Path, help="where to write (default tests/fixtures/upgrade/<version>)")
    capture.set_defaults(handler=_capture_fixtures, region=None)
    return parser


def _broadcast_commands(
    commands: argparse._SubParsersAction[argparse.ArgumentParser],
    command: Callable[..., argparse.ArgumentParser],
    confirm: argparse.ArgumentParser,
    json_option: argparse.ArgumentParser,
) -> None:
    """`broadcast create|status|pause|resume|cancel` (ops.broadcast)."""
    common = _common_options()
    parser = commands.add_parser(
        "broadcast",
        help="One message to every subscriber, exactly once (docs/broadcast.md).",
        parents=[common],
    )
    group = parser.add_subparsers(dest="broadcast_command", required=True, metavar="BROADCAST_COMMAND")
    create = command(
        group,
        "create",
        broadcast.create,
        "Send a message to every private chat that started the bot and has not blocked it.",
        confirm,
        json_option,
    )
    create.add_argument("--text", help="the message (plain text, up to 4096 characters)")
    create.add_argument(
        "--template",
        help="a named text of team/broadcasts.json, in each chat's language (or its fallback_language)",
    )
    create.add_argument("--language", help="only users whose Telegram language is this (e.g. de)")
    create.add_argument(
        "--tag", help="only chats tagged TAG (the store tags a chat that came by a deep link's /start TAG)"
    )
    create.add_argument("--at", help="send from this time on (ISO with offset, e.g. 2026-12-24T18:00+01:00)")
    for name, handler, text in (
        ("status", broadcast.status, "Progress: sent, blocked, failed, remaining, rate, time left."),
        ("pause", broadcast.pause, "Pause a broadcast: its pages wait until resumed."),
        (
            "resume",
            broadcast.resume,
            "Resume a paused broadcast where it stopped; publish the pages an interrupted create left.",
        ),
        ("cancel", broadcast.cancel, "Cancel a broadcast: nobody else gets it."),
    ):
        sub = command(group, name, handler, text, json_option, *((confirm,) if name != "status" else ()))
        sub.add_argument("id", help="the broadcast id (bc-...)")


def _capture_fixtures(context: Context) -> None:
    # Imported here: only this command runs a release's demo.
    from ops.release import capture_fixtures

    args = context.args
    print(f"wrote {capture_fixtures(args.ref, args.version, args.out)}", file=context.out)


def _configure(context: Context) -> None:
    configure(context, CDK_JSON)


def describe_error(error: Exception, local: bool = False) -> str | None:
    """The one-line message for an error an operator can act on; None for a bug (re-raised)."""
    if isinstance(error, EndpointConnectionError) and local:
        endpoint = error.kwargs.get("endpoint_url", "")
        return f"cannot reach the local runtime's AWS endpoint {endpoint}: is it running (make local)?"
    if isinstance(error, OpsError):
        return str(error)
    if isinstance(error, (NoCredentialsError, PartialCredentialsError)):
        return "no AWS credentials found: configure them (AWS_PROFILE, aws sso login, env) or use --local"
    if isinstance(error, NoRegionError):
        return "no AWS region: pass --region, set AWS_REGION, or set a region in your AWS profile"
    if isinstance(error, ClientError):
        details = error.response.get("Error", {})
        return f"AWS {error.operation_name} failed: {details.get('Code', '?')}: {details.get('Message', '')}"
    if isinstance(error, BotoCoreError):
        return f"AWS call failed: {error}"
    return None


def _stdout_closed() -> int:
    """The reader went away (`python -m ops dlq list | head -1`): stop quietly, as `cat` does.

    stdout is pointed at /dev/null so that the interpreter's final flush does not fail again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):
        pass  # not a real file descriptor (tests): nothing to flush at exit
    return EXIT_BROKEN_PIPE


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    # As the CDK CLI resolves it (AWS_REGION first, which boto3 alone does not read).
    before = os.environ.get("AWS_DEFAULT_REGION")
    if apply_region(args.region).region != before:
        aws.reset_clients()
    try:
        code = args.handler(Context(args))
        sys.stdout.flush()
    except BrokenPipeError:
        return _stdout_closed()
    except Exception as error:
        message = describe_error(error, local=bool(getattr(args, "local", False)))
        if message is None:
            raise
        print(f"error: {' '.join(message.split())}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    return EXIT_OK if code is None else code
