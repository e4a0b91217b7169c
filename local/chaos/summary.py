"""The campaign's figures as `python -m local chaos` prints them (`local.chaos.campaign`'s report)."""

from __future__ import annotations

from typing import Any

from local.chaos.checks import Violation


def summary(document: dict[str, Any]) -> list[str]:
    latency = document["latency_ms"]
    lines = [
        f"chaos seed {document['seed']}: {document['events_total']} events,"
        f" {document['faults_total']} faults, {document['violations_total']} violations",
        f"  replies made twice after their first answer was lost (Telegram's at-least-once window):"
        f" {document['at_least_once_total']}",
        "  events: " + ", ".join(f"{k} {v}" for k, v in document["events"].items()),
        "  faults: " + ", ".join(f"{k} {v}" for k, v in document["faults"].items()),
        f"  accepted {document['accepted_events']}; webhook answers {document['webhook_answers']}",
        f"  retries {document['retries']}; redriven {document['redriven'] or 0};"
        f" SMS records decided {document['operator_decisions'] or 0};"
        f" dead letters after the redrive {document['dead_letters'] or 0}",
        f"  throughput {document['throughput_events_per_second']} events/s"
        f" (sending {document['sending_seconds']}s, drain {document['drain_seconds']}s);"
        f" end-to-end latency p50 {latency.get('p50', '-')} ms, p99 {latency.get('p99', '-')} ms",
        f"  report: {document['report_path']}",
    ]
    actions = document.get("actions") or {}
    for each in actions.get("broadcasts", []):
        steered = f", {'; '.join(each['steered'])}" if each["steered"] else ""
        lines.append(
            f"  broadcast {each['number']} (attempt {each['attempt']}) {each['state']}{steered}:"
            f" {each['recipients']} recipients, {each['entries']} entries; sent {each['sent']},"
            f" blocked {each['blocked']}, failed {each['failed']}, unknown {each['unknown']},"
            f" cancelled {each['cancelled']}; {each['messages']} messages at the Bot API"
            + (f"; create failed: {each['error']}" if each["error"] else "")
        )
    if actions:
        lines.append(
            f"  chats that blocked the bot {actions['blocked_chats']};"
            f" numbers opted out {actions['opted_out']};"
            f" old redrives {actions['old_redrives']}; SMS ended unsent {actions['sms_ended_unsent'] or 0};"
            f" broadcast unknowns with their evidence {document['broadcast_unknown_total']}"
        )
    for violation in document["violations"]:
        lines.append(Violation(**violation).line())
    for finding in document["at_least_once"] + document.get("broadcast_unknown", []):
        lines.append(Violation(**finding).line())
    lines.extend(f"  action error: {error}" for error in actions.get("action_errors", []))
    return lines
