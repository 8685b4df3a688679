"""What Liger's kernels (training.liger) save and allocate where they replace transformers' modules, as the Trainer's
use_liger_kernel applies them with liger-kernel's defaults (liger_kernel.transformers.monkey_patch: apply_liger_kernel_
to_llama and its kin), from liger-kernel 0.8.5's autograd functions and the simulation of the Trainer's step under them
(benchmarks/liger.py, make bench-simulate). Pure functions.

- RMSNorm (LigerRMSNormFunction, casting mode "llama"): saves its input in its dtype and the fp32 inverse RMS a row;
  no fp32 upcast, and nothing more when its weight trains (its backward reduces the weight's gradient from those);
- SwiGLU MLP (LigerSiLUMulFunction): saves the gate and up outputs; the activation is recomputed in backward, and the
  product is the down projection's input, as transformers' MLP;
- RoPE (LigerRopeFunction): turns q and k in place and saves the cos/sin it was given, as transformers' rotation;
- fused linear cross-entropy (hf-trainer only: SFTTrainer keeps its own fused head and turns Liger's off): the loss
  and its gradients in the forward, chunk by chunk of tokens, so no logits tensor exists; it saves the gradient of
  the hidden states (the activations' dtype) and, when the output head trains, of its weight (the weight's dtype).
"""

from __future__ import annotations

from contract.model import Architecture, Family
from contract.schema import Method, Recipe, TrainingSpec
from planner.constants import AUTOCAST_BYTES, TOKEN_ID_BYTES
from planner.errors import UnsupportedError

# The families whose Liger patch is simulated so far: RMSNorm (Qwen 3 also its q/k norms), a SwiGLU MLP, RoPE and the
# fused linear cross-entropy as the llama patch applies them (SmolLM3, planned as a Llama, has a patch of its own that
# leaves RoPE out where its model does)
LIGER_FAMILIES = (Family.LLAMA, Family.MISTRAL, Family.QWEN2, Family.QWEN3)
# LigerRMSNormFunction saves one fp32 inverse RMS a row (rms_norm.py: RSTD, rstd_dtype float32 in "llama" mode)
RSTD_BYTES = 4
# LigerFusedLinearCrossEntropyFunction's per-token buffers beside its chunk of logits: the fp32 loss a token
# (loss_1d), the mask of labelled tokens (target_mask, bool)
LOSS_BYTES_PER_TOKEN = 4 + 1


def layers_patched(t: TrainingSpec) -> bool:
    """Whether Liger's RMSNorm, SwiGLU and RoPE replace the model's own."""
    return t.liger


def fused_loss(t: TrainingSpec) -> bool:
    """Whether the loss is Liger's fused linear cross-entropy: under hf-trainer (SFTTrainer turns it off for its own
    fused head, trl/trainer/sft_trainer.py)."""
    return t.liger and t.recipe is Recipe.HF_TRAINER


def norm_bytes_per_row(width: int, b: int, rows: int = 1) -> int:
    """What one Liger RMSNorm saves a token whose `width` it normalises in `rows` rows (a head norm: one a head): its
    input in the activations' dtype (`b` bytes) and the rstd a row."""
    return b * width + RSTD_BYTES * rows


def chunk_tokens(a: Architecture, tokens: int) -> int:
    """Tokens a chunk of the fused cross-entropy projects at once, so that its logits take about as much as the
    hidden states: the next power of two of tokens / ceil(vocab / hidden), at most every token
    (fused_linear_cross_entropy_forward, chunk_mem_const 1)."""
    inc_factor = -(-a.vocab_size // a.hidden_size)
    per_chunk = -(-tokens // inc_factor)
    return min(1 << (per_chunk - 1).bit_length(), tokens)


def head_trains(t: TrainingSpec) -> bool:
    """Whether the output head's weight trains, so that the fused loss accumulates its gradient."""
    return t.method is Method.FULL


def fused_loss_saved_bytes(a: Architecture, t: TrainingSpec, tokens: int) -> int:
    """What the fused cross-entropy saves for backward: the hidden states' gradient and, when the head trains, its
    weight's gradient."""
    b = t.precision.element_bytes
    weight = a.vocab_size * a.hidden_size * b if head_trains(t) else 0
    return tokens * a.hidden_size * b + weight


def fused_loss_forward_bytes(a: Architecture, t: TrainingSpec, tokens: int) -> int:
    """What the fused cross-entropy holds beyond what it saves while it runs: its input (the final norm's output), one
    chunk of logits in autocast's bf16 (CUDA reuses one buffer), the per-token loss and mask, and the labels padded by
    one and shifted (LigerForCausalLMLoss: a copy, but for a single sequence, whose slice is contiguous). On an fp32
    stream (hf-trainer QLoRA's k-bit preparation: the head fp32 too) autocast casts the head's weight to bf16 for each
    chunk's product, a copy it does not keep (the weight is frozen)."""
    b, sequences = t.precision.element_bytes, t.sequences_per_micro_batch
    labels = TOKEN_ID_BYTES * (tokens + sequences) + (TOKEN_ID_BYTES * tokens if sequences > 1 else 0)
    head_cast = a.vocab_size * a.hidden_size * AUTOCAST_BYTES if b != AUTOCAST_BYTES else 0
    return tokens * a.hidden_size * b + chunk_tokens(a, tokens) * a.vocab_size * AUTOCAST_BYTES + \
        tokens * LOSS_BYTES_PER_TOKEN + labels + head_cast


def check(a: Architecture, t: TrainingSpec) -> None:
    """Refuse what the Liger model does not cover (simulated so far), naming what to change."""
    if not t.liger:
        return
    if a.family not in LIGER_FAMILIES:
        names = ", ".join(f.value for f in LIGER_FAMILIES)
        raise UnsupportedError("training.liger", f"Liger's kernels are modelled for {names} so far, not "
                                                 f"{a.family.value}; plan it without --liger")
