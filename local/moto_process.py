"""The moto server in its own process, so that moto's global state is never shared with a caller.

(A test process that also uses `mock_aws` resets moto's backends; a server in the same process
would lose every resource.) It reports its port on `--status-fd` and exits with its parent.
"""

from __future__ import annotations

import argparse
import functools
import logging
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from moto.moto_server.threaded_moto_server import ThreadedMotoServer
from moto.moto_server.werkzeug_app import DomainDispatcherApplication, MotoRequestHandler, create_backend_app
from werkzeug.serving import make_server

from local.lambda_host import EXIT_STOPPED, StatusChannel, Stopper, exit_now, quiet_interrupts
from local.moto_faults import FaultyAws
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


# The DynamoDB backend's writes that read an item, check it and write it in steps.
DYNAMODB_ITEM_WRITES = ("put_item", "update_item", "delete_item", "transact_write_items")


def make_dynamodb_item_writes_atomic() -> None:
    """Make each DynamoDB item write whole, as DynamoDB's are.

    moto 5.x reads an item, checks the condition and writes it in steps, and the threaded server
    runs requests side by side: two `UpdateItem`s of an item that does not exist yet each create it
    and the attributes of one are lost (`store` and `ai` write the same conversation item at the
    same moment), and two conditional writes can both pass their condition. One lock around the
    backend's item writes makes each a single step; reads do not wait.
    """
    from moto.dynamodb.models import DynamoDBBackend

    lock = threading.RLock()

    def locked(write: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(write)
        def write_alone(*args: Any, **kwargs: Any) -> Any:
            with lock:
                return write(*args, **kwargs)

        return write_alone

    for name in DYNAMODB_ITEM_WRITES:
        setattr(DynamoDBBackend, name, locked(getattr(DynamoDBBackend, name)))


def apply_patches() -> None:
    """Our corrections to moto, in this process (the server's; a test's in-process moto)."""
    check_retention_without_recounting()
    receive_as_sqs_does()
    make_dynamodb_item_writes_atomic()


class FaultyMotoServer(ThreadedMotoServer):
    """moto's threaded server with fault points at its door (`local.moto_faults`)."""

    def _server_entry(self) -> None:
        app = FaultyAws(DomainDispatcherApplication(create_backend_app))
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
        "--save-queues", type=Path, help="at stop, write every queue's messages here (local.snapshot)"
    )
    args = parser.parse_args(argv)
    # One line per request (workers long-poll all the time) would drown the log.
    logging.getLogger("werkzeug").setLevel(logging.WARNING)
    apply_patches()
    stopper = Stopper()
    status = StatusChannel(args.status_fd)
    server = FaultyMotoServer(ip_address=args.host, port=args.port, verbose=False)
    server.start()
    status.send("listening", port=server.get_host_and_port()[1])
    while not stopper.wait(0.5):
        pass
    if args.save_queues is not None:
        from local.snapshot import save_queues

        print(f"saved {save_queues(args.save_queues)} messages to {args.save_queues}", flush=True)
    server.stop()
    return EXIT_STOPPED


if __name__ == "__main__":
    with quiet_interrupts():
        exit_now(main())
