"""State that outlives a restart of the local runtime (`python -m local --persist`).

moto keeps everything in memory and has no persistence of its own. With `persist`, at a clean
stop (and at a whole-pipeline restart) the runtime, once the functions have stopped and while moto
still runs, asks the moto process to save (`POST /_local_save_state` on moto's port): it writes
every queue's messages (`queues.json`, from moto's SQS model, so the in-flight and delayed ones
too) and every table's items (`tables.json`, from moto's DynamoDB model, in DynamoDB's JSON form)
to `<state dir>/persisted/`, and answers with the counts only once both files are written. Only
then is moto stopped: a save is confirmed, never left to a process that may be killed before it
finishes (a long campaign's tables outlast the stop's grace). The next start with `persist`
creates the resources as always, sends the messages back through the SQS API and asks the moto
process to put the items back through its model (`POST /_local_restore_tables`), which counts the
tables afterwards and fails the start when they do not hold what was saved. Not the API page by
page: a scan of a long campaign's journal and writes of 25 items a call paused every restart for
minutes (155 s at 100,000 items). So "break, fix, redrive" can be rehearsed across restarts: a
DLQ's messages, with their `dead_letter_reason`, and the journal's records are there.

What does not survive (said in local/README.md): a message comes back visible at once, as new
(in flight or delayed before: visible now; its receive count starts at 0; string and number
attributes only); secrets are the local values again (a rotated one is not kept); the fakes'
recorded calls; anything since the last clean stop when the runtime is killed (SIGKILL). A
snapshot is kept until the next clean stop with `persist` replaces it; a run without `persist`
neither reads nor writes it.
"""

from __future__ import annotations

import base64
import json
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

STATE_DIR = "persisted"
QUEUES_FILE = "queues.json"
TABLES_FILE = "tables.json"
# Where the runtime asks the moto process to save, and to put the saved items back (`PersistDoor`).
SAVE_STATE_PATH = "/_local_save_state"
RESTORE_TABLES_PATH = "/_local_restore_tables"
# A snapshot written before the items were saved from moto's model held binary values so.
_BINARY = "__base64__"
SQS_BATCH = 10

StartResponse = Callable[..., Any]


class SnapshotError(RuntimeError):
    """The state was not saved or not put back (the moto process's reason)."""


def write_json(path: Path, document: Any) -> None:
    """Atomically: a stop interrupted half-way never leaves half a snapshot."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_suffix(".json.tmp")
    temporary.write_text(json.dumps(document, default=_base64) + "\n", encoding="utf-8")
    temporary.replace(path)


def _base64(value: Any) -> str:
    """A binary value as DynamoDB's JSON form writes it (moto holds some as bytes)."""
    if isinstance(value, bytes | bytearray):
        return base64.b64encode(bytes(value)).decode("ascii")
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")


# -- saving (in the moto process, asked by the runtime before it stops moto) -----------------------
def save_state(directory: Path) -> dict[str, int]:
    """Every queue's messages and every table's items, to `directory`; how many of each."""
    return {
        "messages": save_queues(directory / QUEUES_FILE),
        "items": save_tables(directory / TABLES_FILE),
    }


def save_queues(path: Path) -> int:
    """Every queue's messages from moto's SQS model; how many."""
    from moto.sqs.models import sqs_backends

    queues: dict[str, list[dict[str, Any]]] = {}
    for regions in sqs_backends.values():
        for backend in regions.values():
            for name, queue in backend.queues.items():
                messages = [_message(message) for message in list(queue._messages)]
                if messages:
                    queues.setdefault(name, []).extend(messages)
    write_json(path, queues)
    return sum(len(messages) for messages in queues.values())


def _message(message: Any) -> dict[str, Any]:
    attributes = {
        name: {"DataType": value["DataType"], "StringValue": value["StringValue"]}
        for name, value in message.message_attributes.items()
        if value.get("StringValue") is not None
    }
    return {
        "body": message.body,
        "attributes": attributes,
        "group_id": message.group_id,
        "deduplication_id": message.deduplication_id,
    }


def save_tables(path: Path) -> int:
    """Every table's items from moto's DynamoDB model, in DynamoDB's JSON form; how many."""
    from moto.dynamodb.models import dynamodb_backends

    tables: dict[str, list[dict[str, Any]]] = {}
    for regions in dynamodb_backends.values():
        for backend in regions.values():
            for name, table in list(backend.tables.items()):
                items = [item.to_json()["Attributes"] for item in table.all_items()]
                if items:
                    tables.setdefault(name, []).extend(items)
    write_json(path, tables)
    return sum(len(items) for items in tables.values())


# -- restoring -------------------------------------------------------------------------------------
def restore(
    client: Callable[[str], Any], directory: Path, put_items_back: Callable[[], str] | None = None
) -> str:
    """Send the saved messages and put the saved items back (the resources exist); what it did.

    `put_items_back` asks the moto process to do it (`PersistDoor`); without it, moto is in
    this process (a test's) and `restore_tables` runs here."""
    queues_file, tables_file = directory / QUEUES_FILE, directory / TABLES_FILE
    if not queues_file.is_file() and not tables_file.is_file():
        return f"persist: no saved state in {directory} yet; it is written at stop"
    said = []
    if queues_file.is_file():
        queues = json.loads(queues_file.read_text(encoding="utf-8"))
        said.append(_restore_queues(client("sqs"), queues))
    if tables_file.is_file():
        said.append(put_items_back() if put_items_back is not None else restore_tables(tables_file))
    return f"persist: restored from {directory}: " + "; ".join(said)


