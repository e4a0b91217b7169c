"""Importing function code in infra tests without disturbing the unit tests of the same session.

Modules holding Powertools loggers bind the service name of the environment they are imported
in; the unit tests import them inside fixtures, once their environment is set. So infra tests
import them only inside a test, under the deployed environment, and afterwards drop every module
that import added, leaving `sys.modules` as it was.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from types import ModuleType


@contextmanager
def imported(*names: str) -> Iterator[list[ModuleType]]:
    before = set(sys.modules)
    try:
        yield [importlib.import_module(name) for name in names]
    finally:
        for name in set(sys.modules) - before:
            del sys.modules[name]
