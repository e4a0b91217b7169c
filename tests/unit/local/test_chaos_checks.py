"""The chaos campaign's plan and invariants (`local.chaos`), without a pipeline: a planted
violation is reported with the campaign's seed and the event's path."""

from __future__ import annotations

import inspect
import itertools
from typing import Any

from bot.examples import lead_bot

from local.chaos import conversations
from local.chaos.checks import Observed, Sent, Violation, check, customer_name, reply_text, split
from local.chaos.inflight import InFlight
from local.chaos.portals import FINAL_STAGES, status_transitions
from local.chaos.workload import FAULT_WEIGHTS, RESTART_RUNTIME_SPACING, Step, plan

SEED = 4242
RULES = frozenset({"shipped", "ready_for_pickup"})
CHAT = 777


def message(index: int, update: int, step: int) -> Step:
    return Step(index, "message", {"chat": CHAT, "update": update, "step": step})


def move(index: int, run: int, previous: str, status: str) -> Step:
    args = {"order": "O-1", "previous": previous, "status": status, "run": run, "phone": "+4915770000001"}
    return Step(index, "crm_move", {**args, "event_id": f"evt-O-1-{run}"})


def sent_of(*steps: Step) -> Sent:
    sent = Sent()
    for step in steps:
        key = (
            f"crm:{step.args['event_id']}" if step.kind == "crm_move" else f"telegram:1:{step.args['update']}"
        )
        sent.steps[key] = step
        sent.answers[key].append(200)
    return sent


def healthy() -> tuple[Sent, Observed]:
    """Two messages of one chat and an order moved twice, each with exactly its effects."""
    sent = sent_of(
        message(0, 10, 1), message(1, 11, 2), move(2, 1, "new", "paid"), move(3, 2, "paid", "shipped")
    )
    observed = Observed(
        replies=[(CHAT, reply_text(1), 1.0), (CHAT, reply_text(2), 2.0)],
        stored={10, 11},
        leads=[CHAT],
        sms=[f"{customer_name('O-1', 2)}, your order O-1 has been shipped."],
        sms_records=[("sms#k", "accepted", customer_name("O-1", 2))],
        idempotency_records=[("autoreply#a", "COMPLETED")],
    )
    return sent, observed


def test_a_run_with_every_effect_exactly_once_and_in_order_has_no_violation() -> None:
    sent, observed = healthy()
    assert check(SEED, sent, observed, RULES) == []


def test_a_duplicated_reply_is_reported_with_the_seed_and_the_events_path() -> None:
    sent, observed = healthy()
    observed.replies.append((CHAT, reply_text(2), 3.0))  # the planted duplicate effect

    violations = check(SEED, sent, observed, RULES)

    assert [(v.invariant, v.seed) for v in violations] == [("autoreply", SEED)]
    assert violations[0].path.startswith(f"#1 message chat={CHAT} step=2 update=11 -> webhook answered [200]")
    assert f"seed {SEED}" in violations[0].line() and "path: #1 message" in violations[0].line()


def test_a_reply_made_twice_after_its_answer_was_lost_is_telegrams_window_not_a_violation() -> None:
    """Telegram has no idempotency key: a sendMessage that took effect while its worker never got
    the answer is made again. With that evidence the duplicate is counted apart, with its reason."""
    sent, observed = healthy()
    observed.replies.append((CHAT, reply_text(2), 3.0))
    observed.unanswered_replies.append((CHAT, reply_text(2)))

    violations, in_window = split(check(SEED, sent, observed, RULES))

    assert violations == []
    assert [(f.invariant, f.excuse) for f in in_window] == [("autoreply", "1 answer(s) lost or late")]
    assert in_window[0].line().startswith("AT-LEAST-ONCE autoreply")


