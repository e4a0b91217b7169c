"""The `@dataclass` methods of a function's init, compiled at build time instead of at each cold start.

`dataclasses` writes each class's `__init__`, `__repr__`, `__eq__` (and a frozen class's
`__setattr__`, `__delattr__`, `__hash__`) as Python source and compiles it with `exec`, at every
import: bytecode shipped with a module does not cover it. That compilation was about two thirds of
the time the decorator takes, 17 ms of the `sms` consumer's 85 ms init after boto3 and 7 of the
webhook's 33 (docs/perf.md, "Where an init's time goes").

So the build (`infra.dataclass_code`) imports every function's init once, with the runtime's
Python, records each source text `dataclasses` executes, compiles it and ships the code objects in
the functions' asset (CODE_FILE, `marshal`). `install()`, from `pipeline.coldstart.begin()`, gives
`dataclasses` an `exec` that runs the shipped code object of a text it has, and compiles any other
text as before. The lookup is by the whole text, so a class changed since the build, another
Python, or another `dataclasses`, simply compiles: the shipped code is only ever what compiling
that same text gives. A file of another format or another Python's bytecode is not used at all.

Without the file (tests, `make local`, an asset built without a Python of the runtime's version)
`install()` does nothing.
"""

from __future__ import annotations

import builtins
import dataclasses
import marshal
import os
import sys
from pathlib import Path
from typing import Any

# In the functions' asset, at its top (Lambda's LAMBDA_TASK_ROOT).
CODE_FILE = "dataclass-code.marshal"
FORMAT_VERSION = 1
# What the build compiles a text as: the name `dataclasses` gives `exec`'s code too.
SOURCE_NAME = "<string>"

_compiled: dict[str, Any] = {}
_counts = {"shipped": 0, "compiled": 0}


def compiled(source: str) -> Any:
    """`source` compiled as `dataclasses`' own `exec` compiles it: without the `__future__` flags
    of the module that calls (this one's `annotations` would make its annotations strings)."""
    return compile(source, SOURCE_NAME, "exec", dont_inherit=True)


def _exec(source: Any, globals: dict[str, Any] | None = None, locals: Any = None) -> None:
    """`exec` for `dataclasses`: the shipped code of a known text, else the text compiled."""
    code = _compiled.get(source) if isinstance(source, str) else None
    _counts["shipped" if code is not None else "compiled"] += 1
    if code is None:
        code = compiled(source) if isinstance(source, str) else source
    builtins.exec(code, globals, locals)  # noqa: S102


def payload(codes: dict[str, Any]) -> bytes:
    """The file's content: its format, the Python it was compiled by and the code of each text."""
    return marshal.dumps({"format": FORMAT_VERSION, "python": sys.implementation.cache_tag, "codes": codes})


def read(path: Path) -> dict[str, Any] | None:
    """The code objects of the file at `path`; None if there is none, or it is of another format
    or another Python (its bytecode would not run here)."""
    try:
        # The function's own read-only code (/var/task), built with it: as trusted as its .pyc.
        content = marshal.loads(path.read_bytes())  # noqa: S302
    except FileNotFoundError:
        return None
    if (
        not isinstance(content, dict)
        or content.get("format") != FORMAT_VERSION
        or content.get("python") != sys.implementation.cache_tag
    ):
        return None
    codes = content.get("codes")
    return codes if isinstance(codes, dict) else None


def install(folder: str | None = None) -> bool:
    """Use the shipped code objects in `folder` (default: the function's code, LAMBDA_TASK_ROOT)
    for the dataclasses created from now on; True if there were any. Once per process."""
    if _compiled:
        return True
    root = folder if folder is not None else os.environ.get("LAMBDA_TASK_ROOT")
    codes = read(Path(root) / CODE_FILE) if root else None
    if not codes:
        return False
    _compiled.update(codes)
    dataclasses.exec = _exec  # type: ignore[attr-defined]  # found before the builtin
    return True


def counts() -> dict[str, int]:
    """How many dataclass texts ran shipped code, and how many were compiled, in this process."""
    return dict(_counts)
