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
The session's loader answers botocore's "is this service known?" by that service's folder
(`ServiceNames`) instead of listing all 400-odd: about 12 ms less for each type of file loaded.
"""

from __future__ import annotations

import functools
import os
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, overload

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

    session = botocore.session.get_session()
    look_up_services_by_name(session.get_component("data_loader"))
    return session


class ServiceNames(Sequence[str]):
    """What botocore's `Loader.list_available_services(type_name)` returns, answering `in` for one
    name by looking at that name's folder alone.

    botocore checks a service is known before loading its model (`load_service_model`: `if
    service_name not in self.list_available_services(type_name)`), and the list walks every
    service's folder in its data path (400-odd `listdir` and `stat` calls, about 12 ms for each
    type of file: the model, the endpoint rules, boto3's resource model). `name in` asks the
    loader for that service's API versions (`list_api_versions`, which the load asks next
    anyway, cached), which finds the same folders the list would; anything else (iterating, the
    length: an `UnknownServiceError`'s message) reads the whole list, once.
    """

    def __init__(self, loader: Any, type_name: str, full_list: Callable[[str], list[str]]) -> None:
        self._loader = loader
        self._type_name = type_name
        self._full_list = full_list
        self._names: list[str] | None = None

    def __contains__(self, name: object) -> bool:
        from botocore.exceptions import DataNotFoundError

        # Only a folder's own name: the list never holds "", ".", "..", or a path.
        if not isinstance(name, str) or name in ("", ".", "..") or "/" in name or os.sep in name:
            return False
        # The list holds folders only (`list_api_versions` would also take a file of that name).
        if not any(os.path.isdir(os.path.join(path, name)) for path in self._loader.search_paths):
            return False
        try:
            self._loader.list_api_versions(name, self._type_name)
        except DataNotFoundError:
            return False
        except OSError:  # a file of that name in another search path: the list decides
            return name in self._all()
        return True

    def _all(self) -> list[str]:
        if self._names is None:
            self._names = self._full_list(self._type_name)
        return self._names

    @overload
    def __getitem__(self, index: int) -> str: ...

    @overload
    def __getitem__(self, index: slice) -> Sequence[str]: ...

    def __getitem__(self, index: int | slice) -> str | Sequence[str]:
        return self._all()[index]

    def __len__(self) -> int:
        return len(self._all())

    def __iter__(self) -> Iterator[str]:
        return iter(self._all())

    def __eq__(self, other: object) -> bool:
        return list(self._all()) == other

    def __repr__(self) -> str:
        return repr(self._all())


def look_up_services_by_name(loader: Any) -> None:
    """Make `loader.list_available_services` answer `in` without listing (`ServiceNames`); a
    loader without the methods this relies on (another botocore) is left as it is."""
    full_list = getattr(loader, "list_available_services", None)
    if full_list is None or not callable(getattr(loader, "list_api_versions", None)):
        return
    if getattr(full_list, "looks_up_by_name", False):
        return  # a loader shared by sessions (the tests'): already done
    lists: dict[str, ServiceNames] = {}

    def list_available_services(type_name: str) -> ServiceNames:
        if type_name not in lists:
            lists[type_name] = ServiceNames(loader, type_name, full_list)
        return lists[type_name]

    list_available_services.looks_up_by_name = True  # type: ignore[attr-defined]
    loader.list_available_services = list_available_services


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
