"""What the CLI's flags accept: counts with suffixes (10M), fractions, margins, and a model given as a folder, a
config.json or a catalog name. Each parser raises with a message that says what to write instead."""

from __future__ import annotations

import argparse
import math
import re
from collections.abc import Callable
from pathlib import Path

from tunefleet.v1 import model_pb2

from contract.limits import CONFIG_JSON_CHARS

_SUFFIX = {"": 1, "k": 10**3, "m": 10**6, "b": 10**9, "g": 10**9, "t": 10**12}


class BadInputError(Exception):
    """A flag the user must change; the message names it. The CLI exits with its bad-input status (2)."""


def count(text: str) -> int:
    """'10M' -> 10_000_000; '1.5B' -> 1_500_000_000; '2e7' -> 20_000_000."""
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:e[0-9]+)?)\s*([kmbgt]?)\s*", text.lower())
    if not m:
        raise argparse.ArgumentTypeError(f"'{text}' is not a count; write e.g. 500000, 10M or 1.5B")
    value = float(m.group(1)) * _SUFFIX[m.group(2)]
    if not math.isfinite(value) or value >= 2 ** 63:
        raise argparse.ArgumentTypeError(f"'{text}' is too large to be a count")
    return int(value)


def _number(cast: type[int] | type[float], kind: str, zero_allowed: bool = False) -> Callable[[str], float]:
    """A finite number above 0 (or from 0, with zero_allowed)."""
    bound = "a finite number of 0 or more" if zero_allowed else "1 or more" if cast is int else "greater than 0"

    def parse(text: str) -> float:
        try:
            value = cast(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"'{text}' is not {kind}") from None
        if not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"'{text}' is not a finite number")
        if value < 0 or (value == 0 and not zero_allowed):
            raise argparse.ArgumentTypeError(f"must be {bound}, got {value}")
        return value
    return parse


positive_int = _number(int, "a whole number")
positive_float = _number(float, "a number")
non_negative_float = _number(float, "a number", zero_allowed=True)


def fraction(text: str) -> float:
    """A number in [0, 1)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not a number") from None
    if not 0.0 <= value < 1.0:
        raise argparse.ArgumentTypeError(f"must be at least 0 and less than 1, got {text}")
    return value


def margin(text: str) -> float:
    """'10%' or 0.1: headroom demanded beyond the predicted total, as a fraction of it (0 to 1)."""
    number = text.strip().removesuffix("%")
    try:
        value = float(number) / (100 if text.strip().endswith("%") else 1)
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not a margin; write e.g. 10% or 0.1") from None
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"must be between 0% and 100%, got {text}")
    return value


def choice_list(choices: dict[str, int], what: str) -> Callable[[str], list[int]]:
    """'lora,qlora' -> the proto values of those spellings, in the order given, each once; '' -> []."""

    def parse(text: str) -> list[int]:
        values: list[int] = []
        for word in (w.strip() for w in text.split(",")):
            if not word:
                continue
            if word not in choices:
                raise argparse.ArgumentTypeError(f"unknown {what} {word!r}; choose from {', '.join(choices)}")
            if choices[word] in values:
                raise argparse.ArgumentTypeError(f"{word!r} is given twice; name each {what} once")
            values.append(choices[word])
        return values
    return parse


_MODEL_FORMS = ("give the model's folder (with its config.json), the config.json itself, or a catalog name "
                "('tunefleet models')")


def _looks_local(text: str) -> bool:
    """A path a user typed (./tiny, ../m, /models/x, ~/m, C:\\m), as opposed to a hub id such as org/name."""
    return text.startswith((".", "/", "~", "\\")) or (len(text) > 1 and text[1] == ":") or text.endswith(".json")


def model_ref(text: str) -> model_pb2.ModelRef:
    """A catalog name, or a config.json (or a folder holding one), carried with the folder's absolute path so a saved
    plan still finds the weights from another working directory."""
    path = Path(text).expanduser()
    if path.is_dir():
        path = path / "config.json"
        if not path.is_file():
            raise BadInputError(f"--model: folder {text} has no config.json; {_MODEL_FORMS}")
    if path.is_file():
        try:
            size = path.stat().st_size
            if size > CONFIG_JSON_CHARS:
                raise BadInputError(f"--model: {path} is {size:,} bytes; a config.json is a few KB (at most "
                                    f"{CONFIG_JSON_CHARS:,} are read): point --model at the model's config.json")
            with path.open("rb") as f:
                text = f.read(CONFIG_JSON_CHARS + 1).decode("utf-8")
        except OSError as exc:
            raise BadInputError(f"--model: cannot read {path}: {exc.strerror}") from None
        except UnicodeDecodeError as exc:
            raise BadInputError(f"--model: {path} is not UTF-8 text (byte {exc.object[exc.start]:#04x} at offset "
                                f"{exc.start:,}); point --model at the model's config.json") from None
        return model_pb2.ModelRef(config_json=text, weights=str(path.parent.resolve()))
    if _looks_local(text):
        raise BadInputError(f"--model: {text} does not exist (looked in {Path.cwd()}); {_MODEL_FORMS}")
    return model_pb2.ModelRef(catalog_name=text)
