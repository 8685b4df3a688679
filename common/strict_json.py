"""Parse a JSON object from a client without the ways plain json.loads fails badly: nesting that exhausts the
stack (RecursionError), integers with thousands of digits (Python's digit limit), NaN and Infinity (not JSON),
and text of any size. Every failure is a FieldError naming the field."""

from __future__ import annotations

import json
from typing import Any

from common.bounds import echo
from common.errors import FieldError

# Digits an integer may have: more than any real value (uint64 has 20), far fewer than Python's 4,300 limit.
MAX_INT_DIGITS = 20


def _depth(value: object) -> int:
    """Nesting depth of parsed JSON, without recursion."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        node, depth = stack.pop()
        deepest = max(deepest, depth)
        children = node.values() if isinstance(node, dict) else node if isinstance(node, list) else ()
        stack.extend((child, depth + 1) for child in children if isinstance(child, (dict, list)))
    return deepest


def loads_object(text: str | bytes, field: str, *, max_chars: int, max_depth: int,
                 error: type[FieldError] = FieldError) -> dict[str, Any]:
    """The JSON object in `text`, or `error(field, ...)` saying what is wrong with it."""
    if len(text) > max_chars:
        raise error(field, f"is {len(text):,} characters; at most {max_chars:,} are accepted")

    def bounded_int(digits: str) -> int:
        if len(digits.lstrip("-")) > MAX_INT_DIGITS:
            raise error(field, f"has an integer of {len(digits):,} digits ({echo(digits)}); at most "
                               f"{MAX_INT_DIGITS} are accepted")
        return int(digits)

    def no_constant(name: str) -> None:
        raise error(field, f"contains {name}, which is not JSON; give a finite number")

    try:
        value = json.loads(text, parse_int=bounded_int, parse_constant=no_constant)
    except RecursionError as exc:
        raise error(field, f"nests deeper than {max_depth} levels") from exc
    except json.JSONDecodeError as exc:
        raise error(field, f"is not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno})") from exc
    except UnicodeDecodeError as exc:
        raise error(field, f"is not UTF-8 text ({exc.reason} at byte {exc.start})") from exc
    if not isinstance(value, dict):
        raise error(field, f"must be a JSON object, got {type(value).__name__}")
    if _depth(value) > max_depth:
        raise error(field, f"nests deeper than {max_depth} levels")
    return value
