"""`phonenumbers` is loaded only where a CRM event is validated: a cold start of any other path,
and the functions without the phonenumbers layer, never import it."""

from __future__ import annotations

import sys

import pytest

from tests.support.imports import loaded_after_import
from tests.unit.webhook.support import (
    CRM_ORDER_EVENT,
    TELEGRAM_START,
    Invoke,
    Pipeline,
    crm_event,
    load_fixture,
    telegram_event,
)

# Handler modules of every function; only the webhook and `sms` get the phonenumbers layer.
HANDLER_MODULES = ["webhook.app", "sms.app", "reconciler.app", "sms_events.app", "store.app", "crm.app"]


def test_importing_any_handler_loads_no_phonenumbers() -> None:
    assert loaded_after_import(HANDLER_MODULES, {"phonenumbers"}) == []


def test_the_telegram_path_runs_without_phonenumbers_and_the_crm_path_needs_it(
    invoke: Invoke, pipeline: Pipeline, monkeypatch: pytest.MonkeyPatch
) -> None:
    # As if the library were absent (a function without the layer): importing it raises.
    monkeypatch.setitem(sys.modules, "phonenumbers", None)

    assert invoke(telegram_event(load_fixture(TELEGRAM_START)))["statusCode"] == 200
    assert invoke(crm_event(load_fixture(CRM_ORDER_EVENT)))["statusCode"] == 500
    assert len(pipeline.published()) == 1
