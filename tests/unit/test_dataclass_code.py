"""The functions' `@dataclass` methods, precompiled at build time (`pipeline.dataclass_code`,
`infra.dataclass_code`): a class built from the shipped code is the class `dataclasses` builds,
nothing of an init's dataclasses is compiled at a cold start, and a text the file does not hold
(a class changed since the build) or a file another Python built is compiled as before.

Each case builds the file the way the synth does (`infra.dataclass_code.recorded`, a fresh
interpreter importing the modules) and imports the modules in fresh interpreters, with the file
installed and without it: `install()` changes `dataclasses` for the life of a process.
"""

from __future__ import annotations

import json
import marshal
import os
import sys
import textwrap
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from infra.dataclass_code import recorded
from pipeline.dataclass_code import CODE_FILE, FORMAT_VERSION
from tests.support.imports import ROOT, run_fresh

MODULE = "generated_records"
# What a fresh interpreter prints of each class of MODULE: how its instances behave, built from
# the same values, and what `dataclasses` says of it; and what `pipeline.dataclass_code` counted.
PROBE = """\
import dataclasses, importlib, inspect, json, re, sys
from pipeline import dataclass_code
installed = dataclass_code.install({folder!r}) if {install!r} else False
module = importlib.import_module({module!r})

def outcome(call):
    try:
        # An object's default repr names its address, another in each process.
        return re.sub(r" at 0x[0-9a-f]+", " at 0x-", repr(call()))
    except Exception as error:
        return type(error).__name__

def first_field(cls):
    return dataclasses.fields(cls)[0].name if dataclasses.fields(cls) else "absent"

seen = {{}}
for name in sorted(n for n in vars(module) if n.startswith("Record")):
    cls = getattr(module, name)
    a, b, c = module.build(cls, 1), module.build(cls, 1), module.build(cls, 2)
    seen[name] = {{
        "signature": str(inspect.signature(cls)),
        "fields": [(f.name, f.init, f.repr, f.compare, f.kw_only) for f in dataclasses.fields(cls)],
        "match_args": list(getattr(cls, "__match_args__", ())),
        "slots": hasattr(cls, "__slots__"),
        "repr": outcome(lambda: repr(a)),
        "equal": outcome(lambda: (a == b, a == c, a != c)),
        "hash": outcome(lambda: hash(a) == hash(b)),
        "order": outcome(lambda: (a < c, a <= b, c > a)),
        "assign": outcome(lambda: setattr(a, first_field(cls), 9)),
        "delete": outcome(lambda: delattr(b, first_field(cls))),
        "as_dict": outcome(lambda: dataclasses.asdict(c)),
        "replaced": outcome(lambda: repr(dataclasses.replace(c))),
    }}
print(json.dumps({{"installed": installed, "classes": seen, "counts": dataclass_code.counts()}}))
"""

FIELD_NAMES = ("name", "count", "items", "when", "self", "object")


@st.composite
def record_classes(draw: st.DrawFn, index: int) -> str:
    """The source of one dataclass, with the options and fields `dataclasses` generates code for."""
    frozen, eq = draw(st.booleans()), draw(st.booleans())
    order = eq and draw(st.booleans())
    options = {
        "frozen": frozen,
        "eq": eq,
        "order": order,
        "repr": draw(st.booleans()),
        "unsafe_hash": draw(st.booleans()) and not frozen,
        "kw_only": draw(st.booleans()),
        "slots": draw(st.booleans()),
    }
    names = draw(st.lists(st.sampled_from(FIELD_NAMES), max_size=4, unique=True))
    kinds = [draw(st.sampled_from(("plain", "default", "factory", "hidden"))) for _ in names]
    # Fields without a default first: `dataclasses` refuses one after a default (unless keyword-only).
    fields = sorted(zip(names, kinds, strict=True), key=lambda field: field[1] != "plain")
    lines = [f"@dataclass({', '.join(f'{k}={v}' for k, v in options.items())})", f"class Record{index}:"]
    for name, kind in fields:
        value = {
            "plain": "",
            "default": " = 3",
            "factory": " = field(default_factory=list)",
            "hidden": " = field(default=0, repr=False, compare=False)",
        }[kind]
        annotation = "list" if kind == "factory" else "int"
        lines.append(f"    {name}: {annotation}{value}")
    if draw(st.booleans()):
        lines += ["", "    def __post_init__(self) -> None:", "        pass"]
    lines.append("    pass")
    return "\n".join(lines)


