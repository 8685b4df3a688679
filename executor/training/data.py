"""Datasets: JSONL records (text, instruction/response, chat) to token ids with masked labels, and the
deterministic order in which micro-batches are drawn, so that a resumed run sees the same data.
"""

from __future__ import annotations

import json
import random
import secrets
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, BinaryIO, Protocol

from contract.errors import PlanError
from contract.limits import MAX_RECORD_BYTES
from contract.run_config import DatasetConfig, DatasetFormat

IGNORE_INDEX = -100  # label value transformers' cross-entropy skips


class Sized(Protocol):
    """An example of any objective: its length orders the data (longest first), trained_tokens counts it."""

    @property
    def length(self) -> int: ...

    @property
    def trained_tokens(self) -> int: ...
_PROMPT_KEYS = ("instruction", "prompt", "question")
_RESPONSE_KEYS = ("response", "output", "completion", "answer")


@dataclass(frozen=True)
class Example:
    input_ids: tuple[int, ...]
    labels: tuple[int, ...]

    @property
    def length(self) -> int:
        return len(self.input_ids)

    @property
    def trained_tokens(self) -> int:
        return sum(1 for t in self.labels if t != IGNORE_INDEX)


def load_records(d: DatasetConfig) -> list[dict[str, Any]]:
    """Records from a local JSONL file or a hub dataset; PlanError for a missing, unreadable or empty source."""
    if d.hub_name:
        import datasets  # only for hub datasets

        try:
            rows = datasets.load_dataset(d.hub_name, split=d.split)
        except Exception as e:  # the hub raises many types; the message is what the user needs
            raise PlanError("dataset.hub_name", f"could not load {d.hub_name!r} split {d.split!r}: {e}") from e
        records = [dict(r) for r in rows]
        field = "dataset.hub_name"
    else:
        path = Path(d.local_path)
        field = "dataset.local_path"
        if not path.is_file():
            raise PlanError(field, f"{path} does not exist or is not a file; "
                                   "give a JSONL file with one record per line")
        records = []
        with path.open("rb") as f:
            number = 0
            while line := f.readline(MAX_RECORD_BYTES + 1):
                number += 1
                if len(line) > MAX_RECORD_BYTES:
                    raise PlanError(field, f"{path} line {number} is longer than {MAX_RECORD_BYTES:,} bytes, the "
                                           "most one record may hold; split it, or check that the file is JSONL "
                                           "(one record per line)")
                if line.strip():
                    records.append(_record(line, path, number, field))
    if not records:
        raise PlanError(field, f"{d.local_path or d.hub_name} has no records; a training set needs at least one")
    return records


def _record(line: bytes, path: Path, number: int, field: str) -> dict[str, Any]:
    """One JSONL line as a JSON object; PlanError naming the line for anything else."""
    where = f"{path} line {number}"
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError as e:
        raise PlanError(field, f"{where} is not UTF-8 (byte {e.object[e.start]:#04x} at column {e.start + 1}); "
                               "save the file as UTF-8") from e
    try:
        record = json.loads(text)
    except json.JSONDecodeError as e:
        raise PlanError(field, f"{where} is not JSON: {e.msg} (column {e.colno})") from e
    except RecursionError as e:
        raise PlanError(field, f"{where} nests deeper than JSON parsing allows; flatten the record") from e
    except ValueError as e:  # e.g. an integer of more digits than Python converts
        raise PlanError(field, f"{where} is not usable JSON: {e}") from e
    if not isinstance(record, dict):
        raise PlanError(field, f"{where} is not a JSON object")
    return record


def _field(record: dict[str, Any], keys: Sequence[str], number: int, what: str) -> str:
    for key in keys:
        value = record.get(key)
        if isinstance(value, str):
            return value
    raise PlanError("dataset.format", f"record {number} has no {what} field (one of {', '.join(keys)}); "
                                      "check dataset.format matches the file")


def _text(record: dict[str, Any], number: int, tokenizer: Any) -> Example:
    ids = tokenizer(_field(record, ("text",), number, "text"), add_special_tokens=True)["input_ids"]
    ids = list(ids) + ([tokenizer.eos_token_id] if tokenizer.eos_token_id is not None else [])
    return Example(tuple(ids), tuple(ids))


