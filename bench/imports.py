"""What each function's init costs: its handler module imported in a fresh interpreter, vs `import boto3`.

For every function (the webhook, every registry consumer, the SMS reconciler and `sms_events`),
rounds of fresh interpreters alternate `import boto3` and `import <handler module>`, so machine load
skews both alike. Per handler:

- the median import time, and the ratio to `import boto3`: the median over rounds of the handler's
  time divided by the boto3 run just before it;
- the goal beside it (1.0x the webhook; 1.6x the bot consumer, which imports python-telegram-bot,
  issue 14's goal; 1.5x the others) and whether it is met;
- the peak RSS of the interpreter after the import (VmHWM; `import boto3` alone is shown too);
- `then first use`: what the handler imports with its first update, timed after the handler, in
  the same interpreter (FIRST_USE: the bot consumer's python-telegram-bot engine; "-" for none);
- `then boto3`: `import boto3` timed after those, in the same interpreter: what the first
  invocation still pays when it reads a secret (Powertools Parameters), its idempotency record or a
  DynamoDB table (each imports boto3). Init is the goal's figure; init + these is the cold path's;
- which of boto3, s3transfer, the X-Ray SDK and python-telegram-bot the import loaded (none
  should: tracing is off, as deployed by default, and nothing at init needs boto3 or PTB).

Interpreter start-up is left out, and bytecode caches are warm (as in `bench.phones`).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
from typing import Any

from bench.common import (
    FAKE_AWS_ENV,
    PROJECT_ROOT,
    function_path_environment,
    powertools_environment,
    require,
    table,
)
from infra.environment import RECONCILER, SMS_EVENTS, WEBHOOK
from pipeline.registry import CONSUMERS
from pipeline.telegram_bot.runner import ENGINE_MODULE

RUNS = 9
QUICK_RUNS = 1
BASELINE = "boto3"
WEBHOOK_GOAL = 1.0
OTHERS_GOAL = 1.5
# The bot consumer's goal (issue 14): it runs python-telegram-bot, imported with its first update.
BOT = "bot"
BOT_GOAL = 1.6
# Modules a handler imports with its first update, not at init.
FIRST_USE = {BOT: ENGINE_MODULE}
# Loaded at init only if something imports more than it needs (X-Ray only if tracing were on).
WATCHED = {"boto3": "boto3", "s3transfer": "s3transfer", "aws_xray_sdk": "xray", "telegram": "ptb"}

# Prints one JSON line: seconds of the import, of a later `import boto3`, peak RSS and what loaded.
_SNIPPET = """\
import json, sys, time
t = time.perf_counter()
import {module}
seconds = time.perf_counter() - t
# The peak RSS of this process image (ru_maxrss would include the parent's, kept across exec).
with open("/proc/self/status") as status:
    rss_kib = next(int(line.split()[1]) for line in status if line.startswith("VmHWM:"))
loaded = sorted({{name.split(".")[0] for name in sys.modules}} & {watched!r})
first_use = None
if {first_use!r}:
    t = time.perf_counter()
    import {first_use_module}
    first_use = time.perf_counter() - t
t = time.perf_counter()
import boto3
then = time.perf_counter() - t
print(json.dumps({{"seconds": seconds, "first_use": first_use, "then_boto3": then, "rss_kib": rss_kib,
                  "loaded": loaded}}))
"""


def handler_modules() -> dict[str, str]:
    """Function name -> the module its handler string names (`store.app.lambda_handler` -> `store.app`)."""
    functions = [(WEBHOOK.service_name, WEBHOOK.handler)]
    functions += [(consumer.name, consumer.handler) for consumer in CONSUMERS]
    functions += [(spec.service_name, spec.handler) for spec in (RECONCILER, SMS_EVENTS)]
    return {name: handler.rsplit(".", 1)[0] for name, handler in functions}


def goal(function: str) -> float:
    if function == WEBHOOK.service_name:
        return WEBHOOK_GOAL
    return BOT_GOAL if function == BOT else OTHERS_GOAL


def _sample(module: str, first_use: str | None = None) -> dict[str, Any]:
    env = {
        "PATH": os.environ.get("PATH", os.defpath),
        **FAKE_AWS_ENV,
        **powertools_environment(module.split(".", 1)[0]),
        **function_path_environment(),
    }
    code = _SNIPPET.format(
        module=module, watched=set(WATCHED), first_use=first_use, first_use_module=first_use or "sys"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, cwd=PROJECT_ROOT, capture_output=True, text=True, check=False
    )
    require(done.returncode == 0, f"import {module} failed: {done.stderr.strip()[-500:]}")
    sample: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return sample


def run(quick: bool = False) -> dict[str, Any]:
    runs = QUICK_RUNS if quick else RUNS
    modules = handler_modules()
    baseline: list[dict[str, Any]] = []
    samples: dict[str, list[dict[str, Any]]] = {name: [] for name in modules}
    ratios: dict[str, list[float]] = {name: [] for name in modules}
    load_before = round(os.getloadavg()[0], 2)
    # Warm the bytecode caches, so no figure includes a first compilation.
    for module in [BASELINE, *modules.values()]:
        _sample(module)
    for _ in range(runs):
        for name, module in modules.items():
            boto3_run = _sample(BASELINE)
            baseline.append(boto3_run)
            handler_run = _sample(module, FIRST_USE.get(name))
            samples[name].append(handler_run)
            ratios[name].append(handler_run["seconds"] / boto3_run["seconds"])
    functions = {}
    for name, module in modules.items():
        ratio = round(statistics.median(ratios[name]), 2)
        functions[name] = {
            "module": module,
            "import_ms": _median_ms(samples[name], "seconds"),
            "ratio": ratio,
            "goal": goal(name),
            "met": ratio <= goal(name),
            "then_first_use_ms": _median_ms(samples[name], "first_use") if name in FIRST_USE else None,
            "then_boto3_ms": _median_ms(samples[name], "then_boto3"),
            "peak_rss_mb": round(statistics.median(s["rss_kib"] for s in samples[name]) / 1024, 1),
            "loaded": sorted({WATCHED[m] for s in samples[name] for m in s["loaded"]}),
        }
    return {
        "runs": runs,
        "load_average_before": load_before,
        "boto3_import_ms": _median_ms(baseline, "seconds"),
        "boto3_peak_rss_mb": round(statistics.median(s["rss_kib"] for s in baseline) / 1024, 1),
        "functions": functions,
    }


def _median_ms(samples: list[dict[str, Any]], key: str) -> float:
    return round(statistics.median(sample[key] for sample in samples) * 1000, 1)


def report(results: dict[str, Any]) -> list[str]:
    rows = [
        (
            name,
            f["import_ms"],
            f"{f['ratio']:.2f}x",
            f"{f['goal']:.1f}x",
            "yes" if f["met"] else "NO",
            "-" if f.get("then_first_use_ms") is None else f["then_first_use_ms"],
            f["then_boto3_ms"],
            f["peak_rss_mb"],
            ", ".join(f["loaded"]) or "-",
        )
        for name, f in results["functions"].items()
    ]
    header = (
        "handler",
        "import ms",
        "/ boto3",
        "goal",
        "met",
        "then first use ms",
        "then boto3 ms",
        "peak RSS MB",
        "init loads",
    )
    return [
        f"cold imports: median of {results['runs']} fresh interpreters, each after an `import boto3` run"
        f" (load average {results['load_average_before']} before)",
        f"  import boto3: {results['boto3_import_ms']} ms, peak RSS {results['boto3_peak_rss_mb']} MB",
        *(f"  {line}" for line in table(header, rows)),
    ]
