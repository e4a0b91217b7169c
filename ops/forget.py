"""`ops forget --phone P` / `--chat C`: erase or anonymise one person in every table.

Table-driven by `pipeline.personal.KINDS`: per table, the person's items are read by key or by a
query where a kind's key leads to them, and by one paginated scan where none does (the output
says why); each item found is classified by its key and erased as its kind says (deleted, or kept
for exactly-once without its personal attributes). Whatever still names the person afterwards (an
item no kind claims, a kind holding no personal data by its description, an attribute the kind
does not list) is counted as left, named by table and kind, and the exit code is 1.

It runs with the operator's credentials (GetItem, Query, Scan, UpdateItem, DeleteItem on the
stack's tables). Identifiers are printed masked, never in full.
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from infra.outputs import OutputKey
from infra.tables import TABLE_KEYS
from ops.context import Context
from ops.errors import OpsError
from pipeline import aws, formats, phones
from pipeline.observability import mask_phone
from pipeline.personal import KINDS, TABLES, Kind, Person, holds, kind_of

EXIT_LEFT = 1


def mask_chat(chat: int) -> str:
    """'123456789' -> '12*****89' (a short id keeps its last two digits)."""
    text = str(chat)
    sign, digits = ("-", text[1:]) if text.startswith("-") else ("", text)
    head = 2 if len(digits) > 5 else 0
    return sign + digits[:head] + "*" * (len(digits) - head - 2) + digits[-2:]


def person_from(ctx: Context) -> Person:
    phone, chat = ctx.option("phone"), ctx.option("chat")
    if not phone and chat is None:
        raise OpsError("give --phone and/or --chat: the person to forget")
    e164 = None
    if phone:
        region = None if phone.strip().startswith("+") else ctx.deployment().phone_default_region
        try:
            e164 = phones.to_e164(phone, region)
        except phones.PhoneNumberError as error:
            raise OpsError(f"--phone: {error}") from None
    return Person(phone=e164, chat=chat)


def describe(person: Person) -> str:
    parts = [f"phone {mask_phone(person.phone)}"] if person.phone else []
    if person.chat is not None:
        parts.append(f"chat {mask_chat(person.chat)}")
    return ", ".join(parts)


@dataclass
class TableReport:
    table: str
    present: bool = True
    scanned: int = 0
    scan_reasons: list[str] = field(default_factory=list)  # kinds only a scan finds
    done: Counter[tuple[str, str]] = field(default_factory=Counter)  # (kind, deleted|anonymised)
    left: Counter[str] = field(default_factory=Counter)  # kind (or "unclaimed") -> items


def _key_of(table: str, item: dict[str, Any]) -> dict[str, Any]:
    keys = TABLE_KEYS[table]
    return {name: item[name] for name in (keys.partition, keys.sort) if name}


def _key_text(table: str, item: dict[str, Any]) -> str:
    return formats.key_of("journal" if table == "journal" else table, item)


def _query(dynamo: Any, index: str | None, attribute: str, value: str) -> list[dict[str, Any]]:
    request: dict[str, Any] = {
        "KeyConditionExpression": "#partition = :value",
        "ExpressionAttributeNames": {"#partition": attribute},
        "ExpressionAttributeValues": {":value": value},
    }
    if index:
        request["IndexName"] = index
    found: list[dict[str, Any]] = []
    while True:
        page = dynamo.query(**request)
        found += page.get("Items", [])
        if "LastEvaluatedKey" not in page:
            return found
        request["ExclusiveStartKey"] = page["LastEvaluatedKey"]


def _by_key(table: str, dynamo: Any, kinds: list[Kind], person: Person) -> dict[str, dict[str, Any]]:
    """The person's items that a key or an index leads to (whole items, consistent reads)."""
    keys: list[dict[str, Any]] = []
    for kind in kinds:
        if kind.forget.keys:
            keys += kind.forget.keys(person)
        if kind.forget.partitions:
            index, attribute, values = kind.forget.partitions
            for value in values(person):
                keys += [_key_of(table, item) for item in _query(dynamo, index, attribute, value)]
    found: dict[str, dict[str, Any]] = {}
    for key in keys:
        item = dynamo.get_item(Key=key, ConsistentRead=True).get("Item")
        if item is not None:
            found[_key_text(table, item)] = item
    return found


def _scan(dynamo: Any, person: Person, report: TableReport) -> dict[str, dict[str, Any]]:
    patterns = person.patterns()
    found: dict[str, dict[str, Any]] = {}
    request: dict[str, Any] = {"ConsistentRead": True}
    while True:
        page = dynamo.scan(**request)
        report.scanned += int(page.get("ScannedCount", 0))
        for item in page.get("Items", []):
            if holds(item, person, patterns):
                found[_key_text(report.table, item)] = item
        if "LastEvaluatedKey" not in page:
            return found
        request["ExclusiveStartKey"] = page["LastEvaluatedKey"]


