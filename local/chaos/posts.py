"""What the campaign's senders post: Telegram updates (messages, edits, button presses) shaped as
the Bot API sends them, and the generic CRM route's order moves, from a planned step."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from local.chaos.checks import customer_name
from local.chaos.conversations import BOT_KINDS
from local.chaos.workload import Step

# The bot as Telegram names it in the messages it sent (the question a button press is on).
BOT = {"id": 123456, "is_bot": True, "first_name": "Local Pipeline Bot", "username": "local_pipeline_bot"}


def _user(chat: int) -> dict[str, Any]:
    return {
        "id": chat,
        "is_bot": False,
        "first_name": "Chaos",
        "last_name": f"U{chat}",
        "language_code": "en",
    }


def _chat(chat: int) -> dict[str, Any]:
    return {"id": chat, "type": "private", "first_name": "Chaos", "last_name": f"U{chat}"}


def _conversation_update(step: Step, now: int) -> dict[str, Any]:
    """A step of a conversation with the example bot (`local.chaos.conversations`)."""
    chat, update = step.args["chat"], step.args["update"]
    if step.kind == "bot_yes":
        question = {
            "message_id": 3,
            "from": BOT,
            "chat": _chat(chat),
            "date": now - 10,
            "text": "Shall we call you?",
            "reply_markup": {"inline_keyboard": [[{"text": "Yes", "callback_data": "confirm"}]]},
        }
        query = {
            "id": step.args["query"],
            "from": _user(chat),
            "chat_instance": f"-{chat}43",
            "data": "confirm",
            "message": question,
        }
        return {"update_id": update, "callback_query": query}
    message: dict[str, Any] = {"message_id": 1, "from": _user(chat), "chat": _chat(chat), "date": now}
    if step.kind == "bot_start":
        message.update(text="/start", entities=[{"type": "bot_command", "offset": 0, "length": 6}])
    else:
        user = _user(chat)
        contact = {"phone_number": step.args["phone"], "first_name": user["first_name"], "user_id": chat}
        message.update(message_id=2, contact={**contact, "last_name": user["last_name"]})
    return {"update_id": update, "message": message}


def telegram_update(step: Step, now: int) -> dict[str, Any]:
    if step.kind in BOT_KINDS:
        return _conversation_update(step, now)
    chat, update = step.args["chat"], step.args["update"]
    if step.kind == "edit":
        message_id = step.args["message_id"]
        edited = {
            "message_id": message_id,
            "from": _user(chat),
            "chat": _chat(chat),
            "date": now - 5,
            "edit_date": now,
            "text": f"step {message_id}, edited",
        }
        return {"update_id": update, "edited_message": edited}
    if step.kind == "callback":
        query = {
            "id": step.args["query"],
            "from": _user(chat),
            "chat_instance": f"-{chat}42",
            "data": "prices",
            "message": {"message_id": 1, "chat": _chat(chat), "date": now - 60, "text": "Pick one:"},
        }
        return {"update_id": update, "callback_query": query}
    text = f"/step{step.args['step']}"
    message = {
        "message_id": step.args["step"],
        "from": _user(chat),
        "chat": _chat(chat),
        "date": now,
        "text": text,
        "entities": [{"type": "bot_command", "offset": 0, "length": len(text)}],
    }
    return {"update_id": update, "message": message}


def crm_move(step: Step) -> dict[str, Any]:
    return {
        "event_id": step.args["event_id"],
        "type": "order.status_changed",
        "occurred_at": datetime.now(UTC).isoformat(timespec="milliseconds"),
        "order": {
            "id": step.args["order"],
            "status": step.args["status"],
            "previous_status": step.args["previous"],
        },
        "customer": {
            "phone": step.args["phone"],
            "name": customer_name(step.args["order"], step.args["run"]),
        },
    }
