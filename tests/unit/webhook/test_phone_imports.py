"""`phonenumbers` is loaded only where a CRM event is validated: a cold start of any other path,
and the functions without the phonenumbers layer, never import it. The `sms` consumer, which has
the layer and parses a phone in every record, imports it at its init (`pipeline.phones.prepare`)."""

from __future__ import annotations

import sys

import pytest

from infra.constructs.layers import validates_crm_events
from pipeline.registry import by_name
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

# Handler modules of functions without the phonenumbers layer, and the webhook's (its Telegram
# path never needs the library: its CRM routes import it with their first request).
HANDLER_MODULES = ["webhook.app", "reconciler.app", "sms_events.app", "store.app", "crm.app"]


def test_importing_the_webhook_or_a_handler_without_the_layer_loads_no_phonenumbers() -> None:
    assert not any(validates_crm_events(by_name(consumer)) for consumer in ("store", "crm"))
    assert loaded_after_import(HANDLER_MODULES, {"phonenumbers"}) == []


def test_the_sms_consumer_which_has_the_layer_imports_it_at_its_init() -> None:
    assert validates_crm_events(by_name("sms"))
    assert loaded_after_import(["sms.app"], {"phonenumbers"}) == ["phonenumbers"]


def test_the_telegram_path_runs_without_phonenumbers_and_the_crm_path_needs_it(
    invoke: Invoke, pipeline: Pipeline, monkeypatch: pytest.MonkeyPatch
) -> None:
    # As if the library were absent (a function without the layer): importing it raises.
    monkeypatch.setitem(sys.modules, "phonenumbers", None)

    assert invoke(telegram_event(load_fixture(TELEGRAM_START)))["statusCode"] == 200
    assert invoke(crm_event(load_fixture(CRM_ORDER_EVENT)))["statusCode"] == 500
    assert len(pipeline.published()) == 1