def test_a_reply_made_twice_after_a_kill_is_excused_only_by_a_killed_autoreply_worker_holding_it() -> None:
    sent, observed = healthy()
    observed.replies.append((CHAT, reply_text(2), 3.0))
    inflight = InFlight()
    inflight.listener({"event": "busy", "worker": "store", "events": ["telegram:1:11"]})
    inflight.listener({"event": "busy", "worker": "autoreply-1", "events": ["telegram:1:10"]})
    inflight.listener({"event": "busy", "worker": "autoreply", "events": ["telegram:1:11"]})
    inflight.listener({"event": "invocation", "worker": "autoreply"})  # its batch was done: no kill
    inflight.killed("store", "store")
    inflight.killed("autoreply-1", "autoreply")
    observed.undecided = inflight.undecided()

    # A killed store worker held the event, and a killed autoreply worker another one: no excuse.
    assert [f.excuse for f in check(SEED, sent, observed, RULES)] == [""]

    inflight.listener({"event": "busy", "worker": "autoreply", "events": ["telegram:1:11"]})
    inflight.killed("autoreply", "autoreply")
    observed.undecided = inflight.undecided()
    [finding] = check(SEED, sent, observed, RULES)
    assert finding.excuse == "1 autoreply worker(s) killed or timed out holding it"


def test_a_timeout_is_evidence_only_for_a_bot_worker_holding_the_update() -> None:
    """The bot engine's journaled calls do not ask the deadline (`pipeline/deadline.py`); autoreply's
    calls do, so its timeout excuses nothing (the long run at 7941330: a bot 'thanks' twice)."""
    inflight = InFlight()
    workers = {"autoreply#2": "autoreply", "bot#3": "bot", "bot": "bot"}  # as `ChildProcess` says them
    for worker, event in (
        ("autoreply#2", "telegram:1:10"),
        ("bot#3", "telegram:1:11"),
        ("bot", "telegram:1:12"),
    ):
        inflight.listener({"event": "busy", "worker": worker, "function": workers[worker], "events": [event]})
    for worker, timed_out in (("autoreply#2", True), ("bot#3", True), ("bot", False)):
        message = {
            "event": "invocation",
            "worker": worker,
            "function": workers[worker],
            "timed_out": timed_out,
        }
        inflight.listener(message)

    assert inflight.undecided() == {"bot": ["telegram:1:11"]}
    assert [kill.cause for kill in inflight.kills] == ["timed out"]


def test_more_copies_of_a_reply_than_lost_answers_explain_are_a_violation() -> None:
    sent, observed = healthy()
    observed.replies += [(CHAT, reply_text(2), 3.0), (CHAT, reply_text(2), 4.0)]
    observed.unanswered_replies.append((CHAT, reply_text(2)))
    violations, in_window = split(check(SEED, sent, observed, RULES))
    assert [v.detail for v in violations] == [f"chat {CHAT} got {reply_text(2)!r} 3 times"]
    assert in_window == []


def test_a_button_press_answered_twice_is_excused_by_a_lost_answer_and_only_by_one() -> None:
    press = Step(4, "callback", {"chat": CHAT, "update": 12, "query": "q-12"})
    sent, observed = healthy()
    sent.steps["telegram:1:12"] = press
    sent.answers["telegram:1:12"].append(200)
    observed.stored.add(12)
    observed.callback_answers += ["q-12", "q-12"]
    assert [f.excuse for f in check(SEED, sent, observed, RULES)] == [""]
    observed.unanswered_callbacks.append("q-12")
    assert [f.excuse for f in check(SEED, sent, observed, RULES)] == ["1 answer(s) lost or late"]


def test_a_violations_path_names_the_dlq_and_reason_an_event_sits_in() -> None:
    sent, observed = healthy()
    observed.replies.append((CHAT, reply_text(1), 3.0))
    observed.dead["crm"] = {"telegram:1:10": "retries exhausted after 8 attempts: CRM down"}

    [violation] = check(SEED, sent, observed, RULES)

    assert violation.path.endswith("-> crm's DLQ (retries exhausted after 8 attempts: CRM down)")


def test_replies_out_of_a_chats_order_are_a_violation_of_order() -> None:
    sent, observed = healthy()
    observed.replies.reverse()
    assert [v.invariant for v in check(SEED, sent, observed, RULES)] == ["order"]


