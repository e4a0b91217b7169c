"""Every AWS call the local functions made, evaluated against their roles in the synthesized stack.

The function processes record their calls (`local.aws_calls`: one JSONL file per function, each
call with the IAM actions and resource ARNs it is authorized as, `local.iam_requests`). This
module takes the CloudFormation template of the same deployment (`StackSynthesis` runs
`python app.py` with the local runtime's `PipelineSettings.to_context()`), resolves its
intrinsics (Ref, Fn::GetAtt, Fn::Join, Fn::Sub, Fn::Select, Fn::Split, pseudo parameters) to the
local resources' identifiers, and evaluates each call with moto's IAM policy evaluator
(`moto.iam.access_control.IAMPolicy`) against the identity policies of the function's role.

The template's logical ids are paired with local resources through the functions' environments:
a variable that is `{"Ref": X}` or `{"Fn::GetAtt": [X, "Arn"]}` in the template holds X's local
name, URL or ARN in the local process's environment (the same pairing
`tests/infra/test_infra_local_parity.py` checks key by key). A resource no function names has no
local counterpart; it resolves to a stand-in ARN built from its logical id (a KMS key: moto's
topic is not encrypted), which is enough to evaluate the grants on it.

Besides the recorded calls, a call on a resource the template encrypts with a customer managed
key needs the KMS actions the service performs with the caller's permissions (publishing to an
SNS topic: kms:GenerateDataKey and kms:Decrypt on its key); those are checked too.

The other way round, `PolicyReport.unexercised` lists each (function, action) a role grants
that no call of the function needed; `local.policy_grants` says which of them are explained, and
the end-to-end tests fail on any other.

What it does not model: resource policies, permission boundaries, SCPs and session policies
(none apply to same-account calls of this stack's roles), and condition keys (a statement with a
Condition is evaluated by moto without request context and so does not allow).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from infra.config import PipelineSettings
from infra.paths import PROJECT_ROOT
from local.lambda_host import ACCOUNT_ID
from local.policy_grants import UnusedGrant, unexplained, unexplained_lines, unused_lines

# Never bundle assets (no Docker here, none needed), as the infra tests synthesize.
SYNTH_CONTEXT: dict[str, Any] = {"aws:cdk:bundling-stacks": []}
# What each encrypted-resource call needs of its KMS key (AWS docs of SNS, SQS, Secrets Manager).
IMPLIED_KMS: dict[tuple[str, str], tuple[str, ...]] = {
    ("AWS::SNS::Topic", "sns:Publish"): ("kms:GenerateDataKey", "kms:Decrypt"),
    ("AWS::SQS::Queue", "sqs:SendMessage"): ("kms:GenerateDataKey", "kms:Decrypt"),
    ("AWS::SQS::Queue", "sqs:ReceiveMessage"): ("kms:Decrypt",),
    ("AWS::SecretsManager::Secret", "secretsmanager:GetSecretValue"): ("kms:Decrypt",),
}
NICE = ["nice", "-n", "10"] if shutil.which("nice") else []
KEY_PROPERTY = {
    "AWS::SNS::Topic": "KmsMasterKeyId",
    "AWS::SQS::Queue": "KmsMasterKeyId",
    "AWS::SecretsManager::Secret": "KmsKeyId",
}


class PolicyCheckError(ValueError):
    """The template or the recordings cannot be evaluated (an unsupported construct, a bad line)."""


# -- recorded calls ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class Check:
    """One distinct authorization: `function` (its role) needs `action` on `resource`."""

    function: str
    by: str  # "handler", or "lambda" for the event source mapping's calls
    operation: str  # the API call, e.g. "sqs:DeleteMessageBatch" (or what implied a KMS action)
    action: str
    resource: str


@dataclass
class Recorded:
    calls: int = 0
    checks: Counter[Check] = field(default_factory=Counter)
    errors: list[str] = field(default_factory=list)

    @property
    def functions(self) -> set[str]:
        return {check.function for check in self.checks}


def read_recorded(directory: Path) -> Recorded:
    """The calls in `directory/*.jsonl` (a last line still being written is left for later)."""
    recorded = Recorded()
    for path in sorted(directory.glob("*.jsonl")):
        text = path.read_text(encoding="utf-8")
        lines = text.split("\n")
        for number, line in enumerate(lines[:-1] if not text.endswith("\n") else lines, start=1):
            if not line.strip():
                continue
            try:
                call = json.loads(line)
            except ValueError as error:
                raise PolicyCheckError(f"{path.name}:{number}: not JSON ({error})") from None
            add_call(recorded, call)
    return recorded


def add_call(recorded: Recorded, call: Mapping[str, Any]) -> None:
    recorded.calls += 1
    operation = f"{call['service']}:{call['operation']}"
    if "error" in call:
        recorded.errors.append(f"{call['function']}: {operation}: no authorization derived ({call['error']})")
        return
    for authorization in call["authorizations"]:
        recorded.checks[
            Check(call["function"], call["by"], operation, authorization["action"], authorization["resource"])
        ] += 1


# -- the template -----------------------------------------------------------------------------------
def identifiers_from_environments(
    template: Mapping[str, Any], environments: Mapping[str, Mapping[str, str]]
) -> dict[str, dict[str, str]]:
    """Logical id -> {"Ref" or "Arn": local value}, from each function's template environment and
    its local one (`environments`: by Powertools service name, as `Runtime.function_environments`)."""
    found: dict[str, dict[str, str]] = {}
    for function in _of_type(template, "AWS::Lambda::Function").values():
        variables = function["Properties"].get("Environment", {}).get("Variables", {})
        local = environments.get(str(variables.get("POWERTOOLS_SERVICE_NAME")), {})
        for key, value in variables.items():
            if isinstance(value, str) or key not in local:
                continue
            if "Ref" in value:
                logical_id, attribute = str(value["Ref"]), "Ref"
            elif "Fn::GetAtt" in value and _get_att(value["Fn::GetAtt"])[1] == "Arn":
                logical_id, attribute = _get_att(value["Fn::GetAtt"])[0], "Arn"
            else:
                continue
            known = found.setdefault(logical_id, {})
            if known.get(attribute, local[key]) != local[key]:
                raise PolicyCheckError(
                    f"{logical_id}.{attribute} is two local resources: {known[attribute]}, {local[key]}"
                )
            known[attribute] = local[key]
    return found


def _of_type(template: Mapping[str, Any], cfn_type: str) -> dict[str, dict[str, Any]]:
    return {lid: r for lid, r in template["Resources"].items() if r["Type"] == cfn_type}


def _get_att(value: Any) -> tuple[str, str]:
    if isinstance(value, str):
        logical_id, _, attribute = value.partition(".")
        return logical_id, attribute
    return str(value[0]), str(value[1])


class StackResolver:
    """CloudFormation intrinsics of one template, resolved against the local resources."""

    def __init__(
        self,
        template: Mapping[str, Any],
        identifiers: Mapping[str, Mapping[str, str]],
        *,
        region: str,
        account: str = ACCOUNT_ID,
        stack_name: str = "stack",
    ) -> None:
        self.resources: dict[str, dict[str, Any]] = dict(template["Resources"])
        self.identifiers = identifiers
        self.region = region
        self.account = account
        self.pseudo = {
            "AWS::Partition": "aws",
            "AWS::Region": region,
            "AWS::AccountId": account,
            "AWS::URLSuffix": "amazonaws.com",
            "AWS::StackName": stack_name,
            "AWS::StackId": f"arn:aws:cloudformation:{region}:{account}:stack/{stack_name}/local",
            "AWS::NoValue": None,
        }

    def resolve(self, value: Any) -> Any:
        if isinstance(value, list):
            return [self.resolve(item) for item in value]
        if not isinstance(value, dict):
            return value
        if len(value) != 1 or not next(iter(value)).startswith(("Ref", "Fn::")):
            return {key: self.resolve(item) for key, item in value.items()}
        ((function, argument),) = value.items()
        if function == "Ref":
            name = str(argument)
            return self.pseudo[name] if name in self.pseudo else self.attribute(name, "Ref")
        if function == "Fn::GetAtt":
            return self.attribute(*_get_att(self.resolve(argument)))
        if function == "Fn::Join":
            separator, parts = argument
            return str(separator).join(str(self.resolve(part)) for part in self.resolve(parts))
        if function == "Fn::Sub":
            text, variables = (argument, {}) if isinstance(argument, str) else argument
            return self._sub(str(text), {k: self.resolve(v) for k, v in variables.items()})
        if function == "Fn::Select":
            index, items = argument
            return self.resolve(items)[int(self.resolve(index))]
        if function == "Fn::Split":
            separator, text = argument
            return str(self.resolve(text)).split(str(separator))
        raise PolicyCheckError(f"cannot resolve {function} locally: {json.dumps(value)}")

    def _sub(self, text: str, variables: Mapping[str, Any]) -> str:
        def replace(match: re.Match[str]) -> str:
            name = match.group(1)
            if name.startswith("!"):
                return "${" + name[1:] + "}"
            if name in variables:
                return str(variables[name])
            if name in self.pseudo:
                return str(self.pseudo[name])
            logical_id, dot, attribute = name.partition(".")
            return str(self.attribute(logical_id, attribute) if dot else self.attribute(logical_id, "Ref"))

        return re.sub(r"\$\{([^}]+)\}", replace, text)

    def attribute(self, logical_id: str, attribute: str) -> str:
        """`Ref` or an attribute of a resource: its local counterpart's, else a stand-in's."""
        if logical_id not in self.resources:
            raise PolicyCheckError(f"the template has no resource {logical_id}")
        attributes = self.attributes(logical_id)
        if attribute not in attributes:
            raise PolicyCheckError(
                f"cannot resolve {logical_id}.{attribute} ({self.resources[logical_id]['Type']})"
            )
        return attributes[attribute]

    def attributes(self, logical_id: str) -> dict[str, str]:
        cfn_type = self.resources[logical_id]["Type"]
        known = self.identifiers.get(logical_id, {})
        arn = self._arn
        if cfn_type == "AWS::SQS::Queue":
            if "Ref" in known:
                url = known["Ref"]
                path = [part for part in urlparse(url).path.split("/") if part]
                name, owner = path[-1], path[-2] if len(path) > 1 else self.account
            else:
                name = known["Arn"].rsplit(":", 1)[-1] if "Arn" in known else logical_id
                owner = self.account
                url = f"https://sqs.{self.region}.amazonaws.com/{owner}/{name}"
            return {"Ref": url, "QueueUrl": url, "QueueName": name, "Arn": arn("sqs", name, account=owner)}
        if cfn_type == "AWS::DynamoDB::Table":
            name = known.get("Ref") or (known["Arn"].split("table/", 1)[1] if "Arn" in known else logical_id)
            return {"Ref": name, "Arn": known.get("Arn", arn("dynamodb", f"table/{name}"))}
        if cfn_type == "AWS::SNS::Topic":
            topic = known.get("Ref") or known.get("Arn") or arn("sns", logical_id)
            return {"Ref": topic, "TopicArn": topic, "TopicName": topic.rsplit(":", 1)[-1]}
        if cfn_type == "AWS::SecretsManager::Secret":
            secret = (
                known.get("Ref") or known.get("Arn") or arn("secretsmanager", f"secret:{logical_id}-local")
            )
            return {"Ref": secret, "Id": secret}
        if cfn_type == "AWS::KMS::Key":
            return {"Ref": logical_id, "KeyId": logical_id, "Arn": arn("kms", f"key/{logical_id}")}
        if cfn_type == "AWS::Logs::LogGroup":
            name = self.resources[logical_id].get("Properties", {}).get("LogGroupName", logical_id)
            name = str(self.resolve(name))
            return {"Ref": name, "Arn": arn("logs", f"log-group:{name}:*")}
        if cfn_type == "AWS::IAM::Role":
            return {
                "Ref": logical_id,
                "RoleId": logical_id,
                "Arn": arn("iam", f"role/{logical_id}", region=""),
            }
        service = cfn_type.split("::")[1].lower()
        return {"Ref": known.get("Ref", logical_id), "Arn": known.get("Arn", arn(service, logical_id))}

    def _arn(
        self, service: str, resource: str, *, region: str | None = None, account: str | None = None
    ) -> str:
        return (
            f"arn:aws:{service}:{self.region if region is None else region}:"
            f"{self.account if account is None else account}:{resource}"
        )

    def role_of(self, function: str) -> str | None:
        """The logical id of the role of the function whose Powertools service name is `function`."""
        for function_resource in _of_type({"Resources": self.resources}, "AWS::Lambda::Function").values():
            properties = function_resource["Properties"]
            if (
                properties.get("Environment", {}).get("Variables", {}).get("POWERTOOLS_SERVICE_NAME")
                == function
            ):
                role = properties["Role"]
                if isinstance(role, dict) and "Fn::GetAtt" in role:
                    return _get_att(role["Fn::GetAtt"])[0]
                raise PolicyCheckError(f"{function}'s role is not a role of the stack: {role!r}")
        return None

    def functions(self) -> list[str]:
        return sorted(
            str(f["Properties"].get("Environment", {}).get("Variables", {}).get("POWERTOOLS_SERVICE_NAME"))
            for f in _of_type({"Resources": self.resources}, "AWS::Lambda::Function").values()
        )

    def role_statements(self, role_id: str) -> list[dict[str, Any]]:
        """Every identity-policy statement of the role, intrinsics resolved."""
        role = self.resources[role_id].get("Properties", {})
        if role.get("ManagedPolicyArns"):
            raise PolicyCheckError(f"{role_id} attaches managed policies, which this check does not read")
        documents = [policy["PolicyDocument"] for policy in role.get("Policies", [])]
        for policy_type in ("AWS::IAM::Policy", "AWS::IAM::ManagedPolicy"):
            for policy in _of_type({"Resources": self.resources}, policy_type).values():
                if {"Ref": role_id} in policy["Properties"].get("Roles", []):
                    documents.append(policy["Properties"]["PolicyDocument"])
        statements = []
        for document in documents:
            listed = document["Statement"]
            for statement in listed if isinstance(listed, list) else [listed]:
                statements.append(self.resolve(statement))
        return statements

    def encryption_key(self, resource_arn: str, cfn_type: str) -> str | None:
        """The customer managed key ARN the template encrypts the resource at `resource_arn` with."""
        for logical_id, resource in _of_type({"Resources": self.resources}, cfn_type).items():
            attributes = self.attributes(logical_id)
            if resource_arn not in (attributes.get("Arn"), attributes.get("Ref")):
                continue
            key = resource.get("Properties", {}).get(KEY_PROPERTY[cfn_type])
            if key is None:
                return None
            key = str(self.resolve(key))
            if key.startswith("alias/aws/") or ":alias/aws/" in key:
                return None  # an AWS managed key: its key policy allows the account's principals
            return (
                key
                if key.startswith("arn:")
                else self._arn("kms", key if key.startswith("alias/") else f"key/{key}")
            )
        return None

    def complete_secret_arn(self, resource: str) -> str:
        """A secret named without its random suffix (`secret:<name>`) is authorized on its full ARN."""
        if ":secretsmanager:" not in resource:
            return resource
        for logical_id in _of_type({"Resources": self.resources}, "AWS::SecretsManager::Secret"):
            full = self.attributes(logical_id)["Ref"]
            if full == resource or re.fullmatch(re.escape(resource) + r"-[A-Za-z0-9]{6}", full):
                return full
        return resource


# -- evaluation -------------------------------------------------------------------------------------
def _iam_pattern(pattern: str) -> str:
    """An IAM wildcard (`*` any run, `?` one character) as moto's matcher needs it: moto turns `*`
    into `.*` and reads the rest as a regular expression, so everything else is escaped here."""
    return "".join("*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern)


def _for_moto(statement: Mapping[str, Any]) -> dict[str, Any]:
    if "NotResource" in statement or "NotPrincipal" in statement:
        raise PolicyCheckError(
            f"a statement with NotResource/NotPrincipal is not evaluated here: {statement}"
        )
    adapted = dict(statement)
    for key in ("Action", "NotAction"):  # IAM matches action names case-insensitively
        if key in adapted:
            adapted[key] = [_iam_pattern(str(a).lower()) for a in _as_list(adapted[key])]
    adapted["Resource"] = [_iam_pattern(str(r)) for r in _as_list(statement.get("Resource", []))]
    return adapted


def _as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def is_allowed(statements: list[dict[str, Any]], action: str, resource: str) -> bool:
    """moto's IAM evaluation of identity-policy `statements` for `action` on `resource`."""
    from moto.iam.access_control import IAMPolicy, PermissionResult

    document = {"Version": "2012-10-17", "Statement": [_for_moto(s) for s in statements]}
    return (
        IAMPolicy(json.dumps(document)).is_action_permitted(action.lower(), resource)
        == PermissionResult.PERMITTED
    )


