"""Faults of the outgoing webhooks the CRM stand-ins post (`bitrix24`, `amocrm`): lost and delayed.

The change a webhook reports always happens (the portal's history records it); these faults
decide only what becomes of the webhook about it:

- `{"lose_next_webhooks": N}`: the next N webhooks are never posted; each one's `Delivery` has
  `fate: "lost"` (no status, and an error saying so);
- `{"delay_next_webhooks": N, "seconds": S}`: the next N are held and posted S seconds later
  (default 30) by a background timer; each one's `Delivery` has `fate: "held"` and a `held_id`,
  and once it is posted the pipeline's answer is in `released` (`GET /_webhook_faults`).
  `POST /_webhook_faults/flush` posts every held webhook now, in the order they were held.

Faults are used in the order they were added (one body's keys in the order written): after
`{"lose_next_webhooks": 1, "delay_next_webhooks": 2}` the next webhook is lost and the two after
it held. Every posted webhook counts, a resent one (`resend_last`) too. Held webhooks still
pending when the stand-in stops are never posted.

Each stand-in's control routes (JSON bodies; a body it cannot follow is 400 with the reason):

    POST   /_webhook_faults {"lose_next_webhooks": N, "delay_next_webhooks": N, "seconds": S} -> state
    GET    /_webhook_faults        -> {"pending": [...], "held": [...], "released": [...], "lost": [...]}
    DELETE /_webhook_faults        -> state, the pending faults forgotten (held webhooks stay held)
    POST   /_webhook_faults/flush  -> {"released": [delivery, ...]}: the held ones, posted now
"""

from __future__ import annotations

import itertools
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from typing import Any, Literal, Protocol, TypeVar

DEFAULT_DELAY_SECONDS = 30.0
MAX_DELAY_SECONDS = 3600.0
MAX_REMEMBERED = 100  # released and lost deliveries kept for `GET /_webhook_faults`
KEYS = ("lose_next_webhooks", "delay_next_webhooks", "seconds")

Post = Callable[[str, str, Mapping[str, str]], tuple[int | None, Any, str | None]]


class Delivered(Protocol):
    def as_dict(self) -> dict[str, Any]: ...


D = TypeVar("D", bound=Delivered)


@dataclass
class WebhookFault:
    """One pending fault: applies to the next `remaining` webhooks."""

    kind: Literal["lose", "delay"]
    remaining: int
    seconds: float = 0.0


@dataclass
class _Held:
    held_id: int
    url: str
    payload: str
    headers: dict[str, str]
    build: Callable[..., Delivered]
    due: float  # time.monotonic() when the timer posts it
    timer: threading.Timer


def parse_webhook_faults(document: Any) -> list[WebhookFault]:
    """The faults a `POST /_webhook_faults` body asks for; ValueError saying why it cannot."""
    if not isinstance(document, dict) or not document:
        raise ValueError(
            'expected a JSON object such as {"lose_next_webhooks": 1} or '
            '{"delay_next_webhooks": 1, "seconds": 30}'
        )
    unknown = set(document) - set(KEYS)
    if unknown:
        raise ValueError(f"unknown keys {sorted(unknown)}; known: {list(KEYS)}")
    if "seconds" in document and "delay_next_webhooks" not in document:
        raise ValueError("seconds goes with delay_next_webhooks")
    seconds = DEFAULT_DELAY_SECONDS
    if "seconds" in document:
        value = document["seconds"]
        number = isinstance(value, int | float) and not isinstance(value, bool)
        if not number or not 0 < value <= MAX_DELAY_SECONDS:
            raise ValueError(f"seconds must be a number > 0 and <= {MAX_DELAY_SECONDS:g}")
        seconds = float(value)
    faults = []
    for key in document:
        if key == "seconds":
            continue
        count = document[key]
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise ValueError(f"{key} must be an integer >= 1")
        if key == "lose_next_webhooks":
            faults.append(WebhookFault("lose", count))
        else:
            faults.append(WebhookFault("delay", count, seconds))
    return faults


