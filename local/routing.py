"""Why an accepted event reached the consumers it reached, and not the others: one line per publish.

The SNS fault proxy (`local.fakes.sns`) sees every publish to the events topic, by the webhook and
by the consumers that publish (bitrix24, amocrm), with the message attributes moto routes on. This
module decides the routing again from the registry (`pipeline.registry.matches` and each enabled
consumer's `filter_policy`) and says, for each consumer not reached, which attribute kept it out.
moto applies the real policies; this is the explanation, printed beside them.

Only the event id, source and type appear (never the body: it holds names, texts, phone numbers).
"""

from __future__ import annotations

import json
import urllib.parse
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from pipeline.registry import Consumer, matches


@dataclass(frozen=True)
class Publish:
    """One message published to a topic, as the proxy saw it (attributes: the String ones)."""

    topic_arn: str
    attributes: dict[str, str]
    event_id: str | None
    # A repeat of a deduplication id the FIFO topic took within its window: not delivered at all.
    deduplicated: bool = False


def publishes(form: Mapping[str, str]) -> list[Publish]:
    """The messages of an SNS query-API `Publish` or `PublishBatch` request (its form fields)."""
    action = form.get("Action")
    topic = form.get("TopicArn", "")
    if action == "Publish":
        return [_publish(topic, form, "")]
    if action == "PublishBatch":
        found: list[Publish] = []
        index = 1
        while f"PublishBatchRequestEntries.member.{index}.Id" in form:
            found.append(_publish(topic, form, f"PublishBatchRequestEntries.member.{index}."))
            index += 1
        return found
    return []


def parse_form(body: bytes) -> dict[str, str]:
    return dict(urllib.parse.parse_qsl(body.decode("utf-8", "replace"), keep_blank_values=True))


def _publish(topic: str, form: Mapping[str, str], prefix: str) -> Publish:
    attributes: dict[str, str] = {}
    index = 1
    while f"{prefix}MessageAttributes.entry.{index}.Name" in form:
        entry = f"{prefix}MessageAttributes.entry.{index}."
        value = form.get(f"{entry}Value.StringValue")
        if value is not None and form.get(f"{entry}Value.DataType", "String").startswith("String"):
            attributes[form[f"{entry}Name"]] = value
        index += 1
    return Publish(topic, attributes, _event_id(form.get(f"{prefix}Message", "")))


def _event_id(message: str) -> str | None:
    try:
        document = json.loads(message)
    except ValueError:
        return None
    event_id = document.get("event_id") if isinstance(document, dict) else None
    return event_id if isinstance(event_id, str) else None


def why_not(filter_policy: Mapping[str, Any], attributes: Mapping[str, str]) -> str:
    """The first key of `filter_policy` that `attributes` fail, said plainly."""
    for key, allowed in filter_policy.items():
        if matches({key: allowed}, dict(attributes)):
            continue
        value = attributes.get(key)
        strings = [rule for rule in allowed if isinstance(rule, str)]
        if value is None and strings:
            return f"no {key} (needs {_one_of(strings)})"
        if len(strings) == len(allowed):
            return f"{key} {value!r} is not {_one_of(strings)}"
        if len(allowed) == 1 and isinstance(allowed[0], dict) and "exists" in allowed[0]:
            return f"{key} is {'absent' if value is None else 'present'}"
        return f"{key} {value!r} does not match {json.dumps(allowed)}"
    return "matches"  # not reached for a consumer that `matches` rejected


def _one_of(values: list[str]) -> str:
    return repr(values[0]) if len(values) == 1 else f"in [{', '.join(values)}]"


def explain(publish: Publish, consumers: Iterable[Consumer]) -> str:
    """`event telegram:1:7 (telegram message) -> store, crm; not sms: source 'telegram' is not 'crm'`
    (consumers kept out for the same reason are named together)."""
    what = " ".join(publish.attributes.get(key, "?") for key in ("source", "type"))
    if publish.deduplicated:
        return (
            f"event {publish.event_id or '?'} ({what}) -> no consumer: a repeat the FIFO topic dropped "
            "(same deduplication id within 5 minutes)"
        )
    reached: list[str] = []
    missed: dict[str, list[str]] = {}  # reason -> the consumers it keeps out, in registry order
    for consumer in consumers:
        if matches(consumer.filter_policy, publish.attributes):
            reached.append(consumer.name)
        else:
            missed.setdefault(why_not(consumer.filter_policy, publish.attributes), []).append(consumer.name)
    line = f"event {publish.event_id or '?'} ({what}) -> {', '.join(reached) or 'no consumer'}"
    if missed:
        line += "; not " + "; ".join(f"{', '.join(names)}: {reason}" for reason, names in missed.items())
    return line