def _names(attributes: list[str]) -> dict[str, str]:
    return {f"#a{index}": name for index, name in enumerate(attributes)}


def _anonymise(table: str, dynamo: Any, kind: Kind, item: dict[str, Any]) -> dict[str, Any]:
    erase = kind.forget.erase
    assert erase is not None
    sets = dict(erase.replace)
    if erase.settle is not None:
        sets |= erase.settle(item, int(time.time()))
    removes = [name for name in erase.remove if name in item and name not in sets]
    names = _names([*sets, *removes])
    by_name = {name: placeholder for placeholder, name in names.items()}
    expression = ""
    if sets:
        expression += "SET " + ", ".join(f"{by_name[n]} = :v{i}" for i, n in enumerate(sets))
    if removes:
        expression += " REMOVE " + ", ".join(by_name[n] for n in removes)
    key = _key_of(table, item)
    names["#key"] = next(iter(key))
    request: dict[str, Any] = {
        "Key": key,
        "UpdateExpression": expression.strip(),
        "ConditionExpression": "attribute_exists(#key)",
        "ExpressionAttributeNames": names,
        "ReturnValues": "ALL_NEW",
    }
    if sets:
        request["ExpressionAttributeValues"] = {f":v{i}": value for i, value in enumerate(sets.values())}
    answer = dynamo.update_item(**request)
    return dict(answer.get("Attributes") or {})


def _erase(
    table: str,
    dynamo: Any,
    person: Person,
    items: dict[str, dict[str, Any]],
    report: TableReport,
    apply: bool,
) -> None:
    for key_text, item in sorted(items.items()):
        kind = kind_of(table, key_text)
        if kind is None or kind.forget.erase is None:
            report.left[kind.name if kind else "unclaimed"] += 1
            continue
        erase = kind.forget.erase
        if erase.delete:
            if apply:
                dynamo.delete_item(Key=_key_of(table, item))
            report.done[(kind.name, "deleted")] += 1
            continue
        after = _anonymise(table, dynamo, kind, item) if apply else None
        report.done[(kind.name, "anonymised")] += 1
        if after is not None and holds(after, person):
            report.left[kind.name] += 1


def forget(ctx: Context) -> int:
    person = person_from(ctx)
    apply = not ctx.option("dry_run")
    if apply and not ctx.confirm(f"erase {describe(person)} from every table of the pipeline"):
        return 0
    reports: list[TableReport] = []
    for table in TABLES:
        report = TableReport(table)
        reports.append(report)
        name = ctx.stack().get(OutputKey.table_name(table))
        if name is None:
            report.present = False
            continue
        dynamo = aws.resource("dynamodb").Table(name)
        kinds = [kind for kind in KINDS if kind.table == table and kind.personal]
        found = _by_key(table, dynamo, kinds, person)
        report.scan_reasons = [kind.name for kind in kinds if kind.forget.scan]
        if report.scan_reasons:
            found |= _scan(dynamo, person, report)
        _erase(table, dynamo, person, found, report, apply)
    _print(ctx, person, reports, apply)
    return EXIT_LEFT if any(report.left for report in reports) else 0


def _print(ctx: Context, person: Person, reports: list[TableReport], apply: bool) -> None:
    if ctx.wants_json():
        ctx.json(
            {
                "person": describe(person),
                "applied": apply,
                "tables": {
                    r.table: {
                        "present": r.present,
                        "scanned_items": r.scanned,
                        "scan_because": r.scan_reasons,
                        "erased": {f"{k} {how}": n for (k, how), n in sorted(r.done.items())},
                        "left": dict(sorted(r.left.items())),
                    }
                    for r in reports
                },
            }
        )
        return
    ctx.line(f"{'forgot' if apply else 'dry run: would forget'} {describe(person)}")
    for report in reports:
        if not report.present:
            ctx.line(f"{report.table}: not in this stack")
            continue
        how = "by key"
        if report.scan_reasons:
            how += f"; a scan of {report.scanned} item(s): no key leads to {', '.join(report.scan_reasons)}"
        ctx.line(f"{report.table} ({how})")
        for (kind, what), count in sorted(report.done.items()):
            ctx.line(f"  {kind}: {count} {what}")
        for kind, count in sorted(report.left.items()):
            ctx.line(f"  {kind}: {count} LEFT, still naming the person (erase by hand)")
        if not report.done and not report.left:
            ctx.line("  nothing found")
    total = sum(sum(r.done.values()) for r in reports)
    left = sum(sum(r.left.values()) for r in reports)
    ctx.line(f"total: {total} item(s) {'erased' if apply else 'to erase'}, {left} left")
