"""DPO pieces without training: pair tokenization (text, chat, implicit prompt), storage, the loss."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
import transformers

from contract.errors import PlanError
from contract.schema import DpoSpec
from executor.training import dpo, preference


@pytest.fixture(scope="module")
def tokenizer(tiny_model: Path) -> object:
    return transformers.AutoTokenizer.from_pretrained(tiny_model)


def _ids(tok: object, text: str) -> list[int]:
    return list(tok(text=text)["input_ids"])  # type: ignore[operator]


def test_text_pairs_share_the_prompt_and_end_with_eos(tokenizer: object) -> None:
    pair = preference.tokenize_pair({"prompt": "w1 w2", "chosen": " w3 w4", "rejected": " w9"}, 1, tokenizer, 32)
    eos = tokenizer.eos_token_id  # type: ignore[attr-defined]
    assert list(pair.prompt_ids) == _ids(tokenizer, "w1 w2")
    assert list(pair.chosen_ids) == _ids(tokenizer, "w3 w4") + [eos]
    assert list(pair.rejected_ids) == _ids(tokenizer, "w9") + [eos]
    assert pair.length == 2 + 3 and pair.trained_tokens == 3 + 2


def test_chat_pairs_with_an_implicit_prompt_train_on_the_replies_only(tokenizer: object) -> None:
    user = {"role": "user", "content": "w1 w2"}
    record = {"chosen": [user, {"role": "assistant", "content": "w3 w4"}],
              "rejected": [user, {"role": "assistant", "content": "w5"}]}
    pair = preference.tokenize_pair(record, 1, tokenizer, 64)
    prompt = tokenizer.apply_chat_template([user], tokenize=True, add_generation_prompt=True,  # type: ignore[attr-defined]
                                           return_dict=True)["input_ids"]
    assert list(pair.prompt_ids) == list(prompt)
    assert _ids(tokenizer, "w3 w4")[0] == pair.chosen_ids[0] and _ids(tokenizer, "w5")[0] == pair.rejected_ids[0]


@pytest.mark.parametrize(("record", "words"), [
    ({"prompt": "w1", "chosen": " w2"}, "no 'rejected'"),
    ({"chosen": " w2", "rejected": " w3"}, "no 'prompt'"),
    ({"prompt": "w1", "chosen": [{"role": "assistant", "content": "w2"}], "rejected": " w3"}, "all be strings"),
])
def test_malformed_pairs_name_the_record(tokenizer: object, record: dict[str, object], words: str) -> None:
    with pytest.raises(PlanError) as e:
        preference.tokenize([{"prompt": "w1", "chosen": " w2", "rejected": " w3"}, record], tokenizer, 32)
    assert "record 2" in str(e.value) and words in str(e.value)


def test_a_prompt_longer_than_the_sequence_is_refused(tokenizer: object) -> None:
    with pytest.raises(PlanError) as e:
        preference.tokenize([{"prompt": "w1 w2 w3 w4", "chosen": " w5", "rejected": " w6"}], tokenizer, 4)
    assert e.value.field == "training.sequence_length" and "record 1" in str(e.value)


def test_pairs_round_trip_through_storage(tokenizer: object, tmp_path: Path) -> None:
    pairs = preference.tokenize([{"prompt": "w1 w2", "chosen": " w3", "rejected": " w4 w5"},
                                 {"prompt": "w7", "chosen": " w8 w9 w10", "rejected": " w1"}], tokenizer, 16)
    preference.save(tmp_path / "pairs.npz", pairs)
    assert preference.load(tmp_path / "pairs.npz") == pairs


def _policy(chosen: list[float], rejected: list[float], nll: float = 1.5) -> dpo.SequenceLogProbs:
    return dpo.SequenceLogProbs(torch.tensor(chosen), torch.tensor(rejected), torch.tensor(nll))


def test_the_loss_is_ln2_when_policy_equals_reference_and_falls_as_the_margin_grows() -> None:
    same = dpo.dpo_loss(_policy([-3.0, -4.0], [-5.0, -2.0]), (torch.tensor([-3.0, -4.0]), torch.tensor([-5.0, -2.0])),
                        DpoSpec(beta=0.1))
    assert float(same.loss) == pytest.approx(math.log(2))
    assert float(same.metrics["rewards/margin"]) == 0 and float(same.metrics["rewards/accuracy"]) == 0
    ref = (torch.tensor([-3.0]), torch.tensor([-3.0]))
    better = dpo.dpo_loss(_policy([-2.0], [-4.0]), ref, DpoSpec(beta=0.5))
    assert float(better.loss) == pytest.approx(-math.log(1 / (1 + math.exp(-0.5 * 2.0))))
    assert float(better.metrics["rewards/accuracy"]) == 1 and float(better.metrics["rewards/margin"]) == 1.0


def test_label_smoothing_and_the_sft_term_follow_their_definitions() -> None:
    ref = (torch.tensor([-3.0]), torch.tensor([-3.0]))
    policy = _policy([-2.0], [-4.0], nll=1.5)
    z = 0.5 * 2.0
    smoothed = dpo.dpo_loss(policy, ref, DpoSpec(beta=0.5, label_smoothing=0.2))
    expected = -0.8 * math.log(1 / (1 + math.exp(-z))) - 0.2 * math.log(1 / (1 + math.exp(z)))
    assert float(smoothed.loss) == pytest.approx(expected)
    with_sft = dpo.dpo_loss(policy, ref, DpoSpec(beta=0.5, sft_weight=0.3))
    assert float(with_sft.loss) == pytest.approx(-math.log(1 / (1 + math.exp(-z))) + 0.3 * 1.5)
