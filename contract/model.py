"""The model a plan trains: its family and exact shape (config.json's keys, validated), and its catalog name."""

from __future__ import annotations

import enum
from dataclasses import dataclass

from contract.errors import InvalidFieldError
from contract.values import hash_once, positive, without_hash


class Family(enum.Enum):
    LLAMA = "llama"
    MISTRAL = "mistral"
    MIXTRAL = "mixtral"
    QWEN2 = "qwen2"
    QWEN2_VL = "qwen2_vl"
    QWEN3 = "qwen3"
    OLMO2 = "olmo2"
    QWEN3_MOE = "qwen3_moe"
    GEMMA3 = "gemma3_text"
    PHI = "phi"
    QWEN2_MOE = "qwen2_moe"
    GEMMA = "gemma"
    GEMMA2 = "gemma2"
    PHI3 = "phi3"
    GPT2 = "gpt2"
    STARCODER2 = "starcoder2"
    DEEPSEEK_V3 = "deepseek_v3"
    GLM4_MOE = "glm4_moe"
    DEEPSEEK_V2 = "deepseek_v2"
    GPT_OSS = "gpt_oss"
    QWEN2_5_VL = "qwen2_5_vl"
    LLAMA4 = "llama4_text"


# Module names PEFT (0.21: utils/transformers_weight_conversion.py, for the model types transformers 5 converts like
# Qwen2-MoE) maps onto a mixture of experts' fused 3-D expert tensors whatever module they name: in DeepSeek-V3 its
# dense layers' and shared experts' MLP linears cannot be adapted by name, so all-linear adapts the attention only
PEFT_EXPERT_MAPPED_NAMES: dict[str, tuple[str, ...]] = {
    model_type: ("gate_proj", "up_proj", "down_proj") for model_type in ("deepseek_v2", "deepseek_v3", "glm4_moe")}


@dataclass(frozen=True)
class VisionTower:
    """Qwen2-VL style vision encoder: patch embed, `depth` ViT blocks, a patch merger. Qwen2.5-VL's blocks have
    RMSNorms and a gated MLP of `intermediate_size` (0: Qwen2-VL's LayerNorms and fc1/fc2 of mlp_ratio x embed_dim).
    With an `image_size`, a SigLIP encoder (Gemma 3): learned positions for (image_size / patch_size)^2 patches,
    LayerNorm blocks with an fc1/fc2 MLP of `intermediate_size`, each spatial_merge_size^2 patches pooled into one
    image token, and a projection into the language model."""

    depth: int
    embed_dim: int
    num_heads: int
    mlp_ratio: int
    patch_size: int
    temporal_patch_size: int
    in_channels: int
    spatial_merge_size: int
    out_hidden_size: int
    intermediate_size: int = 0
    image_size: int = 0

    def __post_init__(self) -> None:
        for name in ("depth", "embed_dim", "num_heads", "mlp_ratio", "patch_size",
                     "temporal_patch_size", "in_channels", "spatial_merge_size", "out_hidden_size"):
            positive(f"model.architecture.vision.{name}", getattr(self, name))


@dataclass(frozen=True)
class LatentAttention:
    """Multi-head latent attention (DeepSeek-V2/V3): queries through a low-rank latent (or one projection when
    q_lora_rank is 0), keys and values expanded from one shared latent; each head's query and key are a part RoPE
    leaves alone (qk_nope_head_dim) and a turned part (qk_rope_head_dim, one key part shared by every head)."""

    q_lora_rank: int
    kv_lora_rank: int
    qk_rope_head_dim: int
    qk_nope_head_dim: int
    v_head_dim: int

    def __post_init__(self) -> None:
        for name in ("kv_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim"):
            positive(f"model.architecture.latent_attention.{name}", getattr(self, name))
        if self.q_lora_rank < 0:
            raise InvalidFieldError("model.architecture.latent_attention.q_lora_rank",
                                    f"must not be negative (0: one query projection), got {self.q_lora_rank}")

    @property
    def qk_head_dim(self) -> int:
        return self.qk_nope_head_dim + self.qk_rope_head_dim