def _instruction(record: dict[str, Any], number: int, tokenizer: Any) -> Example:
    prompt = _field(record, _PROMPT_KEYS, number, "instruction")
    if isinstance(record.get("input"), str) and record["input"]:
        prompt = f"{prompt}\n\n{record['input']}"
    response = _field(record, _RESPONSE_KEYS, number, "response")
    prompt_ids = list(tokenizer(prompt + "\n\n", add_special_tokens=True)["input_ids"])
    response_ids = list(tokenizer(response, add_special_tokens=False)["input_ids"])
    if tokenizer.eos_token_id is not None:
        response_ids.append(tokenizer.eos_token_id)
    return Example(tuple(prompt_ids + response_ids), tuple([IGNORE_INDEX] * len(prompt_ids) + response_ids))


def render(tokenizer: Any, messages: list[dict[str, Any]], generation_prompt: bool) -> list[int]:
    out = tokenizer.apply_chat_template(messages, tokenize=True, add_generation_prompt=generation_prompt,
                                        return_dict=True)
    return list(out["input_ids"])


Render = Callable[[list[dict[str, Any]], bool], list[int]]


def chat(record: dict[str, Any], number: int, tokenizer: Any, render_ids: Render | None = None) -> Example:
    """Labels on assistant turns only: each turn's tokens are the rendering of messages[:i+1] past the
    rendering of messages[:i] with the generation prompt (templates render conversations prefix-stably).
    render_ids turns messages into ids (vision data expands image placeholders there)."""
    messages = record.get("messages")
    if not isinstance(messages, list) or not messages:
        raise PlanError("dataset.format", f"record {number} has no 'messages' list; chat data is "
                                          '{"messages": [{"role": ..., "content": ...}, ...]}')
    if getattr(tokenizer, "chat_template", None) is None:
        raise PlanError("dataset.format", "the tokenizer has no chat template; use format instruction or text, "
                                          "or a tokenizer with a chat template")
    to_ids = render_ids or partial(render, tokenizer)
    ids: list[int] = []
    labels: list[int] = []
    for i, message in enumerate(messages):
        full = to_ids(messages[: i + 1], False)
        if message.get("role") == "assistant":
            prefix = to_ids(messages[:i], True) if i else []
            if full[: len(prefix)] != prefix or full[: len(ids)] != ids:
                raise PlanError("dataset.format", f"record {number}: the chat template does not render "
                                                  "conversations prefix-stably, so prompts cannot be masked")
            labels += [IGNORE_INDEX] * (len(prefix) - len(ids)) + full[len(prefix):]
        else:
            labels += [IGNORE_INDEX] * (len(full) - len(ids))
        ids = full
    return Example(tuple(ids), tuple(labels))


_TOKENIZE = {DatasetFormat.TEXT: _text, DatasetFormat.INSTRUCTION: _instruction, DatasetFormat.CHAT: chat}


def pack(examples: Sequence[Example], sequence_length: int) -> list[Example]:
    """Concatenate examples and cut them into full-length sequences; the last one may be shorter."""
    ids = [t for e in examples for t in e.input_ids]
    labels = [t for e in examples for t in e.labels]
    return [Example(tuple(ids[i:i + sequence_length]), tuple(labels[i:i + sequence_length]))
            for i in range(0, len(ids), sequence_length)]


def tokenize(records: Sequence[dict[str, Any]], tokenizer: Any, d: DatasetConfig,
             sequence_length: int) -> list[Example]:
    """Token ids truncated to the plan's sequence length (or packed to it); examples with nothing to learn dropped."""
    if d.format not in _TOKENIZE:
        raise PlanError("dataset.format", f"{d.format.value} records are preference pairs for DPO; set "
                                          "training.objective dpo, or give text, instruction or chat data")
    examples = [_TOKENIZE[d.format](r, number, tokenizer) for number, r in enumerate(records, start=1)]
    if d.packing:
        examples = pack(examples, sequence_length)
    else:
        examples = [Example(e.input_ids[:sequence_length], e.labels[:sequence_length]) for e in examples]
    examples = [e for e in examples if e.trained_tokens > 0]
    if not examples:
        raise PlanError("dataset", "no record has a token to train on after masking prompts and truncating to "
                                   f"{sequence_length} tokens; check dataset.format and training.sequence_length")
    return examples


def write_atomically(path: Path, write: Callable[[BinaryIO], object]) -> None:
    """Write path through a hidden partial file renamed into place, so a reader never sees half a file (the
    partial's name is this writer's own: the nodes of a multi-node run write the same file on shared storage)."""
    partial = path.with_name(f".{path.name}.{secrets.token_hex(6)}.partial")
    path.parent.mkdir(parents=True, exist_ok=True)
    with partial.open("wb") as f:
        write(f)
    partial.replace(path)


