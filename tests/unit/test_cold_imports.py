"""What a function's init imports: what its first invocation needs, and nothing that it never needs.

Lambda runs a function's init at a full vCPU and its invocations at the memory's share of one
(`pipeline.aws`), so what every first invocation needs is imported by the init: the SDK (boto3;
the webhook's and the CRM sweep's clients are botocore's alone, and they never load boto3),
Powertools idempotency (every consumer), the secrets' reader (`pipeline.secrets`: the webhook and
every consumer with a secret), the bot's python-telegram-bot engine. What the first invocation then still
builds or imports, run in `make local`'s function hosts: tests/e2e/test_first_invocation.py. With
tracing off (the default deployment) no handler module loads the X-Ray SDK, nor Powertools' parser
models, which its batch utility builds when pydantic is loaded before it (the consumers import the
worker runtime first). How long the imports take is `python -m bench imports`' business, not a
test's.
"""

from __future__ import annotations

import gc
import json
import sys
import types
from pathlib import Path

import pytest

from bench.common import FAKE_AWS_ENV
from bench.imports import BOTOCORE_CLIENTS_MODULE, BOTOCORE_ONLY, first_use
from infra.environment import RECONCILER, SMS_EVENTS, WEBHOOK
from pipeline import coldstart
from pipeline.observability import UntracedFunction, service_tracer
from pipeline.registry import CONSUMERS
from tests.support.imports import collector_after_import, loaded_after_import, run_fresh

ROOT = Path(__file__).resolve().parents[2]
HANDLER_MODULES = [
    spec.rsplit(".", 1)[0]
    for spec in (WEBHOOK.handler, *(c.handler for c in CONSUMERS), RECONCILER.handler, SMS_EVENTS.handler)
]
# Every handler module, including any added later: each pauses the collector (pipeline.coldstart).
EVERY_HANDLER_MODULE = sorted(f"{path.parent.name}.app" for path in (ROOT / "functions").glob("*/app.py"))
NEVER_AT_INIT = {"aws_xray_sdk", "aws_lambda_powertools.utilities.parser"}


def _loaded_after_import(module: str, modules: set[str] | None = None, **environment: str) -> list[str]:
    """Which of `modules` (default: NEVER_AT_INIT) an untraced fresh interpreter has loaded after
    importing `module`."""
    return loaded_after_import([module], modules if modules is not None else NEVER_AT_INIT, **environment)


@pytest.mark.parametrize("module", HANDLER_MODULES)
def test_an_untraced_handlers_init_loads_no_xray_sdk_or_parser_models(module: str) -> None:
    assert _loaded_after_import(module, POWERTOOLS_TRACE_DISABLED="true") == []


# Every function whose first invocation imports something (the consumers, the webhook), by name.
FIRST_USES = sorted(first_use().items())


@pytest.mark.parametrize(("function", "modules"), FIRST_USES, ids=[name for name, _ in FIRST_USES])
def test_a_handlers_init_imports_what_its_first_invocation_needs(
    function: str, modules: tuple[str, ...]
) -> None:
    """boto3 and the function's first-use modules are loaded once the handler module is: none is
    left for the first invocation, at its share of a vCPU. (The webhook and the CRM sweep: below.)"""
    wanted = {*modules} if function in BOTOCORE_ONLY else {"boto3", *modules}
    assert _loaded_after_import(f"{function}.app", wanted, POWERTOOLS_TRACE_DISABLED="true") == sorted(wanted)


@pytest.mark.parametrize("function", sorted(BOTOCORE_ONLY))
def test_a_function_charged_botocore_alone_never_loads_boto3_and_its_init_builds_its_clients(
    function: str,
) -> None:
    """`bench imports` charges the webhook and the CRM sweep (`BOTOCORE_ONLY`) `import
    botocore.session`, not boto3: in an execution environment each init builds its clients
    (`pipeline.aws.prepare`) from botocore, and neither the init nor what its first invocation
    imports loads boto3 or Powertools Parameters (which imports boto3: `pipeline.secrets` caches on
    its own). A module of theirs that imported boto3 fails this."""
    modules = [f"{function}.app", *first_use()[function]]
    environment = {**FAKE_AWS_ENV, "AWS_LAMBDA_FUNCTION_NAME": function, "POWERTOOLS_TRACE_DISABLED": "true"}
    wanted = {
        "boto3",
        "aws_lambda_powertools.utilities.parameters",
        BOTOCORE_CLIENTS_MODULE,
        "botocore.client",
    }
    assert loaded_after_import(modules, wanted, **environment) == sorted(
        {BOTOCORE_CLIENTS_MODULE, "botocore.client"}
    )


# No function's whole cold path (init, then what its first invocation imports: bench.imports'
# `first_use`) loads pydantic, about 0.4x of `import boto3` (docs/perf.md): what each reads is
# checked by `pipeline.validation`. Only the deployment's settings (`infra.config`) are pydantic's.
@pytest.mark.parametrize("module", EVERY_HANDLER_MODULE)
def test_no_functions_cold_path_loads_pydantic(module: str) -> None:
    modules = [module, *first_use().get(module.removesuffix(".app"), ())]
    assert loaded_after_import(modules, {"pydantic", "pydantic_core"}, POWERTOOLS_TRACE_DISABLED="true") == []


