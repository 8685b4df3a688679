"""Exact parameter layout of supported decoder families, and config.json parsing.

Counts follow the module layout of transformers 5.x for each family; tests compare them
with models instantiated on the meta device.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from common.bounds import echo
from common.strict_json import loads_object
from contract.errors import InvalidFieldError
from contract.limits import CONFIG_JSON_CHARS, CONFIG_JSON_DEPTH
from contract.model import Architecture, Family, VisionTower
from contract.schema import ALL_LINEAR
from planner.errors import UnsupportedError
from planner.memo import memo


@dataclass(frozen=True)
class LinearLayer:
    """A Linear (or GPT-2 Conv1D) module that LoRA can target, repeated `count` times."""

    name: str
    in_features: int
    out_features: int
    bias: bool
    count: int
    part: str  # "decoder", "vision" or "head"

    @property
    def params(self) -> int:
        return self.count * (self.in_features * self.out_features + (self.out_features if self.bias else 0))


def _decoder_linears(a: Architecture) -> list[tuple[str, int, int, bool]]:
    h, q, kv, i = a.hidden_size, a.q_dim, a.kv_dim, a.intermediate_size
    if a.family is Family.GPT2:
        return [("c_attn", h, 3 * h, True), ("c_proj", h, h, True),
                ("c_fc", h, i, True), ("mlp.c_proj", i, h, True)]
    if a.family is Family.PHI:  # every projection biased; "dense" is the attention output
        return [("q_proj", h, q, True), ("k_proj", h, kv, True), ("v_proj", h, kv, True), ("dense", q, h, True),
                ("fc1", h, i, True), ("fc2", i, h, True)]
    if a.family is Family.STARCODER2:  # use_bias: every projection biased, or none; a GELU MLP (c_fc, c_proj)
        return [("q_proj", h, q, a.attention_bias), ("k_proj", h, kv, a.attention_bias),
                ("v_proj", h, kv, a.attention_bias), ("o_proj", q, h, a.attention_bias),
                ("c_fc", h, i, a.mlp_bias), ("c_proj", i, h, a.mlp_bias)]
    if a.family is Family.PHI3:
        return [("qkv_proj", h, q + 2 * kv, False), ("o_proj", q, h, False),
                ("gate_up_proj", h, 2 * i, False), ("down_proj", i, h, False)]
    qwen2 = a.family in (Family.QWEN2, Family.QWEN2_VL, Family.QWEN2_MOE)
    qkv_bias = a.attention_bias or qwen2
    o_bias = a.attention_bias and not qwen2
    layers = [("q_proj", h, q, qkv_bias), ("k_proj", h, kv, qkv_bias),
              ("v_proj", h, kv, qkv_bias), ("o_proj", q, h, o_bias)]
    s = a.shared_expert_intermediate_size
    if s:  # the shared expert (an MLP) and its per-token gate, the only linears of a Qwen2-MoE feed-forward
        layers += [("gate_proj", h, s, False), ("up_proj", h, s, False), ("down_proj", s, h, False),
                   ("shared_expert_gate", h, 1, False)]
    if a.num_experts == 0:
        layers += [("gate_proj", h, i, a.mlp_bias), ("up_proj", h, i, a.mlp_bias),
                   ("down_proj", i, h, a.mlp_bias)]
    return layers


def _vision_linears(v: VisionTower) -> list[tuple[str, int, int, bool, int]]:
    e, mlp, merged = v.embed_dim, v.embed_dim * v.mlp_ratio, v.embed_dim * v.spatial_merge_size ** 2
    return [("qkv", e, 3 * e, True, v.depth), ("proj", e, e, True, v.depth),
            ("fc1", e, mlp, True, v.depth), ("fc2", mlp, e, True, v.depth),
            ("merger.mlp.0", merged, merged, True, 1), ("merger.mlp.2", merged, v.out_hidden_size, True, 1)]


@memo(512)
def linear_layers(a: Architecture) -> tuple[LinearLayer, ...]:
    out = [LinearLayer(n, i, o, b, a.num_layers, "decoder") for n, i, o, b in _decoder_linears(a)]
    if a.vision is not None:
        out += [LinearLayer(n, i, o, b, c, "vision") for n, i, o, b, c in _vision_linears(a.vision)]
    if not a.tie_word_embeddings:
        out.append(LinearLayer("lm_head", a.hidden_size, a.vocab_size, a.family is Family.PHI, 1, "head"))
    return tuple(out)


# Families whose norms are LayerNorm (a weight and a bias; the input, mean and rstd saved) rather than RMSNorm
LAYER_NORM_FAMILIES = (Family.GPT2, Family.PHI, Family.STARCODER2)


def norms_per_layer(a: Architecture) -> int:
    """The hidden-size norms of a decoder layer: one in Phi's parallel block, four in Gemma 2 and 3 (pre/post
    feed-forward norms too), two elsewhere."""
    if a.family is Family.PHI:
        return 1
    return 4 if a.family in (Family.GEMMA2, Family.GEMMA3) else 2


def qk_norm_rows(a: Architecture) -> tuple[int, int]:
    """Rows per token of the q_norm and k_norm: one per head (Qwen3, Qwen3-MoE, Gemma 3), one over the whole
    projection (OLMo 2); (0, 0) for a family without them."""
    if a.family in (Family.QWEN3, Family.QWEN3_MOE, Family.GEMMA3):
        return a.num_attention_heads, a.num_key_value_heads
    if a.family is Family.OLMO2:
        return 1, 1
    return 0, 0


def _norm_params(a: Architecture) -> int:
    # LayerNorm (GPT-2, Phi, StarCoder2) has a weight and a bias; the final norm is one more
    per_norm = 2 if a.family in LAYER_NORM_FAMILIES else 1
    rows_q, rows_k = qk_norm_rows(a)
    qk_norms = a.q_dim // rows_q + a.kv_dim // rows_k if rows_q else 0  # a weight over one row each
    return per_norm * a.hidden_size * (norms_per_layer(a) * a.num_layers + 1) + qk_norms * a.num_layers


def _expert_params(a: Architecture) -> int:
    if a.num_experts == 0:
        return 0
    router = a.num_experts * a.hidden_size
    experts = a.num_experts * 3 * a.hidden_size * a.intermediate_size  # gate, up, down per expert
    return a.num_layers * (router + experts)


def _vision_params(v: VisionTower) -> int:
    patch = v.embed_dim * v.in_channels * v.temporal_patch_size * v.patch_size ** 2  # Conv3d, no bias
    norms = v.depth * 2 * 2 * v.embed_dim + 2 * v.embed_dim  # norm1, norm2 per block; merger ln_q
    return patch + norms + sum(
        c * (i * o + (o if b else 0)) for _, i, o, b, c in _vision_linears(v))


@dataclass(frozen=True)
class ParameterCounts:
    total: int
    embedding: int
    decoder_layer: int
    vision: int
    lm_head: int
    active: int

    @property
    def language_model(self) -> int:
        return self.total - self.vision


@memo(512)
def parameter_counts(a: Architecture) -> ParameterCounts:
    embedding = a.vocab_size * a.hidden_size
    if a.family is Family.GPT2:
        embedding += a.max_position_embeddings * a.hidden_size
    decoder_linear = sum(layer.params for layer in linear_layers(a) if layer.part == "decoder")
    per_layer = (decoder_linear + _expert_params(a)) // a.num_layers + _norm_params(a) // a.num_layers
    vision = _vision_params(a.vision) if a.vision else 0
    lm_head = 0 if a.tie_word_embeddings else a.vocab_size * (a.hidden_size + (a.family is Family.PHI))
    total = embedding + decoder_linear + _expert_params(a) + _norm_params(a) + vision + lm_head
    active = total
    if a.num_experts:
        idle = a.num_experts - a.experts_per_token
        active -= a.num_layers * idle * 3 * a.hidden_size * a.intermediate_size
    return ParameterCounts(total, embedding, per_layer, vision, lm_head, active)


def lora_targets(a: Architecture, target_modules: tuple[str, ...], field: str) -> tuple[LinearLayer, ...]:
    """The linear layers a LoRA config adapts, resolved the way PEFT matches module names."""
    layers = linear_layers(a)
    if target_modules == (ALL_LINEAR,):
        return tuple(layer for layer in layers if layer.part != "head")
    chosen: list[LinearLayer] = []
    for target in target_modules:
        matched = [layer for layer in layers if layer.name == target or layer.name.endswith("." + target)]
        if not matched:
            known = sorted({layer.name.split(".")[-1] for layer in layers} | {ALL_LINEAR})
            raise InvalidFieldError(field, f"{a.family.value} has no module {echo(target)}; "
                                           f"choose from {', '.join(known)}")
        chosen += [layer for layer in matched if layer not in chosen]
    return tuple(chosen)


def lora_parameter_count(targets: tuple[LinearLayer, ...], rank: int) -> int:
    """LoRA adds A (rank × in) and B (out × rank) to each targeted linear layer (Hu et al. 2021)."""
    return sum(layer.count * rank * (layer.in_features + layer.out_features) for layer in targets)


def largest_layer_params(a: Architecture) -> int:
    """Parameters ZeRO-3 must gather at once for the biggest module (decoder layer or embedding)."""
    counts = parameter_counts(a)
    return max(counts.decoder_layer, counts.embedding, counts.lm_head)


_FAMILY_BY_MODEL_TYPE = {
    "llama": Family.LLAMA, "mistral": Family.MISTRAL, "mixtral": Family.MIXTRAL,
    "qwen2": Family.QWEN2, "qwen2_vl": Family.QWEN2_VL, "gemma": Family.GEMMA,
    "gemma2": Family.GEMMA2, "phi3": Family.PHI3, "gpt2": Family.GPT2, "qwen3": Family.QWEN3,
    # the Llama layout exactly (SmolLM3 leaves RoPE out of some layers: the same tensors are saved)
    "smollm3": Family.LLAMA,
    "olmo2": Family.OLMO2, "qwen3_moe": Family.QWEN3_MOE, "gemma3_text": Family.GEMMA3, "phi": Family.PHI,
    "qwen2_moe": Family.QWEN2_MOE, "starcoder2": Family.STARCODER2,
}


def config_json(a: Architecture) -> dict[str, Any]:
    """The config.json an Architecture stands for (transformers' keys and model_type): what
    architecture_from_config reads back, and what benchmarks/simulate.py builds a model from."""
    if a.family is Family.GPT2:
        return {"model_type": "gpt2", "n_embd": a.hidden_size, "n_layer": a.num_layers,
                "n_head": a.num_attention_heads, "vocab_size": a.vocab_size, "n_positions": a.max_position_embeddings}
    text: dict[str, Any] = {
        "num_hidden_layers": a.num_layers, "hidden_size": a.hidden_size, "intermediate_size": a.intermediate_size,
        "num_attention_heads": a.num_attention_heads, "num_key_value_heads": a.num_key_value_heads,
        "vocab_size": a.vocab_size, "tie_word_embeddings": a.tie_word_embeddings}
    if a.head_dim:
        text["head_dim"] = a.head_dim
    if a.max_position_embeddings:
        text["max_position_embeddings"] = a.max_position_embeddings
    if a.family is Family.STARCODER2:
        text.update(use_bias=a.attention_bias, residual_dropout=a.residual_dropout,
                    attention_dropout=a.attention_dropout, embedding_dropout=a.embedding_dropout)
    if a.family is Family.PHI:
        text.update(partial_rotary_factor=a.resolved_rotary_dims / a.resolved_head_dim,
                    resid_pdrop=a.residual_dropout)
    if a.family in (Family.QWEN3_MOE, Family.QWEN2_MOE):
        # every layer sparse, the routing weights normalised as each ships (Qwen3-MoE yes, Qwen2-MoE no)
        text.update(num_experts=a.num_experts, num_experts_per_tok=a.experts_per_token,
                    moe_intermediate_size=a.intermediate_size, norm_topk_prob=a.family is Family.QWEN3_MOE,
                    decoder_sparse_step=1, mlp_only_layers=[])
        if a.family is Family.QWEN2_MOE:
            text.update(shared_expert_intermediate_size=a.shared_expert_intermediate_size)
    elif a.num_experts:
        text.update(num_local_experts=a.num_experts, num_experts_per_tok=a.experts_per_token)
    if a.vision is not None:
        v = a.vision
        return {"model_type": a.family.value, "tie_word_embeddings": a.tie_word_embeddings, "text_config": text,
                "vision_config": {"depth": v.depth, "embed_dim": v.embed_dim, "num_heads": v.num_heads,
                                  "mlp_ratio": v.mlp_ratio, "hidden_size": v.out_hidden_size,
                                  "in_chans": v.in_channels, "patch_size": v.patch_size,
                                  "spatial_merge_size": v.spatial_merge_size,
                                  "temporal_patch_size": v.temporal_patch_size}}
    return {"model_type": a.family.value, **text}


_CONFIG = "model.config_json"


def _int(cfg: Mapping[str, Any], *keys: str, default: int | None = None) -> int:
    """The first of `keys` that is set (not null), as an integer; `default` when none is, else an error."""
    for key in keys:
        value = cfg.get(key)
        if value is None:
            continue
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if not isinstance(value, int) or isinstance(value, bool):
            raise InvalidFieldError(_CONFIG, f"'{key}' must be an integer, got {echo(value)}")
        if value < 0:
            raise InvalidFieldError(_CONFIG, f"'{key}' must not be negative, got {value}")
        return value
    if default is None:
        raise InvalidFieldError(_CONFIG, f"missing '{keys[0]}'")
    return default


def _bool(cfg: Mapping[str, Any], key: str, default: bool) -> bool:
    value = cfg.get(key)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise InvalidFieldError(_CONFIG, f"'{key}' must be true or false, got {echo(value)}")
    return value


def _fraction(cfg: Mapping[str, Any], key: str, default: float) -> float:
    value = cfg.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0.0 <= value <= 1.0:
        raise InvalidFieldError(_CONFIG, f"'{key}' must be a number in [0, 1], got {echo(value)}")
    return float(value)


def _object(cfg: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    value = cfg.get(key)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise InvalidFieldError(_CONFIG, f"'{key}' must be a JSON object, got {echo(value)}")
    return value


# Keys of a config whose layers are not the Llama layout (experts, multi-head latent attention, a vision tower),
# even when its other keys read like one.
_NOT_LLAMA_LAYOUT_KEYS = ("num_local_experts", "num_experts", "n_routed_experts", "q_lora_rank", "kv_lora_rank",
                          "vision_config", "n_embd", "multi_query", "partial_rotary_factor")
_LLAMA_LAYOUT_KEYS = ("hidden_size", "num_hidden_layers", "intermediate_size", "num_attention_heads", "vocab_size")


def architecture_from_config(text: str) -> Architecture:
    """Parse the text of a Hugging Face config.json into an Architecture: strictly typed, size- and depth-bounded;
    every failure names the key."""
    return read_config(text)[0]


def read_config(text: str) -> tuple[Architecture, str]:
    """The Architecture of a config.json and a note for the answer: a model_type the planner does not model whose
    config follows the Llama layout (the keys of _LLAMA_LAYOUT_KEYS, none of _NOT_LLAMA_LAYOUT_KEYS) is read as
    Llama, and the note says so; any other unknown model_type is refused naming the ones supported."""
    cfg = loads_object(text, _CONFIG, max_chars=CONFIG_JSON_CHARS, max_depth=CONFIG_JSON_DEPTH,
                       error=InvalidFieldError)
    model_type = cfg.get("model_type")
    family = _FAMILY_BY_MODEL_TYPE.get(model_type) if isinstance(model_type, str) else None
    if family is None:
        llama_like = all(isinstance(cfg.get(key), int) for key in _LLAMA_LAYOUT_KEYS) and \
            not any(key in cfg for key in _NOT_LLAMA_LAYOUT_KEYS)
        if not llama_like:
            raise UnsupportedError(_CONFIG, f"model_type {echo(model_type)} is not supported; supported: "
                                            f"{', '.join(sorted(_FAMILY_BY_MODEL_TYPE))}")
        note = (f"model_type {echo(model_type)} is not one the planner models; its config follows the Llama layout, "
                "so it is answered as Llama (norms or biases it adds are not counted): check the parameter count "
                "against the model card")
        return _architecture(cfg, Family.LLAMA), note
    return _architecture(cfg, family), ""


def _architecture(cfg: Mapping[str, Any], family: Family) -> Architecture:
    vision = None
    text_cfg: Mapping[str, Any] = cfg
    if family is Family.QWEN2_VL:
        text_cfg = {**cfg, **_object(cfg, "text_config")}
        vc = _object(cfg, "vision_config")
        vision = VisionTower(
            depth=_int(vc, "depth"), embed_dim=_int(vc, "embed_dim"), num_heads=_int(vc, "num_heads"),
            mlp_ratio=_int(vc, "mlp_ratio", default=4), patch_size=_int(vc, "patch_size", "spatial_patch_size"),
            temporal_patch_size=_int(vc, "temporal_patch_size", default=2),
            in_channels=_int(vc, "in_chans", "in_channels", default=3),
            spatial_merge_size=_int(vc, "spatial_merge_size", default=2),
            out_hidden_size=_int(vc, "hidden_size", default=_int(text_cfg, "hidden_size")),
        )
    if family is Family.GPT2:
        hidden = _int(cfg, "n_embd")
        return Architecture(
            family=family, num_layers=_int(cfg, "n_layer"), hidden_size=hidden,
            intermediate_size=_int(cfg, "n_inner", default=4 * hidden),
            num_attention_heads=_int(cfg, "n_head"), num_key_value_heads=_int(cfg, "n_head"),
            vocab_size=_int(cfg, "vocab_size"), tie_word_embeddings=_bool(cfg, "tie_word_embeddings", True),
            max_position_embeddings=_int(cfg, "n_positions"),
        )
    heads = _int(text_cfg, "num_attention_heads")
    tie_default = family in (Family.GEMMA, Family.GEMMA2, Family.GEMMA3, Family.STARCODER2)
    rotary_dims, residual_dropout, attention_dropout, embedding_dropout = 0, 0.0, 0.0, 0.0
    if family is Family.PHI:  # transformers' PhiConfig defaults: half of each head turned, no dropout
        head_dim = _int(text_cfg, "head_dim", default=0) or _int(text_cfg, "hidden_size") // heads
        rope = _object(text_cfg, "rope_parameters")
        factor = _fraction(text_cfg, "partial_rotary_factor", _fraction(rope, "partial_rotary_factor", 0.5))
        rotary_dims = int(head_dim * factor)
        residual_dropout = _fraction(text_cfg, "resid_pdrop", 0.0)
        if residual_dropout >= 1.0:
            raise InvalidFieldError(_CONFIG, f"'resid_pdrop' must be below 1, got {residual_dropout}")
    use_bias = _bool(text_cfg, "use_bias", True)  # StarCoder2's one switch for every projection's bias
    if family is Family.STARCODER2:  # transformers' Starcoder2Config defaults: no dropout
        residual_dropout = _fraction(text_cfg, "residual_dropout", 0.0)
        attention_dropout = _fraction(text_cfg, "attention_dropout", 0.0)
        embedding_dropout = _fraction(text_cfg, "embedding_dropout", 0.0)
        for key, value in (("residual_dropout", residual_dropout), ("attention_dropout", attention_dropout),
                           ("embedding_dropout", embedding_dropout)):
            if value >= 1.0:
                raise InvalidFieldError(_CONFIG, f"'{key}' must be below 1, got {value}")
    intermediate = _int(text_cfg, "intermediate_size")
    shared = 0
    if family is Family.QWEN2_MOE:
        shared = _int(text_cfg, "shared_expert_intermediate_size")
    if family in (Family.QWEN3_MOE, Family.QWEN2_MOE):
        if text_cfg.get("mlp_only_layers") or _int(text_cfg, "decoder_sparse_step", default=1) != 1:
            raise UnsupportedError(_CONFIG, "dense layers among the sparse ones (mlp_only_layers, decoder_sparse_step "
                                            "other than 1) are not modelled; the released Qwen2/3-MoE models are all "
                                            "sparse")
        intermediate = _int(text_cfg, "moe_intermediate_size")
    return Architecture(
        family=family,
        num_layers=_int(text_cfg, "num_hidden_layers"),
        hidden_size=_int(text_cfg, "hidden_size"),
        intermediate_size=intermediate,
        num_attention_heads=heads,
        num_key_value_heads=_int(text_cfg, "num_key_value_heads", default=heads) or heads,
        head_dim=_int(text_cfg, "head_dim", default=0),
        vocab_size=_int(text_cfg, "vocab_size"),
        tie_word_embeddings=_bool(cfg, "tie_word_embeddings", _bool(text_cfg, "tie_word_embeddings", tie_default)),
        attention_bias=use_bias if family is Family.STARCODER2 else _bool(text_cfg, "attention_bias", False),
        mlp_bias=use_bias if family is Family.STARCODER2 else _bool(text_cfg, "mlp_bias", False),
        num_experts=_int(text_cfg, "num_local_experts", "num_experts", default=0),
        experts_per_token=_int(text_cfg, "num_experts_per_tok", default=0),
        max_position_embeddings=_int(text_cfg, "max_position_embeddings", default=0),
        vision=vision, rotary_dims=rotary_dims, residual_dropout=residual_dropout,
        shared_expert_intermediate_size=shared, attention_dropout=attention_dropout,
        embedding_dropout=embedding_dropout,
    )
