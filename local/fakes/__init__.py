"""Local stand-ins for the services outside AWS (and for Bedrock), with recording and faults."""

from __future__ import annotations

from local.fakes.amocrm import AmoCrmFake
from local.fakes.base import FakeService
from local.fakes.bedrock import BedrockFake
from local.fakes.bitrix24 import Bitrix24PortalFake
from local.fakes.crm import CrmFake
from local.fakes.end_user_messaging import EndUserMessagingFake
from local.fakes.sms import SmsGatewayFake
from local.fakes.sns import SnsFaultProxy
from local.fakes.telegram import TelegramFake

__all__ = [
    "AmoCrmFake",
    "BedrockFake",
    "Bitrix24PortalFake",
    "CrmFake",
    "EndUserMessagingFake",
    "FakeService",
    "SmsGatewayFake",
    "SnsFaultProxy",
    "TelegramFake",
]