def _restore_queues(sqs: Any, queues: dict[str, list[dict[str, Any]]]) -> str:
    restored, skipped = 0, []
    for name, messages in queues.items():
        try:
            url = sqs.get_queue_url(QueueName=name)["QueueUrl"]
        except sqs.exceptions.QueueDoesNotExist:
            skipped.append(name)  # its consumer is off in this run
            continue
        for start in range(0, len(messages), SQS_BATCH):
            chunk = messages[start : start + SQS_BATCH]
            entries = [_entry(str(i), message) for i, message in enumerate(chunk)]
            response = sqs.send_message_batch(QueueUrl=url, Entries=entries)
            if response.get("Failed"):
                codes = sorted({failure.get("Code", "?") for failure in response["Failed"]})
                failed = len(response["Failed"])
                raise RuntimeError(f"persist: could not restore {failed} messages to {name}: {codes}")
            restored += len(entries)
    note = f" (skipped queues not in this run: {', '.join(skipped)})" if skipped else ""
    return f"{restored} messages in {len(queues) - len(skipped)} queues{note}"


def _entry(identifier: str, message: dict[str, Any]) -> dict[str, Any]:
    entry: dict[str, Any] = {"Id": identifier, "MessageBody": message["body"]}
    if message["attributes"]:
        entry["MessageAttributes"] = message["attributes"]
    if message.get("group_id"):
        entry["MessageGroupId"] = message["group_id"]
    if message.get("deduplication_id"):
        entry["MessageDeduplicationId"] = message["deduplication_id"]
    return entry


def restore_tables(path: Path) -> str:
    """In the process moto runs in: each saved item put into its table through moto's model (the
    tables exist: the runtime made them); what it did."""
    from moto.dynamodb.models import dynamodb_backends

    saved = json.loads(path.read_text(encoding="utf-8"), object_hook=_binary_as_base64)
    backends = {
        name: backend
        for regions in dynamodb_backends.values()
        for backend in regions.values()
        for name in list(backend.tables)
    }
    restored, skipped = 0, []
    for table, items in saved.items():
        backend = backends.get(table)
        if backend is None:
            skipped.append(table)
            continue
        for item in items:
            backend.put_item(table, item)
        held = len(backend.get_table(table))
        if held != len(items):  # the tables were made empty: each saved item is one key
            raise RuntimeError(f"persist: {table} holds {held} items after restoring {len(items)} saved ones")
        restored += len(items)
    note = f" (skipped tables not in this run: {', '.join(skipped)})" if skipped else ""
    return f"{restored} items in {len(saved) - len(skipped)} tables{note}"


def _binary_as_base64(document: dict[str, Any]) -> Any:
    """An older snapshot's binary value (`{"__base64__": ...}`) as DynamoDB's JSON form has it."""
    return document[_BINARY] if set(document) == {_BINARY} else document


class PersistDoor:
    """A WSGI application: `app`, and two doors for the runtime when the moto process persists to
    `directory`: `POST /_local_save_state` (`save_state`, answered `{"messages": n, "items": m}`
    once written) and `POST /_local_restore_tables` (`restore_tables`, answered `{"said": ...}`)."""

    def __init__(
        self, app: Callable[[dict[str, Any], StartResponse], Iterable[bytes]], directory: Path | None
    ) -> None:
        self.app = app
        self.directory = directory

    def __call__(self, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        path = environ.get("PATH_INFO")
        if path not in (SAVE_STATE_PATH, RESTORE_TABLES_PATH):
            return self.app(environ, start_response)
        if environ.get("REQUEST_METHOD") != "POST":
            return _json(start_response, 405, {"error": f"POST {path}"})
        if self.directory is None:
            return _json(
                start_response, 404, {"error": "this moto process persists nothing (no --persist-dir)"}
            )
        try:
            if path == SAVE_STATE_PATH:
                return _json(start_response, 200, save_state(self.directory))
            tables_file = self.directory / TABLES_FILE
            if not tables_file.is_file():
                return _json(start_response, 200, {"said": f"no items saved in {tables_file}"})
            return _json(start_response, 200, {"said": restore_tables(tables_file)})
        except Exception as error:  # answered, so that the runtime's stop or start says the reason
            return _json(start_response, 500, {"error": f"{type(error).__name__}: {error}"})


def ask_moto(endpoint: str, path: str, timeout: float) -> dict[str, Any]:
    """In the runtime: POST one of the moto process's doors (`PersistDoor`); its answer. Raises
    `SnapshotError` unless it answered that it did it (a big table takes seconds: `timeout`)."""
    request = urllib.request.Request(f"{endpoint}{path}", method="POST")  # noqa: S310 - loopback
    try:
        with urllib.request.urlopen(request, timeout=timeout) as answer:  # noqa: S310 - loopback
            document: dict[str, Any] = json.loads(answer.read())
            return document
    except urllib.error.HTTPError as error:
        raise SnapshotError(f"persist: {path} failed: {error.read().decode()}") from error
    except (OSError, ValueError) as error:
        raise SnapshotError(f"persist: {path} failed: {type(error).__name__}: {error}") from error


def _json(start_response: StartResponse, status: int, document: dict[str, Any]) -> list[bytes]:
    body = json.dumps(document).encode()
    reason = {200: "OK", 404: "Not Found", 405: "Method Not Allowed", 500: "Internal Server Error"}[status]
    start_response(
        f"{status} {reason}", [("Content-Type", "application/json"), ("Content-Length", str(len(body)))]
    )
    return [body]
