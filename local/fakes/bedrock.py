"""A stand-in for Bedrock Runtime's Converse API: `POST /model/<modelId>/converse`.

botocore reaches it through `AWS_ENDPOINT_URL_BEDROCK_RUNTIME`. The answer is a real-shaped
Converse response whose text is the JSON of an intent classification, decided by keywords in the
last user message so that demos are repeatable. When the request offers tools (`toolConfig`),
the model "calls" the first one with the same JSON as its input, as a model asked for structured
output would. Errors use the AWS JSON protocol (`x-amzn-ErrorType` + `{"message": ...}`).
"""

from __future__ import annotations

import json
import re
import urllib.parse
from typing import Any, ClassVar

from local.fakes.base import FakeRequest, FakeResponse, FakeService

_CONVERSE_PATH = re.compile(r"^/model/(?P<model>[^/]+)/converse$")
_PHONE = re.compile(r"\+?\d[\d ()-]{6,18}\d")
_EMAIL = re.compile(r"[\w.+-]+@[\w-]+\.[\w.-]+")
_NAME = re.compile(r"\b(?:my name is|i am|i'm|меня зовут)\s+(?P<name>[^\W\d_]{2,40})", re.IGNORECASE)
_PRODUCT = re.compile(
    r"\b(?:buy|order|price of|cost of|купить|заказать)\s+(?:a |an |the )?"
    r"(?P<product>[^\W\d_][\w -]{1,40}?)(?=[.,!?]|$)",
    re.IGNORECASE,
)

# The keys the `ai` consumer asks for (functions/ai/extraction.py SYSTEM_PROMPT), and for each
# intent the words that suggest it, checked in this order; the first hit wins.
INTENT_KEYWORDS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("complaint", ("complaint", "terrible", "awful", "refund", "жалоба", "ужасно")),
    ("support", ("help", "problem", "broken", "not working", "where is my", "помощь", "проблема")),
    ("pricing", ("price", "cost", "how much", "цена", "стоимость", "сколько")),
    ("purchase", ("buy", "order", "purchase", "купить", "заказать")),
    ("partnership", ("partner", "cooperation", "collaborat", "сотрудничество")),
    ("greeting", ("hello", "hi ", "/start", "привет", "здравствуйте")),
)
FALLBACK_INTENT = "other"
URGENT_WORDS = ("urgent", "asap", "immediately", "срочно")

# AWS error code per HTTP status, as Bedrock Runtime names them.
ERROR_CODES: dict[int, str] = {
    400: "ValidationException",
    403: "AccessDeniedException",
    404: "ResourceNotFoundException",
    408: "ModelTimeoutException",
    424: "ModelErrorException",
    429: "ThrottlingException",
    500: "InternalServerException",
    503: "ServiceUnavailableException",
}


def classify(text: str) -> dict[str, Any]:
    """The extraction the fake model answers for `text` (keyword based, deterministic)."""
    lowered = f"{text.lower()} "
    intent = next(
        (candidate for candidate, words in INTENT_KEYWORDS if any(word in lowered for word in words)),
        FALLBACK_INTENT,
    )
    phone = _PHONE.search(text)
    email = _EMAIL.search(text)
    name = _NAME.search(text)
    product = _PRODUCT.search(text)
    return {
        "intent": intent,
        "name": name["name"] if name else None,
        "phone": re.sub(r"[^\d+]", "", phone.group(0)) if phone else None,
        "email": email.group(0) if email else None,
        "product": product["product"].strip() if product else None,
        "urgency": "high" if any(word in lowered for word in URGENT_WORDS) else "low",
    }


def last_user_text(messages: list[Any]) -> str:
    for message in reversed(messages):
        if isinstance(message, dict) and message.get("role") == "user":
            parts = message.get("content") or []
            return " ".join(
                part["text"] for part in parts if isinstance(part, dict) and isinstance(part.get("text"), str)
            )
    return ""


class BedrockFake(FakeService):
    name: ClassVar[str] = "bedrock"

    def redact_path(self, path: str) -> str:
        """Recorded with the model id readable (botocore sends "v1%3A0" for "v1:0")."""
        return urllib.parse.unquote(path)

    def error_response(self, status: int, retry_after: int | None = None) -> FakeResponse:
        code = ERROR_CODES.get(status, "InternalServerException" if status >= 500 else "ValidationException")
        message = (
            "Too many requests, please wait before trying again." if status == 429 else f"local fault: {code}"
        )
        return FakeResponse(status, {"message": message}, {"x-amzn-ErrorType": code})

    def answer(self, request: FakeRequest) -> FakeResponse:
        match = _CONVERSE_PATH.match(request.path)
        if match is None or request.method != "POST":
            return self.error_response(404)
        document = request.json()
        if (
            not isinstance(document, dict)
            or not isinstance(document.get("messages"), list)
            or not document["messages"]
        ):
            return FakeResponse(
                400,
                {"message": "A conversation must start with a user message."},
                {"x-amzn-ErrorType": "ValidationException"},
            )
        messages = document["messages"]
        prompt = last_user_text(messages)
        classification = classify(prompt)
        content, stop_reason = self._content(document, classification)
        input_tokens = max(1, len(json.dumps(document)) // 4)
        output_tokens = max(1, len(json.dumps(content)) // 4)
        return FakeResponse(
            200,
            {
                "output": {"message": {"role": "assistant", "content": content}},
                "stopReason": stop_reason,
                "usage": {
                    "inputTokens": input_tokens,
                    "outputTokens": output_tokens,
                    "totalTokens": input_tokens + output_tokens,
                },
                "metrics": {"latencyMs": 42},
            },
            {"x-amzn-RequestId": f"local-{urllib.parse.quote(match['model'], safe='')[:40]}"},
        )

    @staticmethod
    def _content(
        document: dict[str, Any], classification: dict[str, Any]
    ) -> tuple[list[dict[str, Any]], str]:
        tools = (document.get("toolConfig") or {}).get("tools") or []
        tool_names = [
            tool["toolSpec"]["name"] for tool in tools if isinstance(tool, dict) and "toolSpec" in tool
        ]
        if tool_names:
            tool_use = {"toolUseId": "tooluse_local_1", "name": tool_names[0], "input": classification}
            return [{"toolUse": tool_use}], "tool_use"
        return [{"text": json.dumps(classification, ensure_ascii=False)}], "end_turn"
