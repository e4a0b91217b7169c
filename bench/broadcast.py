"""`python -m bench broadcast`: the time and AWS cost of a broadcast to 100,000 chats at the default
rate, and the room it leaves interactive replies. A model on the registry, the settings' defaults
and infra/prices.py (no timed test): the sending rate is the pacing's (`pipeline.pacing`), the
calls per chat and per page are the ones `functions/broadcast/logic.py` makes.
"""

from __future__ import annotations

from typing import Any

from infra.config import PipelineSettings
from infra.prices import TRAFFIC
from pipeline import broadcast as jobs
from pipeline import pacing
from pipeline.registry import by_name

RECIPIENTS = 100_000
# Per chat: the claim (PutItem) and its outcome (UpdateItem), 1 WRU each; the bot-wide not-before
# read before each message (a consistent GetItem, 1 RRU); the job re-read every CHECK_EVERY chats.
WRU_PER_CHAT = 2.0
RRU_PER_CHAT = 1.0 + 1 / 10
# Per page: Powertools' claim and completion, and the counted page (the job item grows with
# `done_pages`: a few KB by the last page), in WRU; SQS receive and delete (and the delivery).
WRU_PER_PAGE = 2 + 4
SQS_REQUESTS_PER_PAGE = 3


def run(quick: bool = False) -> dict[str, Any]:
    settings = PipelineSettings()
    consumer = by_name("broadcast")
    bot_rate = settings.telegram_messages_per_second
    broadcast_rate = pacing.send_rate(consumer.max_concurrency, bot_rate, settings.broadcast_share)
    total_rate = broadcast_rate * consumer.max_concurrency
    seconds = RECIPIENTS / total_rate
    pages = -(-RECIPIENTS // jobs.PAGE_SIZE)
    gb_seconds = seconds * consumer.max_concurrency * consumer.memory_mb / 1024
    lines = {
        "lambda_gb_seconds": gb_seconds * TRAFFIC.lambda_arm_gb_second.usd,
        # An invocation a page, and about one hand-back a page (its time runs out mid-page).
        "lambda_requests": 2 * pages * TRAFFIC.lambda_request.usd,
        "dynamodb_writes": (RECIPIENTS * WRU_PER_CHAT + pages * WRU_PER_PAGE)
        * TRAFFIC.dynamodb_write_unit.usd,
        "dynamodb_reads": RECIPIENTS * RRU_PER_CHAT * TRAFFIC.dynamodb_read_unit.usd,
        "sns_fifo_publishes": pages * (TRAFFIC.sns_fifo_publish.usd + TRAFFIC.sns_fifo_sqs_delivery.usd),
        "sqs_requests": 2 * pages * SQS_REQUESTS_PER_PAGE * TRAFFIC.sqs_request.usd,
    }
    budget = pacing.HEADROOM * bot_rate
    return {
        "recipients": RECIPIENTS,
        "bot_rate_per_second": bot_rate,
        "broadcast_share": settings.broadcast_share,
        "broadcast_rate_per_second": round(total_rate, 2),
        "hours": round(seconds / 3600, 2),
        "pages": pages,
        "usd": {name: round(value, 4) for name, value in lines.items()},
        "usd_total": round(sum(lines.values()), 3),
        # What interactive replies can use before the bot passes the pacing's budget, and
        # Telegram's limit: under either, replies keep their usual pacing delay (no 429).
        "reply_room_within_budget_per_second": round(budget - total_rate, 2),
        "reply_room_within_telegram_per_second": round(bot_rate - total_rate, 2),
        "reply_extra_delay_seconds_within_room": 0.0,
    }


def report(results: dict[str, Any]) -> list[str]:
    usd = results["usd"]
    return [
        f"broadcast: {results['recipients']:,} recipients at"
        f" {results['broadcast_rate_per_second']} messages/s"
        f" ({results['broadcast_share']:.0%} of the pacing's share of {results['bot_rate_per_second']:g}/s):"
        f" {results['hours']} h in {results['pages']:,} pages",
        f"  AWS cost ${results['usd_total']}: "
        + ", ".join(f"{name} ${value}" for name, value in usd.items()),
        f"  interactive replies keep {results['reply_room_within_budget_per_second']}/s within the pacing's"
        f" budget ({results['reply_room_within_telegram_per_second']}/s within Telegram's limit): below"
        " that, no 429 and no delay beyond their usual pacing (a model, not measured)",
    ]
