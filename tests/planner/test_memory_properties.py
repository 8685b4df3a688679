"""Structural properties of the memory model that must hold for every configuration."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import assume, given, settings
from hypothesis import strategies as st

from contract.schema import Hardware, Method, Offload, Precision, Recipe, TrainingSpec
from planner.catalog import default_catalog
from planner.constants import ALLOCATOR_OVERHEAD_FRACTION
from planner.memory import host_memory, per_gpu_memory

CATALOG = default_catalog()
MODELS = st.sampled_from([m.name for m in CATALOG.models])
METHODS = st.sampled_from([Method.FULL, Method.LORA, Method.QLORA, Method.LORA_8BIT])
# 8-bit LoRA is refused under ZeRO-3 (planner.recipes.check: ZeRO-3 shards none of its int8 base)
ZERO3_METHODS = st.sampled_from([Method.FULL, Method.LORA, Method.QLORA])


def _planned(method: Method, zero: int) -> None:
    assume(not (method is Method.LORA_8BIT and zero == 3))
PRECISIONS = st.sampled_from([Precision.BF16, Precision.FP16, Precision.FP32, Precision.BF16_PURE])


def hw(gpus: int = 1) -> Hardware:
    return Hardware(gpu=CATALOG.gpu("h100-sxm-80gb"), gpus_per_node=gpus, host_memory_bytes=2 * 1024**4)


def total(model: str, t: TrainingSpec, gpus: int = 1) -> int:
    return per_gpu_memory(CATALOG.model(model), t, hw(gpus)).total_bytes


@settings(max_examples=200, deadline=None)
@given(model=MODELS, method=METHODS, precision=PRECISIONS, mb=st.integers(1, 16), seq=st.integers(64, 8192),
       ckpt=st.booleans(), zero=st.integers(0, 3), gpus=st.sampled_from([1, 2, 8]))
def test_more_micro_batch_or_sequence_never_needs_less(model: str, method: Method, precision: Precision, mb: int,
                                                       seq: int, ckpt: bool, zero: int, gpus: int) -> None:
    _planned(method, zero)
    t = TrainingSpec(method=method, precision=precision, micro_batch_size=mb, sequence_length=seq,
                     gradient_checkpointing=ckpt, zero_stage=zero)
    bigger_batch = per_gpu_memory(CATALOG.model(model), replace(t, micro_batch_size=mb + 1), hw(gpus))
    longer = per_gpu_memory(CATALOG.model(model), replace(t, sequence_length=seq + 64), hw(gpus))
    base = per_gpu_memory(CATALOG.model(model), t, hw(gpus))
    # never less; strictly more unless the gradients or the optimizer step (which no batch size changes) peak
    for grown in (bigger_batch, longer):
        assert grown.activations_bytes > base.activations_bytes
        assert grown.total_bytes >= base.total_bytes
        assert grown.total_bytes > base.total_bytes or not grown.activations_decide_peak


@settings(max_examples=200, deadline=None)
@given(model=MODELS, method=ZERO3_METHODS, gpus=st.sampled_from([2, 4, 8]), mb=st.integers(1, 8))
def test_higher_zero_stage_never_needs_more_per_gpu(model: str, method: Method, gpus: int, mb: int) -> None:
    """What each stage allocates (the allocator's slack is a regression over the simulated rows, not a law)."""
    b = [per_gpu_memory(CATALOG.model(model), TrainingSpec(method=method, zero_stage=z, micro_batch_size=mb), hw(gpus))
         for z in range(4)]
    # ZeRO 1-2 allocate their reduce bucket at its full size whatever the trainable count, where ZeRO 0's all-reduce
    # flattens only the gradients there are: for a small LoRA, a ZeRO-1 step can hold that much more
    assert b[1].allocated_bytes <= b[0].allocated_bytes + b[1].reduce_bucket_bytes
    assert b[2].allocated_bytes <= b[1].allocated_bytes
    # ZeRO-3 holds full copies of the parameters it gathers (up to stage3_max_live_parameters) beside every rank's
    # partition: for a model not much larger than that, more than ZeRO-2's whole weights (simulated: Llama-3.2-1B
    # on 2 ranks gathers 1.0e9 of its 1.24e9 parameters); and it keeps its flat gradient partition across steps, where
    # ZeRO-2 frees its own in the step (simulated: Llama-3.2-1B full on 4 ranks peaks at the loss with none), and it
    # gathers through a flat buffer; beyond those it never needs more
    held = b[3].gathered_parameters_bytes + b[3].gradients_bytes + b[3].fetch_buffer_bytes
    assert b[3].allocated_bytes <= b[2].allocated_bytes + held


@settings(max_examples=200, deadline=None)
@given(model=MODELS, method=METHODS, zero=st.integers(1, 3), gpus=st.sampled_from([1, 2, 4]))
def test_more_gpus_never_need_more_per_gpu_at_zero_1_and_up(model: str, method: Method, zero: int, gpus: int) -> None:
    _planned(method, zero)
    t = TrainingSpec(method=method, zero_stage=zero)
    few, more = (per_gpu_memory(CATALOG.model(model), t, hw(n)) for n in (gpus, gpus * 2))
    # beyond the second reduce bucket overlap_comm adds once there is a second rank (contract.deepspeed_config), and
    # ZeRO-3's gathered copies and fetch buffer, which one rank, whose partition is the whole parameter, does without
    overlap = more.reduce_bucket_bytes - few.reduce_bucket_bytes
    gathering = more.gathered_parameters_bytes + more.fetch_buffer_bytes if gpus == 1 and zero == 3 else 0
    assert more.total_bytes <= few.total_bytes + (overlap + gathering) * (1 + ALLOCATOR_OVERHEAD_FRACTION)


@settings(max_examples=100, deadline=None)
@given(model=MODELS, mb=st.integers(1, 8), seq=st.integers(128, 4096))
def test_qlora_below_lora_below_full(model: str, mb: int, seq: int) -> None:
    t = TrainingSpec(micro_batch_size=mb, sequence_length=seq)
    qlora, lora, full = (total(model, replace(t, method=m)) for m in (Method.QLORA, Method.LORA, Method.FULL))
    assert qlora < lora < full


@settings(max_examples=100, deadline=None)
@given(model=MODELS, method=st.sampled_from([Method.FULL, Method.LORA]), gpus=st.sampled_from([1, 2, 8]))
def test_offload_moves_bytes_from_gpu_to_host(model: str, method: Method, gpus: int) -> None:
    m = CATALOG.model(model)
    stay = TrainingSpec(method=method, zero_stage=3)
    for offload in (Offload.OPTIMIZER, Offload.ALL):
        moved = replace(stay, offload=offload)
        assert per_gpu_memory(m, moved, hw(gpus)).total_bytes < per_gpu_memory(m, stay, hw(gpus)).total_bytes
        assert host_memory(m, moved, hw(gpus)).total_bytes > host_memory(m, stay, hw(gpus)).total_bytes


def test_breakdown_terms_add_up_to_the_total() -> None:
    b = per_gpu_memory(CATALOG.model("meta-llama/Llama-3.1-8B"), TrainingSpec(method=Method.FULL, zero_stage=2), hw(4))
    parts = (b.weights_bytes + b.adapter_bytes + b.gradients_bytes + b.optimizer_bytes
             + max(b.activations_bytes, b.optimizer_step_bytes)
             + b.deepspeed_buffers_bytes + b.cuda_workspace_bytes + b.cuda_context_bytes + b.allocator_bytes)
    assert parts == b.total_bytes
    assert b.logits_bytes <= b.activations_bytes
    assert b.optimizer_step_bytes > 0, "the ZeRO-2 step builds the fp32 copy of the rank's gradient partition"


@settings(max_examples=100, deadline=None)
@given(model=MODELS, method=METHODS, zero=st.integers(0, 3), accumulation=st.integers(2, 64),
       gpus=st.sampled_from([1, 2, 8]))
def test_accumulating_gradients_keeps_them_through_the_next_backward(model: str, method: Method, zero: int,
                                                                    accumulation: int, gpus: int) -> None:
    """From a step's second micro-batch on, backward starts with every gradient of the micro-batches before it: the
    peak is never below accumulation 1's, and under ZeRO 0-1 (which free the gradients at each step) it holds the
    gradients beside the activations."""
    _planned(method, zero)
    t = TrainingSpec(method=method, precision=Precision.BF16, micro_batch_size=2, sequence_length=2048,
                     gradient_checkpointing=False, zero_stage=zero)
    one = per_gpu_memory(CATALOG.model(model), t, hw(gpus))
    many = per_gpu_memory(CATALOG.model(model), replace(t, gradient_accumulation_steps=accumulation), hw(gpus))
    assert many.total_bytes >= one.total_bytes
    if zero <= 1 and one.activations_decide_peak:
        assert many.total_bytes - one.total_bytes >= one.gradients_bytes > 0


def test_zero3_on_one_rank_gathers_nothing() -> None:
    """One rank's partition is the whole parameter, which DeepSpeed views in place of gathering it (simulated: a
    Llama-3.2-1B full step at 2 x 2,048 tokens peaks at 24.69 GiB; on an H100, 24.76 with cuBLAS's workspace)."""
    t = TrainingSpec(method=Method.FULL, zero_stage=3, micro_batch_size=2, sequence_length=2048)
    one, two = (per_gpu_memory(CATALOG.model("meta-llama/Llama-3.2-1B"), t, hw(n)) for n in (1, 2))
    assert (one.gathered_parameters_bytes, one.fetch_buffer_bytes, one.regathered_bytes) == (0, 0, 0)
    assert two.gathered_parameters_bytes > 0 and two.fetch_buffer_bytes > 0


def test_a_deepspeed_rank_holds_nccl_beside_the_cuda_context() -> None:
    """Outside PyTorch's allocator a one-GPU Trainer holds the CUDA context; a DeepSpeed rank NCCL's communicators
    too, ZeRO-3 one more; everyone's allocated peak has cuBLAS's workspace in it (measured on an H100)."""
    m = CATALOG.model("meta-llama/Llama-3.1-8B")
    trainer, executor, zero3 = (per_gpu_memory(m, t, hw()) for t in (
        TrainingSpec(method=Method.LORA, recipe=Recipe.TRL_SFT), TrainingSpec(method=Method.LORA),
        TrainingSpec(method=Method.LORA, zero_stage=3)))
    assert trainer.cuda_context_bytes < executor.cuda_context_bytes < zero3.cuda_context_bytes
    assert all(b.cuda_workspace_bytes > 0 for b in (trainer, executor, zero3))
