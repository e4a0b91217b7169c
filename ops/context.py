"""What every command gets: the parsed options, the stack (loaded on first use) and output helpers."""

from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from botocore.exceptions import ClientError

from infra.config import PipelineSettings
from infra.outputs import OutputKey
from ops import stack as stack_source
from ops.errors import OpsError
from ops.stack import StackOutputs
from ops.telegram import BOT_TOKEN_ENV, BotApi, api_base_from_env, check_bot_token
from pipeline import aws

HIDDEN = "<hidden; --show-secrets prints it>"


@dataclass
class Context:
    args: argparse.Namespace
    out: TextIO = field(default_factory=lambda: sys.stdout)
    _stack: StackOutputs | None = None
    _deployment: PipelineSettings | None = None

    def option(self, name: str, default: Any = None) -> Any:
        return getattr(self.args, name, default)

    def stack(self) -> StackOutputs:
        if self._stack is None:
            if self.option("local"):
                self._stack = stack_source.from_local_file(self.local_file())
            else:
                self._stack = stack_source.from_cloudformation(self.stack_name())
        return self._stack

    # -- which stage ------------------------------------------------------------------------------
    def stage(self) -> str:
        """--stage, else the stage cdk.json pins, else the default (as a plain `cdk deploy`)."""
        given = self.option("stage")
        return str(given) if given else self.deployment().stage

    def deployment(self) -> PipelineSettings:
        """cdk.json's settings for --stage (as `cdk deploy -c stage=<it>` reads them)."""
        if self._deployment is None:
            self._deployment = stack_source.stage_settings(self.option("stage"))
        return self._deployment

    def stack_name(self) -> str:
        """--stack, else the stage's stack (`PipelineSettings.stage_stack_name`)."""
        return str(self.option("stack") or self.deployment().stage_stack_name)

    def local_file(self) -> Path:
        """--local-file, else the stage's `make local` stack file."""
        given = self.option("local_file")
        return Path(given) if given else stack_source.local_stack_file(self.stage())

    # -- output ----------------------------------------------------------------------------------
    def line(self, text: str = "") -> None:
        print(text, file=self.out)

    def field(self, name: str, value: Any) -> None:
        self.line(f"{name}: {'-' if value is None or value == '' else value}")

    def json(self, data: Any) -> None:
        """The command's result for scripts (--json): one JSON document, keys sorted."""
        self.line(json.dumps(data, indent=2, sort_keys=True, default=str, ensure_ascii=False))

    def wants_json(self) -> bool:
        return bool(self.option("json"))

    def confirm(self, action: str) -> bool:
        """Whether to go ahead with `action` (it sends or changes something).

        --dry-run: say what would be done, go no further (False). --yes: go ahead. A terminal:
        ask. No terminal and no --yes: refuse, so a script never changes things by accident.
        """
        if self.option("dry_run"):
            self.line(f"dry run: would {action}; nothing changed")
            return False
        if self.option("yes"):
            return True
        stdin = sys.stdin
        if stdin is None or not stdin.isatty():
            raise OpsError(f"refusing to {action} without confirmation: pass --yes (or --dry-run)")
        # The question goes to stderr: stdout may be a pipe even when a person is typing.
        print(f"{action[0].upper()}{action[1:]}? [y/N] ", end="", file=sys.stderr, flush=True)
        answer = stdin.readline().strip().lower()
        if answer not in ("y", "yes"):
            raise OpsError("not confirmed: nothing changed")
        return True

    def secret(self, value: str) -> str:
        """A secret as printed: only with --show-secrets."""
        return value if self.option("show_secrets") else HIDDEN

    # -- secrets and Telegram ----------------------------------------------------------------------
    def secret_string(self, secret_id: str) -> str:
        try:
            response = aws.client("secretsmanager").get_secret_value(SecretId=secret_id)
        except ClientError as error:
            if aws.error_code(error) == "ResourceNotFoundException":
                raise OpsError(f"secret {secret_id!r} not found") from error
            raise
        if "SecretString" not in response:
            raise OpsError(f"secret {secret_id!r} has no SecretString")
        return str(response["SecretString"])

    def bot_token(self) -> str:
        """--bot-token-secret, else $TELEGRAM_BOT_TOKEN, else the stack's bot token secret."""
        secret_id = self.option("bot_token_secret")
        if secret_id:
            return check_bot_token(self.secret_string(secret_id), f"secret {secret_id!r}")
        from_env = os.environ.get(BOT_TOKEN_ENV)
        if from_env:
            return check_bot_token(from_env, BOT_TOKEN_ENV)
        secret_id = self.stack().get(OutputKey.BOT_TOKEN_SECRET_ID)
        if secret_id:
            return check_bot_token(self.secret_string(secret_id), f"secret {secret_id!r}")
        raise OpsError(f"no bot token: pass --bot-token-secret SECRET_ID or set {BOT_TOKEN_ENV}")

    def bot_api(self) -> BotApi:
        base = (self.stack().telegram_api_base if self.option("local") else None) or api_base_from_env()
        return BotApi(self.bot_token(), base=base)
