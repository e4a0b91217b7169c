"""How a CRM's own pipeline stages become this pipeline's order statuses: configuration, not code.

Bitrix24 names a deal's stage by `STAGE_ID` within a pipeline (`CATEGORY_ID`; stages of a
category other than the default one read `C<id>:<code>`), amoCRM a lead's by a numeric
`status_id` within a `pipeline_id` (the system statuses 142 "won" and 143 "lost" are shared by
every pipeline, hence the map per pipeline). The deployment maps each stage of the pipelines it
connects to an order status, the name the SMS rules (`team/sms_rules.json`) speak of:

    {"0": {"NEW": "new", "EXECUTING": "ready_for_pickup", "WON": "completed"}}

Every stage of a connected pipeline needs a name, even one no SMS is sent for: the order's history
must see it leave "ready_for_pickup" to count a return as a new entry. A pipeline that is not in
the map is not connected (its deals are ignored, and counted); a stage missing from a connected
pipeline is a configuration error the event is dead-lettered with, naming the stage.

The map is a deployment setting (`bitrix24_stages`, `amocrm_statuses`), checked at synth with
`parse_status_map` and given to the consumer as canonical JSON in its environment.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

# What an order status may be: it travels as an SNS message attribute (`pipeline.crm.event_model.Order`).
ORDER_STATUS = re.compile(r"^[^\x00-\x1f\x7f]{1,64}$")
# A pipeline or stage id as the CRMs write them (Bitrix24 `C2:PREPARATION`, amoCRM `142`).
CRM_ID = re.compile(r"^[A-Za-z0-9_:.-]{1,64}$")

LookupKind = Literal["mapped", "pipeline_not_connected", "unknown_stage"]


@dataclass(frozen=True)
class Lookup:
    kind: LookupKind
    status: str | None = None


@dataclass(frozen=True)
class StatusMap:
    """{pipeline id: {stage id: order status}}, every id a string."""

    pipelines: Mapping[str, Mapping[str, str]]

    def lookup(self, pipeline: str | int, stage: str | int) -> Lookup:
        stages = self.pipelines.get(str(pipeline))
        if stages is None:
            return Lookup("pipeline_not_connected")
        status = stages.get(str(stage))
        return Lookup("unknown_stage") if status is None else Lookup("mapped", status)

    def to_json(self) -> str:
        """Canonical JSON: what the consumer's environment variable holds."""
        return json.dumps(
            {pipeline: dict(stages) for pipeline, stages in self.pipelines.items()},
            sort_keys=True,
            separators=(",", ":"),
            ensure_ascii=False,
        )


def parse_status_map(value: Any, name: str) -> StatusMap:
    """`value` (a JSON object, or its text as `cdk -c` gives it) as a StatusMap; ValueError naming
    `name` and the offending pipeline or stage otherwise."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            raise ValueError(f"{name} must be a JSON object {{pipeline: {{stage: order status}}}}") from None
    if not isinstance(value, Mapping) or not value:
        raise ValueError(f"{name} must be a non-empty JSON object {{pipeline: {{stage: order status}}}}")
    pipelines: dict[str, dict[str, str]] = {}
    for pipeline, stages in value.items():
        pipeline_id = str(pipeline)
        if not CRM_ID.match(pipeline_id):
            raise ValueError(
                f"{name}: pipeline id {pipeline_id!r} is not a CRM id (letters, digits, _ : . -)"
            )
        if not isinstance(stages, Mapping) or not stages:
            raise ValueError(f"{name}[{pipeline_id}] must be a non-empty object {{stage: order status}}")
        mapped: dict[str, str] = {}
        for stage, status in stages.items():
            stage_id = str(stage)
            if not CRM_ID.match(stage_id):
                raise ValueError(f"{name}[{pipeline_id}]: stage id {stage_id!r} is not a CRM id")
            if not isinstance(status, str) or not ORDER_STATUS.match(status):
                raise ValueError(
                    f"{name}[{pipeline_id}][{stage_id}] must name an order status "
                    "(1-64 characters, no control characters)"
                )
            mapped[stage_id] = status
        pipelines[pipeline_id] = mapped
    return StatusMap(pipelines)