def _grants(statement: Mapping[str, Any]) -> list[tuple[str, str]]:
    if statement.get("Effect") != "Allow" or "NotAction" in statement:
        return []
    return [(str(a), str(r)) for a in _as_list(statement["Action"]) for r in _as_list(statement["Resource"])]


def render_statement(statement: Mapping[str, Any]) -> str:
    actions = ", ".join(str(a) for a in _as_list(statement.get("Action", statement.get("NotAction"))))
    resources = ", ".join(str(r) for r in _as_list(statement.get("Resource", "")))
    condition = f" when {json.dumps(statement['Condition'])}" if "Condition" in statement else ""
    return f"{statement.get('Effect')} {actions} on {resources}{condition}"


@dataclass(frozen=True)
class Denial:
    check: Check
    calls: int
    role: str | None
    statements: tuple[dict[str, Any], ...]

    def lines(self) -> list[str]:
        c = self.check
        head = (
            f"DENIED {c.function} ({c.by}): {c.action} on {c.resource} "
            f"[{c.operation}, {self.calls} call{'s' if self.calls != 1 else ''}]"
        )
        if self.role is None:
            return [head, "  the stack has no function of that name, so no role"]
        lines = [head, f"  role {self.role}; statements considered:"]
        for statement in self.statements:
            action_matches = statement.get("Effect") == "Allow" and is_allowed(
                [{**statement, "Resource": "*"}], c.action, c.resource
            )
            verdict = "action matches, resource does not" if action_matches else "action does not match"
            lines.append(f"    {render_statement(statement)}  <- {verdict}")
        if not self.statements:
            lines.append("    (none)")
        return lines


