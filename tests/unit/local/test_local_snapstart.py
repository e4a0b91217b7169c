"""`make local` runs a SnapStart function's runtime hooks as Lambda does: after the init, the
before-snapshot hooks in the reverse order of registration, then the after-restore hooks in order,
all before the first invocation; a hook that fails is an init error. The runtime tells a function
its init is for a snapshot only where the `snapstart` setting names it."""

from __future__ import annotations

import textwrap
import uuid
from dataclasses import replace
from pathlib import Path

import pytest
import snapshot_restore_py

from infra.config import PipelineSettings
from local.lambda_host import RESTORED, FunctionHost
from local.runtime import Runtime
from local.settings import LocalSettings
from pipeline import snapstart
from pipeline.registry import enabled

HOOKS = """
import snapshot_restore_py
ran = []

for name in ("first", "second"):
    snapshot_restore_py.register_before_snapshot(ran.append, f"before {name}")
    snapshot_restore_py.register_after_restore(ran.append, f"after {name}")
if FAIL:
    snapshot_restore_py.register_after_restore(lambda: 1 / 0)

def lambda_handler(event, context):
    return list(ran)
"""


def host_of(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *, fail: bool = False) -> FunctionHost:
    name = f"snapfn_{uuid.uuid4().hex[:8]}"
    (tmp_path / name).mkdir()
    (tmp_path / name / "__init__.py").write_text("")
    (tmp_path / name / "app.py").write_text(f"FAIL = {fail}\n" + textwrap.dedent(HOOKS))
    monkeypatch.syspath_prepend(str(tmp_path))
    # The registry is the process's, as in Lambda: each case starts with an empty one.
    monkeypatch.setattr(snapshot_restore_py, "_before_snapshot_registry", [])
    monkeypatch.setattr(snapshot_restore_py, "_after_restore_registry", [])
    return FunctionHost(f"{name}.app.lambda_handler", "fn", timeout_seconds=5, memory_mb=128)


def test_a_snapstart_init_runs_the_hooks_in_lambdas_order_before_the_first_invocation(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(snapstart.INIT_TYPE_ENV, snapstart.SNAPSHOT_INIT)
    host = host_of(tmp_path, monkeypatch)

    assert host.load() == ("ready", f"{RESTORED}: 4 runtime hooks ran")
    first = host.invoke({})

    assert first.ok
    assert first.result == ["before second", "before first", "after first", "after second"]


def test_an_on_demand_init_runs_no_hook(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(snapstart.INIT_TYPE_ENV, snapstart.ON_DEMAND_INIT)
    host = host_of(tmp_path, monkeypatch)

    assert host.load() == ("ready", None)
    assert host.invoke({}).result == []


def test_a_failing_hook_is_an_init_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(snapstart.INIT_TYPE_ENV, snapstart.SNAPSHOT_INIT)
    host = host_of(tmp_path, monkeypatch, fail=True)

    state, detail = host.load()

    assert state == "init error"
    assert detail == "a SnapStart runtime hook failed: ZeroDivisionError: division by zero"
    assert host.handler is None


def test_the_runtime_tells_only_the_named_functions_their_init_is_snapshotted() -> None:
    base = LocalSettings.from_cdk_json()
    named = ("webhook", "autoreply")
    settings = replace(
        base,
        deployment=PipelineSettings.from_context(
            {**base.deployment.to_context(), "snapstart": ",".join(named)}
        ),
    )
    runtime = Runtime(settings=settings)
    functions = ["webhook", *(consumer.name for consumer in enabled(settings.deployment.registry_settings()))]

    types = {name: runtime.init_type(name) for name in functions}

    assert {name for name, kind in types.items() if kind == snapstart.SNAPSHOT_INIT} == set(named)
    assert set(types.values()) == {snapstart.SNAPSHOT_INIT, snapstart.ON_DEMAND_INIT}
