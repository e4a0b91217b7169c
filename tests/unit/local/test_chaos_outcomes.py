"""The campaign's actions (`local.chaos.actions`) and their invariants (`local.chaos.outcomes`),
without a pipeline: broadcasts (exactly once per chat, blocked ones none, `unknown` only with its
evidence), opt-outs (nothing after, later moves `suppressed`) and old redrives (`expired`)."""

from __future__ import annotations

from local.chaos.actions import BROADCAST_TEXT, with_actions
from local.chaos.checks import Observed, Sent, check, customer_name, reply_text, split
from local.chaos.outcomes import Acted, Created, Seen
from local.chaos.outcomes import check as check_actions
from local.chaos.workload import Step, counted, plan
from pipeline.broadcast import page_event_id

SEED = 4242
RULES = frozenset({"shipped", "ready_for_pickup"})
TEXT = f"{BROADCAST_TEXT} {SEED}-1: sale"
CHATS = [501, 502, 503]
PHONE = "+4915770000009"


def campaign(*chats: int) -> Sent:
    sent = Sent()
    for n, chat in enumerate(chats):
        sent.steps[f"telegram:1:{n}"] = Step(n, "message", {"chat": chat, "update": n, "step": 1})
        sent.answers[f"telegram:1:{n}"].append(200)
    return sent


def one_broadcast(**states: str) -> tuple[Acted, Seen]:
    """A job over CHATS, each chat's entry `sent` (or as `states` say: "c502": "blocked")."""
    acted = Acted(creates=[Created(1, 1, TEXT, started_at=100.0, broadcast_id="bc-1", recipients=3)])
    entries = {chat: states.get(f"c{chat}", "sent") for chat in CHATS}
    counts = {o: 0 for o in ("sent", "blocked", "failed", "unknown", "cancelled")}
    for state in entries.values():
        counts["unknown" if state == "sending" else state] += 1
    seen = Seen(
        jobs={"bc-1": {"state": "done", "total": 3, **counts}},
        entries={"bc-1": entries},
        messages=[(chat, TEXT, False) for chat, state in entries.items() if state == "sent"],
    )
    return acted, seen


def broadcast_findings(acted: Acted, seen: Seen) -> tuple[list[str], list[str]]:
    violations, excused = split(check_actions(SEED, campaign(*CHATS), acted, seen, [], {}, RULES))
    return [v.detail for v in violations], [v.excuse for v in excused]


def test_a_broadcast_with_one_message_per_chat_and_its_blocked_chat_refused_has_no_violation() -> None:
    acted, seen = one_broadcast(c502="blocked")
    acted.blocked[502] = 90.0

    assert broadcast_findings(acted, seen) == ([], [])


def test_a_chat_sent_the_broadcast_twice_or_a_blocked_chat_sent_it_once_is_a_violation() -> None:
    acted, seen = one_broadcast()
    seen.messages.append((501, TEXT, False))
    acted.blocked[503] = 90.0

    violations, _ = broadcast_findings(acted, seen)

    assert "chat 501 got the broadcast 2 times" in violations
    assert "chat 501 is counted sent and got it 2 times" in violations
    assert "chat 503 blocked the bot and got the broadcast" in violations


def test_a_chat_counted_blocked_that_never_blocked_the_bot_or_a_job_left_sending_is_a_violation() -> None:
    acted, seen = one_broadcast(c502="blocked")
    seen.jobs["bc-1"]["state"] = "sending"

    violations, _ = broadcast_findings(acted, seen)

    assert violations == ["the job ended sending", "chat 502 is counted blocked but never blocked the bot"]


def test_an_unknown_chat_is_excused_only_by_its_evidence_and_never_by_a_second_message() -> None:
    """The broadcast rules: a claim whose answer was lost is `unknown`, never sent again; counted
    apart with the evidence (its answer lost, its page's worker killed), else a violation."""
    acted, seen = one_broadcast(c501="sending", c502="unknown")
    violations, excused = broadcast_findings(acted, seen)
    assert len(violations) == 2 and excused == []

    seen.messages.append((501, TEXT, True))  # the Bot API took it; its answer was lost
    seen.undecided = {"broadcast": [page_event_id("bc-1", 0)]}  # a worker killed holding the page
    violations, excused = broadcast_findings(acted, seen)
    assert violations == []
    assert excused == [
        "the Bot API's answer to it lost or late; 1 broadcast worker(s) killed or timed out holding its page",
        "1 broadcast worker(s) killed or timed out holding its page",
    ]

    seen.messages.append((501, TEXT, False))  # sent again: never allowed
    violations, _ = broadcast_findings(acted, seen)
    assert "chat 501 got the broadcast 2 times" in violations


def test_counters_that_do_not_match_the_entries_or_a_missing_entry_are_violations() -> None:
    acted, seen = one_broadcast()
    seen.jobs["bc-1"]["sent"] = 2
    del seen.entries["bc-1"][503]

    violations, _ = broadcast_findings(acted, seen)

    assert violations[0] == "chat 503 got the broadcast without an entry"
    assert violations[1] == "create printed 3 recipients, the job has 3, the journal 2 entries"
    assert violations[2].startswith("the job counted")


