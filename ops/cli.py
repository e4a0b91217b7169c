"""`python -m ops`: operate a deployed (or local) pipeline.

Every failure an operator can cause or fix (no stack, no credentials, a bad bot token, no local
runtime, a refused state change) ends as one line on stderr and exit code 2, never a traceback.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence

from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    EndpointConnectionError,
    NoCredentialsError,
    NoRegionError,
    PartialCredentialsError,
)

from ops import dlq, journal, outputs, scaffold, webhook
from ops.context import Context
from ops.errors import OpsError
from ops.stack import DEFAULT_LOCAL_FILE, DEFAULT_STACK_NAME
from ops.telegram import API_BASE_ENV, BOT_TOKEN_ENV, DEFAULT_MAX_CONNECTIONS
from pipeline import aws

EXIT_ERROR = 2
Handler = Callable[[Context], None]


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


def _common_options() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    where = common.add_argument_group("where the pipeline is")
    where.add_argument(
        "--stack",
        default=DEFAULT_STACK_NAME,
        help=f"CloudFormation stack name (default {DEFAULT_STACK_NAME})",
    )
    where.add_argument("--region", help="AWS region (default: AWS_REGION / AWS_DEFAULT_REGION / profile)")
    where.add_argument(
        "--local",
        action="store_true",
        help="use the local runtime (moto server and fake Telegram) instead of AWS",
    )
    where.add_argument(
        "--local-file",
        default=str(DEFAULT_LOCAL_FILE),
        help=f"the local runtime's stack file (default {DEFAULT_LOCAL_FILE})",
    )
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


def _phone_option() -> argparse.ArgumentParser:
    options = argparse.ArgumentParser(add_help=False)
    options.add_argument("--show-phone", action="store_true", help="print phone numbers unmasked")
    return options


def _new_consumer(context: Context) -> None:
    try:
        written = scaffold.new_consumer(context.args.name, description=context.args.description)
    except scaffold.ScaffoldError as error:
        raise OpsError(str(error)) from error
    for path in (*written.created, *written.edited):
        print(f"wrote {path}", file=context.out)
    print(
        f"next: fill in functions/{written.name}/logic.py and its registry entry, then make test",
        file=context.out,
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m ops",
        description="Operate the Telegram/CRM event pipeline: webhook, secret rotation, DLQs, SMS journal, "
        "stack outputs.",
        epilog=f"AWS credentials come from the usual places (AWS_PROFILE, env, SSO). {API_BASE_ENV} "
        "overrides the Telegram Bot API base URL.",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    common, telegram = _common_options(), _telegram_options()

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
        _max_connections_option(DEFAULT_MAX_CONNECTIONS, str(DEFAULT_MAX_CONNECTIONS)),
        _drop_pending_option(),
    )
    command(
        commands,
        "webhook-info",
        webhook.webhook_info,
        "Show Telegram's view of the webhook (getWebhookInfo).",
        telegram,
    )
    command(
        commands,
        "delete-webhook",
        webhook.delete_webhook,
        "Remove the webhook (deleteWebhook).",
        telegram,
        _drop_pending_option(),
    )
    command(
        commands,
        "rotate-secret",
        webhook.rotate_secret,
        "Store a new Telegram secret_token as AWSCURRENT (the old one becomes AWSPREVIOUS), "
        "then setWebhook with it.",
        telegram,
        _max_connections_option(None, "keep Telegram's current setting"),
    )
    command(
        commands,
        "rotate-crm-token",
        webhook.rotate_crm_token,
        "Store a new CRM token (crm_auth token mode) as AWSCURRENT; the old one is accepted for the "
        "grace period while the CRM's templates are updated.",
        _show_secrets_option(),
    )

    outputs_command = command(
        commands,
        "outputs",
        outputs.show,
        "Show the stack's outputs: URLs, topic ARNs (alarms, SMS delivery events), queue and DLQ URLs, "
        "table names, secret ids.",
    )
    outputs_command.add_argument(
        "key", nargs="?", help="print only this output's value (e.g. AlarmTopicArn), for scripts"
    )

    dlq_parser = commands.add_parser("dlq", help="Dead-letter queues of the consumers.")
    dlq_commands = dlq_parser.add_subparsers(dest="dlq_command", required=True, metavar="DLQ_COMMAND")
    command(dlq_commands, "list", dlq.list_dlqs, "Depth and oldest message age of every consumer's DLQ.")
    peek = command(
        dlq_commands,
        "peek",
        dlq.peek,
        "Show DLQ messages (ids, type, dead_letter_reason) without removing them.",
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
        "Move every message of a consumer's DLQ back to its queue.",
    )
    redrive.add_argument("consumer", help="consumer name from the registry (e.g. crm)")
    redrive.add_argument(
        "--timeout", type=float, default=300, help="seconds to wait for the move task (default 300)"
    )

    journal_parser = commands.add_parser("journal", help="SMS journal records (exactly-once sends).")
    journal_commands = journal_parser.add_subparsers(
        dest="journal_command", required=True, metavar="JOURNAL_COMMAND"
    )
    show = command(journal_commands, "show", journal.show, "Show one SMS journal record.", _phone_option())
    show.add_argument("key", help="the SMS idempotency key (record id without the 'sms#' prefix)")
    command(
        journal_commands,
        "unknown",
        journal.list_unknown,
        "List SMS records whose outcome is unknown (need a decision).",
        _phone_option(),
    )
    resolve = command(
        journal_commands,
        "resolve",
        journal.resolve,
        "Decide an 'unknown' or 'failed' SMS record: --accepted closes an unknown, --not-sent has"
        " it sent once more, --abandon closes it unsent.",
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
    scaffold_help = (
        "Scaffold a consumer (make consumer NAME=<name>): its registry entry, handler package, "
        "unit test and README row."
    )
    new_consumer = commands.add_parser("new-consumer", help=scaffold_help, description=scaffold_help)
    new_consumer.add_argument("name", help="a lowercase Python identifier not yet in the registry")
    new_consumer.add_argument("--description", help="one line for the registry and the README table")
    new_consumer.set_defaults(handler=_new_consumer, region=None)
    return parser


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
        return "no AWS region: pass --region or set AWS_REGION"
    if isinstance(error, ClientError):
        details = error.response.get("Error", {})
        return f"AWS {error.operation_name} failed: {details.get('Code', '?')}: {details.get('Message', '')}"
    if isinstance(error, BotoCoreError):
        return f"AWS call failed: {error}"
    return None


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.region:
        os.environ["AWS_DEFAULT_REGION"] = args.region
        aws.reset_clients()
    try:
        args.handler(Context(args))
    except Exception as error:
        message = describe_error(error, local=bool(getattr(args, "local", False)))
        if message is None:
            raise
        print(f"error: {' '.join(message.split())}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    return 0
