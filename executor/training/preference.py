"""Preference pairs for DPO: records to token ids, stored for the ranks, collated chosen-then-rejected.

Tokenization follows TRL's DPOTrainer (trl/trainer/dpo_trainer.py, TRL 1.16): the prompt is whatever the
prompt+chosen and prompt+rejected renderings share at the front, an implicit prompt is extracted from chat pairs
with TRL's `extract_prompt`, plain-text completions end with the EOS token. Collation is TRL's
`DataCollatorForPreference` (chosen sequences first, rejected second, a completion mask, per-sequence truncation).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from contract.errors import PlanError
from executor.training import data

_KEYS = ("chosen", "rejected")
_COLUMNS = ("prompt_ids", "chosen_ids", "rejected_ids")  # TRL's names, and the stored arrays'


@dataclass(frozen=True)
class PairExample:
    """One preference pair: a shared prompt and two completions, untruncated."""

    prompt_ids: tuple[int, ...]
    chosen_ids: tuple[int, ...]
    rejected_ids: tuple[int, ...]
    sequence_length: int  # what the collator truncates each sequence to

    @property
    def length(self) -> int:
        """Tokens of the longer of the two sequences after truncation (what the micro-batch is padded to)."""
        longest = len(self.prompt_ids) + max(len(self.chosen_ids), len(self.rejected_ids))
        return min(longest, self.sequence_length)

    @property
    def trained_tokens(self) -> int:
        room = max(self.sequence_length - len(self.prompt_ids), 0)
        return min(len(self.chosen_ids), room) + min(len(self.rejected_ids), room)

    def as_trl(self) -> dict[str, list[int]]:
        return {name: list(getattr(self, name)) for name in _COLUMNS}


def _check_record(record: dict[str, Any], number: int) -> None:
    for key in _KEYS:
        if key not in record:
            raise PlanError("dataset.format", f"record {number} has no '{key}'; a preference record is "
                                              '{"prompt": ..., "chosen": ..., "rejected": ...} (strings, or chat '
                                              "messages; the prompt may be left inside chat pairs)")
    values = [record[key] for key in ("prompt", *_KEYS) if key in record]
    if all(isinstance(v, str) for v in values):
        if "prompt" not in record:
            raise PlanError("dataset.format", f"record {number} has text 'chosen'/'rejected' but no 'prompt'; "
                                              "text pairs name their prompt")
        return
    if not all(isinstance(v, list) and v and all(isinstance(m, dict) for m in v) for v in values):
        raise PlanError("dataset.format", f"record {number}: 'prompt', 'chosen' and 'rejected' must all be strings "
                                          "or all be non-empty lists of chat messages")


def _ids(tokenizer: Any, value: str | list[dict[str, Any]], generation_prompt: bool = False) -> list[int]:
    if isinstance(value, str):
        return list(tokenizer(text=value)["input_ids"])
    out = tokenizer.apply_chat_template(value, tokenize=True, return_dict=True,
                                        add_generation_prompt=generation_prompt)
    return list(out["input_ids"])


def tokenize_pair(record: dict[str, Any], number: int, tokenizer: Any, sequence_length: int) -> PairExample:
    from trl.data_utils import common_prefix_length, extract_prompt, is_conversational

    _check_record(record, number)
    fields: dict[str, Any] = dict(record) if "prompt" in record else dict(
        extract_prompt({key: record[key] for key in _KEYS}))
    chat = is_conversational(fields)
    if chat and getattr(tokenizer, "chat_template", None) is None:
        raise PlanError("dataset.format", "chat-formatted pairs need a tokenizer with a chat template; give text "
                                          "pairs or a tokenizer with one")
    if chat:
        prompt = _ids(tokenizer, fields["prompt"], generation_prompt=True)
        chosen = _ids(tokenizer, fields["prompt"] + fields["chosen"])
        rejected = _ids(tokenizer, fields["prompt"] + fields["rejected"])
    else:
        eos = tokenizer.eos_token or ""
        prompt = _ids(tokenizer, fields["prompt"])
        chosen = _ids(tokenizer, fields["prompt"] + _with_eos(fields["chosen"], eos))
        rejected = _ids(tokenizer, fields["prompt"] + _with_eos(fields["rejected"], eos))
    shared = min(common_prefix_length(prompt, chosen), common_prefix_length(prompt, rejected))
    return PairExample(tuple(prompt[:shared]), tuple(chosen[shared:]), tuple(rejected[shared:]), sequence_length)


def _with_eos(text: str, eos: str) -> str:
    return text if text.endswith(eos) else text + eos


def tokenize(records: Sequence[dict[str, Any]], tokenizer: Any, sequence_length: int) -> list[PairExample]:
    """Every record as a pair; a pair whose prompt leaves no room for either completion is a PlanError."""
    pairs = [tokenize_pair(r, number, tokenizer, sequence_length) for number, r in enumerate(records, start=1)]
    for number, pair in enumerate(pairs, start=1):
        if not pair.chosen_ids or not pair.rejected_ids:
            raise PlanError("dataset", f"record {number}: the {'chosen' if not pair.chosen_ids else 'rejected'} "
                                       "response is empty after the prompt; both responses need text")
        if len(pair.prompt_ids) >= sequence_length:
            raise PlanError("training.sequence_length",
                            f"record {number}: its prompt is {len(pair.prompt_ids)} tokens, which leaves nothing of "
                            f"the responses within {sequence_length} tokens; raise training.sequence_length or "
                            "shorten the prompt")
    return pairs


def save(path: Path, pairs: Sequence[PairExample]) -> None:
    """Pairs as flat arrays and lengths, written atomically (data.save_arrays)."""
    import numpy as np

    arrays: dict[str, Any] = {"sequence_length": np.array([pairs[0].sequence_length], dtype=np.int64)}
    for name in _COLUMNS:
        arrays[f"{name}_lengths"], arrays[name] = data.flatten([getattr(p, name) for p in pairs])
    data.save_arrays(path, arrays)


def load(path: Path) -> list[PairExample]:
    import numpy as np

    with np.load(path) as saved:
        sequence_length = int(saved["sequence_length"][0])
        columns = [[tuple(r.tolist()) for r in data.split_rows(saved[name], saved[f"{name}_lengths"])]
                   for name in _COLUMNS]
    return [PairExample(p, c, r, sequence_length) for p, c, r in zip(*columns, strict=True)]
