"""Record every AWS call a local function process makes, for the policy check (`local.policy_check`).

The local runtime sets `LOCAL_AWS_CALLS_FILE` in each function process's environment; the
function host (`local.lambda_host`) calls `install_from_environment()` before it loads the
handler. Without the variable nothing is registered and nothing else is imported, and the
Lambda code itself (`pipeline.aws`) knows nothing of this: it builds its clients from one
botocore session, made at its first client (after `install()`), and every botocore session created
after `install()` registers botocore's built-in handlers, to which this adds one on
`before-parameter-build` (once per API call, before retries; it sees the call's parameters, its
service model and the client's region).

Each call is one JSON line: the function, who made it (`handler`, or `lambda` for the event
source mapping's own receives and deletes, which Lambda makes with the function's role), the
IAM service, operation, and what IAM authorizes for it (`local.iam_requests`): identifiers
only, never parameter values such as message bodies or secret strings.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ENV_VAR = "LOCAL_AWS_CALLS_FILE"
HANDLER = "handler"
LAMBDA_SERVICE = "lambda"
# What only the local runtime does, standing in for a service that needs no role of the function
# in AWS (SNS delivering to a Lambda subscription): not recorded at all.
LOCAL_EMULATION = "local"

_recorder: Recorder | None = None
_caller = threading.local()


class Recorder:
    def __init__(self, path: Path, function: str, account: str) -> None:
        from local.iam_requests import authorizations

        self._authorizations = authorizations
        self.path = path
        self.function = function
        self.account = account
        self._lock = threading.Lock()
        path.parent.mkdir(parents=True, exist_ok=True)
        self._stream = path.open("a", encoding="utf-8", buffering=1)

    def on_call(self, params: Any, model: Any, context: Any = None, **_: Any) -> None:
        """botocore's `before-parameter-build` handler: never raises into the caller's call."""
        if getattr(_caller, "name", HANDLER) == LOCAL_EMULATION:
            return
        service = model.service_model.signing_name
        record: dict[str, Any] = {
            "function": self.function,
            "by": getattr(_caller, "name", HANDLER),
            "service": service,
            "operation": model.name,
        }
        try:
            region = (context or {}).get("client_region") or os.environ.get("AWS_REGION", "")
            record["authorizations"] = [
                {"action": a.action, "resource": a.resource}
                for a in self._authorizations(
                    service, model.name, params, region=region, account=self.account
                )
            ]
        except Exception as error:  # a derivation bug must show up in the check, not break the call
            record["error"] = f"{type(error).__name__}: {error}"
        with self._lock, contextlib.suppress(OSError, ValueError):
            self._stream.write(json.dumps(record) + "\n")


def install(path: Path, function: str, account: str) -> Recorder:
    """Record the calls of every botocore session created from now on (and boto3's default one)."""
    global _recorder
    if _recorder is not None:
        return _recorder
    from botocore import handlers

    recorder = Recorder(path, function, account)
    handlers.BUILTIN_HANDLERS.append(("before-parameter-build", recorder.on_call))
    # Not imported for this: a function that never loads boto3 (the webhook) must not get it from
    # its local host, which would then charge its init with what Lambda's never loads.
    boto3 = sys.modules.get("boto3")
    if boto3 is not None and boto3.DEFAULT_SESSION is not None:
        boto3.DEFAULT_SESSION.events.register("before-parameter-build", recorder.on_call)
    _recorder = recorder
    return recorder


def install_from_environment(account: str) -> Recorder | None:
    """`install()` when the local runtime asked for it (`LOCAL_AWS_CALLS_FILE`), else nothing.

    Calls are recorded under the function's Powertools service name, as the stack names it."""
    path = os.environ.get(ENV_VAR)
    if not path:
        return None
    return install(Path(path), os.environ.get("POWERTOOLS_SERVICE_NAME", Path(path).stem), account)


@contextlib.contextmanager
def _made_by(name: str) -> Iterator[None]:
    previous = getattr(_caller, "name", HANDLER)
    _caller.name = name
    try:
        yield
    finally:
        _caller.name = previous


def as_lambda_service() -> contextlib.AbstractContextManager[None]:
    """Calls made inside are the Lambda service's (the SQS event source mapping), not the handler's."""
    return _made_by(LAMBDA_SERVICE)


def as_local_emulation() -> contextlib.AbstractContextManager[None]:
    """Calls made inside stand in for what AWS does without the function's role: not recorded."""
    return _made_by(LOCAL_EMULATION)
