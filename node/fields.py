# Errors of the peer's configuration dataclasses (CanConfig, ClusterConfig, SchedConfig,
# ProbeConfig), naming the field, so that a caller can say where the value came from: the
# testbed's spec names it by its spec path ("clusters.samples"), a peer's JSON document by
# its section.
#
# Rule: a config dataclass is the only declaration of its fields (type, default, check);
# an invalid config never exists, its __post_init__ raises FieldError.

from __future__ import annotations

import math

__all__ = ["FieldError", "check_positive"]


class FieldError(ValueError):
    """`config.field` cannot take its value; `reason` says what it takes (and what it got)."""

    def __init__(self, config: str, field: str, reason: str) -> None:
        super().__init__(f"{config}.{field} {reason}")
        self.config = config
        self.field = field
        self.reason = reason


def check_positive(config: str, obj: object, names: tuple[str, ...], what: str) -> None:
    """Each of `names` must be a finite number > 0 (`what`: "seconds", "ms", ...)."""
    for name in names:
        value = getattr(obj, name)
        if not (
            isinstance(value, int | float)
            and not isinstance(value, bool)
            and math.isfinite(value)
            and value > 0
        ):
            raise FieldError(config, name, f"must be a positive number of {what}, not {value!r}")