def test_a_reply_the_operator_redrove_from_the_dlq_may_come_after_the_chats_later_ones() -> None:
    sent, observed = healthy()
    observed.replies.reverse()  # step 1's message sat in the DLQ while step 2 was answered
    observed.redriven["crm"] = {"telegram:1:10": "timed out"}  # redriven, but from another consumer's DLQ
    assert [v.invariant for v in check(SEED, sent, observed, RULES)] == ["order"]
    observed.redriven["autoreply"] = {"telegram:1:10": "timed out"}
    assert check(SEED, sent, observed, RULES) == []


def test_a_lost_effect_is_a_violation_unless_the_event_is_in_its_consumers_dlq() -> None:
    sent, observed = healthy()
    observed.stored.discard(11)
    assert [v.invariant for v in check(SEED, sent, observed, RULES)] == ["store"]
    observed.dead["store"] = {"telegram:1:11": "PermanentError: poison"}
    assert check(SEED, sent, observed, RULES) == []


def test_sms_twice_for_one_run_none_for_the_last_due_one_and_one_without_a_rule_are_violations() -> None:
    sent, observed = healthy()
    observed.sms = [observed.sms[0], observed.sms[0]]
    assert [v.detail for v in check(SEED, sent, observed, RULES)] == ["2 SMS for one run (shipped)"]
    observed.sms = [f"{customer_name('O-1', 1)}, your order O-1 is paid."]
    details = sorted(v.detail for v in check(SEED, sent, observed, RULES))
    assert details == [
        "an SMS for paid, which has no rule",
        "no SMS for the move into shipped, nor a record to decide on",
    ]
    # A record a person must decide on is a visible outcome, not a loss.
    observed.sms = []
    observed.sms_records = [("sms#k", "unknown", customer_name("O-1", 2))]
    assert check(SEED, sent, observed, RULES) == []


def test_a_journal_record_left_in_an_intermediate_state_is_a_violation() -> None:
    sent, observed = healthy()
    observed.idempotency_records.append(("store#b", "INPROGRESS"))
    observed.sms_records.append(("sms#l", "sending", "x"))
    assert sorted(v.detail for v in check(SEED, sent, observed, RULES)) == [
        "SMS record sms#l left sending",
        "idempotency record store#b left INPROGRESS",
    ]


def test_two_leads_for_one_chat_are_a_violation() -> None:
    sent, observed = healthy()
    observed.leads.append(CHAT)
    assert [v.invariant for v in check(SEED, sent, observed, RULES)] == ["crm"]


def test_the_same_seed_plans_the_same_events_and_faults_and_another_seed_others() -> None:
    first = plan(SEED, 500)
    assert first == plan(SEED, 500)
    assert first != plan(SEED + 1, 500)
    assert sum(1 for step in first if not step.is_fault) == 500
    assert {step.kind for step in first if step.is_fault} <= set(FAULT_WEIGHTS)


def test_a_steps_path_never_shows_a_phone_number() -> None:
    moves = [step for step in plan(SEED, 300) if step.kind == "crm_move"]
    assert moves and all(step.args["phone"] not in step.path() for step in moves)
    assert Violation("sms", "x", moves[0].path(), SEED).as_dict()["path"] == moves[0].path()


def portal_move(index: int, stages: list[str], create: bool = False) -> Step:
    args = {"portal": "bitrix24", "deal": "b1", "name": "Portalb1", "phone": "+4915778000001"}
    return Step(index, "portal_move", {**args, "previous": "?", "stages": stages, "create": create})


def test_a_move_between_two_stages_of_one_status_is_no_transition() -> None:
    # EXECUTING and the pickup shelf UC_PICKUP are both ready_for_pickup (local.overlay).
    stages = ["NEW", "EXECUTING", "UC_PICKUP", "PREPARATION", "EXECUTING"]
    assert status_transitions("bitrix24", stages) == ["ready_for_pickup", "processing", "ready_for_pickup"]