@dataclass
class PolicyReport:
    calls: int
    functions: list[str]
    checks: int
    denials: list[Denial]
    unused: list[UnusedGrant]
    # (function, action) its role grants that no call of the function needed (`local.policy_grants`).
    unexercised: list[tuple[str, str]]
    silent: list[str]  # functions of the stack that made no AWS call
    errors: list[str]

    @property
    def ok(self) -> bool:
        return not self.denials and not self.errors

    def text(self) -> str:
        lines = [
            f"policy check: {self.calls} AWS calls by {len(self.functions)} functions "
            f"({', '.join(self.functions)}), {self.checks} distinct authorizations, "
            f"{len(self.denials)} denied, {len(self.errors)} not derivable"
        ]
        for denial in self.denials:
            lines += denial.lines()
        lines += [f"ERROR {error}" for error in self.errors]
        if self.silent:
            lines.append(f"functions of the stack that made no AWS call: {', '.join(self.silent)}")
        lines.append(f"grants never used in this run ({len(self.unused)} actions):")
        lines += unused_lines(self.unused)
        lines.append("(function, action) grants no call used, not explained by local.policy_grants:")
        lines += unexplained_lines(self.unexplained(self.functions)) or ["  none"]
        return "\n".join(lines)

    def unexplained(self, functions: list[str]) -> list[tuple[str, str]]:
        """The grants of `functions` no call used that `local.policy_grants.ALLOWED_UNUSED` does
        not explain: each one a permission to drop, or to exercise in the run."""
        return unexplained(self.unexercised, functions)