@dataclass(frozen=True)
class Architecture:
    family: Family
    num_layers: int
    hidden_size: int
    intermediate_size: int
    num_attention_heads: int
    num_key_value_heads: int
    vocab_size: int
    head_dim: int = 0
    tie_word_embeddings: bool = False
    attention_bias: bool = False
    mlp_bias: bool = False
    num_experts: int = 0
    experts_per_token: int = 0
    max_position_embeddings: int = 0
    vision: VisionTower | None = None
    rotary_dims: int = 0  # dimensions of each head RoPE turns (Phi: partial_rotary_factor); 0 means all
    residual_dropout: float = 0.0  # dropout on the attention and MLP outputs while training (Phi: resid_pdrop)
    shared_expert_intermediate_size: int = 0  # a mixture of experts' always-on expert (Qwen2-MoE); 0 for none
    attention_dropout: float = 0.0  # dropout on the attention probabilities while training (StarCoder2: 0.1)
    embedding_dropout: float = 0.0  # dropout on the token embeddings while training (StarCoder2: 0.1)
    latent_attention: LatentAttention | None = None  # DeepSeek-V3's attention; None for grouped-query attention
    dense_layers: int = 0  # leading layers with a dense MLP of dense_intermediate_size (first_k_dense_replace)
    dense_intermediate_size: int = 0
    qk_norm: bool = False  # an RMSNorm over each query and key head where the family makes it a choice (GLM-4.5)
    # the router masks its softmax to the best expert groups before its top-k (DeepSeek-V2's group_limited_greedy)
    group_limited_routing: bool = False
    # Llama 4: every n-th layer is sparse, the others dense MLPs of dense_intermediate_size (interleave_moe_layer_step;
    # dense_layers counts them); 0 where dense layers lead
    moe_layer_interval: int = 0
    # Llama 4: every n-th layer turns no RoPE (its queries temperature-scaled, no q/k norm); 0 for none
    nope_layer_interval: int = 0
    # Llama 4: the RoPE layers attend within chunks of this many tokens; 0 for none
    attention_chunk_size: int = 0

    __hash__ = hash_once
    __getstate__ = without_hash

    def __post_init__(self) -> None:
        prefix = "model.architecture"
        for name in ("residual_dropout", "attention_dropout", "embedding_dropout"):
            if not 0.0 <= getattr(self, name) < 1.0:
                raise InvalidFieldError(f"{prefix}.{name}", f"must be in [0, 1), got {getattr(self, name)}")
        for name in ("num_layers", "hidden_size", "intermediate_size", "num_attention_heads",
                     "num_key_value_heads", "vocab_size"):
            positive(f"{prefix}.{name}", getattr(self, name))
        if self.head_dim == 0 and self.hidden_size % self.num_attention_heads:
            raise InvalidFieldError(
                f"{prefix}.head_dim",
                f"hidden_size {self.hidden_size} is not divisible by num_attention_heads "
                f"{self.num_attention_heads}; set head_dim explicitly",
            )
        if self.num_attention_heads % self.num_key_value_heads:
            raise InvalidFieldError(
                f"{prefix}.num_key_value_heads",
                f"num_attention_heads {self.num_attention_heads} must be a multiple of "
                f"num_key_value_heads {self.num_key_value_heads}",
            )
        if self.num_experts and not 0 < self.experts_per_token <= self.num_experts:
            raise InvalidFieldError(
                f"{prefix}.experts_per_token",
                f"must be between 1 and num_experts ({self.num_experts}), got {self.experts_per_token}",
            )
        if self.dense_layers and not (self.num_experts and self.dense_layers < self.num_layers
                                      and self.dense_intermediate_size > 0):
            raise InvalidFieldError(f"{prefix}.dense_layers",
                                    "dense layers lead a mixture of experts: set num_experts, fewer dense layers "
                                    f"than num_layers ({self.num_layers}) and dense_intermediate_size")
        if self.moe_layer_interval > 1 and not (
                self.num_experts and self.dense_layers == self.num_layers - self.num_layers // self.moe_layer_interval):
            raise InvalidFieldError(f"{prefix}.moe_layer_interval",
                                    f"every {self.moe_layer_interval}th of {self.num_layers} layers sparse leaves "
                                    f"{self.num_layers - self.num_layers // self.moe_layer_interval} dense: set "
                                    "num_experts and dense_layers to that")
        m = self.latent_attention
        if m is not None and (self.num_key_value_heads != self.num_attention_heads or self.resolved_head_dim !=
                              m.qk_head_dim or self.resolved_rotary_dims != m.qk_rope_head_dim):
            raise InvalidFieldError(f"{prefix}.latent_attention",
                                    "latent attention expands a key and value per head: num_key_value_heads must equal "
                                    "num_attention_heads, head_dim qk_nope_head_dim + qk_rope_head_dim, rotary_dims "
                                    "qk_rope_head_dim")
        if self.family is Family.GPT2 and self.max_position_embeddings <= 0:
            raise InvalidFieldError(f"{prefix}.max_position_embeddings",
                                    "GPT-2 has learned positions: set n_positions")

    @property
    def resolved_head_dim(self) -> int:
        return self.head_dim or self.hidden_size // self.num_attention_heads

    @property
    def resolved_rotary_dims(self) -> int:
        return self.rotary_dims or self.resolved_head_dim

    @property
    def q_dim(self) -> int:
        return self.num_attention_heads * self.resolved_head_dim

    @property
    def kv_dim(self) -> int:
        return self.num_key_value_heads * self.resolved_head_dim

    @property
    def v_dim(self) -> int:
        """Width of the attention's values (and output) over all heads: latent attention's heads have their own."""
        m = self.latent_attention
        return self.num_attention_heads * m.v_head_dim if m else self.q_dim

    def is_sparse_layer(self, index: int) -> bool:
        """Whether layer `index` (from 0) is a mixture of experts: after the leading dense layers, or every
        moe_layer_interval-th (transformers' Llama4TextConfig: moe_layers)."""
        if not self.num_experts:
            return False
        if self.moe_layer_interval > 1:
            return (index + 1) % self.moe_layer_interval == 0
        return index >= self.dense_layers

    def turns_rope(self, index: int) -> bool:
        """Whether layer `index` turns RoPE (Llama 4: not every nope_layer_interval-th, no_rope_layers)."""
        return not (self.nope_layer_interval and (index + 1) % self.nope_layer_interval == 0)

    @property
    def sparse_layers(self) -> int:
        """Layers whose feed-forward is the mixture of experts (all of them but the leading dense ones)."""
        return self.num_layers - self.dense_layers if self.num_experts else 0


@dataclass(frozen=True)
class ModelSpec:
    name: str
    architecture: Architecture
    weights: str = ""
    source: str = ""
    note: str = ""  # how the planner read it, when that is an approximation (shown with every answer)

    __hash__ = hash_once
    __getstate__ = without_hash
