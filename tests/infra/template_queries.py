"""Small readers over a synthesized CloudFormation template (plain dicts), shared by the infra tests."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

Resources = dict[str, dict[str, Any]]
# What the CDK grants a function with active tracing: X-Ray has no resource-level permissions.
XRAY_ACTIONS = {"xray:PutTraceSegments", "xray:PutTelemetryRecords"}


def xray_grant(tracing: bool) -> dict[str, set[str]]:
    """A role's X-Ray grant (`role_permissions` form): only where the stack traces (`tracing`)."""
    return {"*": XRAY_ACTIONS} if tracing else {}


def of_type(resources: Resources, cfn_type: str) -> Resources:
    return {logical_id: r for logical_id, r in resources.items() if r["Type"] == cfn_type}


def props(resources: Resources, logical_id: str) -> dict[str, Any]:
    properties: dict[str, Any] = resources[logical_id]["Properties"]
    return properties


def ref_name(value: Any) -> str:
    """What a CloudFormation value points at: the logical id for Ref/GetAtt, the literal for a
    string, and a readable rendering (refs as ${Name}) for Fn::Join."""
    if isinstance(value, str):
        return value
    if "Ref" in value:
        return str(value["Ref"])
    if "Fn::GetAtt" in value:
        return str(value["Fn::GetAtt"][0])
    if "Fn::Join" in value:
        separator, parts = value["Fn::Join"]
        return str(separator).join(p if isinstance(p, str) else "${" + ref_name(p) + "}" for p in parts)
    raise AssertionError(f"unexpected CloudFormation value {value!r}")


def as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def role_statements(resources: Resources, role_id: str) -> list[dict[str, Any]]:
    """Every statement of every AWS::IAM::Policy attached to the role."""
    statements: list[dict[str, Any]] = []
    for policy in of_type(resources, "AWS::IAM::Policy").values():
        if {"Ref": role_id} in policy["Properties"]["Roles"]:
            statements.extend(policy["Properties"]["PolicyDocument"]["Statement"])
    return statements


def role_permissions(resources: Resources, role_id: str) -> dict[str, set[str]]:
    """Resource (logical id, '*' or rendered ARN) -> actions the role is allowed on it.

    Also asserts the role has no other source of permissions (managed or inline policies) and
    that no statement is a Deny or uses NotAction/NotResource, so this map is the whole story.
    """
    role = props(resources, role_id)
    assert "ManagedPolicyArns" not in role, "roles must not attach AWS-managed policies"
    assert "Policies" not in role, "roles must not carry inline policies outside AWS::IAM::Policy"
    allowed: dict[str, set[str]] = defaultdict(set)
    for statement in role_statements(resources, role_id):
        assert statement["Effect"] == "Allow"
        assert "NotAction" not in statement and "NotResource" not in statement
        for resource in as_list(statement["Resource"]):
            allowed[ref_name(resource)].update(as_list(statement["Action"]))
    return dict(allowed)


def function_env(resources: Resources, function_id: str) -> dict[str, Any]:
    env: dict[str, Any] = props(resources, function_id)["Environment"]["Variables"]
    return env
