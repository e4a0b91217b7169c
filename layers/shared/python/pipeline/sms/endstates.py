"""Why a `pending` notification is not sent now: it ends unsent, or it waits (quiet hours).

Checked at send time, just before a worker or the reconciler claims the record (`hold`), so a
redrive days later, a catch-up sweep and an orphan are judged alike:

- `superseded`: the order entered a newer status since (its entry's move no longer opens the
  order's current entry): the customer would read an old status after the new one;
- `expired`: older than its rule's maximum age (`pipeline.sms.rules`; by default the one SMS age
  setting, SMS_MAX_AGE_SECONDS, measured from the CRM's move): "ready for pickup" for an order
  collected days ago;
- `suppressed`: the number is on the suppression list (an inbound STOP, `ops sms opt-out`), or
  End User Messaging refused it as opted out (`ConflictException`
  `DESTINATION_PHONE_NUMBER_OPTED_OUT`, its own opt-out list, `pipeline.sms.service`);
- quiet hours (off by default): a status listed in `SMS_QUIET_STATUSES` inside the recipient's
  local `SMS_QUIET_HOURS` waits until the window ends, durably: the worker hands its message
  back to the queue (`HandedBack`, SQS delays of at most 900 s, again until the end), never a
  sleeping function; the reconciler leaves it alone meanwhile.

Each ending is a journal state of its own, counted (`SmsSuppressed`, `SmsExpired`,
`SmsSuperseded`): an outcome, never retried, never dead-lettered, kept for the retention.

The suppression list is `pipeline.sms.suppression` (one journal item per number, no TTL); the
functions here take the journal.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from pipeline.observability import mask_phone
from pipeline.sms import suppression
from pipeline.sms.journal import Journal, Notification, State
from pipeline.sms.rules import SmsRules, max_age
from pipeline.sms.settings import SmsSettings

# End User Messaging's `TimeToLive` bounds (seconds).
TTL_MIN_SECONDS, TTL_MAX_SECONDS = 5, 259_200
# Hours between UTC and local (standard) time by the number's country calling code, longest prefix
# first. Daylight saving time is not modelled: in summer the window of such a country is one
# hour early. A number of a code not here has no quiet hours (sent at once).
UTC_OFFSET_HOURS: dict[str, float] = {
    "+1": -5,  # USA/Canada: Eastern
    "+7": 3,  # Russia: Moscow
    "+76": 5,  # Kazakhstan
    "+77": 5,  # Kazakhstan
    "+30": 2,
    "+31": 1,
    "+32": 1,
    "+33": 1,
    "+34": 1,
    "+36": 1,
    "+39": 1,
    "+40": 2,
    "+41": 1,
    "+43": 1,
    "+44": 0,
    "+45": 1,
    "+46": 1,
    "+47": 1,
    "+48": 1,
    "+49": 1,
    "+351": 0,
    "+353": 0,
    "+358": 2,
    "+370": 2,
    "+371": 2,
    "+372": 2,
    "+373": 2,
    "+374": 4,
    "+375": 3,
    "+380": 2,
    "+420": 1,
    "+90": 3,
    "+994": 4,
    "+995": 4,
    "+996": 6,
    "+998": 5,
}
CLOSING_METRICS = {
    State.SUPPRESSED: "SmsSuppressed",
    State.EXPIRED: "SmsExpired",
    State.SUPERSEDED: "SmsSuperseded",
}
QUIET_METRIC = "SmsQuietHoursDelayed"


# -- the suppression list (`pipeline.sms.suppression`) ---------------------------------------------
suppression_id = suppression.suppression_id


def opted_out(journal: Journal, phone: str) -> bool:
    return suppression.opted_out(journal.table, phone)


def opt_out(journal: Journal, phone: str, *, by: str) -> bool:
    """Put the number on the list; False if it was on it already."""
    return suppression.opt_out(journal.table, phone, by=by, now=journal.clock.now())


def opt_in(journal: Journal, phone: str) -> bool:
    """Take the number off the list; False if it was not on it."""
    return suppression.opt_in(journal.table, phone)


# -- age ----------------------------------------------------------------------------------------
def time_to_live(rules: SmsRules, record: Notification, now: datetime) -> int | None:
    """Seconds the notification may still be delivered in (End User Messaging's `TimeToLive`)."""
    if record.occurred_at is None:
        return None
    left = (record.occurred_at + rules.max_age(record.rule, max_age()) - now).total_seconds()
    return int(min(TTL_MAX_SECONDS, max(TTL_MIN_SECONDS, left)))


# -- quiet hours ----------------------------------------------------------------------------------
def utc_offset(phone: str) -> timedelta | None:
    for length in (4, 3, 2):
        hours = UTC_OFFSET_HOURS.get(phone[:length])
        if hours is not None:
            return timedelta(hours=hours)
    return None


def quiet_wait(settings: SmsSettings, status: str | None, phone: str, now: datetime) -> int | None:
    """Seconds until the recipient's quiet hours end, when `status` waits for them; else None."""
    window = settings.quiet_window
    if window is None or status not in settings.quiet_status_set:
        return None
    offset = utc_offset(phone)
    if offset is None:
        return None
    start, end = window
    local = now + offset
    minute = local.hour * 60 + local.minute
    inside = start <= minute < end if start < end else minute >= start or minute < end
    if not inside:
        return None
    wait = (end - minute) % (24 * 60)
    ends = local.replace(second=0, microsecond=0) + timedelta(minutes=wait)
    return max(1, int((ends - local).total_seconds()))


# -- the check before a send ----------------------------------------------------------------------
@dataclass(frozen=True)
class Hold:
    """Why a `pending` record is not sent now: `state` ends it, or (None) it waits `wait_seconds`."""

    state: State | None
    reason: str
    wait_seconds: int = 0

    def log_keys(self, record: Notification) -> dict[str, Any]:
        return {
            "notification_key": record.key,
            "recipient": mask_phone(record.recipient),
            "order": record.order_id,
            "reason": self.reason,
        }


def hold(
    journal: Journal, rules: SmsRules, settings: SmsSettings, record: Notification, now: datetime
) -> Hold | None:
    """What keeps `record` from being sent now, or None (see the module docstring)."""
    if record.order_id and record.transition:
        order = journal.get_order(record.order_id)
        if order is not None and order.opened_by != record.transition:
            return Hold(State.SUPERSEDED, f"the order moved on to {order.status!r} before it was sent")
    if record.occurred_at is not None:
        limit_age = rules.max_age(record.rule, max_age())
        if now - record.occurred_at > limit_age:
            age, limit = (now - record.occurred_at) / timedelta(hours=1), limit_age / timedelta(hours=1)
            return Hold(State.EXPIRED, f"{age:.1f} h after the move, past its maximum age of {limit:g} h")
    if opted_out(journal, record.recipient):
        return Hold(State.SUPPRESSED, "the number opted out (suppression list)")
    wait = quiet_wait(settings, record.order_status, record.recipient, now)
    if wait is not None:
        return Hold(None, "the recipient's quiet hours", wait)
    return None