def implied_checks(resolver: StackResolver, check: Check) -> list[Check]:
    """The KMS actions a call on a resource encrypted with a customer managed key also needs."""
    implied = []
    for (cfn_type, action), kms_actions in IMPLIED_KMS.items():
        if check.action != action:
            continue
        key = resolver.encryption_key(check.resource, cfn_type)
        if key is not None:
            implied += [
                Check(check.function, check.by, f"{check.action} on an encrypted resource", kms, key)
                for kms in kms_actions
            ]
    return implied


def evaluate(resolver: StackResolver, recorded: Recorded) -> PolicyReport:
    checks: Counter[Check] = Counter()
    for check, count in recorded.checks.items():
        check = Check(
            check.function,
            check.by,
            check.operation,
            check.action,
            resolver.complete_secret_arn(check.resource),
        )
        checks[check] += count
        for implied in implied_checks(resolver, check):
            checks[implied] += count
    statements_of: dict[str, list[dict[str, Any]]] = {}
    roles: dict[str, str | None] = {}
    for function in {c.function for c in checks} | set(resolver.functions()):
        roles[function] = resolver.role_of(function)
        role = roles[function]
        statements_of[function] = resolver.role_statements(role) if role is not None else []
    denials = [
        Denial(check, count, roles[check.function], tuple(statements_of[check.function]))
        for check, count in sorted(checks.items(), key=lambda item: _sort_key(item[0]))
        if not is_allowed(statements_of[check.function], check.action, check.resource)
    ]
    unused = []
    granted: set[tuple[str, str]] = set()
    exercised: set[tuple[str, str]] = set()
    for function in resolver.functions():
        needed = [c for c in checks if c.function == function]
        for statement in statements_of[function]:
            for action, resource in _grants(statement):
                granted.add((function, action))
                grant = {"Effect": "Allow", "Action": action, "Resource": resource}
                if any(is_allowed([grant], c.action, c.resource) for c in needed):
                    exercised.add((function, action))
                else:
                    unused.append(UnusedGrant(function, action, resource))
    called = {c.function for c in checks}
    return PolicyReport(
        calls=recorded.calls,
        functions=sorted(recorded.functions),
        checks=len(checks),
        denials=denials,
        unused=unused,
        unexercised=sorted(granted - exercised),
        silent=[f for f in resolver.functions() if f not in called],
        errors=list(recorded.errors),
    )