def save_arrays(path: Path, arrays: dict[str, Any]) -> None:
    """numpy arrays as one .npz file, atomically."""
    import numpy as np

    write_atomically(path, lambda f: np.savez(f, **arrays))


def flatten(rows: Sequence[Sequence[int]]) -> tuple[Any, Any]:
    """(lengths, concatenation) of integer rows: the stored form of token ids."""
    import numpy as np

    return (np.array([len(r) for r in rows], dtype=np.int64),
            np.fromiter((t for r in rows for t in r), np.int64))


def split_rows(flat: Any, lengths: Any) -> list[Any]:
    """The rows of a flattened array back, by their lengths (the inverse of flatten)."""
    import numpy as np

    ends = np.cumsum(lengths).tolist()
    return [flat[a:b] for a, b in zip([0, *ends[:-1]], ends, strict=True)]


def token_arrays(examples: Sequence[Example]) -> dict[str, Any]:
    """Token ids and labels of examples as stored arrays (one flat array each, and the lengths)."""
    lengths, ids = flatten([e.input_ids for e in examples])
    return {"lengths": lengths, "input_ids": ids, "labels": flatten([e.labels for e in examples])[1]}


def save_examples(path: Path, examples: Sequence[Example]) -> None:
    """Write tokenized examples for the ranks, atomically."""
    save_arrays(path, token_arrays(examples))


def token_rows(saved: Any) -> tuple[list[tuple[int, ...]], list[tuple[int, ...]]]:
    """(input ids, labels) of every stored example, from what token_arrays wrote."""
    return ([tuple(r.tolist()) for r in split_rows(saved["input_ids"], saved["lengths"])],
            [tuple(r.tolist()) for r in split_rows(saved["labels"], saved["lengths"])])


def load_examples(path: Path) -> list[Example]:
    import numpy as np

    with np.load(path) as saved:
        ids, labels = token_rows(saved)
    return [Example(i, lab) for i, lab in zip(ids, labels, strict=True)]


@dataclass(frozen=True)
class DataOrder:
    """Which examples each rank reads for every micro-batch of the run, as a pure function of the seed.

    Global micro-batch g draws world_size × micro_batch examples from epoch g // batches_per_epoch, in that
    epoch's seeded permutation. Epoch 0 starts with the longest examples, so step 1 is the preflight on the
    longest batch. A run resumed at micro-batch g reads exactly what the uninterrupted run would have.
    """

    lengths: tuple[int, ...]
    micro_batch: int
    world_size: int
    seed: int

    @classmethod
    def of(cls, examples: Sequence[Sized], micro_batch: int, world_size: int, seed: int) -> DataOrder:
        return cls(tuple(e.length for e in examples), micro_batch, world_size, seed)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_permutations", {})
        if len(self.lengths) < self.global_micro_batch:
            raise PlanError("dataset", f"{len(self.lengths)} examples are fewer than one micro-batch on every rank "
                                       f"({self.micro_batch} × {self.world_size} ranks); add data or lower "
                                       "training.micro_batch_size")

    @property
    def global_micro_batch(self) -> int:
        return self.micro_batch * self.world_size

    @property
    def batches_per_epoch(self) -> int:
        return len(self.lengths) // self.global_micro_batch

    def permutation(self, epoch: int) -> list[int]:
        cache: dict[int, list[int]] = self._permutations  # type: ignore[attr-defined]
        if epoch not in cache:
            cache.clear()
            cache[epoch] = self._permute(epoch)
        return cache[epoch]

    def _permute(self, epoch: int) -> list[int]:
        order = list(range(len(self.lengths)))
        random.Random(self.seed * 1_000_003 + epoch).shuffle(order)
        if epoch == 0:
            longest = sorted(order, key=lambda i: -self.lengths[i])[: self.global_micro_batch]
            first = set(longest)
            order = longest + [i for i in order if i not in first]
        return order

    def indices(self, micro_batch_index: int, rank: int) -> list[int]:
        epoch, within = divmod(micro_batch_index, self.batches_per_epoch)
        start = within * self.global_micro_batch + rank * self.micro_batch
        return self.permutation(epoch)[start:start + self.micro_batch]

    def epoch_of(self, micro_batch_index: int) -> float:
        return micro_batch_index / self.batches_per_epoch


def total_steps(order: DataOrder, epochs: float, gradient_accumulation_steps: int, max_steps: int) -> int:
    """Optimizer steps of the run: the plan's max_steps, else whole micro-batches over the epochs."""
    if max_steps:
        return max_steps
    return max(1, int(order.batches_per_epoch * epochs) // gradient_accumulation_steps)
