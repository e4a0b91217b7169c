"""The pipeline a campaign runs: `make local`'s, with Lambda's concurrency shape (three workers
per consumer), the consumers whose effects show outside, and timeouts and retry delays of
seconds, so that a killed worker's record comes back within the campaign."""

from __future__ import annotations

import dataclasses
import json
import math

from local.chaos.checks import reply_text
from local.chaos.workload import LONGEST_REFUSAL_SECONDS, STEPS
from local.settings import LocalSettings
from pipeline.registry import Consumer, RetryPolicy, by_name
from pipeline.secrets import REFRESH_ON_MISMATCH_INTERVAL_SECONDS
from pipeline.sms.rules import load_rules

# Pauses of seconds too: an account refused for a few seconds (`account_blocked`) resumes within it.
PAUSE_SECONDS = 3
FAST_RETRY = RetryPolicy(
    max_receive_count=8, base_delay_seconds=1, max_delay_seconds=4, pause_seconds=PAUSE_SECONDS
)


# Seconds of a `broadcast` invocation beyond what its Bot API calls need (a few chats' pacing).
BROADCAST_SLACK_SECONDS = 5

STEP_REPLIES = {f"/step{n}": reply_text(n) for n in range(1, STEPS + 1)}


def _autoreply() -> Consumer:
    """Ordered (FIFO by chat), replies naming their step, in batches of 3 at the least timeout
    for them. Its reply is a Bot API call with no idempotency key: one is started only with the
    time left to make it and record it (`pipeline.deadline`; at 6 s, before that rule, seed 5
    sent 2 of 745 replies twice), after the batch's earlier replies to one chat (at 12 s with
    batches of 10, seed 7 dead-lettered 18 of 3,000 messages refused for time on every retry)."""
    autoreply = dataclasses.replace(
        by_name("autoreply"),
        ordered=True,
        batch_size=3,
        # Only its step replies (the whole table): /start is the example bot's, in the conversations' chats.
        environment={"AUTOREPLY_REPLIES": json.dumps(STEP_REPLIES)},
        retry=FAST_RETRY,
    )
    return dataclasses.replace(
        autoreply, timeout_seconds=math.ceil(autoreply.least_batch_timeout_seconds) + 1
    )


# What an ordered consumer's paused record must outlast before its queue's redrive count of
# receives runs out: the longest refusal, then a token put just after a refused worker re-read it
# (re-read again at most once per REFRESH_ON_MISMATCH_INTERVAL_SECONDS), twice over. Seed 40 paused
# autoreply's chats 24 times 3 s and dead-lettered 14 replies to a bot token revoked then replaced.
ORDERED_PAUSE_OUTLASTS_SECONDS = 2 * (LONGEST_REFUSAL_SECONDS + REFRESH_ON_MISMATCH_INTERVAL_SECONDS)


def outlasting(consumer: Consumer) -> Consumer:
    """An ordered consumer with pauses long enough for ORDERED_PAUSE_OUTLASTS_SECONDS (in AWS its
    pauses spread over the queue's retention: `pipeline.pause.pause_seconds`)."""
    if not consumer.ordered or consumer.retry.pause_seconds is None:
        return consumer
    wait = math.ceil(ORDERED_PAUSE_OUTLASTS_SECONDS / consumer.redrive_max_receive_count)
    retry = dataclasses.replace(consumer.retry, pause_seconds=max(consumer.retry.pause_seconds, wait))
    return dataclasses.replace(consumer, retry=retry)


def campaign_consumers() -> tuple[Consumer, ...]:
    """The consumers, with timeouts and retry delays of seconds: a killed worker's record comes
    back after the visibility timeout (6x the function's timeout), within the campaign."""
    return tuple(outlasting(consumer) for consumer in _consumers())


def _consumers() -> tuple[Consumer, ...]:
    sms = by_name("sms")
    return (
        dataclasses.replace(by_name("store"), timeout_seconds=6, retry=FAST_RETRY),
        _autoreply(),
        dataclasses.replace(by_name("crm"), timeout_seconds=6, retry=FAST_RETRY),
        # The example bot, beside autoreply (in AWS one or the other): its own chats.
        dataclasses.replace(by_name("bot"), retry=FAST_RETRY),
        # The portals' webhooks (each reads the deal's history): retries of seconds, not minutes.
        dataclasses.replace(by_name("bitrix24"), timeout_seconds=10, retry=FAST_RETRY),
        dataclasses.replace(by_name("amocrm"), timeout_seconds=10, retry=FAST_RETRY),
        # Broadcasts (`local.chaos.actions`): a page a worker killed mid-page comes back within the
        # campaign (6x its timeout). Its calls need 11 s of an invocation: at 12 s, on the loaded
        # machine, invocations sent one chat or none (seed 46: pages of 100 dead-lettered for
        # time after the fix that hands an advancing page back), so it gets seconds to advance.
        dataclasses.replace(
            by_name("broadcast"),
            timeout_seconds=math.ceil(by_name("broadcast").least_batch_timeout_seconds)
            + BROADCAST_SLACK_SECONDS,
            retry=FAST_RETRY,
        ),
        dataclasses.replace(
            sms,
            # Seconds, not minutes: a send whose worker died is taken over within the campaign.
            timeout_seconds=12,
            retry=RetryPolicy(
                max_receive_count=10, base_delay_seconds=1, max_delay_seconds=4, pause_seconds=PAUSE_SECONDS
            ),
            environment={**sms.environment, "SMS_LEASE_SECONDS": "15"},
        ),
    )


def campaign_settings(workers: int) -> LocalSettings:
    return LocalSettings.from_cdk_json(
        consumer_workers=workers,
        scale_workers_on_demand=False,
        bot_consumer=True,
        ai_consumer=False,
        crm_sources=True,
        reconcile_every_seconds=3.0,
        # Moves whose webhook was lost are found within seconds, and the campaign's end waits less.
        crm_sweep_every_seconds=10.0,
        # The campaign's checks wait for every consumer: without the batching windows of store,
        # crm and analytics, which would make each of its drains wait them out.
        batching_windows=False,
    )


def rule_statuses() -> frozenset[str]:
    """The statuses with an SMS rule, as the `sms` consumer loads them."""
    return frozenset(rule.status for rule in load_rules("").rules)
