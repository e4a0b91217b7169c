"""The campaign's faults at the edges, where the pipeline meets vendors misbehaving as a whole.

Planned in `local.chaos.workload` (seeded, with the other faults), played here against the
stand-ins' switches (`local.fakes.accounts`, `local.fakes.crm_access`) and moto's Secrets Manager,
as a vendor and an operator would:

- `account_blocked`: a vendor refuses the whole account for seconds, then works again;
- `token_rotated`: the vendor takes a new credential (amoCRM's token, a Bitrix24 webhook code, the
  bot token), the old one is refused (401) from then on, and `gap` seconds later the operator
  puts the new value in the consumer's secret: calls with the cached old value are refused, re-read
  the secret past the cache and go on (`pipeline.secrets`); meanwhile they pause, never dead-letter;
- `bot_token_revoked`: the bot token revoked in @BotFather (every Bot API call 401) for seconds,
  then a new one issued: the stand-in takes it, the operator puts it, the chats resume;
- `deal_hidden`: the deal or lead of the portal moved last (its look likely still on its way), which
  the integration's user may no longer read, for seconds (the CRM's list methods leave its
  history out, reading it is refused): a look meanwhile is counted
  and named (`CrmOrdersHidden`, a warning naming the order), and once visible its moves are read
  again (the sweep's overlap, or the deal's next move) and texted;
- `portal_outage`: a portal's API down and its webhooks lost for `periods` of the catch-up sweep's
  period (so longer than one run's window, measured on the runtime's sweep schedule; the campaign
  goes on meanwhile): the moves made then reach the pipeline only through the sweep, which fails
  while the API is down and catches up after, page by page from its saved cursor.

A rotated secret is the world's: a restart of the whole pipeline (`restart_runtime`), which makes
the secrets again with their local values, is followed by the operator's values put back.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable
from typing import Any

from local.chaos.checks import Sent
from local.chaos.portals import NOUNS
from local.chaos.workload import Step
from local.resources import LOCAL_SECRET_VALUES

KINDS = frozenset({"account_blocked", "token_rotated", "bot_token_revoked", "deal_hidden", "portal_outage"})
# Per vendor (`local.chaos.workload.ROTATED_VENDORS`): the consumers' secret its credential is
# in, and the local setting holding it.
CREDENTIALS: dict[str, tuple[str, str]] = {
    "amocrm": ("amocrm_api", "amocrm_token"),
    "bitrix24": ("bitrix24_api", "bitrix24_webhook_code"),
    "telegram": ("telegram_bot_token", "telegram_bot_token"),
}
# Lost webhooks while a portal is down: more than it posts meanwhile.
OUTAGE_LOST_WEBHOOKS = 1_000


class EdgeFaults:
    """Plays the edge faults on a running campaign's runtime; `finish` ends what is still on."""

    def __init__(
        self,
        runtime: Callable[[], Any],
        pipeline_down: threading.Lock,
        sent: Sent,
        errors: list[str],
    ) -> None:
        self._runtime = runtime
        self._pipeline_down = pipeline_down
        self._sent = sent
        self._errors = errors
        self._lock = threading.Lock()
        self._pending: list[tuple[threading.Timer, Callable[[], None]]] = []
        self._hidden: dict[str, set[int]] = {}
        # The operator's secret values (logical name -> value), put back after a restart.
        self.secrets: dict[str, str] = {}

    def inject(self, step: Step) -> None:
        args = step.args
        fakes = self._runtime().fakes
        if step.kind == "account_blocked":
            switch = fakes[args["vendor"]].account
            switch.block(args["cause"])
            self._later(args["seconds"], switch.unblock)
        elif step.kind == "token_rotated":
            put = self._rotate(args["vendor"], args["value"])
            self._later(args["gap"], put)
        elif step.kind == "bot_token_revoked":
            switch = fakes["telegram"].account
            switch.block("revoked")

            def issued() -> None:
                put = self._rotate("telegram", args["value"])
                switch.unblock()
                put()

            self._later(args["seconds"], issued)
        elif step.kind == "deal_hidden":
            self._hide(args["portal"], args["pick"], args["seconds"])
        elif step.kind == "portal_outage":
            runtime = self._runtime()
            fake = fakes[args["portal"]]
            seconds = args["periods"] * runtime.settings.crm_sweep_every_seconds
            fake.webhook_faults.add({"lose_next_webhooks": OUTAGE_LOST_WEBHOOKS})
            fake.go_down(seconds)

            def over() -> None:
                fake.come_back()
                fake.webhook_faults.clear()

            self._later(seconds, over)

    def _later(self, seconds: float, action: Callable[[], None]) -> None:
        done = threading.Event()

        def once() -> None:
            if done.is_set():
                return
            done.set()
            try:
                action()
            except Exception as error:  # shown in the report; the campaign goes on
                self._errors.append(f"edge fault: {type(error).__name__}: {error}")

        timer = threading.Timer(seconds, once)
        timer.daemon = True
        with self._lock:
            self._pending.append((timer, once))
        timer.start()

    def finish(self) -> None:
        """Everything still on ends now (the faults are cleared): accounts work, a revoked bot token
        is replaced, the operator's secrets are put, hidden orders are visible, portals are up."""
        with self._lock:
            pending, self._pending = self._pending, []
        for timer, action in pending:
            timer.cancel()
            action()
        runtime = self._runtime()
        for portal in self._hidden:
            runtime.fakes[portal].access.show_all()
        self._hidden.clear()

    # -- credentials ------------------------------------------------------------------------------------
    def _rotate(self, vendor: str, value: str) -> Callable[[], None]:
        """The vendor takes a new credential now; returns the operator's put of it in the secret."""
        runtime = self._runtime()
        fake = runtime.fakes[vendor]
        credential = f"{fake.bot_id}:{value}" if vendor == "telegram" else value
        name, setting = CREDENTIALS[vendor]
        settings = dataclasses.replace(runtime.settings, **{setting: credential})
        secret = LOCAL_SECRET_VALUES[name](settings, runtime.fake_urls())
        fake.account.rotate(credential)
        return lambda: self.put_secret(name, secret)

    def put_secret(self, name: str, value: str) -> None:
        """`aws secretsmanager put-secret-value`, as the operator does (waits out a restart)."""
        with self._lock:
            self.secrets[name] = value
        with self._pipeline_down:
            runtime = self._runtime()
            runtime.client("secretsmanager").put_secret_value(
                SecretId=runtime.resources.secrets[name], SecretString=value
            )

    def restore_secrets(self) -> None:
        """After a restart of the pipeline (secrets made again with local values): the operator's
        values, which a real deployment's Secrets Manager keeps."""
        with self._lock:
            values = dict(self.secrets)
        for name, value in values.items():
            self.put_secret(name, value)

    # -- permissions ------------------------------------------------------------------------------------
    def _hide(self, portal: str, pick: int, seconds: float) -> None:
        """The portal's deal moved last (else one `pick`s) hidden from the integration's user for
        `seconds`."""
        ids = self._sent.portal_ids
        moved = [  # in the order they were sent (a lane may still be making the newest)
            step.args["deal"]
            for step in list(self._sent.steps.values())
            if step.kind == "portal_move" and step.args["portal"] == portal and step.args["deal"] in ids
        ]
        made = sorted(number for key, number in list(ids.items()) if key.startswith(portal[0]))
        if not made:
            return  # no deal made yet in that portal: nothing to hide
        order_id = ids[moved[-1]] if moved else made[pick % len(made)]
        fake = self._runtime().fakes[portal]
        with self._lock:
            self._hidden.setdefault(portal, set()).add(order_id)
            self._sent.hidden.add(f"{portal} {NOUNS[portal]} {order_id}")
            fake.access.control("POST", {"hidden_orders": sorted(self._hidden[portal])})

        def shown() -> None:
            with self._lock:
                self._hidden.get(portal, set()).discard(order_id)
                fake.access.control("POST", {"hidden_orders": sorted(self._hidden.get(portal, ()))})

        self._later(seconds, shown)
