"""The moto server in its own process, so that moto's global state is never shared with a caller.

(A test process that also uses `mock_aws` resets moto's backends; a server in the same process
would lose every resource.) It reports its port on `--status-fd` and exits with its parent.
"""

from __future__ import annotations

import argparse
import functools
import logging
from pathlib import Path
from typing import Any

from moto.moto_server.threaded_moto_server import ThreadedMotoServer
from moto.moto_server.werkzeug_app import DomainDispatcherApplication, MotoRequestHandler, create_backend_app
from werkzeug.serving import make_server

from local.lambda_host import EXIT_STOPPED, StatusChannel, Stopper, exit_now, quiet_interrupts
from local.moto_dynamodb import make_dynamodb_item_writes_atomic, query_without_sorting_the_table
from local.moto_faults import FaultyAws
from local.snapshot import PersistDoor
from local.sqs_receive import receive_as_sqs_does


def check_retention_without_recounting() -> None:
    """Make moto's SQS receive cost independent of the queue's length (same behaviour).

    moto 5.x checks each message it receives against the queue's retention period through
    `get_queue_attributes`, which recounts every message of the queue (visible, in flight,
    delayed) several times: a receive of 10 messages from a queue of a few hundred takes 100+ ms,
    and a burst slows the whole pipeline down. This reads the one attribute the check needs.
    """
    from moto.core.utils import unix_time
    from moto.sqs.models import Message, SQSBackend

    def is_message_valid_based_on_retention_period(
        self: SQSBackend, queue_name: str, message: Message
    ) -> bool:
        retention_seconds = int(self.get_queue(queue_name).message_retention_period)  # type: ignore[attr-defined]
        return bool(retention_seconds + (message.sent_timestamp or 0) / 1000 > unix_time())

    SQSBackend.is_message_valid_based_on_retention_period = is_message_valid_based_on_retention_period  # type: ignore[method-assign]


def route_each_host_once() -> None:
    """Remember which backend serves each host, instead of finding it again for every request.

    moto's server looks a request's host up among its backends by listing moto's package directory
    (`os.listdir` and `isdir` on some 150 entries) and then matching hundreds of URL patterns,
    under a lock every request takes: a tenth of the server's CPU in a campaign. The answer for a
    host never changes while the server runs.
    """
    find = DomainDispatcherApplication.get_backend_for_host
    if getattr(find, "cached", False):
        return
    backends: dict[str | None, Any] = {}

    @functools.wraps(find)
    def find_once(self: DomainDispatcherApplication, host: str | None) -> Any:
        if host not in backends:
            backends[host] = find(self, host)
        return backends[host]

    find_once.cached = True  # type: ignore[attr-defined]
    DomainDispatcherApplication.get_backend_for_host = find_once  # type: ignore[method-assign]


def list_response_methods_once() -> None:
    """Remember each response class's method names, instead of listing them for every request.

    moto's `BaseResponse.call_action` lists the class's functions with `inspect.getmembers` (some
    hundreds of attributes) to see whether the request's action is one of them: 4% of the server's
    CPU in a broadcast to 10,000 chats. A class's functions never change while the server runs.
    """
    from moto.core import responses

    names = responses.method_names_from_class
    if getattr(names, "cached", False):
        return
    remembered = functools.cache(names)
    remembered.cached = True  # type: ignore[attr-defined]
    responses.method_names_from_class = remembered


def apply_patches() -> None:
    """Our corrections to moto, in this process (the server's; a test's in-process moto)."""
    check_retention_without_recounting()
    receive_as_sqs_does()
    make_dynamodb_item_writes_atomic()
    query_without_sorting_the_table()
    route_each_host_once()
    list_response_methods_once()


class FaultyMotoServer(ThreadedMotoServer):
    """moto's threaded server with fault points at its door (`local.moto_faults`) and, with a
    persist directory, the doors that save the state and put saved items back (`local.snapshot`)."""

    persist_dir: Path | None = None

    def _server_entry(self) -> None:
        app = FaultyAws(PersistDoor(DomainDispatcherApplication(create_backend_app), self.persist_dir))
        self._server = make_server(
            self._ip_address, self._port, app, True, request_handler=MotoRequestHandler
        )
        self._server_ready_event.set()
        self._server.serve_forever()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m local.moto_process")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--status-fd", type=int)
    parser.add_argument(
        "--persist-dir",
        type=Path,
        help="on the runtime's request, save every queue's messages and table's items here (local.snapshot)",
    )
    args = parser.parse_args(argv)
    # One line per request (workers long-poll all the time) would drown the log.
    logging.getLogger("werkzeug").setLevel(logging.WARNING)
    apply_patches()
    stopper = Stopper()
    status = StatusChannel(args.status_fd)
    server = FaultyMotoServer(ip_address=args.host, port=args.port, verbose=False)
    if args.persist_dir is not None:
        server.persist_dir = args.persist_dir
    server.start()
    status.send("listening", port=server.get_host_and_port()[1])
    while not stopper.wait(0.5):
        pass
    server.stop()
    return EXIT_STOPPED


if __name__ == "__main__":
    with quiet_interrupts():
        exit_now(main())
