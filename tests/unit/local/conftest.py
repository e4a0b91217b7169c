"""Fixtures for the CRM portal stand-ins' tests (helpers in `crm_portal_support`)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from local.fakes.amocrm import AmoCrmFake
from local.fakes.bitrix24 import Bitrix24PortalFake
from tests.unit.local.crm_portal_support import Receiver, fixed_clock, running, serving


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with serving(Receiver()) as receiver:
        yield receiver


@pytest.fixture
def portal(receiver: Receiver) -> Iterator[Bitrix24PortalFake]:
    with running(Bitrix24PortalFake(handler_url=receiver.url, clock=fixed_clock)) as fake:
        yield fake


@pytest.fixture
def amo(receiver: Receiver) -> Iterator[AmoCrmFake]:
    with running(AmoCrmFake(handler_url=receiver.url, clock=fixed_clock)) as fake:
        yield fake
