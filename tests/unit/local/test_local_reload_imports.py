"""Issue 22: `make local` restarts every function whose process imported a changed file of
functions/ (the bot's Application module, another package's module), not only the functions of
the changed package (`local.loaded_code`, `local.reload`).

The runtime-level scenario (a user's bot under functions/mybot/ edited while `make local` runs)
is in tests/e2e/test_local_code_and_state.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

from local.loaded_code import LoadedCode, stale
from local.reload import affected_functions
from local.runtime import PROJECT_ROOT, Runtime
from local.status import READY, FunctionStatus
from pipeline.registry import by_name

FUNCTIONS, LAYER = Path("/p/functions"), Path("/p/layers/shared/python")
PACKAGES = {"webhook": "webhook", "crm": "crm", "bot": "bot"}


def write(path: Path, text: str, mtime_offset: float = 0) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    later = time.time() + mtime_offset
    os.utime(path, (later, later))


def test_a_file_a_function_imported_restarts_it_whatever_package_it_is_in() -> None:
    loaded = {"bot": {FUNCTIONS / "mybot" / "main.py", FUNCTIONS / "crm" / "logic.py"}, "crm": set()}

    assert affected_functions([FUNCTIONS / "mybot" / "main.py"], FUNCTIONS, LAYER, PACKAGES, loaded) == {
        "bot": FUNCTIONS / "mybot" / "main.py"
    }
    # crm's own package restarts crm; the bot imported crm.logic, so it restarts too.
    assert set(affected_functions([FUNCTIONS / "crm" / "logic.py"], FUNCTIONS, LAYER, PACKAGES, loaded)) == {
        "crm",
        "bot",
    }
    # Imported by nobody yet: its first import will read it as it is.
    assert affected_functions([FUNCTIONS / "otherbot" / "main.py"], FUNCTIONS, LAYER, PACKAGES, loaded) == {}


IMPORT_AND_REPORT = """
import json, sys
from local.loaded_code import ImportedFiles
tracker = ImportedFiles.from_environment()
import mybot.main
first = tracker.changed()
again = tracker.changed()
import mybot.extra
print(json.dumps({"first": first, "again": again, "then": tracker.changed()}))
"""


def run_reporter(functions: Path) -> dict[str, dict[str, list[float]] | None]:
    environment = {
        "PATH": os.environ.get("PATH", os.defpath),
        "PYTHONPATH": os.pathsep.join((str(functions), str(PROJECT_ROOT))),
        "PYTHONDONTWRITEBYTECODE": "1",
        "LOCAL_CODE_ROOT": str(functions),
    }
    completed = subprocess.run(
        [sys.executable, "-c", IMPORT_AND_REPORT],
        env=environment,
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    result: dict[str, dict[str, list[float]] | None] = json.loads(completed.stdout)
    return result


def test_a_process_reports_the_files_of_functions_it_imported_with_the_version_it_read(
    tmp_path: Path,
) -> None:
    functions = tmp_path / "functions"
    main, helpers, extra = (functions / "mybot" / name for name in ("main.py", "helpers.py", "extra.py"))
    write(functions / "mybot" / "__init__.py", "")
    write(main, "from mybot import helpers\n")
    write(helpers, "VALUE = 1\n")
    write(extra, "")

    report = run_reporter(functions)

    first = report["first"]
    assert first is not None
    assert set(first) == {str(functions / "mybot" / n) for n in ("__init__.py", "main.py", "helpers.py")}
    assert report["again"] is None  # nothing new: nothing sent
    assert report["then"] is not None and str(extra) in report["then"]
    assert stale(first) == []
    # Saved after the process imported it: the version it runs is no longer the one on disk.
    write(helpers, "VALUE = 22\n", mtime_offset=5)
    assert stale(first) == [helpers]


def test_the_runtime_restarts_a_function_for_a_file_its_process_reported_and_says_why(
    tmp_path: Path,
) -> None:
    functions = tmp_path / "functions"
    user_bot = functions / "mybot" / "main.py"
    write(user_bot, "")
    runtime = Runtime(
        state_dir=tmp_path / "state",
        consumers=(by_name("crm"), by_name("bot")),
        functions_dir=functions,
        layer_dir=tmp_path / "layer",
    )
    runtime.log_dir.mkdir(parents=True)
    runtime.functions = {name: FunctionStatus(name, "consumer", state=READY) for name in ("crm", "bot")}
    runtime.children = {  # type: ignore[dict-item]
        name: SimpleNamespace(name=name, function=name, process=SimpleNamespace(pid=pid), crashes_in_a_row=0)
        for name, pid in (("crm", 101), ("bot", 102))
    }
    restarted: list[tuple[str, ...]] = []
    runtime.restart_functions = lambda *names, timeout=0: restarted.append(names) or {}  # type: ignore[method-assign]
    heard: list[str] = []
    runtime.on_announcement(heard.append)
    stat = user_bot.stat()
    report = {"event": "code", "pid": 102, "files": {str(user_bot): [stat.st_mtime, stat.st_size]}}

    runtime._on_function_message(runtime.children["bot"], report)  # type: ignore[arg-type]
    runtime.reload_changed([user_bot])

    assert restarted == [("bot",)]
    assert heard == [f"reloaded bot ({functions.name}/mybot/main.py changed)"]


def test_a_report_of_a_file_saved_since_its_import_is_taken_as_a_change() -> None:
    code = LoadedCode()
    gone = "/nonexistent/functions/mybot/main.py"
    code.record("bot", {"event": "code", "pid": 7, "files": {gone: [1.0, 10]}})

    assert code.take_stale() == [Path(gone)]
    assert code.take_stale() == []
    assert code.by_function({7}) == {"bot": frozenset({Path(gone)})}
    assert code.by_function(set()) == {"bot": frozenset()}  # its process ended: forgotten
