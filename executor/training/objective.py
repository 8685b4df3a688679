"""What one micro-batch trains on and the loss it gives: supervised fine-tuning (text or vision-language) and
DPO. The Trainer's loop, checkpoints and progress are the same for every objective."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
import torch

from contract.schema import DpoSpec
from executor.training import data, dpo
from executor.training.preference import PairExample
from executor.training.vision import VisionExample


@dataclass(frozen=True)
class Batch:
    tensors: dict[str, torch.Tensor]
    tokens: int


@dataclass(frozen=True)
class StepLoss:
    loss: torch.Tensor
    metrics: dict[str, torch.Tensor] = field(default_factory=dict)  # sums over `count` items
    count: int = 0


class BatchObjective(Protocol):
    def collate(self, indices: Sequence[int], device: torch.device) -> Batch: ...

    def loss(self, engine: Any, batch: Batch) -> StepLoss: ...


def _pad(rows: Sequence[Sequence[int]], value: int) -> torch.Tensor:
    width = max(len(r) for r in rows)
    out = torch.full((len(rows), width), value, dtype=torch.long)
    for i, r in enumerate(rows):
        out[i, :len(r)] = torch.tensor(r, dtype=torch.long)
    return out


@dataclass(frozen=True)
class Sft:
    """Next-token loss on the labelled tokens; right padding masked out of attention and loss. Vision examples
    bring their pixel values and image grids, concatenated in batch order as the model matches them."""

    pad_token_id: int
    examples: Sequence[data.Example]  # VisionExample adds images
    image_token_id: int = -1  # vision-language models: marks image positions for M-RoPE (mm_token_type_ids)

    def collate(self, indices: Sequence[int], device: torch.device) -> Batch:
        examples = [self.examples[i] for i in indices]
        ids = _pad([e.input_ids for e in examples], self.pad_token_id)
        labels = _pad([e.labels for e in examples], data.IGNORE_INDEX)
        mask = _pad([[1] * len(e.input_ids) for e in examples], 0)
        tensors = {"input_ids": ids, "labels": labels, "attention_mask": mask}
        images = [e for e in examples if isinstance(e, VisionExample) and e.image_grid_thw.size]
        if images:
            tensors["pixel_values"] = torch.from_numpy(np.concatenate([e.pixel_values for e in images]))
            tensors["image_grid_thw"] = torch.from_numpy(np.concatenate([e.image_grid_thw for e in images]))
            tensors["mm_token_type_ids"] = (ids == self.image_token_id).long()  # 1 image, 0 text (the processor's)
        return Batch({k: v.to(device) for k, v in tensors.items()}, sum(len(e.input_ids) for e in examples))

    def loss(self, engine: Any, batch: Batch) -> StepLoss:
        return StepLoss(engine(**batch.tensors).loss)


@dataclass(frozen=True)
class Dpo:
    """Chosen and rejected sequences of a micro-batch in one forward pass (TRL's DataCollatorForPreference);
    the reference log-probs from `reference`, or, when they were precomputed, from `stored` through the batch."""

    pad_token_id: int
    sequence_length: int
    spec: DpoSpec
    pairs: Sequence[PairExample]
    reference: dpo.Reference | None = None
    stored: torch.Tensor | None = None

    def collate(self, indices: Sequence[int], device: torch.device) -> Batch:
        from trl.trainer.dpo_trainer import DataCollatorForPreference

        rows = []
        for i in indices:
            row: dict[str, Any] = self.pairs[i].as_trl()
            if self.stored is not None:
                row["ref_chosen_logps"], row["ref_rejected_logps"] = float(self.stored[i, 0]), float(self.stored[i, 1])
            rows.append(row)
        tensors = DataCollatorForPreference(pad_token_id=self.pad_token_id, max_length=self.sequence_length)(rows)
        return Batch({k: v.to(device) for k, v in tensors.items()}, int(tensors["attention_mask"].sum()))

    def loss(self, engine: Any, batch: Batch) -> StepLoss:
        policy = dpo.sequence_log_probs(engine, batch.tensors)
        t = batch.tensors
        if "ref_chosen_logps" in t:
            reference = t["ref_chosen_logps"], t["ref_rejected_logps"]
        elif self.reference is not None:
            reference = self.reference(t)
        else:
            raise RuntimeError("a DPO objective needs a reference model or stored reference log-probs")
        losses = dpo.dpo_loss(policy, reference, self.spec)
        return StepLoss(losses.loss, losses.metrics, losses.pairs)