class WebhookFaults:
    """The pending faults, the held webhooks and what became of them, for one stand-in."""

    def __init__(self, post: Post) -> None:
        self._post = post
        self._lock = threading.Lock()
        self._faults: list[WebhookFault] = []
        self._held: dict[int, _Held] = {}
        self._held_ids = itertools.count(1)
        self._released: deque[dict[str, Any]] = deque(maxlen=MAX_REMEMBERED)
        self._lost: deque[dict[str, Any]] = deque(maxlen=MAX_REMEMBERED)

    # -- control ---------------------------------------------------------------------------------
    def add(self, document: Any) -> dict[str, Any]:
        faults = parse_webhook_faults(document)
        with self._lock:
            self._faults.extend(faults)
        return self.state()

    def clear(self) -> dict[str, Any]:
        """Forget the pending faults; held webhooks stay held (flush posts them)."""
        with self._lock:
            self._faults.clear()
        return self.state()

    def state(self) -> dict[str, Any]:
        now = time.monotonic()
        with self._lock:
            return {
                "pending": [asdict(fault) for fault in self._faults],
                "held": [
                    {
                        "held_id": held.held_id,
                        "due_in": round(max(0.0, held.due - now), 1),
                        "payload": held.payload,
                    }
                    for held in sorted(self._held.values(), key=lambda held: held.held_id)
                ],
                "released": list(self._released),
                "lost": list(self._lost),
            }

    def flush(self) -> list[dict[str, Any]]:
        """Post every held webhook now, in the order they were held; their deliveries."""
        with self._lock:
            held = [self._held.pop(held_id) for held_id in sorted(self._held)]
        for item in held:
            item.timer.cancel()
        return [self._post_held(item) for item in held]

    def stop(self) -> None:
        """The stand-in stops: held webhooks are never posted."""
        with self._lock:
            held, self._held = list(self._held.values()), {}
        for item in held:
            item.timer.cancel()

    # -- sending ---------------------------------------------------------------------------------
    def send(self, url: str, payload: str, headers: Mapping[str, str], build: Callable[..., D]) -> D:
        """Post one webhook, unless a fault loses or holds it.

        `build(status, body, error, fate=..., held_id=...)` makes the stand-in's `Delivery`.
        """
        fault = self._take()
        if fault is None:
            status, body, error = self._post(url, payload, headers)
            return build(status, body, error)
        if fault.kind == "lose":
            lost = build(
                None, None, "lost: the change was made but this webhook was never posted", fate="lost"
            )
            with self._lock:
                self._lost.append(lost.as_dict())
            return lost
        with self._lock:
            held_id = next(self._held_ids)
            timer = threading.Timer(fault.seconds, self._release, args=(held_id,))
            timer.daemon = True
            self._held[held_id] = _Held(
                held_id, url, payload, dict(headers), build, time.monotonic() + fault.seconds, timer
            )
            timer.start()
        return build(
            None,
            None,
            f"held: to be posted in {fault.seconds:g} s (see released in GET /_webhook_faults)",
            fate="held",
            held_id=held_id,
        )

    def _take(self) -> WebhookFault | None:
        with self._lock:
            if not self._faults:
                return None
            fault = self._faults[0]
            fault.remaining -= 1
            if fault.remaining <= 0:
                self._faults.pop(0)
            return WebhookFault(fault.kind, 1, fault.seconds)

    def _release(self, held_id: int) -> None:
        """The timer's: post the held webhook, unless flush (or stop) took it first."""
        with self._lock:
            held = self._held.pop(held_id, None)
        if held is not None:
            self._post_held(held)

    def _post_held(self, held: _Held) -> dict[str, Any]:
        status, body, error = self._post(held.url, held.payload, held.headers)
        delivery = held.build(status, body, error, fate="released", held_id=held.held_id).as_dict()
        with self._lock:
            self._released.append(delivery)
        return delivery
