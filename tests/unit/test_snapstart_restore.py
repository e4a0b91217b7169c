"""SnapStart's restore as Lambda runs it: every handler's init registers its after-restore hook
where the init is the one Lambda snapshots, and environments resumed from one snapshot then draw
different random numbers (botocore's retry jitter among them).

Each case runs in a fresh interpreter: the hooks' registry (`snapshot_restore_py`, which Lambda's
Python runtimes include) lives as long as the process, as in Lambda.
"""

from __future__ import annotations

import json

import pytest

from pipeline import snapstart
from pipeline.registry import CONSUMERS
from tests.support.imports import run_fresh

HANDLERS = ["webhook.app", *(consumer.handler.rsplit(".", 1)[0] for consumer in CONSUMERS)]

# Import a handler (its init), then take the "snapshot" (the generator's state) and resume from it
# twice, as two environments would, each running the registered after-restore hooks or not.
RESTORES = """
import importlib, json, random, sys
importlib.import_module(sys.argv[1])
loaded = "snapshot_restore_py" in sys.modules
import snapshot_restore_py
hooks = snapshot_restore_py.get_after_restore()
snapshot = random.getstate()
draws = {}
for run_hooks in (False, True):
    for environment in (1, 2):
        random.setstate(snapshot)
        if run_hooks:
            for hook, args, kwargs in hooks:
                hook(*args, **kwargs)
        draws[f"{run_hooks}-{environment}"] = [random.random() for _ in range(3)]
print(json.dumps({
    "loaded": loaded,
    "hooks": [f"{h.__module__}.{h.__qualname__}" for h, _, _ in hooks],
    "draws": draws,
}))
"""


def restore(handler_module: str, init_type: str) -> dict[str, object]:
    script = f"import sys; sys.argv[1:] = [{handler_module!r}]\n{RESTORES}"
    result: dict[str, object] = json.loads(
        run_fresh(script, **{snapstart.INIT_TYPE_ENV: init_type}).splitlines()[-1]
    )
    return result


@pytest.mark.parametrize("handler_module", HANDLERS)
def test_every_handlers_snapshotted_init_registers_the_reseed(handler_module: str) -> None:
    result = restore(handler_module, snapstart.SNAPSHOT_INIT)
    assert result["hooks"] == ["pipeline.snapstart.after_restore"]


def test_restored_environments_draw_apart_with_the_hook_and_alike_without_it() -> None:
    draws = restore("autoreply.app", snapstart.SNAPSHOT_INIT)["draws"]
    assert isinstance(draws, dict)
    # Without the hook two environments resumed from one snapshot draw the same numbers ...
    assert draws["False-1"] == draws["False-2"]
    # ... with it, each its own.
    assert draws["True-1"] != draws["True-2"]


# "": Lambda leaves no other value; the variable unset reads the same.
@pytest.mark.parametrize("init_type", ["", snapstart.ON_DEMAND_INIT, "provisioned-concurrency"])
def test_no_hook_and_no_snapshot_library_where_lambda_snapshots_nothing(init_type: str) -> None:
    result = restore("webhook.app", init_type)
    assert result["hooks"] == []
    assert result["loaded"] is False
