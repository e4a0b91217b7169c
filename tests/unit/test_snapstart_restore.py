"""SnapStart's restore as Lambda runs it: every handler's init registers its after-restore hook
where the init is the one Lambda snapshots, and environments resumed from one snapshot then draw
different random numbers (botocore's retry jitter among them).

Each case runs in a fresh interpreter: the hooks' registry (`snapshot_restore_py`, which Lambda's
Python runtimes include) lives as long as the process, as in Lambda.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from pipeline import snapstart
from pipeline.registry import CONSUMERS

ROOT = Path(__file__).resolve().parents[2]
PYTHONPATH = os.pathsep.join(str(ROOT / part) for part in ("layers/shared/python", "functions", "."))
HANDLERS = ["webhook.app", *(consumer.handler.rsplit(".", 1)[0] for consumer in CONSUMERS)]

# Import a handler (its init), then take the "snapshot" (the generator's state) and resume from it
# twice, as two environments would, each running the registered after-restore hooks or not.
RESTORES = """
import importlib, json, random, sys
import snapshot_restore_py
importlib.import_module(sys.argv[1])
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
print(json.dumps({"hooks": [f"{h.__module__}.{h.__qualname__}" for h, _, _ in hooks], "draws": draws}))
"""


def restore(handler_module: str, init_type: str | None) -> dict[str, object]:
    environment = {key: value for key, value in os.environ.items() if key != snapstart.INIT_TYPE_ENV} | {
        "PYTHONPATH": PYTHONPATH,
        "AWS_REGION": "us-east-1",
        "AWS_DEFAULT_REGION": "us-east-1",
    }
    if init_type is not None:
        environment[snapstart.INIT_TYPE_ENV] = init_type
    done = subprocess.run(
        [sys.executable, "-c", RESTORES, handler_module],
        env=environment,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    result: dict[str, object] = json.loads(done.stdout.splitlines()[-1])
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


@pytest.mark.parametrize("init_type", [None, snapstart.ON_DEMAND_INIT, "provisioned-concurrency"])
def test_no_hook_and_no_snapshot_library_where_lambda_snapshots_nothing(init_type: str | None) -> None:
    assert restore("webhook.app", init_type)["hooks"] == []
    environment = {k: v for k, v in os.environ.items() if k != snapstart.INIT_TYPE_ENV}
    environment |= {"PYTHONPATH": PYTHONPATH, "AWS_REGION": "us-east-1"}
    if init_type is not None:
        environment[snapstart.INIT_TYPE_ENV] = init_type
    loaded = subprocess.run(
        [sys.executable, "-c", "import sys, webhook.app; print('snapshot_restore_py' in sys.modules)"],
        env=environment,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert loaded.stdout.strip() == "False"
