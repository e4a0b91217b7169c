"""What `phonenumbers` costs a cold start, each figure the median over fresh interpreters.

- `import phonenumbers`, with warm bytecode caches, and compiled from source: the layer is built
  with `--no-compile` and Lambda's /opt is read-only, so a real cold start compiles it;
- the first `parse` + `is_valid_number` of a BY number after the import (libphonenumber loads a
  region's metadata when it first needs it);
- `import webhook.app` as deployed (phonenumbers is not imported: the Telegram path never pays
  for it), and the same followed by `import phonenumbers` (what an eager import would add);
- the first CRM event validated after `import webhook.app` (what a CRM cold start adds).

Interpreter start-up is left out (Lambda's runtime is up before the init code runs).
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.common import (
    FAKE_AWS_ENV,
    PROJECT_ROOT,
    crm_status_change,
    function_path_environment,
    powertools_environment,
    require,
)

RUNS = 7
QUICK_RUNS = 3
BY_PHONE = "+375 (29) 123-45-67"
BY_E164 = "+375291234567"

# Each snippet times only its `measured` part and prints seconds; `setup` runs first, untimed.
_TIMED = "import time\n{setup}\nt = time.perf_counter()\n{measured}\nprint(time.perf_counter() - t)\n"
_PARSE = (
    f"n = phonenumbers.parse({BY_PHONE!r}, None)\n"
    "assert phonenumbers.is_valid_number(n)\n"
    f"assert phonenumbers.format_number(n, phonenumbers.PhoneNumberFormat.E164) == {BY_E164!r}"
)


@dataclass(frozen=True)
class Snippet:
    """Code timed in a fresh interpreter: only `measured`, after an untimed `setup`."""

    measured: str
    setup: str = ""
    # Put before the webhook's paths (an uncompiled phonenumbers copy), and write no bytecode.
    from_source: str | None = None


def _sample_seconds(snippet: Snippet) -> float:
    env = {
        "PATH": os.environ.get("PATH", os.defpath),
        **FAKE_AWS_ENV,
        **powertools_environment("webhook"),
        **function_path_environment(),
    }
    if snippet.from_source:
        env["PYTHONPATH"] = os.pathsep.join([snippet.from_source, env["PYTHONPATH"]])
        env["PYTHONDONTWRITEBYTECODE"] = "1"
    code = _TIMED.format(setup=snippet.setup, measured=snippet.measured)
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, cwd=PROJECT_ROOT, capture_output=True, text=True, check=False
    )
    require(done.returncode == 0, f"snippet failed: {done.stderr.strip()[-500:]}")
    return float(done.stdout.strip().splitlines()[-1])


def _medians_ms(snippets: dict[str, Snippet], runs: int) -> dict[str, float]:
    """Median ms of each snippet; runs are interleaved so machine load skews every figure alike."""
    samples: dict[str, list[float]] = {name: [] for name in snippets}
    for _ in range(runs):
        for name, snippet in snippets.items():
            samples[name].append(_sample_seconds(snippet))
    return {name: round(statistics.median(values) * 1000, 2) for name, values in samples.items()}


def _uncompiled_copy(target: Path) -> Path:
    """A copy of the installed phonenumbers without any bytecode, as the layer ships it."""
    import phonenumbers

    source = Path(phonenumbers.__file__).parent
    shutil.copytree(source, target / "phonenumbers", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    return target


def run(quick: bool = False) -> dict[str, Any]:
    import phonenumbers

    runs = QUICK_RUNS if quick else RUNS
    event = crm_status_change(1)
    event["customer"]["phone"] = BY_PHONE
    # The first CRM request imports the event's reader too: a Telegram-only webhook never does.
    validate = (
        "from pipeline.crm import event_model\n"
        f"event = event_model.CrmEvent.parse({event!r})\n"
        f"assert event.customer.phone == {BY_E164!r}"
    )
    # Warm the bytecode caches once, so "warm" figures do not include a first compilation; and
    # check that the webhook's import leaves phonenumbers out (else the figures below mislead).
    _sample_seconds(Snippet("import phonenumbers\n" + _PARSE))
    _sample_seconds(Snippet("import sys\nassert 'phonenumbers' not in sys.modules", "import webhook.app"))
    with tempfile.TemporaryDirectory(prefix="bench-phonenumbers-") as scratch:
        uncompiled = str(_uncompiled_copy(Path(scratch)))
        figures = _medians_ms(
            {
                "import_phonenumbers_ms": Snippet("import phonenumbers"),
                "import_phonenumbers_from_source_ms": Snippet("import phonenumbers", from_source=uncompiled),
                "first_parse_and_validate_ms": Snippet(_PARSE, "import phonenumbers"),
                "later_parse_and_validate_ms": Snippet(_PARSE, "import phonenumbers\n" + _PARSE),
                "import_webhook_app_ms": Snippet("import webhook.app"),
                "import_webhook_app_and_phonenumbers_ms": Snippet("import webhook.app\nimport phonenumbers"),
                "import_phonenumbers_after_webhook_app_ms": Snippet(
                    "import phonenumbers", "import webhook.app"
                ),
                "first_crm_validation_ms": Snippet(
                    validate, "import webhook.app\nfrom pipeline.crm import contract"
                ),
            },
            runs,
        )
    return {"phonenumbers_version": phonenumbers.__version__, "runs": runs, **figures}


def report(results: dict[str, Any]) -> list[str]:
    rows = (
        ("import phonenumbers (bytecode cached)", "import_phonenumbers_ms"),
        ("import phonenumbers (from source, as from the layer)", "import_phonenumbers_from_source_ms"),
        ("first parse + is_valid_number (loads BY metadata)", "first_parse_and_validate_ms"),
        ("a later parse + is_valid_number", "later_parse_and_validate_ms"),
        ("import webhook.app (as deployed: no phonenumbers)", "import_webhook_app_ms"),
        ("import webhook.app, then import phonenumbers", "import_webhook_app_and_phonenumbers_ms"),
        ("  of which import phonenumbers", "import_phonenumbers_after_webhook_app_ms"),
        ("first CrmEvent validation after import webhook.app", "first_crm_validation_ms"),
    )
    lines = [
        f"phonenumbers {results['phonenumbers_version']}, median of {results['runs']} fresh interpreters"
    ]
    lines += [f"  {label:<54} {results[key]:8.2f} ms" for label, key in rows]
    return lines
