"""The rule-based state machine that drives the simulated shop (`tests.support.sms_shop`).

Used by `tests/unit/sms/test_sms_model.py` (a seeded, bounded run in CI) and by
`python -m bench sms-model` (a long campaign); `TOTALS` adds up what every sequence did.
"""

from __future__ import annotations

from collections import Counter
from datetime import timedelta

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from pipeline.sms.gateways import FakeBehaviour
from tests.support.sms_shop import AWS_FAULTS, STATUSES, Shop

# Steps, sequences, faults injected and violations of every machine run in this process.
TOTALS: Counter[str] = Counter()

# The same order number in three CRMs: three orders (issue 20, sequence 8).
ORDERS = (("7", None), ("7", "bitrix24"), ("8", "amocrm"))
SKEWS = (timedelta(0), timedelta(0), timedelta(0), timedelta(hours=1), timedelta(days=365 * 70))
faults = st.none() | st.sampled_from(AWS_FAULTS)
# (which waiting copy, delivered again later, under a new delivery id, fault, at which AWS call)
deliveries = st.tuples(st.integers(0, 30), st.booleans(), st.booleans(), faults, st.integers(1, 8))


class ShopMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self._running = Shop.running()
        self.shop = self._running.__enter__()
        for order_id, source in ORDERS:
            self.shop.add_order(order_id, source)

    @rule(
        order=st.integers(0, len(ORDERS) - 1),
        status=st.sampled_from(STATUSES),
        same_second=st.booleans(),
        skew=st.sampled_from(SKEWS),
    )
    def crm_moves_an_order(self, order: int, status: str, same_second: bool, skew: timedelta) -> None:
        self.shop.move(self.shop.orders[order], status, same_second=same_second, skew=skew)

    @rule(order=st.integers(0, len(ORDERS) - 1), new_phone=st.booleans())
    def crm_re_saves_an_order(self, order: int, new_phone: bool) -> None:
        self.shop.resave(self.shop.orders[order], new_phone=new_phone)

    @precondition(lambda self: any("for good" in reason for _, reason in self.shop.dead_letters))
    @rule(index=st.integers(0, 30))
    def a_manager_fixes_a_refused_number(self, index: int) -> None:
        """The gateway refused an order's number for good (dead-lettered): the manager corrects
        the phone in the CRM and the order is saved again (a re-save with the new phone)."""
        refused = [copy for copy, reason in self.shop.dead_letters if "for good" in reason]
        TOTALS["phone_fixes"] += 1
        run = refused[index % len(refused)].run
        self.shop.resave(next(o for o in self.shop.orders if o.label == run.order), new_phone=True)

    @precondition(lambda self: bool(self.shop.queue))
    @rule(deliveries=st.lists(deliveries, min_size=1, max_size=4))
    def workers_take_deliveries(self, deliveries: list[tuple[int, bool, bool, str | None, int]]) -> None:
        """Up to four worker invocations, each with any waiting copy: late, again, under a new
        delivery id, with a fault at its Nth DynamoDB call."""
        for index, again, new_id, fault, at_call in deliveries:
            self.shop.deliver(index, again=again, new_id=new_id, fault=fault, at_call=at_call)

    @rule(behaviour=st.sampled_from(FakeBehaviour))
    def the_gateway_will(self, behaviour: FakeBehaviour) -> None:
        self.shop.gateway_next(behaviour)

    @rule(seconds=st.sampled_from([1, 15, 130, 3600, 3 * 86400, 30 * 86400]))
    def time_passes(self, seconds: int) -> None:
        self.shop.advance(seconds)

    @rule(fault=faults, at_call=st.integers(1, 12))
    def the_reconciler_runs(self, fault: str | None, at_call: int) -> None:
        self.shop.reconcile(fault, at_call)

    @rule(index=st.integers(0, 30))
    def a_delivery_receipt_arrives(self, index: int) -> None:
        self.shop.receipt(index)

    @rule(
        index=st.integers(0, 30),
        decision=st.sampled_from(["accepted", "not_sent", "not_sent_then_receipt", "abandon"]),
    )
    def an_operator_decides(self, index: int, decision: str) -> None:
        self.shop.operator(index, decision)

    @rule()
    def ttl_deletes_what_expired(self) -> None:
        self.shop.expire()

    @invariant()
    def nothing_is_sent_twice(self) -> None:
        TOTALS["steps"] += 1
        found = self.shop.violations(drained=False)
        TOTALS["violations"] += len(found)
        assert not found, "\n".join(found)

    def teardown(self) -> None:
        try:
            self.shop.drain()
            found = self.shop.violations(drained=True)
            TOTALS["violations"] += len(found)
            TOTALS["sequences"] += 1
            TOTALS["sms_sent"] += len(self.shop.gateway.delivered)
            TOTALS["dead_letters"] += len(self.shop.dead_letters)
            for kind, count in (self.shop.faults + self.shop.aws.injected).items():
                TOTALS[f"fault:{kind}"] += count
            assert not found, "\n".join(found)
        finally:
            self._running.__exit__(None, None, None)
