"""Bounds every request respects before any work is done: finite numbers inside documented ranges, and strings
and lists of capped length. One walk over a protobuf message (cost proportional to its size, which the server's
receive limit caps); the first violation raises a FieldError naming the field, with the value echoed short."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message

from common.errors import FieldError

# gRPC's own default receive limit (4 MiB) stated explicitly, and a send limit: no response may grow past it. Here,
# beside the other bounds, so that what sizes a plan (contract.run_config) needs no gRPC to import.
MAX_RECEIVE_MESSAGE_BYTES = 4 * 1024 * 1024
MAX_SEND_MESSAGE_BYTES = 16 * 1024 * 1024
# A name (GPU, flavor, model, module, id, path) longer than this is a mistake or an attack, never a name.
DEFAULT_STRING_CHARS = 256
# No list in a request needs more entries than the catalog has GPUs, flavors or modules.
DEFAULT_LIST_ITEMS = 64
# How much of a client's value an error message (and so the log) repeats.
ECHO_CHARS = 64

_FLOATS = (FieldDescriptor.TYPE_DOUBLE, FieldDescriptor.TYPE_FLOAT)
_TEXT = (FieldDescriptor.TYPE_STRING, FieldDescriptor.TYPE_BYTES)


# The largest sequence number or count a request may name: protobuf's uint64 fields take no more, int64s half.
MAX_COUNT = 2**63 - 1


def parse_count(text: str) -> int | None:
    """A non-negative decimal count written in ASCII digits, at most MAX_COUNT; None for anything else (str.isdigit
    takes '²' and other digits int() refuses, and any length)."""
    if not (text.isascii() and text.isdigit()) or len(text) > len(str(MAX_COUNT)):
        return None
    value = int(text)
    return value if value <= MAX_COUNT else None


def echo(value: object, limit: int = ECHO_CHARS) -> str:
    """`value` as repr, cut to `limit` characters with the length said: safe to put in an error or a log line."""
    if isinstance(value, (str, bytes)) and len(value) > limit:
        return f"{value[:limit]!r}… ({len(value):,} characters)"
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit]}… ({len(text):,} characters)"


@dataclass(frozen=True)
class Range:
    """Inclusive bounds of a number field; `why` says where the bound comes from (shown to the client)."""

    low: float
    high: float
    why: str = ""

    def check(self, path: str, value: float) -> None:
        if not self.low <= value <= self.high:
            because = f" ({self.why})" if self.why else ""
            raise FieldError(path, f"{echo(value)} is outside [{_num(self.low)}, {_num(self.high)}]{because}")


def _num(x: float) -> str:
    return f"{x:g}" if isinstance(x, float) and not x.is_integer() else f"{int(x):,}"


def _lookup(table: Mapping[str, int], path: str, default: int) -> int:
    """The cap for `path`, or for its nearest enclosing message that has one ("prediction" covers
    "prediction.fit.notes"), or the default."""
    while path:
        if path in table:
            return table[path]
        path = path.rpartition(".")[0]
    return default


@dataclass(frozen=True)
class Bounds:
    """Per-field limits, keyed by field path without list indices ("constraints.allowed_gpus"); string and list
    caps also apply to every field under a message path they name."""

    ranges: Mapping[str, Range] = field(default_factory=dict)
    string_chars: Mapping[str, int] = field(default_factory=dict)
    list_items: Mapping[str, int] = field(default_factory=dict)

    def prefixed(self, prefix: str) -> Bounds:
        """The same limits for messages nested under `prefix` (a Plan inside a SubmitRequest: "plan.")."""
        return Bounds({prefix + k: v for k, v in self.ranges.items()},
                      {prefix + k: v for k, v in self.string_chars.items()},
                      {prefix + k: v for k, v in self.list_items.items()})

    def merged(self, other: Bounds) -> Bounds:
        return Bounds({**self.ranges, **other.ranges}, {**self.string_chars, **other.string_chars},
                      {**self.list_items, **other.list_items})

    def check(self, message: Message, prefix: str = "") -> None:
        """Raise FieldError for the first field out of bounds; fields left at their default are not visited."""
        for fd, value in message.ListFields():
            path = f"{prefix}{fd.name}"
            if fd.is_repeated:
                if fd.message_type is not None and fd.message_type.GetOptions().map_entry:
                    items = list(value.items())
                    self._count(path, len(items))
                    for key, item in items:
                        self._value(f"{path}[{echo(key)}]", path, fd.message_type.fields_by_name["key"], key)
                        self._value(f"{path}[{echo(key)}]", path, fd.message_type.fields_by_name["value"], item)
                    continue
                self._count(path, len(value))
                for i, item in enumerate(value):
                    self._value(f"{path}[{i}]", path, fd, item)
            else:
                self._value(path, path, fd, value)

    def _count(self, path: str, n: int) -> None:
        cap = _lookup(self.list_items, path, DEFAULT_LIST_ITEMS)
        if n > cap:
            raise FieldError(path, f"has {n:,} entries; at most {cap:,} are accepted")

    def _value(self, path: str, key: str, fd: FieldDescriptor, value: object) -> None:
        if fd.type in (FieldDescriptor.TYPE_MESSAGE, FieldDescriptor.TYPE_GROUP):
            self.check(value, f"{key}.")  # type: ignore[arg-type]
            return
        if fd.type in _TEXT:
            cap = _lookup(self.string_chars, key, DEFAULT_STRING_CHARS)
            if len(value) > cap:  # type: ignore[arg-type]
                raise FieldError(path, f"is {len(value):,} characters long ({echo(value)}); "  # type: ignore
                                       f"at most {cap:,} are accepted")
            return
        if fd.type in _FLOATS and not math.isfinite(value):  # type: ignore[arg-type]
            raise FieldError(path, f"is {value}; give a finite number")
        bound = self.ranges.get(key)
        if bound is not None and fd.type != FieldDescriptor.TYPE_ENUM and fd.type != FieldDescriptor.TYPE_BOOL:
            bound.check(path, value)  # type: ignore[arg-type]
