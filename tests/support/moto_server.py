"""A moto server that answers one request at a time, for tests that race conditional writes.

DynamoDB applies each conditional write atomically. moto's `ThreadedMotoServer` runs requests in
parallel without a lock, so two racing `PutItem ... attribute_not_exists(id)` or
`UpdateItem ... #state = :pending` writes could both pass the check in moto where only one can
in DynamoDB. Serving one request at a time restores that guarantee; the racers still run in
parallel and interleave between their requests.

In-process moto (`mock_aws`) is not thread-safe either, so racing tests point boto3 at this
server through `AWS_ENDPOINT_URL`, as the local runtime does.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from moto.core.base_backend import BackendDict
from moto.moto_server.werkzeug_app import DomainDispatcherApplication, MotoRequestHandler, create_backend_app
from werkzeug.serving import make_server


@contextmanager
def serialized_moto_server() -> Iterator[str]:
    """Run the server on a free loopback port; yield its endpoint URL; stop it and reset moto."""
    backend = DomainDispatcherApplication(create_backend_app)
    lock = threading.Lock()

    def one_at_a_time(environ: dict[str, Any], start_response: Any) -> list[bytes]:
        with lock:
            return list(backend(environ, start_response))

    server = make_server("127.0.0.1", 0, one_at_a_time, threaded=True, request_handler=MotoRequestHandler)
    thread = threading.Thread(target=server.serve_forever, name="serialized-moto", daemon=True)
    thread.start()
    host, port = server.server_address[:2]
    try:
        yield f"http://{host!s}:{port}"
    finally:
        server.shutdown()
        thread.join()
        server.server_close()
        BackendDict.reset()