def test_a_portal_deal_gets_at_most_one_sms_per_entry_and_one_for_where_it_is_now() -> None:
    """Whatever became of its webhooks: the history the plan made is what the SMS answer to."""
    sent = Sent(portal_ids={"b1": 42})
    for step in (portal_move(0, ["EXECUTING"], create=True), portal_move(1, ["PREPARATION", "EXECUTING"])):
        sent.steps[f"portal:b1:{step.index}"] = step
    texted = "Portalb1, your order 42 is ready for pickup."
    rfp = frozenset({"ready_for_pickup"})

    assert check(SEED, sent, Observed(sms=[texted]), rfp) == []  # the first entry's was stale
    assert check(SEED, sent, Observed(sms=[texted, texted]), rfp) == []
    [too_many] = check(SEED, sent, Observed(sms=[texted] * 3), rfp)
    assert too_many.detail == "3 SMS for 2 entries into a status with a rule (bitrix24 deal 42)"
    [none] = check(SEED, sent, Observed(), rfp)
    assert none.detail.startswith("no SMS for bitrix24 deal 42, now ready_for_pickup")
    assert none.path.startswith("#1 portal_move") and "+49" not in none.line()
    in_dlq = Observed(dead={"sms": {"bitrix24:42:0f3a": "retries exhausted"}})
    assert check(SEED, sent, in_dlq, rfp) == []


def test_a_planned_burst_moves_the_deal_each_time_and_ends_it_only_last() -> None:
    steps = [s for s in plan(SEED, 3000) if s.kind == "portal_move"]
    assert steps and any(len(s.args["stages"]) > 1 for s in steps)
    for step in steps:
        portal, stages = step.args["portal"], [step.args["previous"], *step.args["stages"]]
        assert all(a != b for a, b in itertools.pairwise(stages))
        assert not set(stages[:-1]) & FINAL_STAGES[portal]  # a closed deal is moved no more


BOT_CHAT = 888


def conversation(*kinds: str) -> Sent:
    sent = Sent()
    for index, kind in enumerate(kinds):
        args: dict[str, Any] = {"chat": BOT_CHAT, "update": 100 + index}
        if kind == "bot_contact":
            args["phone"] = "+4915776000001"
        sent.steps[f"telegram:1:{100 + index}"] = Step(index, kind, args)
        sent.answers[f"telegram:1:{100 + index}"].append(200)
    return sent


def bot_said(*texts: str, thanks: bool = True) -> Observed:
    return Observed(
        replies=[(BOT_CHAT, text, float(n)) for n, text in enumerate(texts)],
        edits=[(BOT_CHAT, conversations.THANKS)] if thanks else [],
        stored={100, 101, 102},
        leads=[BOT_CHAT],
    )


QUESTION = f"{conversations.CONFIRM_PREFIX} +4915776000001?"


def test_a_conversation_with_each_output_once_and_in_order_has_no_violation() -> None:
    sent = conversation("bot_start", "bot_contact", "bot_yes")
    assert check(SEED, sent, bot_said(conversations.ASK_PHONE, conversations.GOT_IT, QUESTION), RULES) == []


def test_a_conversations_repeated_lost_or_misordered_output_is_a_violation_without_evidence() -> None:
    sent = conversation("bot_start", "bot_contact", "bot_yes")
    twice = bot_said(conversations.ASK_PHONE, conversations.GOT_IT, conversations.GOT_IT, QUESTION)
    [repeated] = check(SEED, sent, twice, RULES)
    assert repeated.detail == f"chat {BOT_CHAT}: the bot's 'got it' came 2 times" and not repeated.excuse
    twice.unanswered_replies.append((BOT_CHAT, conversations.GOT_IT))
    assert [f.excuse for f in check(SEED, sent, twice, RULES)] == ["1 answer(s) lost or late"]

    [lost] = check(
        SEED, sent, bot_said(conversations.ASK_PHONE, conversations.GOT_IT, QUESTION, thanks=False), RULES
    )
    assert lost.detail == f"chat {BOT_CHAT}: the bot's 'thanks' came 0 times" and "+49" not in lost.line()
    misordered = bot_said(conversations.GOT_IT, QUESTION, conversations.ASK_PHONE)
    assert [v.invariant for v in check(SEED, sent, misordered, RULES)] == ["order"]


