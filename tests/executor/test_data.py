"""Datasets: formats, masking, packing, refusals, and the deterministic micro-batch order."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import transformers

from contract.errors import PlanError
from contract.run_config import DatasetConfig, DatasetFormat
from executor.training import data


@pytest.fixture(scope="module")
def tokenizer(tiny_model: Path) -> transformers.PreTrainedTokenizerBase:
    return transformers.AutoTokenizer.from_pretrained(tiny_model)


def _jsonl(path: Path, records: list[object]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def _examples(path: Path, fmt: DatasetFormat, tokenizer: object, seq: int = 64,
              packing: bool = False) -> list[data.Example]:
    d = DatasetConfig(local_path=str(path), format=fmt, packing=packing)
    return data.tokenize(data.load_records(d), tokenizer, d, seq)


def test_text_trains_on_every_token_and_ends_with_eos(tmp_path: Path, tokenizer: object) -> None:
    [e] = _examples(_jsonl(tmp_path / "t.jsonl", [{"text": "w1 w2 w3"}]), DatasetFormat.TEXT, tokenizer)
    assert e.labels == e.input_ids
    assert e.input_ids[-1] == tokenizer.eos_token_id  # type: ignore[attr-defined]
    assert tokenizer.decode(e.input_ids, skip_special_tokens=True).split() == ["w1", "w2", "w3"]  # type: ignore[attr-defined]


def test_instruction_masks_the_prompt(tmp_path: Path, tokenizer: object) -> None:
    path = _jsonl(tmp_path / "i.jsonl", [{"instruction": "w1 w2", "input": "w3", "response": "w4 w5"}])
    [e] = _examples(path, DatasetFormat.INSTRUCTION, tokenizer)
    trained = [t for t in e.labels if t != data.IGNORE_INDEX]
    assert tokenizer.decode(trained, skip_special_tokens=True).split() == ["w4", "w5"]  # type: ignore[attr-defined]
    assert e.labels[: len(e.input_ids) - 3] == (data.IGNORE_INDEX,) * (len(e.input_ids) - 3)


def test_chat_trains_on_assistant_turns_only(tmp_path: Path, tokenizer: object) -> None:
    messages = [{"role": "user", "content": "w1"}, {"role": "assistant", "content": "w2 w3"},
                {"role": "user", "content": "w4"}, {"role": "assistant", "content": "w5"}]
    [e] = _examples(_jsonl(tmp_path / "c.jsonl", [{"messages": messages}]), DatasetFormat.CHAT, tokenizer)
    trained = tokenizer.decode([t for t in e.labels if t != data.IGNORE_INDEX])  # type: ignore[attr-defined]
    assert trained.split() == ["w2", "w3", "</s>", "w5", "</s>"]
    assert len(e.labels) == len(e.input_ids)


def test_truncation_and_packing(tmp_path: Path, tokenizer: object) -> None:
    path = _jsonl(tmp_path / "t.jsonl", [{"text": " ".join(["w1"] * 10)}] * 3)
    truncated = _examples(path, DatasetFormat.TEXT, tokenizer, seq=8)
    assert [len(e.input_ids) for e in truncated] == [8, 8, 8]
    whole = _examples(path, DatasetFormat.TEXT, tokenizer, seq=64)
    packed = _examples(path, DatasetFormat.TEXT, tokenizer, seq=8, packing=True)
    assert sum(len(e.input_ids) for e in packed) == sum(len(e.input_ids) for e in whole)  # nothing dropped
    assert all(len(e.input_ids) == 8 for e in packed[:-1])


@pytest.mark.parametrize(("records", "fmt", "field", "words"), [
    ([], DatasetFormat.TEXT, "dataset.local_path", "no records"),
    ([{"prompt": "w1"}], DatasetFormat.TEXT, "dataset.format", "no text field"),
    ([{"instruction": "w1"}], DatasetFormat.INSTRUCTION, "dataset.format", "no response field"),
    ([{"text": "w1"}], DatasetFormat.CHAT, "dataset.format", "messages"),
    ([{"messages": [{"role": "user", "content": "w1"}]}], DatasetFormat.CHAT, "dataset", "no record has a token"),
])
def test_unusable_data_is_refused(tmp_path: Path, tokenizer: object, records: list[object], fmt: DatasetFormat,
                                  field: str, words: str) -> None:
    with pytest.raises(PlanError) as info:
        _examples(_jsonl(tmp_path / "d.jsonl", records), fmt, tokenizer)
    assert info.value.field == field and words in info.value.description


def test_missing_and_malformed_files_are_refused(tmp_path: Path) -> None:
    with pytest.raises(PlanError, match="does not exist"):
        data.load_records(DatasetConfig(local_path=str(tmp_path / "nope.jsonl")))
    (tmp_path / "bad.jsonl").write_text('{"text": "w1"}\n{"text": \n')
    with pytest.raises(PlanError, match="line 2 is not JSON"):
        data.load_records(DatasetConfig(local_path=str(tmp_path / "bad.jsonl")))


def test_order_covers_each_epoch_once_across_ranks_and_starts_with_the_longest() -> None:
    lengths = tuple((i * 7) % 23 + 1 for i in range(40))
    order = data.DataOrder(lengths, micro_batch=3, world_size=2, seed=11)
    assert order.batches_per_epoch == 6
    for epoch in (0, 1):
        seen = [i for g in range(epoch * 6, epoch * 6 + 6) for rank in (0, 1) for i in order.indices(g, rank)]
        assert len(seen) == len(set(seen)) == 36
    first = order.indices(0, 0) + order.indices(0, 1)
    assert sorted((lengths[i] for i in first), reverse=True) == sorted(lengths, reverse=True)[:6]
    assert order.permutation(1) != order.permutation(2)
    again = data.DataOrder(lengths, micro_batch=3, world_size=2, seed=11)
    assert [again.indices(g, 1) for g in range(20)] == [order.indices(g, 1) for g in range(20)]


def test_too_little_data_for_one_micro_batch_per_rank() -> None:
    with pytest.raises(PlanError, match="fewer than one micro-batch"):
        data.DataOrder((5, 6, 7), micro_batch=2, world_size=2, seed=0)


def test_total_steps() -> None:
    order = data.DataOrder(tuple(range(1, 101)), micro_batch=2, world_size=2, seed=0)
    assert data.total_steps(order, epochs=1.0, gradient_accumulation_steps=5, max_steps=0) == 5
    assert data.total_steps(order, epochs=2.5, gradient_accumulation_steps=1, max_steps=0) == 62
    assert data.total_steps(order, epochs=1.0, gradient_accumulation_steps=1, max_steps=7) == 7


def test_a_dataset_by_name_loads_through_datasets(tmp_path: Path) -> None:
    """hub_name goes through datasets.load_dataset; a local folder of JSONL stands in for the hub (no network)."""
    folder = tmp_path / "my-dataset"
    folder.mkdir()
    _jsonl(folder / "train.jsonl", [{"text": "w1 w2"}, {"text": "w3"}])
    records = data.load_records(DatasetConfig(hub_name=str(folder), split="train"))
    assert records == [{"text": "w1 w2"}, {"text": "w3"}]
    with pytest.raises(PlanError, match="could not load") as info:
        data.load_records(DatasetConfig(hub_name=str(folder), split="validation"))
    assert info.value.field == "dataset.hub_name"


def test_examples_round_trip_through_the_tokenized_file(tmp_path: Path) -> None:
    examples = [data.Example((1, 2, 3), (data.IGNORE_INDEX, 2, 3)), data.Example((4,), (4,)),
                data.Example((5, 6), (5, 6))]
    path = tmp_path / "data" / "tokenized.npz"
    data.save_examples(path, examples)
    assert data.load_examples(path) == examples
    assert [p.name for p in path.parent.iterdir()] == ["tokenized.npz"]
