"""Process-wide test defaults, applied before any test module is imported.

Powertools reads some settings when a handler module is first imported (the metrics namespace,
tracing), and boto3 looks for credentials on first use: fixing them here makes the suite
independent of import order and guarantees no test can reach a real AWS account.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import botocore.loaders
import botocore.session
import pytest
from hypothesis import settings

for _name, _value in {
    "AWS_DEFAULT_REGION": "eu-central-1",
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_SECURITY_TOKEN": "testing",
    "AWS_SESSION_TOKEN": "testing",
    "POWERTOOLS_TRACE_DISABLED": "1",
    "POWERTOOLS_METRICS_NAMESPACE": "TelegramCrmPipeline",
    "JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION": "20",
}.items():
    os.environ[_name] = _value
# Shared modules create Powertools child loggers at import (`Logger(child=True)`), named after the
# service set then; in Lambda it is always set first. Tests that import them while collecting get
# the consumers' test service, so their log lines reach the worker's logger the tests capture.
os.environ.setdefault("POWERTOOLS_SERVICE_NAME", "consumer")
for _name in ("AWS_PROFILE", "AWS_ENDPOINT_URL"):
    os.environ.pop(_name, None)


# No generated example fails for taking long: Hypothesis' default 200 ms deadline made a test's
# verdict depend on the machine's load (CI's 2 cores run three test processes). Each test's own
# `@settings(...)` inherits this, and none sets a deadline (tests/unit/test_test_layout.py).
settings.register_profile("pipeline", deadline=None)
settings.load_profile("pipeline")


_SHARED_LOADER = botocore.loaders.create_loader()


@pytest.fixture(scope="session", autouse=True)
def _load_service_models_once() -> Iterator[None]:
    """Every botocore session of a test process reads AWS's service models through one loader.

    `pipeline.aws` makes one botocore session per process, which a test forgets with its clients
    (`aws.reset_clients()`) as a new Lambda environment starts without it, and the local runtime and
    boto3 make sessions of their own; a new session's loader reads and parses each service's model
    files again: 54 ms a client here, 11 ms with the loader shared (boto3's sessions, which
    `botocore.session.get_session` also makes, share it too).
    """
    make = botocore.session.get_session

    def get_session(env_vars: Any = None) -> botocore.session.Session:
        session = make(env_vars)
        session.register_component("data_loader", _SHARED_LOADER)
        return session

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(botocore.session, "get_session", get_session)
        yield


@pytest.hookimpl(tryfirst=True)  # before tests/e2e/conftest.py moves `after_scenarios` tests last
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The modules marked `minutes(n)` first, the longest first; the rest in their order.

    `make test` hands whole files to its workers in this order (`--dist loadfile
    --no-loadscope-reorder`): a file that takes minutes started last would run on alone while the
    other workers sit idle (xdist's default order, by number of tests, put the one-test 10,000-chat
    broadcast and the chaos campaign last). A stable sort: tests keep their order within a module.
    """

    def minutes(item: pytest.Item) -> float:
        marker = item.get_closest_marker("minutes")
        return -float(marker.args[0]) if marker is not None else 0.0

    items.sort(key=minutes)
