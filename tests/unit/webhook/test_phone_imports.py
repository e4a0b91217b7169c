"""`phonenumbers` is loaded only where a CRM event is validated: a cold start of any other path,
and the functions without the phonenumbers layer, never import it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.unit.webhook.support import (
    CRM_ORDER_EVENT,
    TELEGRAM_START,
    Invoke,
    Pipeline,
    crm_event,
    load_fixture,
    telegram_event,
)

ROOT = Path(__file__).resolve().parents[3]
# Handler modules of every function; only the webhook and `sms` get the phonenumbers layer.
HANDLER_MODULES = ["webhook.app", "sms.app", "reconciler.app", "sms_events.app", "store.app", "crm.app"]


def test_importing_any_handler_loads_no_phonenumbers() -> None:
    script = (
        "import importlib, json, sys\n"
        f"for name in {HANDLER_MODULES!r}:\n"
        "    importlib.import_module(name)\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] == 'phonenumbers')))\n"
    )
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(str(ROOT / p) for p in ("layers/shared/python", "functions")),
        "POWERTOOLS_TRACE_DISABLED": "1",
        "AWS_DEFAULT_REGION": "eu-central-1",
    }
    result = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120, check=False
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert json.loads(result.stdout) == []


def test_the_telegram_path_runs_without_phonenumbers_and_the_crm_path_needs_it(
    invoke: Invoke, pipeline: Pipeline, monkeypatch: pytest.MonkeyPatch
) -> None:
    # As if the library were absent (a function without the layer): importing it raises.
    monkeypatch.setitem(sys.modules, "phonenumbers", None)

    assert invoke(telegram_event(load_fixture(TELEGRAM_START)))["statusCode"] == 200
    assert invoke(crm_event(load_fixture(CRM_ORDER_EVENT)))["statusCode"] == 500
    assert len(pipeline.published()) == 1