def _sort_key(check: Check) -> tuple[str, ...]:
    return (check.function, check.action, check.resource, check.by, check.operation)


def check_directory(
    template: Mapping[str, Any],
    calls_dir: Path,
    environments: Mapping[str, Mapping[str, str]],
    *,
    region: str,
    stack_name: str,
) -> PolicyReport:
    """The report for the calls recorded in `calls_dir` by functions started with `environments`."""
    resolver = StackResolver(
        template, identifiers_from_environments(template, environments), region=region, stack_name=stack_name
    )
    return evaluate(resolver, read_recorded(calls_dir))


# -- the template of the local deployment -----------------------------------------------------------
class StackSynthesis:
    """`python app.py` for `deployment` in the background (it takes seconds; start it early)."""

    def __init__(self, deployment: PipelineSettings, outdir: Path) -> None:
        self.outdir = outdir
        self.stack_name = deployment.stage_stack_name
        outdir.mkdir(parents=True, exist_ok=True)
        self.log_path = outdir / "synth.log"
        env = {
            **os.environ,
            "CDK_OUTDIR": str(outdir),
            "CDK_CONTEXT_JSON": json.dumps({**SYNTH_CONTEXT, **deployment.to_context()}),
            "JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION": "20",
        }
        with self.log_path.open("wb") as log:
            self.process = subprocess.Popen(  # noqa: S603 - our own interpreter and app
                # Low priority: it runs beside timing-sensitive scenarios on a shared machine.
                [*NICE, sys.executable, str(PROJECT_ROOT / "app.py")],
                cwd=outdir,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
            )

    def template(self, timeout: float = 300) -> dict[str, Any]:
        code = self.process.wait(timeout)
        if code != 0:
            tail = self.log_path.read_text(errors="replace")[-2000:]
            raise PolicyCheckError(f"synthesizing the stack failed (exit {code}):\n{tail}")
        document: dict[str, Any] = json.loads((self.outdir / f"{self.stack_name}.template.json").read_text())
        return document

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
