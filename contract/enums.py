"""Each enum of the contract is defined once, in the protos; every other spelling of it is derived here.

The CLI spelling of a proto value is its name without the enum's prefix, lower-case, `_` as `-`
(METHOD_LORA_8BIT -> "lora-8bit"). A domain enum (contract.schema, planner.search) names its members as the proto
does without the prefix (Method.LORA_8BIT), and proto_table pairs them by that name, refusing at import a domain
enum and a proto enum that disagree.
"""

from __future__ import annotations

import enum
from typing import Any, TypeVar, overload

from contract.errors import InvalidFieldError

E = TypeVar("E", bound=enum.Enum)


def spellings(proto_enum: Any, prefix: str) -> dict[str, int]:
    """CLI spelling -> proto value, for every value but *_UNSPECIFIED, in the proto's order."""
    return {name.removeprefix(prefix).lower().replace("_", "-"): value
            for name, value in proto_enum.items() if not name.endswith("_UNSPECIFIED")}


def proto_table(domain: type[E], proto_enum: Any, prefix: str) -> dict[E, int]:
    """Domain member -> proto value; every member has a proto value and every proto value a member."""
    named = {name.removeprefix(prefix): value for name, value in proto_enum.items()
             if not name.endswith("_UNSPECIFIED")}
    if set(named) != set(domain.__members__):
        raise TypeError(f"{domain.__name__} {sorted(domain.__members__)} and {prefix}* {sorted(named)} disagree; "
                        "change both together")
    return {domain[name]: value for name, value in named.items()}


# Each table read backwards (proto value -> member), built on first use: tables are module constants.
_BACKWARDS: dict[int, dict[int, Any]] = {}


@overload
def from_proto(table: dict[E, int], value: int, default: E, field: str) -> E: ...


@overload
def from_proto(table: dict[E, int], value: int, default: None, field: str) -> E | None: ...


def from_proto(table: dict[E, int], value: int, default: E | None, field: str) -> E | None:
    """The domain member of a proto value (0, unset: the default); InvalidFieldError naming the field otherwise."""
    if value == 0:
        return default
    backwards = _BACKWARDS.get(id(table))
    if backwards is None:
        backwards = _BACKWARDS[id(table)] = {proto: member for member, proto in table.items()}
    member: E | None = backwards.get(value)
    if member is None:
        raise InvalidFieldError(field, f"unknown enum value {value}; use one of "
                                       f"{', '.join(m.value for m in table)}")
    return member
