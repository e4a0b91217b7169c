"""One construct per concern; `infra.stack.PipelineStack` wires them together."""
