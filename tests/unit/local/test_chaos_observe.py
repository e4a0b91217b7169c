"""What the campaign's observer counts as a Bot API call that took effect (`local.chaos.observe`)."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

from local.chaos.observe import took_effect
from local.fakes.telegram import TelegramFake


def send(fake: TelegramFake, text: str) -> int:
    request = urllib.request.Request(  # noqa: S310 - the stand-in on loopback
        f"{fake.url}/bot{fake.token}/sendMessage",
        data=json.dumps({"chat_id": 42, "text": text}).encode(),
        headers={"Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=5) as response:  # noqa: S310
            return int(response.status)
    except urllib.error.HTTPError as error:
        return int(error.code)


def test_a_reply_refused_for_a_revoked_token_did_not_take_effect_and_one_sent_did() -> None:
    """Seed 36: the bot token revoked for seconds, every refused sendMessage (401) was counted as a
    reply sent, and each reply sent again after the pause looked like a duplicate."""
    with TelegramFake() as fake:
        fake.account.block("revoked")
        assert send(fake, "refused") == 401
        fake.account.unblock()
        assert send(fake, "sent") == 200

        refused, sent = fake.calls()

    assert (refused["status"], sent["status"]) == (401, 200)
    assert not took_effect(refused) and took_effect(sent)
