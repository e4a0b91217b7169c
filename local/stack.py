"""The local stack's parts that hold no process: ports, the fakes of the outside services, boto3
clients on moto, and the environment every child process starts from.

`local.runtime.Runtime` builds its stack from these; so does anything else that needs the same
stand-ins without the whole runtime (`local.chaos` drives them).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3
from botocore.config import Config

from local import routing
from local.fakes.amocrm import AmoCrmFake
from local.fakes.base import FakeService
from local.fakes.bedrock import BedrockFake
from local.fakes.bitrix24 import Bitrix24PortalFake
from local.fakes.crm import CrmFake
from local.fakes.end_user_messaging import EndUserMessagingFake
from local.fakes.sms import SmsGatewayFake
from local.fakes.sns import SnsFaultProxy
from local.fakes.telegram import TelegramFake
from local.settings import PROJECT_ROOT, LocalSettings

FUNCTIONS_DIR = PROJECT_ROOT / "functions"
LAYER_DIR = PROJECT_ROOT / "layers" / "shared" / "python"
DEFAULT_STATE_DIR = PROJECT_ROOT / ".local"
# Fake credentials: moto accepts anything; these make sure no real account is ever used.
FAKE_CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_SESSION_TOKEN": "testing",
}


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


def build_fakes(
    ports: Ports,
    settings: LocalSettings,
    *,
    aws_endpoint: Callable[[], str],
    publish_sms_event: Callable[[str, str], None],
    on_publish: Callable[[list[routing.Publish]], None],
) -> dict[str, FakeService]:
    """The stand-ins of the outside services, by name (not started)."""
    return {
        "telegram": TelegramFake(port=ports.telegram, token=settings.telegram_bot_token),
        "crm": CrmFake(port=ports.crm, auth_header=settings.crm_auth_header),
        "bedrock": BedrockFake(port=ports.bedrock),
        "sms": SmsGatewayFake(port=ports.sms, token=settings.sms_gateway_token),
        # AWS End User Messaging SMS; its delivery events go to SNS (moto).
        "end_user_messaging": EndUserMessagingFake(port=ports.end_user_messaging, publish=publish_sms_event),
        # The webhook's way to SNS (moto), where publishing can be made to fail.
        "sns": SnsFaultProxy(upstream=aws_endpoint, port=ports.sns, on_publish=on_publish),
        # CRMs that post their own webhooks (to the API, once it listens) and answer the
        # consumers' reads.
        "bitrix24": Bitrix24PortalFake(
            port=ports.bitrix24,
            webhook_code=settings.bitrix24_webhook_code,
            application_token=settings.bitrix24_application_token,
        ),
        "amocrm": AmoCrmFake(port=ports.amocrm, token=settings.amocrm_token),
    }


def _on_moto(endpoint: str, region: str) -> dict[str, Any]:
    return {
        "endpoint_url": endpoint,
        "region_name": region,
        "aws_access_key_id": FAKE_CREDENTIALS["AWS_ACCESS_KEY_ID"],
        "aws_secret_access_key": FAKE_CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
        "aws_session_token": FAKE_CREDENTIALS["AWS_SESSION_TOKEN"],
        "config": Config(retries={"mode": "standard", "max_attempts": 2}, connect_timeout=2, read_timeout=10),
    }


def moto_client(service: str, endpoint: str, region: str) -> Any:
    """A boto3 client on a local moto server (never a real account)."""
    return boto3.session.Session().client(service, **_on_moto(endpoint, region))  # type: ignore[call-overload]


def moto_resource(service: str, endpoint: str, region: str) -> Any:
    """A boto3 resource on a local moto server (never a real account)."""
    return boto3.session.Session().resource(service, **_on_moto(endpoint, region))  # type: ignore[call-overload]


def base_environment(functions_dir: Path, layer_dir: Path, region: str) -> dict[str, str]:
    """What every child gets: no variables of the user's shell, so no real AWS profile leaks in."""
    return {
        "PATH": os.environ.get("PATH", os.defpath),
        "LANG": "C.UTF-8",
        "TZ": "UTC",
        "PYTHONPATH": os.pathsep.join(str(path) for path in (functions_dir, layer_dir, PROJECT_ROOT)),
        "PYTHONUNBUFFERED": "1",
        "AWS_REGION": region,
        "AWS_DEFAULT_REGION": region,
        "AWS_CONFIG_FILE": os.devnull,
        "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
        **FAKE_CREDENTIALS,
    }
