"""The values of the training options a run names, as plain data: no torch here, so that
`evolution.config.RunConfig` and the `evolve` parser (built by every command, `evolve genome
validate` included) read them without loading it. `evaluation.precision` holds the rules
(and re-exports these names); `evaluation.budget`, itself torch-free, holds ``BUDGETS``."""

PRECISIONS = ("auto", "fp32", "bf16")
#: What a stored result without ``metrics["precision"]`` trained in.
LEGACY_PRECISION = "fp32"

__all__ = ["LEGACY_PRECISION", "PRECISIONS"]