def opted_out(via: str, at: float) -> tuple[Sent, Acted]:
    sent = Sent()
    moves = (("new", "shipped", 10.0), ("shipped", "ready_for_pickup", 30.0))
    for run, (previous, status, posted) in enumerate(moves, 1):
        args = {"order": "O-1", "previous": previous, "status": status, "run": run, "phone": PHONE}
        event_id = f"crm:evt-O-1-{run}"
        sent.steps[event_id] = Step(run, "crm_move", {**args, "event_id": f"evt-O-1-{run}"})
        sent.answers[event_id].append(200)
        sent.first_posted[event_id] = posted
    step = Step(0, "sms_opt_out", {"order": "O-1", "phone": PHONE, "via": via})
    return sent, Acted(opted_out={PHONE: (step, at)})


def test_a_customer_who_opted_out_gets_no_sms_after_and_the_orders_later_moves_end_suppressed() -> None:
    sent, acted = opted_out("stop", at=20.0)
    first, second = customer_name("O-1", 1), customer_name("O-1", 2)
    seen = Seen(sms=[(PHONE, f"{first}, shipped", 11.0)])
    records = [("sms#1", "accepted", first), ("sms#2", "suppressed", second)]

    assert check_actions(SEED, sent, acted, seen, records, {}, RULES) == []

    seen.sms.append((PHONE, f"{second}, ready", 31.0))
    records[1] = ("sms#2", "accepted", second)
    dead = {"sms": {"crm:evt-O-1-2": "refused"}}
    details = [v.detail for v in check_actions(SEED, sent, acted, seen, records, dead, RULES)]
    assert details == [
        "1 SMS after the number opted out (stop), the first 11.0s after",
        "a move into ready_for_pickup after the opt-out ended ['accepted']",
        "a move after the opt-out was dead-lettered (refused)",
    ]


def test_an_sms_just_after_an_ops_opt_out_is_the_check_then_send_window_but_later_is_not() -> None:
    sent, acted = opted_out("ops", at=20.0)
    records = [("sms#2", "suppressed", customer_name("O-1", 2))]
    seen = Seen(sms=[(PHONE, "Chaos O-1 r1, shipped", 21.0)])
    assert check_actions(SEED, sent, acted, seen, records, {}, RULES) == []

    seen.sms = [(PHONE, "Chaos O-1 r1, shipped", 25.0)]
    assert [v.invariant for v in check_actions(SEED, sent, acted, seen, records, {}, RULES)] == ["opt-out"]


def test_an_old_redrive_must_end_expired_and_an_ended_run_must_have_no_sms() -> None:
    step = Step(3, "old_redrive", {"order": "OLD-1", "run": 1, "days": 3.0, "phone": PHONE})
    acted = Acted(old_redrives=[step])
    run = customer_name("OLD-1", 1)
    assert check_actions(SEED, Sent(), acted, Seen(), [("sms#o", "expired", run)], {}, RULES) == []

    found = check_actions(
        SEED,
        Sent(),
        acted,
        Seen(sms=[(PHONE, f"{run}, ready", 1.0)]),
        [("sms#o", "accepted", run)],
        {},
        RULES,
    )
    assert [v.invariant for v in found] == ["expired"]
    found = check_actions(
        SEED, Sent(), acted, Seen(sms=[(PHONE, f"{run}, ready", 1.0)]), [("sms#o", "expired", run)], {}, RULES
    )
    assert [v.invariant for v in found] == ["ended"]


def test_a_reply_refused_because_the_user_blocked_the_bot_is_owed_no_more() -> None:
    """`user_blocks_bot`: the Bot API answers that chat's replies 403; a missing reply is a
    violation only without that refusal for a chat the campaign had block the bot."""
    sent = campaign(501)
    observed = Observed(stored={0}, leads=[501], refused_replies={(501, reply_text(1))})
    assert [v.detail for v in check(SEED, sent, observed, RULES)] == [
        "chat 501 never got 'step 1', nor is it in the DLQ"
    ]

    observed.blocked_chats = {501}
    assert check(SEED, sent, observed, RULES) == []


def test_the_actions_leave_a_seeds_events_and_faults_as_they_were_and_are_seeded_too() -> None:
    for seed, events in ((2095, 100), (24, 3000)):
        steps = plan(seed, events, 0.15)
        acted = with_actions(seed, steps)
        assert counted(acted) == counted(steps)
        assert [s.kind for s in acted if not s.is_action] == [s.kind for s in steps]
        assert [s.index for s in acted] == list(range(len(acted)))
        assert with_actions(seed, steps) == acted
        kinds = {s.kind for s in acted if s.is_action}
        assert {"broadcast_create", "sms_opt_out", "old_redrive", "user_blocks_bot"} <= kinds


def test_a_dynamodb_answer_lost_excuses_an_unknown_only_while_its_job_was_sending() -> None:
    acted, seen = one_broadcast(c501="sending")
    seen.jobs["bc-1"]["updated_at"] = 200
    seen.dynamodb_lost = [50.0, 300.0]  # before the create, after the job's last count
    assert broadcast_findings(acted, seen)[1] == []

    seen.dynamodb_lost.append(150.0)
    assert broadcast_findings(acted, seen) == ([], ["1 DynamoDB answer(s) lost while it was sending"])
