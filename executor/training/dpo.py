"""The DPO objective on a DeepSpeed engine: sequence log-probs, the reference, the loss and its metrics.

The loss is TRL's: loss_type "sigmoid" with cDPO label smoothing (Mitchell 2023; TRL's sigmoid loss before 1.0,
and its "aot" losses today), plus loss_type "sft" weighted by sft_weight; per-token log-probs come from TRL's
`selective_log_softmax`. The reference is the policy with its adapter disabled (LoRA/QLoRA), a separate frozen
copy (full fine-tuning, or training.dpo_reference_model), or log-probs computed once before the first step and
kept with the job (training.dpo.precompute_reference).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch.nn.functional import logsigmoid

from contract.schema import DpoSpec
from executor.training import data

LogProbs = tuple[torch.Tensor, torch.Tensor]  # (chosen, rejected), one value per pair


@dataclass(frozen=True)
class SequenceLogProbs:
    chosen: torch.Tensor
    rejected: torch.Tensor
    chosen_nll: torch.Tensor  # mean negative log-likelihood per chosen completion token (the SFT term)


def sequence_log_probs(model: Callable[..., Any], batch: dict[str, torch.Tensor]) -> SequenceLogProbs:
    """Summed log-probs of each completion under the model; the batch is chosen rows then rejected rows."""
    from trl.trainer.utils import selective_log_softmax

    logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], use_cache=False).logits
    mask = batch["completion_mask"][:, 1:].float()
    per_token = selective_log_softmax(logits[:, :-1].float(), batch["input_ids"][:, 1:]) * mask
    chosen, rejected = per_token.sum(dim=1).chunk(2, dim=0)
    chosen_tokens, _ = per_token.chunk(2, dim=0)
    chosen_mask, _ = mask.chunk(2, dim=0)
    nll = -chosen_tokens.sum() / chosen_mask.sum().clamp(min=1.0)
    return SequenceLogProbs(chosen, rejected, nll)


@dataclass(frozen=True)
class Losses:
    loss: torch.Tensor
    metrics: dict[str, torch.Tensor]  # detached, summed over the micro-batch's pairs (accuracy: count of pairs)
    pairs: int


def dpo_loss(policy: SequenceLogProbs, reference: LogProbs, spec: DpoSpec) -> Losses:
    chosen_ratio = policy.chosen - reference[0]
    rejected_ratio = policy.rejected - reference[1]
    logits = spec.beta * (chosen_ratio - rejected_ratio)
    per_pair = -(1 - spec.label_smoothing) * logsigmoid(logits) - spec.label_smoothing * logsigmoid(-logits)
    loss = per_pair.mean()
    if spec.sft_weight:
        loss = loss + spec.sft_weight * policy.chosen_nll
    chosen_reward, rejected_reward = (spec.beta * chosen_ratio).detach(), (spec.beta * rejected_ratio).detach()
    metrics = {"rewards/chosen": chosen_reward.sum(), "rewards/rejected": rejected_reward.sum(),
               "rewards/accuracy": (chosen_reward > rejected_reward).float().sum(),
               "rewards/margin": (chosen_reward - rejected_reward).sum(),
               "logps/chosen": policy.chosen.detach().sum(), "logps/rejected": policy.rejected.detach().sum()}
    return Losses(loss, metrics, int(policy.chosen.shape[0]))


# The reference log-probs of a batch (chosen, rejected), computed without gradients.
Reference = Callable[[dict[str, torch.Tensor]], LogProbs]


def policy(engine: Any) -> Reference:
    """The model itself: a frozen reference copy, or the policy before its first step (precomputed log-probs)."""
    def log_probs(batch: dict[str, torch.Tensor]) -> LogProbs:
        with torch.no_grad():
            lp = sequence_log_probs(engine, batch)
        return lp.chosen, lp.rejected
    return log_probs


def adapter_disabled(engine: Any) -> Reference:
    """The policy's base model: PEFT's disable_adapter() on the engine's module (no second copy)."""
    base = policy(engine)

    def log_probs(batch: dict[str, torch.Tensor]) -> LogProbs:
        with engine.module.disable_adapter():
            return base(batch)
    return log_probs


def frozen_copy(model: Any, ds_config: dict[str, Any]) -> Reference:
    """A separate frozen model wrapped the way TRL's prepare_deepspeed does (trl/models/utils.py): ZeRO-3 keeps
    it partitioned like the policy, lower stages hold it whole; no optimizer, eval mode."""
    import deepspeed

    config = copy.deepcopy(ds_config)
    for key in ("optimizer", "scheduler"):
        config.pop(key, None)
    if config.get("zero_optimization", {}).get("stage", 0) != 3:
        config["zero_optimization"] = {"stage": 0}
    model.requires_grad_(False)
    engine, *_ = deepspeed.initialize(model=model, config=config)
    engine.eval()
    return policy(engine)


def _rounds(count: int, per_round: int) -> int:
    return -(-count // per_round)


def precompute(reference: Reference, count: int, micro_batch: int, rank: int,
               world_size: int, collate: Callable[[Sequence[int]], dict[str, torch.Tensor]]) -> torch.Tensor:
    """Reference log-probs of every pair, shape (count, 2), computed once: each rank takes its share of every
    round (ZeRO-3 needs every rank in every forward, so a rank past the end repeats pair 0 and drops it),
    then the shares are gathered so that every rank holds them all."""
    mine: list[tuple[int, float, float]] = []
    for r in range(_rounds(count, micro_batch * world_size)):
        start = (r * world_size + rank) * micro_batch
        indices = [i for i in range(start, start + micro_batch) if i < count]
        chosen, rejected = reference(collate(indices or [0]))
        mine += [(i, float(c), float(j)) for i, c, j in zip(indices, chosen.tolist(), rejected.tolist(),
                                                             strict=False)]
    shares: list[Any] = [mine]
    if dist.is_initialized() and world_size > 1:
        shares = [None] * world_size
        dist.all_gather_object(shares, mine)
    out = torch.zeros((count, 2), dtype=torch.float32)
    for share in shares:
        for i, c, j in share:
            out[i, 0], out[i, 1] = c, j
    return out


def save_reference(path: Path, values: torch.Tensor) -> None:
    data.write_atomically(path, lambda f: torch.save(values, f))


def load_reference(path: Path, count: int) -> torch.Tensor | None:
    if not path.is_file():
        return None
    values: torch.Tensor = torch.load(path, weights_only=True)
    return values if tuple(values.shape) == (count, 2) else None
