"""Synthesized stacks shared by the infrastructure tests.

Synthesizing costs seconds, so each configuration is built once per test process: `default`
(no optional settings), `full` (every registry `requires_setting` given, so every consumer
exists, and every optional feature on), `custom` (every setting changed from its default,
the SMS gateway being HTTP) and `essential` (the default but `alarms=essential`). All run
cdk-nag at synth, like `python app.py` does.
"""

from __future__ import annotations

import pytest
from synthesized import BASE_CONTEXT, CUSTOM_CONTEXT, Synthesized, full_context, synthesize


@pytest.fixture(scope="session")
def default_synth(tmp_path_factory: pytest.TempPathFactory) -> Synthesized:
    return synthesize(tmp_path_factory.mktemp("cdk-default"), BASE_CONTEXT)


@pytest.fixture(scope="session")
def full_synth(tmp_path_factory: pytest.TempPathFactory) -> Synthesized:
    return synthesize(tmp_path_factory.mktemp("cdk-full"), full_context())


@pytest.fixture(scope="session")
def essential_synth(tmp_path_factory: pytest.TempPathFactory) -> Synthesized:
    """The default settings but `alarms=essential`."""
    return synthesize(tmp_path_factory.mktemp("cdk-essential"), {**BASE_CONTEXT, "alarms": "essential"})


@pytest.fixture(scope="session")
def custom_synth(tmp_path_factory: pytest.TempPathFactory) -> Synthesized:
    return synthesize(tmp_path_factory.mktemp("cdk-custom"), {**BASE_CONTEXT, **CUSTOM_CONTEXT})
