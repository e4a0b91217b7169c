"""A campaign that loses its moto server (the kernel killed it, say) ends with one line naming
its seed and how far it got, and `make chaos` exits 2: no traceback, no half-checked figures."""

from __future__ import annotations

import socket
from types import SimpleNamespace

import pytest

from local.chaos import cli
from local.chaos.campaign import Campaign, CampaignStopped, Options
from local.chaos.workload import Step

FAILURE = "the moto server exited (code -9); see .local/chaos/logs/moto.log"


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_a_fault_for_a_dead_moto_server_stops_the_campaign_with_its_seed_and_progress() -> None:
    campaign = Campaign(Options(seed=31, events=10), say=lambda line: None)
    campaign.runtime = SimpleNamespace(  # type: ignore[assignment]
        failure=FAILURE, fakes={}, aws_endpoint=f"http://127.0.0.1:{closed_port()}"
    )
    campaign.dispatched = 7
    throttle = Step(3, "dynamodb_throttle", {"target": "DynamoDB", "kind": "throttle", "count": 1})

    with pytest.raises(CampaignStopped) as stopped:
        campaign.inject(throttle)

    assert str(stopped.value) == f"chaos seed 31: stopped after 7 events sent: {FAILURE}"


def test_make_chaos_prints_the_one_line_and_exits_2(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def lose_moto(self: Campaign) -> None:
        raise CampaignStopped(f"chaos seed {self.options.seed}: stopped after 0 events sent: {FAILURE}")

    monkeypatch.setattr(Campaign, "run", lose_moto)

    code = cli.main(["--seed", "31", "--events", "10"])

    captured = capsys.readouterr()
    assert code == 2
    assert captured.err.splitlines() == [f"chaos seed 31: stopped after 0 events sent: {FAILURE}"]
    assert "Traceback" not in captured.out + captured.err
