"""What a rank's GPU holds while its model loads, before the first step: a quantised model whole on every GPU. Pure.

transformers loads a bitsandbytes model onto the GPU whole, whatever the ZeRO stage: under a quantizer it skips
zero.Init (modeling_utils: `is_deepspeed_zero3_enabled() and not _is_quantized`) and the quantizer places the model on
the rank's own GPU (quantizer_bnb_4bit.update_device_map: {"": torch.cuda.current_device()}); transformers before 5
parked each quantised weight on the CPU instead, and DeepSpeed's engine moved the module to the GPU whole before its
ZeRO-3 optimizer partitioned it (engine._configure_distributed_model: module.to(device) for a model not built under
zero.Init). So ZeRO-3 shards a QLoRA model only once all of it is on every GPU: on more GPUs each step needs less,
loading does not. Reported by users (deepspeedai/DeepSpeed#5660, huggingface/peft#1844, 2024: "parameters first be
fully loaded to each GPU and then be sharded") and simulated (benchmarks/simulate.py counts loading's peak for a
quantised model: simulate.csv's row 'Llama-2-70b-hf qlora[all-linear] mb2x2048 ckpt sdpa z3 x2' peaks there).

Then a Trainer's script runs PEFT's prepare_model_for_kbit_training, which casts every parameter that is not 4-bit
to fp32 (peft.utils.other: the embeddings, norms, output head and a mixture of experts' fused expert tensors),
parameter by parameter; PEFT adds the adapters (fp32, for a bf16 base); and DeepSpeed's bf16 engine casts each upcast
parameter back to bf16, its fp32 source freed once its bf16 copy is made. TRL's trainers do not upcast (they cast
QLoRA's adapters to bf16), nor does tunefleet's executor under mixed precision, where DeepSpeed would cast the upcast
back (for a mixture of experts, whose expert tensors bitsandbytes leaves in bf16, the upcast alone doubled them).
"""

from __future__ import annotations

from contract.model import Architecture
from contract.schema import Precision, TrainingSpec
from planner import recipes
from planner.architecture import parameter_counts
from planner.parameters import ParameterSplit, weight_storage_bytes

BF16_BYTES = 2


def largest_unquantised_params(a: Architecture) -> int:
    """The largest parameter bitsandbytes leaves dense: the embedding, an untied output head, or a sparse layer's
    fused gate-and-up expert tensor (E x 2I x H; transformers' fused experts are not nn.Linear)."""
    counts = parameter_counts(a)
    experts_gate_up = 2 * a.num_experts * a.intermediate_size * a.hidden_size if a.num_experts else 0
    return max(counts.embedding, counts.lm_head, experts_gate_up)


def loading_bytes(a: Architecture, split: ParameterSplit, t: TrainingSpec) -> int:
    """The peak of loading a quantised model (0 for a dense one, whose loading the step's own peak covers, and under
    FSDP, which shards a quantised model unit by unit as it places it): the model whole as stored and the adapters
    PEFT adds (fp32, whatever casts them later: TRL to bf16, DeepSpeed to the step's dtype). Where PEFT's
    prepare_model_for_kbit_training runs (`t.upcasts_when_loading`), every dense parameter upcast to fp32 too,
    and the bf16 copy of the largest beside its fp32 one as DeepSpeed casts it back (without DeepSpeed, its bf16 source
    beside its fp32 copy as PEFT casts it: the same bytes). Simulated with the upcast, the peak at DeepSpeed's cast of
    the tied embedding: simulate.csv's row 'Llama-3.2-1B qlora[all-linear] mb1x2048 ckpt sdpa z3 x2'."""
    if not split.quantised or recipes.fsdp(t):
        return 0
    stored = int(weight_storage_bytes(split, t)) + split.adapter * recipes.FP32_BYTES
    if not t.upcasts_when_loading:
        return stored
    # as weight_storage_bytes stores a dense parameter
    element = recipes.FP32_BYTES if t.precision is Precision.FP32 else BF16_BYTES
    upcast = (split.total - split.quantised) * (recipes.FP32_BYTES - element)
    return stored + upcast + largest_unquantised_params(a) * BF16_BYTES