MODULE_HEAD = textwrap.dedent(
    """\
    from dataclasses import dataclass, field, fields


    def build(cls, seed):
        values = {f.name: [seed] if f.type == "list" else seed for f in fields(cls) if f.init}
        return cls(**values)

    """
)


def _write(folder: Path, classes: list[str]) -> None:
    (folder / f"{MODULE}.py").write_text(
        "from __future__ import annotations\n\n" + MODULE_HEAD + "\n\n".join(classes) + "\n"
    )


def _build(folder: Path) -> None:
    content = recorded(sys.executable, folder, [MODULE])
    assert content is not None
    (folder / CODE_FILE).write_bytes(content)


def _probe(folder: Path, install: bool) -> dict[str, Any]:
    script = PROBE.format(folder=str(folder), install=install, module=MODULE)
    printed = run_fresh(script, PYTHONPATH=os.pathsep.join(map(str, (folder, ROOT / "layers/shared/python"))))
    result: dict[str, Any] = json.loads(printed.splitlines()[-1])
    return result


@settings(max_examples=12, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    classes=st.integers(min_value=1, max_value=4).flatmap(lambda n: st.tuples(*map(record_classes, range(n))))
)
def test_a_class_built_from_the_shipped_code_behaves_as_the_one_dataclasses_compiles(
    tmp_path_factory: Any, classes: tuple[str, ...]
) -> None:
    folder = tmp_path_factory.mktemp("records")
    _write(folder, list(classes))
    _build(folder)
    shipped, compiled = _probe(folder, install=True), _probe(folder, install=False)
    assert shipped["installed"] is True and compiled["installed"] is False
    assert shipped["classes"] == compiled["classes"]
    assert len(shipped["classes"]) == len(classes)
    # Every class's methods came from the file (one text per class); none was compiled.
    assert shipped["counts"] == {"shipped": len(classes), "compiled": 0}


def test_a_class_changed_since_the_build_is_compiled_and_the_others_still_shipped(tmp_path: Path) -> None:
    unchanged = "@dataclass(frozen=True)\nclass Record0:\n    name: int\n    count: int = 3"
    _write(tmp_path, [unchanged, "@dataclass\nclass Record1:\n    name: int"])
    _build(tmp_path)
    _write(tmp_path, [unchanged, "@dataclass\nclass Record1:\n    name: int\n    count: int = 5"])
    shipped = _probe(tmp_path, install=True)
    assert shipped["counts"] == {"shipped": 1, "compiled": 1}
    assert shipped["classes"]["Record1"]["signature"] == "(name: 'int', count: 'int' = 5) -> None"
    assert shipped["classes"] == _probe(tmp_path, install=False)["classes"]


def test_a_file_of_another_python_or_format_is_not_used(tmp_path: Path) -> None:
    _write(tmp_path, ["@dataclass\nclass Record0:\n    name: int"])
    _build(tmp_path)
    content = marshal.loads((tmp_path / CODE_FILE).read_bytes())  # noqa: S302 - built just above
    assert content["format"] == FORMAT_VERSION and content["python"] == sys.implementation.cache_tag
    for changed in ({**content, "python": "cpython-399"}, {**content, "format": FORMAT_VERSION + 1}):
        (tmp_path / CODE_FILE).write_bytes(marshal.dumps(changed))
        result = _probe(tmp_path, install=True)
        assert result["installed"] is False
        assert result["counts"] == {"shipped": 0, "compiled": 0}  # `dataclasses` left as it is
        assert result["classes"]["Record0"]["repr"] == repr("Record0(name=1)")


def test_without_the_file_nothing_changes(tmp_path: Path) -> None:
    _write(tmp_path, ["@dataclass\nclass Record0:\n    name: int"])
    result = _probe(tmp_path, install=True)
    assert result["installed"] is False and result["counts"] == {"shipped": 0, "compiled": 0}


def test_a_python_that_cannot_import_the_functions_builds_no_file_and_says_why(
    tmp_path: Path, capsys: Any
) -> None:
    """As with a `python3.13` on the PATH without Powertools: the asset ships without the file."""
    assert recorded(sys.executable, tmp_path, ["a_module_nobody_wrote"]) is None
    note = capsys.readouterr().err
    assert "could not import the functions to precompile their dataclasses" in note
    assert "No module named 'a_module_nobody_wrote'" in note and CODE_FILE in note
