"""`bin/ops sms preview`: what each SMS rule costs before a customer gets it.

Per rule and language: the encoding (GSM-7 or UCS-2), the billed parts, the units (septets or
UTF-16 units) and characters of its longest text, fields at their maximum length
(`pipeline.sms.rules.worst_case`), against the file's `max_parts`, and that text as an
example. The synth refuses the same rules with the same counts (`infra.environment`); this shows
them before a deploy. No AWS call: it reads the team's rules file and cdk.json.
"""

from __future__ import annotations

from pathlib import Path

from ops.context import Context
from ops.errors import OpsError
from pipeline.sms.rules import SmsRules, load_rules, rules_file
from pipeline.validation import Invalid


def _rules(context: Context) -> tuple[SmsRules, Path]:
    given = context.option("rules")
    path = Path(given) if given else rules_file()
    try:
        return load_rules(str(path)), path
    except OSError as error:
        raise OpsError(f"cannot read the SMS rules file {path}: {error.strerror}") from None
    except Invalid as error:
        problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'rules'}: {e['msg']}" for e in error.errors())
        raise OpsError(f"{path}: {problems}") from None


def preview(context: Context) -> int:
    rules, path = _rules(context)
    limit = context.option("max_parts") or rules.max_parts
    sizes = rules.sizes()
    over = [sized for sized in sizes if sized.size.parts > limit]
    if context.wants_json():
        context.json(
            {
                "rules_file": str(path),
                "max_parts": limit,
                "fallback_language": rules.fallback_language,
                "field_max_lengths": rules.max_lengths,
                "templates": [
                    {
                        "rule": sized.rule,
                        "language": sized.language,
                        "encoding": sized.size.encoding,
                        "parts": sized.size.parts,
                        "units": sized.size.units,
                        "characters": sized.size.characters,
                        "within_limit": sized.size.parts <= limit,
                        "example": sized.example,
                    }
                    for sized in sizes
                ],
            }
        )
        return 1 if over else 0
    context.line(f"SMS rules: {path}")
    context.line(
        f"fallback language {rules.fallback_language}; part limit (max_parts) {limit};"
        " fields at their longest: "
        + ", ".join(f"{name} {length}" for name, length in rules.max_lengths.items())
    )
    context.line("(a field in any script is filled with Ж, so a name in Cyrillic is counted: UCS-2)")
    for sized in sizes:
        verdict = "ok" if sized.size.parts <= limit else f"OVER the limit of {limit}"
        context.line()
        context.line(
            f"{sized.rule} [{sized.language}]: {sized.size.encoding}, {sized.size.parts} part(s),"
            f" {sized.size.units} units, {sized.size.characters} characters: {verdict}"
        )
        context.line(f"  {sized.example}")
    if over:
        context.line()
        context.line(f"{len(over)} template(s) over {limit} parts: the synth refuses them")
        return 1
    return 0
