"""Cached AWS clients, built at a function's init in an execution environment, else on first use.

Lambda runs a function's init at a full vCPU and its invocations at the memory's share of one
(1,769 MB is one vCPU: the webhook's 512 MB get about 0.29 of it, a consumer's 256 MB 0.14), so
what a first invocation builds (botocore's session, the service models and endpoint rules, the
clients: about 80 ms of CPU for two clients) takes several times longer there than at init.
A handler's init calls `prepare` with the clients its first invocation calls: in Lambda, or in
`make local`'s function host (both set `AWS_LAMBDA_FUNCTION_NAME`, and every variable the
clients read, before the init), it builds them; anywhere else (a test importing a handler
before it starts moto's `mock_aws` or sets the endpoint) it does nothing, and each client is built
at its first use. `reset_clients()` drops the cache between tests. No client calls AWS when built.

Clients are botocore's own: `import boto3` also imports s3transfer (boto3's S3 transfer
manager, which nothing here uses), about a third of its import time. boto3 is imported only
for a DynamoDB `resource` (tables with Python values instead of attribute-value maps).

Every client and resource of a process comes from one botocore session: a session reads the
endpoint rules, the retry rules and each service's model once, and resolves the credentials once.
A session per client read them again for each (`bench/latency.py` times the first reply with them).
"""

from __future__ import annotations

import functools
import os
import threading
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from botocore.exceptions import ClientError

if TYPE_CHECKING:
    from botocore.config import Config

# `botocore.config` (it loads botocore's endpoint, parser and HTTP machinery) and `botocore.session`
# (the client machinery) are imported when the first client is built, as part of building it
# (at the init, by `prepare`, in an execution environment).


# Attempts of one AWS call in all, the first included (botocore's `total_max_attempts`; its
# `max_attempts` counts retries only). local/README.md states it; a test holds the two together.
MAX_ATTEMPTS = 4


def _config() -> Config:
    """The clients' config, `_CONFIG`, built at first use (a test may replace it)."""
    config: Config | None = globals().get("_CONFIG")
    if config is None:
        from botocore.config import Config

        # Short timeouts: a Lambda must fail fast and let SQS/Telegram retry rather than hang.
        config = Config(
            connect_timeout=3,
            read_timeout=10,
            retries={"mode": "standard", "total_max_attempts": MAX_ATTEMPTS},
        )
        globals()["_CONFIG"] = config
    return config


def __getattr__(name: str) -> Any:
    """`aws._CONFIG` reads as a constant, built on first access (PEP 562)."""
    if name == "_CONFIG":
        return _config()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# A botocore session is not thread-safe: clients (which are) are built from it one at a time.
_BUILDING = threading.Lock()


@functools.cache
def _session() -> Any:
    """The process's botocore session, made with its first client (module docstring)."""
    import botocore.session

    return botocore.session.get_session()


@functools.cache
def client(service: str) -> Any:
    """Return the process-wide client for `service` (e.g. "sns", "sqs", "dynamodb")."""
    with _BUILDING:
        return _session().create_client(service, config=_config())


@functools.cache
def non_retrying_client(service: str) -> Any:
    """A client that never repeats a request by itself, for calls that are not idempotent.

    botocore's standard retries resend a request after a 5xx, a throttle or a read timeout; for
    an API without an idempotency token (sending an SMS) that resend is a second message. The
    caller decides instead, knowing whether the first request may have been taken.
    """
    from botocore.config import Config

    no_retries = _config().merge(Config(retries={"mode": "standard", "total_max_attempts": 1}))
    with _BUILDING:
        return _session().create_client(service, config=no_retries)


@functools.cache
def resource(service: str) -> Any:
    """Return the process-wide resource for `service` (used for DynamoDB tables)."""
    import boto3

    with _BUILDING:
        session = boto3.session.Session(botocore_session=_session())
        return session.resource(service, config=_config())  # type: ignore[call-overload]


def in_execution_environment() -> bool:
    """In Lambda, or in `make local`'s function host, which sets the same variable."""
    return bool(os.environ.get("AWS_LAMBDA_FUNCTION_NAME"))


def prepare(
    clients: Iterable[str] = (), resources: Iterable[str] = (), non_retrying_clients: Iterable[str] = ()
) -> None:
    """At a handler's init: build the clients and resources its first invocation calls, in an
    execution environment only (module docstring). No AWS call is made."""
    if not in_execution_environment():
        return
    for service in clients:
        client(service)
    for service in non_retrying_clients:
        non_retrying_client(service)
    for service in resources:
        built = resource(service)
        if service == "dynamodb":
            # A first `Table(...)` loads boto3's table customisation (`boto3.dynamodb.table`): one
            # here, which makes no call (a table's attributes load when first read).
            built.Table("prepared")


def error_code(error: ClientError) -> str:
    """The AWS error code of a failed call ("ConditionalCheckFailedException"), "" when it has none."""
    return str(error.response.get("Error", {}).get("Code", ""))


def reset_clients() -> None:
    """Forget every cached client and resource, and the session (tests, local runtime re-pointing)."""
    client.cache_clear()
    non_retrying_client.cache_clear()
    resource.cache_clear()
    _session.cache_clear()
