"""Importing function code in infra tests without disturbing the unit tests of the same session.

Modules holding Powertools loggers bind the service name of the environment they are imported
in; the unit tests import them inside fixtures, once their environment is set. So infra tests
import them only inside a test, under the deployed environment, and afterwards drop every module
of the project's own code that import added.

Third-party modules it pulled in (boto3.dynamodb.conditions, ...) stay: they bind no environment,
and dropping them would leave two copies of their classes in the session (a condition built by
the new copy is not one the old copy's boto3 resource recognises).
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType

PROJECT = Path(__file__).resolve().parents[2]


@contextmanager
def imported(*names: str) -> Iterator[list[ModuleType]]:
    before = set(sys.modules)
    try:
        yield [importlib.import_module(name) for name in names]
    finally:
        for name in set(sys.modules) - before:
            if _is_project_code(sys.modules[name]):
                del sys.modules[name]


def _is_project_code(module: ModuleType) -> bool:
    file = getattr(module, "__file__", None)
    if not file:
        return True  # a namespace package of ours (functions' packages have no __init__)
    path = Path(file).resolve()
    return path.is_relative_to(PROJECT) and ".venv" not in path.relative_to(PROJECT).parts