def test_a_crm_request_loads_no_pydantic_on_the_webhook() -> None:
    """The webhook's CRM route reads the event with `pipeline.validation` too."""
    modules = ["webhook.app", *first_use()["webhook"], "pipeline.crm.event_model"]
    assert loaded_after_import(modules, {"pydantic", "pydantic_core"}) == []


@pytest.mark.parametrize(
    "route",
    [("pipeline.crm.forms", "pipeline.crm.bitrix24"), ("pipeline.crm.forms", "pipeline.crm.amocrm")],
    ids=["bitrix24", "amocrm"],
)
def test_a_crm_webhook_request_loads_no_pydantic_on_the_webhook(route: tuple[str, ...]) -> None:
    """The webhook's Bitrix24 and amoCRM routes read their forms with `pipeline.validation` too."""
    modules = ["webhook.app", *first_use()["webhook"], *route]
    assert loaded_after_import(modules, {"pydantic", "pydantic_core"}) == []


def test_the_check_sees_pydantic_where_it_is_loaded() -> None:
    """The lists above are not empty by accident: the deployment's settings are pydantic's."""
    assert loaded_after_import(["infra.config"], {"pydantic"}) == ["pydantic"]


def test_the_bot_consumers_init_loads_python_telegram_bot_and_only_what_its_engine_uses() -> None:
    """Its engine, and python-telegram-bot with it, is imported by the init: every update needs it.
    PTB imports httpx, but the engine's transport is urllib3 (`pipeline.telegram_bot.transport`):
    httpx's async stack is never loaded; nor is Passport's cryptography, which AWS's Powertools
    layer carries (`pipeline.telegram_bot.passport`)."""
    watched = {"telegram", "httpx", "httpcore", "h11", "anyio", "cryptography"}
    assert _loaded_after_import("bot.app", watched) == ["httpx", "telegram"]


def test_no_handlers_init_compiles_the_formats_key_patterns() -> None:
    """Only `ops` and the tests match stored keys against `pipeline.formats` (`Format.key`)."""
    script = (
        "import importlib, json\n"
        f"for name in {HANDLER_MODULES!r}:\n"
        "    importlib.import_module(name)\n"
        "from pipeline.formats import FORMATS\n"
        "print(json.dumps([f.name for f in FORMATS if 'key' in vars(f)]))\n"
    )
    assert json.loads(run_fresh(script)) == []


def test_a_traced_handler_gets_powertools_tracer() -> None:
    assert _loaded_after_import("webhook.app", POWERTOOLS_TRACE_DISABLED="false") == ["aws_xray_sdk"]


@pytest.mark.parametrize("value", ["1", "true", "True"])
def test_untraced_decorators_return_the_function_itself(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv("POWERTOOLS_TRACE_DISABLED", value)
    tracer = service_tracer()

    def handler(event: dict, context: object) -> dict:
        return event

    assert isinstance(tracer, UntracedFunction)
    assert tracer.capture_lambda_handler(handler) is handler
    assert tracer.capture_lambda_handler(capture_response=False)(handler) is handler
    assert tracer.capture_method(handler) is handler
    assert tracer.capture_method(capture_error=False)(handler) is handler


def test_the_webhooks_init_loads_no_powertools_event_handler() -> None:
    """Its five routes are matched by `webhook.app` itself: the event handler package (asyncio and
    every event class) would be a third of its init."""
    loaded = _loaded_after_import("webhook.app", {"aws_lambda_powertools.event_handler", "asyncio"})
    assert loaded == []


@pytest.mark.parametrize("module", EVERY_HANDLER_MODULE)
def test_a_handlers_init_imports_with_the_collector_paused_then_resumes_it(module: str) -> None:
    """The imports run no collection (a tenth of an init, `python -m bench imports`); afterwards
    the collector is on again, with what the init made frozen (`pipeline.coldstart`)."""
    collector = collector_after_import(module)
    assert collector["collections"] == 0
    assert collector["enabled"] is True
    assert collector["frozen"] > 10_000


def test_a_first_invocations_imports_pause_the_collector_the_first_time_only(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`coldstart.paused(module)` pauses and freezes while `module` is not loaded; once it is (a
    warm request), it does nothing: no freeze per request keeping that request's garbage."""
    name = "tests.unit.not_a_module_anyone_imports"
    frozen = gc.get_freeze_count()
    try:
        with coldstart.paused(name):
            assert not gc.isenabled()
            garbage = [[]]
        assert gc.isenabled()
        assert gc.get_freeze_count() > frozen
        monkeypatch.setitem(sys.modules, name, types.ModuleType(name))
        gc.unfreeze()
        with coldstart.paused(name):
            assert gc.isenabled()
            garbage.append([])
        assert gc.get_freeze_count() == 0
    finally:
        gc.enable()


@pytest.mark.parametrize("module", ["sms.app", "reconciler.app", "sms_events.app"])
def test_the_sms_functions_init_loads_no_crm_source_machinery(module: str) -> None:
    """They read one setting the CRM sources read too (`pipeline.sms.rules.max_age`), not the
    sources' sync (about a tenth of `import boto3` of the `sms` cold path, docs/perf.md)."""
    assert _loaded_after_import(module, {"pipeline.crm.sync", "pipeline.crm.sources"}) == []
