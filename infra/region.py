"""Which AWS region a command works in, resolved the way the CDK CLI and boto3 resolve it.

`ops` (boto3) and the synth (`python app.py`, `cdk synth`) must agree on the region, or `ops
set-webhook` looks for the stack somewhere else than `cdk deploy` put it. The CDK CLI reads
`AWS_REGION`, then `AWS_DEFAULT_REGION`, then the profile's `region`, and falls back to us-east-1;
boto3 reads only the last two. Here the order is the CLI's, without the silent fallback: no
region is an answer the caller reports.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import NamedTuple

from botocore.configloader import load_config

REGION_ENV_VARS = ("AWS_REGION", "AWS_DEFAULT_REGION")
# The CDK CLI's region when nothing names one: a synth in it is very likely a mistake.
CDK_FALLBACK_REGION = "us-east-1"


class ResolvedRegion(NamedTuple):
    region: str | None
    source: str  # "--region", "AWS_REGION", "AWS_DEFAULT_REGION", "profile <name>", or "none"


def resolve_region(explicit: str | None = None, environ: Mapping[str, str] | None = None) -> ResolvedRegion:
    """The region an explicit `--region`, the environment or the AWS profile names, and which did."""
    environ = os.environ if environ is None else environ
    if explicit:
        return ResolvedRegion(explicit, "--region")
    for name in REGION_ENV_VARS:
        if environ.get(name):
            return ResolvedRegion(environ[name], name)
    profile = environ.get("AWS_PROFILE") or environ.get("AWS_DEFAULT_PROFILE") or "default"
    config_file = Path(environ.get("AWS_CONFIG_FILE") or "~/.aws/config").expanduser()
    configured = None
    if config_file.is_file():
        configured = load_config(str(config_file)).get("profiles", {}).get(profile, {}).get("region")
    if configured:
        return ResolvedRegion(str(configured), f"profile {profile}")
    return ResolvedRegion(None, "none")


def apply_region(explicit: str | None = None) -> ResolvedRegion:
    """Point boto3 at the resolved region (it does not read `AWS_REGION` itself)."""
    resolved = resolve_region(explicit)
    if resolved.region:
        os.environ["AWS_DEFAULT_REGION"] = resolved.region
    return resolved


def synth_region_summary(stack_region: str | None, environ: Mapping[str, str] | None = None) -> str:
    """The synth summary's region line: the stack's region and what chose it.

    Under the CDK CLI, `CDK_DEFAULT_REGION` is the CLI's answer, us-east-1 when nothing names a
    region: that case is said out loud, as the template's SMS, Bedrock and KMS ARNs are in it.
    """
    environ = os.environ if environ is None else environ
    if stack_region is None:
        return "any region (environment-agnostic: the deploy's credentials choose it)"
    resolved = resolve_region(environ=environ)
    if resolved.region == stack_region:
        return f"{stack_region} (from {resolved.source})"
    if resolved.region is None and stack_region == CDK_FALLBACK_REGION:
        return (
            f"{stack_region} (the CDK CLI's fallback: no AWS_REGION, AWS_DEFAULT_REGION or profile "
            "region is set; set one if this is not the region you deploy to)"
        )
    return f"{stack_region} (from CDK_DEFAULT_REGION)"


# Bedrock's geographic cross-region inference profiles ("<geo>.<model id>") and the regions that
# can call each: a profile is callable only from a source region of its geography.
INFERENCE_PROFILE_REGIONS = {
    "us": ("us-east-", "us-west-"),
    "us-gov": ("us-gov-",),
    "eu": ("eu-",),
    "apac": ("ap-",),
    "jp": ("ap-northeast-1", "ap-northeast-3"),
    "au": ("ap-southeast-2", "ap-southeast-4"),
    "ca": ("ca-",),
}


def inference_profile_problem(model_id: str | None, region: str | None) -> str | None:
    """Why a Bedrock inference profile cannot be called from the stack's region, if it cannot.

    Bedrock refuses such a call at every invocation (the `ai` consumer would dead-letter every
    message), so the synth refuses it. A plain model id, a `global.` profile, or a stack whose
    region is decided at deploy (environment-agnostic) is not checked.
    """
    if not model_id or not region or "." not in model_id:
        return None
    geography = model_id.split(".", 1)[0]
    sources = INFERENCE_PROFILE_REGIONS.get(geography)
    if sources is None or region.startswith(sources):
        return None
    fitting = [name for name, prefixes in INFERENCE_PROFILE_REGIONS.items() if region.startswith(prefixes)]
    instead = f"use {fitting[0]}. (or global.)" if fitting else "use the model id itself or global."
    return f"the inference profile {geography}. cannot be called from the stack's region {region}: {instead}"
