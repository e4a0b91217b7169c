"""The test tree as pytest collects it: every test module's file name is unique, and no generated
example's verdict depends on the machine's speed.

The test folders are not packages, so pytest imports each module by its bare file name: a second
`test_broadcast.py` in another folder is not collected ("import file mismatch"), and its tests
silently never run (two modules were lost that way before this check).
"""

from __future__ import annotations

import re
import tomllib
from collections import defaultdict
from pathlib import Path

from hypothesis import settings

ROOT = Path(__file__).resolve().parents[2]


def collected_modules() -> list[Path]:
    options = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]
    return [
        path
        for folder in options["testpaths"]
        for path in sorted((ROOT / folder).rglob("test_*.py"))
        if ".venv" not in path.parts and "node_modules" not in path.parts
    ]


def test_every_test_module_has_a_file_name_of_its_own() -> None:
    found: defaultdict[str, list[str]] = defaultdict(list)
    for path in collected_modules():
        found[path.name].append(str(path.relative_to(ROOT)))
    modules = sum(len(paths) for paths in found.values())
    assert modules > 100, f"only {modules} test modules found: is the tree read as pytest reads it?"
    assert {name: paths for name, paths in found.items() if len(paths) > 1} == {}


def test_no_hypothesis_example_fails_for_taking_long_on_a_loaded_machine() -> None:
    assert settings.default.deadline is None, "tests/conftest.py loads the profile without a deadline"
    timed = [
        str(path.relative_to(ROOT))
        for path in collected_modules()
        if path != Path(__file__).resolve()
        and re.search(r"deadline=(?!None)", path.read_text(encoding="utf-8"))
    ]
    assert timed == [], "a deadline makes the verdict depend on the machine's load"
