"""The region `ops` and the synth work in: the CDK CLI's order (AWS_REGION first), never a silent guess."""

from __future__ import annotations

from pathlib import Path

import pytest
from moto import mock_aws

from infra.application import build_app
from infra.config import SettingsError
from infra.region import CDK_FALLBACK_REGION, inference_profile_problem, resolve_region, synth_region_summary


def profile_config(tmp_path: Path, region: str, profile: str = "default") -> dict[str, str]:
    config = tmp_path / "config"
    section = "default" if profile == "default" else f"profile {profile}"
    config.write_text(f"[{section}]\nregion = {region}\n", encoding="utf-8")
    return {"AWS_CONFIG_FILE": str(config), "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "none")}


def test_the_cdk_clis_order_aws_region_then_aws_default_region_then_the_profile(tmp_path: Path) -> None:
    config = profile_config(tmp_path, "ap-south-1", profile="shop")
    everything = {
        **config,
        "AWS_PROFILE": "shop",
        "AWS_REGION": "eu-west-1",
        "AWS_DEFAULT_REGION": "us-west-2",
    }

    assert resolve_region("eu-north-1", everything) == ("eu-north-1", "--region")
    assert resolve_region(None, everything) == ("eu-west-1", "AWS_REGION")
    del everything["AWS_REGION"]
    assert resolve_region(None, everything) == ("us-west-2", "AWS_DEFAULT_REGION")
    del everything["AWS_DEFAULT_REGION"]
    assert resolve_region(None, everything) == ("ap-south-1", "profile shop")
    assert resolve_region(None, profile_config(tmp_path, "sa-east-1")) == ("sa-east-1", "profile default")


def test_no_region_anywhere_is_no_region_not_us_east_1(tmp_path: Path) -> None:
    nothing = {
        "AWS_CONFIG_FILE": str(tmp_path / "none"),
        "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "none"),
    }

    assert resolve_region(None, nothing) == (None, "none")
    # A missing profile is no region either, not a crash.
    assert resolve_region(None, {**nothing, "AWS_PROFILE": "gone"}) == (None, "none")


def test_the_synth_summary_says_which_setting_chose_the_region_or_that_none_did(tmp_path: Path) -> None:
    nothing = {
        "AWS_CONFIG_FILE": str(tmp_path / "none"),
        "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "none"),
    }

    assert (
        synth_region_summary("eu-west-1", {**nothing, "AWS_REGION": "eu-west-1"})
        == "eu-west-1 (from AWS_REGION)"
    )
    fallback = synth_region_summary(CDK_FALLBACK_REGION, nothing)
    assert fallback.startswith("us-east-1 (the CDK CLI's fallback: no AWS_REGION")
    assert synth_region_summary(None, nothing).startswith("any region (environment-agnostic")


def test_ops_works_in_the_region_aws_region_names(
    run, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """docs/deploy.md's "Before the first deploy" sets AWS_REGION; boto3 reads only AWS_DEFAULT_REGION."""
    monkeypatch.delenv("AWS_DEFAULT_REGION")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_REGION", "ap-southeast-2")

    with mock_aws():
        result = run("dlq", "list", "--stack", "NoSuchStack")

    assert result.code == 2
    assert "stack 'NoSuchStack' not found in region ap-southeast-2" in result.err


def test_ops_without_any_region_says_how_to_give_one(
    run, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("AWS_DEFAULT_REGION")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))

    result = run("dlq", "list", "--stack", "NoSuchStack")

    assert result.code == 2
    assert result.err == (
        "error: no AWS region: pass --region, set AWS_REGION, or set a region in your AWS profile\n"
    )


@pytest.mark.parametrize(
    ("model_id", "region", "refused"),
    [
        ("eu.anthropic.claude-3-haiku-20240307-v1:0", "us-east-1", "use us. (or global.)"),
        ("us.anthropic.claude-3-haiku-20240307-v1:0", "eu-central-1", "use eu. (or global.)"),
        ("apac.amazon.nova-lite-v1:0", "sa-east-1", "use the model id itself or global."),
        ("eu.anthropic.claude-3-haiku-20240307-v1:0", "eu-central-1", None),
        ("us.amazon.nova-lite-v1:0", "us-west-2", None),
        ("jp.amazon.nova-lite-v1:0", "ap-northeast-1", None),
        ("global.anthropic.claude-sonnet-4-20250514-v1:0", "sa-east-1", None),
        ("anthropic.claude-3-haiku-20240307-v1:0", "us-east-1", None),  # a model id, not a profile
        ("eu.anthropic.claude-3-haiku-20240307-v1:0", None, None),  # the region is the deploy's
    ],
)
def test_an_inference_profile_of_another_geography_is_refused_naming_one_that_fits(
    model_id: str, region: str | None, refused: str | None
) -> None:
    problem = inference_profile_problem(model_id, region)
    if refused is None:
        assert problem is None
    else:
        assert problem is not None and problem.endswith(refused) and str(region) in problem


@pytest.mark.slow
def test_the_synth_refuses_an_inference_profile_its_region_cannot_call(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("CDK_DEFAULT_REGION", "us-east-1")
    context = {"aws:cdk:bundling-stacks": [], "bedrock_model_id": "eu.anthropic.claude-3-haiku-20240307-v1:0"}

    with pytest.raises(SettingsError) as refused:
        build_app(context, nag=False)

    assert str(refused.value).startswith("bedrock_model_id: the inference profile eu. cannot be called from")
