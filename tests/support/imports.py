"""Which modules a fresh interpreter loads after importing a handler: what a Lambda init pays for.

The tests ask whether a module is loaded, never how long it took (`python -m bench imports`
measures that).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def loaded_after_import(modules: Iterable[str], wanted: Iterable[str], **environment: str) -> list[str]:
    """Which of `wanted` (a package counts with its submodules) a fresh, untraced interpreter
    has loaded after importing every one of `modules`, sorted."""
    script = (
        "import importlib, json, sys\n"
        f"for name in {list(modules)!r}:\n"
        "    importlib.import_module(name)\n"
        f"wanted = {sorted(wanted)!r}\n"
        "loaded = {w for w in wanted for m in sys.modules if m == w or m.startswith(w + '.')}\n"
        "print(json.dumps(sorted(loaded)))\n"
    )
    result = _run(script, environment)
    loaded: list[str] = json.loads(result.stdout)
    return loaded


def collector_after_import(module: str, **environment: str) -> dict[str, int | bool]:
    """What Python's cyclic GC did while a fresh, untraced interpreter imported `module`, with
    `pipeline.coldstart` loaded and a collection run just before it:
    `collections` (passes run during the import), `enabled` after it and `frozen` (objects in
    the permanent generation)."""
    script = (
        "import gc, importlib, json\n"
        "import pipeline.coldstart\n"
        "gc.collect()  # so the few allocations before the handler's `coldstart.begin()` trigger none\n"
        "started = []\n"
        "def seen(phase, info):\n"
        "    if phase == 'start':\n"
        "        started.append(info['generation'])\n"
        "gc.callbacks.append(seen)\n"
        f"importlib.import_module({module!r})\n"
        "gc.callbacks.remove(seen)\n"
        "print(json.dumps({'collections': len(started), 'enabled': gc.isenabled(),\n"
        "                  'frozen': gc.get_freeze_count()}))\n"
    )
    result = _run(script, environment)
    collector: dict[str, int | bool] = json.loads(result.stdout)
    return collector


def run_fresh(script: str, **environment: str) -> str:
    """What `script` prints, run in a fresh interpreter with the functions' import path, untraced."""
    return _run(script, environment).stdout


def _run(script: str, environment: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """`script` in a fresh interpreter with the functions' import path, untraced."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(str(ROOT / p) for p in ("layers/shared/python", "functions")),
        "AWS_DEFAULT_REGION": "eu-central-1",
        "POWERTOOLS_TRACE_DISABLED": "true",
        **environment,
    }
    result = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120, check=False
    )
    assert result.returncode == 0, result.stderr[-2000:]
    return result