def test_after_a_conversations_step_in_the_dlq_its_later_steps_are_owed_nothing() -> None:
    sent = conversation("bot_start", "bot_contact", "bot_yes")
    observed = bot_said(conversations.ASK_PHONE, thanks=False)
    observed.dead["bot"] = {"telegram:1:101": "retries exhausted after 8 attempts: CRM down"}
    assert check(SEED, sent, observed, RULES) == []


def test_the_campaigns_copy_of_the_example_bots_texts_is_the_bots() -> None:
    source = inspect.getsource(lead_bot)
    assert (lead_bot.ASK_PHONE, lead_bot.CONFIRM_PREFIX) == (
        conversations.ASK_PHONE,
        conversations.CONFIRM_PREFIX,
    )
    assert (lead_bot.THANKS, lead_bot.KNOWN) == (conversations.THANKS, conversations.KNOWN)
    assert f'reply_text("{conversations.GOT_IT}"' in source


def test_a_plan_restarts_the_whole_pipeline_at_most_once_per_spacing() -> None:
    """Each restart saves and restores every queue and table: rare, and never in a row."""
    steps = plan(7, 20_000)
    made, at = 0, []
    for step in steps:
        if step.kind == "restart_runtime":
            at.append(made)
        made += 0 if step.is_fault else 1
    assert len(at) >= 2
    assert all(later - earlier >= RESTART_RUNTIME_SPACING for earlier, later in itertools.pairwise(at))


def test_a_dead_letter_for_a_refusal_of_the_whole_account_is_a_violation_whatever_excuses_it() -> None:
    """A message of a blocked account pauses and resumes (`pipeline.worker`): in a DLQ, the store's
    missing item is excused by the DLQ, so the `account` invariant is what catches it, classified
    as an account refusal or misread as the message's own (the vendor's words in the reason)."""
    for reason in (
        "account refused (unpaid): amocrm lead: HTTP 402 Payment Required: Functional not paid",
        "bitrix24 crm.deal.get: HTTP 500 PORTAL_DELETED: Portal was deleted",
    ):
        sent, observed = healthy()
        observed.stored.discard(11)
        observed.dead = {"store": {"telegram:1:11": reason}}

        violations = check(SEED, sent, observed, RULES)

        assert [v.invariant for v in violations] == ["account"]
        assert violations[0].path.startswith(f"#1 message chat={CHAT} step=2 update=11")


def test_a_dead_letter_of_the_message_itself_is_not_an_account_violation() -> None:
    sent, observed = healthy()
    observed.stored.discard(11)
    observed.dead = {
        "store": {"telegram:1:11": "telegram sendMessage: HTTP 403 Forbidden: bot was blocked by the user"}
    }

    assert check(SEED, sent, observed, RULES) == []


def test_the_plan_blocks_every_vendor_account_the_campaign_calls_for_seconds() -> None:
    steps = [step for step in plan(SEED, 4000, 0.3) if step.kind == "account_blocked"]

    assert {step.args["vendor"] for step in steps} == {"bitrix24", "amocrm", "telegram", "end_user_messaging"}
    assert all(0 < step.args["seconds"] <= 12 for step in steps)


def test_a_last_run_ended_suppressed_or_expired_is_an_outcome_but_superseded_is_not() -> None:
    """Issue 43: an opted-out number and a move past its rule's maximum age end unsent by a rule,
    visible in the journal: outcomes, not losses, also once the operator has decided the rest. A
    last run can never be superseded (nothing came after it): that is still a missing SMS."""
    for ended in ("suppressed", "expired"):
        sent, observed = healthy()
        observed.sms = []
        observed.sms_records = [("sms#k", ended, customer_name("O-1", 2))]
        observed.decided_by_operator = True
        assert check(SEED, sent, observed, RULES) == [], ended
    sent, observed = healthy()
    observed.sms = []
    observed.sms_records = [("sms#k", "superseded", customer_name("O-1", 2))]
    assert [v.detail for v in check(SEED, sent, observed, RULES)] == [
        "no SMS for the move into shipped, nor a record to decide on"
    ]
