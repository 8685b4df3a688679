from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ModelFamily(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    MODEL_FAMILY_UNSPECIFIED: _ClassVar[ModelFamily]
    MODEL_FAMILY_LLAMA: _ClassVar[ModelFamily]
    MODEL_FAMILY_MISTRAL: _ClassVar[ModelFamily]
    MODEL_FAMILY_MIXTRAL: _ClassVar[ModelFamily]
    MODEL_FAMILY_QWEN2: _ClassVar[ModelFamily]
    MODEL_FAMILY_QWEN2_VL: _ClassVar[ModelFamily]
    MODEL_FAMILY_GEMMA: _ClassVar[ModelFamily]
    MODEL_FAMILY_GEMMA2: _ClassVar[ModelFamily]
    MODEL_FAMILY_PHI3: _ClassVar[ModelFamily]
    MODEL_FAMILY_GPT2: _ClassVar[ModelFamily]
    MODEL_FAMILY_QWEN3: _ClassVar[ModelFamily]
    MODEL_FAMILY_OLMO2: _ClassVar[ModelFamily]
    MODEL_FAMILY_QWEN3_MOE: _ClassVar[ModelFamily]
    MODEL_FAMILY_GEMMA3: _ClassVar[ModelFamily]
    MODEL_FAMILY_PHI: _ClassVar[ModelFamily]
    MODEL_FAMILY_QWEN2_MOE: _ClassVar[ModelFamily]
    MODEL_FAMILY_STARCODER2: _ClassVar[ModelFamily]
    MODEL_FAMILY_DEEPSEEK_V3: _ClassVar[ModelFamily]
    MODEL_FAMILY_GLM4_MOE: _ClassVar[ModelFamily]
    MODEL_FAMILY_DEEPSEEK_V2: _ClassVar[ModelFamily]
    MODEL_FAMILY_GPT_OSS: _ClassVar[ModelFamily]
    MODEL_FAMILY_QWEN2_5_VL: _ClassVar[ModelFamily]
    MODEL_FAMILY_LLAMA4: _ClassVar[ModelFamily]
MODEL_FAMILY_UNSPECIFIED: ModelFamily
MODEL_FAMILY_LLAMA: ModelFamily
MODEL_FAMILY_MISTRAL: ModelFamily
MODEL_FAMILY_MIXTRAL: ModelFamily
MODEL_FAMILY_QWEN2: ModelFamily
MODEL_FAMILY_QWEN2_VL: ModelFamily
MODEL_FAMILY_GEMMA: ModelFamily
MODEL_FAMILY_GEMMA2: ModelFamily
MODEL_FAMILY_PHI3: ModelFamily
MODEL_FAMILY_GPT2: ModelFamily
MODEL_FAMILY_QWEN3: ModelFamily
MODEL_FAMILY_OLMO2: ModelFamily
MODEL_FAMILY_QWEN3_MOE: ModelFamily
MODEL_FAMILY_GEMMA3: ModelFamily
MODEL_FAMILY_PHI: ModelFamily
MODEL_FAMILY_QWEN2_MOE: ModelFamily
MODEL_FAMILY_STARCODER2: ModelFamily
MODEL_FAMILY_DEEPSEEK_V3: ModelFamily
MODEL_FAMILY_GLM4_MOE: ModelFamily
MODEL_FAMILY_DEEPSEEK_V2: ModelFamily
MODEL_FAMILY_GPT_OSS: ModelFamily
MODEL_FAMILY_QWEN2_5_VL: ModelFamily
MODEL_FAMILY_LLAMA4: ModelFamily

class VisionTower(_message.Message):
    __slots__ = ("depth", "embed_dim", "num_heads", "mlp_ratio", "patch_size", "temporal_patch_size", "in_channels", "spatial_merge_size", "out_hidden_size", "intermediate_size", "image_size")
    DEPTH_FIELD_NUMBER: _ClassVar[int]
    EMBED_DIM_FIELD_NUMBER: _ClassVar[int]
    NUM_HEADS_FIELD_NUMBER: _ClassVar[int]
    MLP_RATIO_FIELD_NUMBER: _ClassVar[int]
    PATCH_SIZE_FIELD_NUMBER: _ClassVar[int]
    TEMPORAL_PATCH_SIZE_FIELD_NUMBER: _ClassVar[int]
    IN_CHANNELS_FIELD_NUMBER: _ClassVar[int]
    SPATIAL_MERGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    OUT_HIDDEN_SIZE_FIELD_NUMBER: _ClassVar[int]
    INTERMEDIATE_SIZE_FIELD_NUMBER: _ClassVar[int]
    IMAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    depth: int
    embed_dim: int
    num_heads: int
    mlp_ratio: int
    patch_size: int
    temporal_patch_size: int
    in_channels: int
    spatial_merge_size: int
    out_hidden_size: int
    intermediate_size: int
    image_size: int
    def __init__(self, depth: _Optional[int] = ..., embed_dim: _Optional[int] = ..., num_heads: _Optional[int] = ..., mlp_ratio: _Optional[int] = ..., patch_size: _Optional[int] = ..., temporal_patch_size: _Optional[int] = ..., in_channels: _Optional[int] = ..., spatial_merge_size: _Optional[int] = ..., out_hidden_size: _Optional[int] = ..., intermediate_size: _Optional[int] = ..., image_size: _Optional[int] = ...) -> None: ...

class LatentAttention(_message.Message):
    __slots__ = ("q_lora_rank", "kv_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim")
    Q_LORA_RANK_FIELD_NUMBER: _ClassVar[int]
    KV_LORA_RANK_FIELD_NUMBER: _ClassVar[int]
    QK_ROPE_HEAD_DIM_FIELD_NUMBER: _ClassVar[int]
    QK_NOPE_HEAD_DIM_FIELD_NUMBER: _ClassVar[int]
    V_HEAD_DIM_FIELD_NUMBER: _ClassVar[int]
    q_lora_rank: int
    kv_lora_rank: int
    qk_rope_head_dim: int
    qk_nope_head_dim: int
    v_head_dim: int
    def __init__(self, q_lora_rank: _Optional[int] = ..., kv_lora_rank: _Optional[int] = ..., qk_rope_head_dim: _Optional[int] = ..., qk_nope_head_dim: _Optional[int] = ..., v_head_dim: _Optional[int] = ...) -> None: ...

class Architecture(_message.Message):
    __slots__ = ("family", "num_layers", "hidden_size", "intermediate_size", "num_attention_heads", "num_key_value_heads", "head_dim", "vocab_size", "tie_word_embeddings", "attention_bias", "mlp_bias", "num_experts", "experts_per_token", "max_position_embeddings", "vision", "rotary_dims", "residual_dropout", "shared_expert_intermediate_size", "attention_dropout", "embedding_dropout", "latent_attention", "dense_layers", "dense_intermediate_size", "qk_norm", "group_limited_routing", "moe_layer_interval", "nope_layer_interval", "attention_chunk_size")
    FAMILY_FIELD_NUMBER: _ClassVar[int]
    NUM_LAYERS_FIELD_NUMBER: _ClassVar[int]
    HIDDEN_SIZE_FIELD_NUMBER: _ClassVar[int]
    INTERMEDIATE_SIZE_FIELD_NUMBER: _ClassVar[int]
    NUM_ATTENTION_HEADS_FIELD_NUMBER: _ClassVar[int]
    NUM_KEY_VALUE_HEADS_FIELD_NUMBER: _ClassVar[int]
    HEAD_DIM_FIELD_NUMBER: _ClassVar[int]
    VOCAB_SIZE_FIELD_NUMBER: _ClassVar[int]
    TIE_WORD_EMBEDDINGS_FIELD_NUMBER: _ClassVar[int]
    ATTENTION_BIAS_FIELD_NUMBER: _ClassVar[int]
    MLP_BIAS_FIELD_NUMBER: _ClassVar[int]
    NUM_EXPERTS_FIELD_NUMBER: _ClassVar[int]
    EXPERTS_PER_TOKEN_FIELD_NUMBER: _ClassVar[int]
    MAX_POSITION_EMBEDDINGS_FIELD_NUMBER: _ClassVar[int]
    VISION_FIELD_NUMBER: _ClassVar[int]
    ROTARY_DIMS_FIELD_NUMBER: _ClassVar[int]
    RESIDUAL_DROPOUT_FIELD_NUMBER: _ClassVar[int]
    SHARED_EXPERT_INTERMEDIATE_SIZE_FIELD_NUMBER: _ClassVar[int]
    ATTENTION_DROPOUT_FIELD_NUMBER: _ClassVar[int]
    EMBEDDING_DROPOUT_FIELD_NUMBER: _ClassVar[int]
    LATENT_ATTENTION_FIELD_NUMBER: _ClassVar[int]
    DENSE_LAYERS_FIELD_NUMBER: _ClassVar[int]
    DENSE_INTERMEDIATE_SIZE_FIELD_NUMBER: _ClassVar[int]
    QK_NORM_FIELD_NUMBER: _ClassVar[int]
    GROUP_LIMITED_ROUTING_FIELD_NUMBER: _ClassVar[int]
    MOE_LAYER_INTERVAL_FIELD_NUMBER: _ClassVar[int]
    NOPE_LAYER_INTERVAL_FIELD_NUMBER: _ClassVar[int]
    ATTENTION_CHUNK_SIZE_FIELD_NUMBER: _ClassVar[int]
    family: ModelFamily
    num_layers: int
    hidden_size: int
    intermediate_size: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    vocab_size: int
    tie_word_embeddings: bool
    attention_bias: bool
    mlp_bias: bool
    num_experts: int
    experts_per_token: int
    max_position_embeddings: int
    vision: VisionTower
    rotary_dims: int
    residual_dropout: float
    shared_expert_intermediate_size: int
    attention_dropout: float
    embedding_dropout: float
    latent_attention: LatentAttention
    dense_layers: int
    dense_intermediate_size: int
    qk_norm: bool
    group_limited_routing: bool
    moe_layer_interval: int
    nope_layer_interval: int
    attention_chunk_size: int
    def __init__(self, family: _Optional[_Union[ModelFamily, str]] = ..., num_layers: _Optional[int] = ..., hidden_size: _Optional[int] = ..., intermediate_size: _Optional[int] = ..., num_attention_heads: _Optional[int] = ..., num_key_value_heads: _Optional[int] = ..., head_dim: _Optional[int] = ..., vocab_size: _Optional[int] = ..., tie_word_embeddings: _Optional[bool] = ..., attention_bias: _Optional[bool] = ..., mlp_bias: _Optional[bool] = ..., num_experts: _Optional[int] = ..., experts_per_token: _Optional[int] = ..., max_position_embeddings: _Optional[int] = ..., vision: _Optional[_Union[VisionTower, _Mapping]] = ..., rotary_dims: _Optional[int] = ..., residual_dropout: _Optional[float] = ..., shared_expert_intermediate_size: _Optional[int] = ..., attention_dropout: _Optional[float] = ..., embedding_dropout: _Optional[float] = ..., latent_attention: _Optional[_Union[LatentAttention, _Mapping]] = ..., dense_layers: _Optional[int] = ..., dense_intermediate_size: _Optional[int] = ..., qk_norm: _Optional[bool] = ..., group_limited_routing: _Optional[bool] = ..., moe_layer_interval: _Optional[int] = ..., nope_layer_interval: _Optional[int] = ..., attention_chunk_size: _Optional[int] = ...) -> None: ...

class ModelRef(_message.Message):
    __slots__ = ("catalog_name", "architecture", "config_json", "weights")
    CATALOG_NAME_FIELD_NUMBER: _ClassVar[int]
    ARCHITECTURE_FIELD_NUMBER: _ClassVar[int]
    CONFIG_JSON_FIELD_NUMBER: _ClassVar[int]
    WEIGHTS_FIELD_NUMBER: _ClassVar[int]
    catalog_name: str
    architecture: Architecture
    config_json: str
    weights: str
    def __init__(self, catalog_name: _Optional[str] = ..., architecture: _Optional[_Union[Architecture, _Mapping]] = ..., config_json: _Optional[str] = ..., weights: _Optional[str] = ...) -> None: ...

class ModelInfo(_message.Message):
    __slots__ = ("name", "architecture", "parameter_count", "active_parameter_count", "vision_parameter_count", "source")
    NAME_FIELD_NUMBER: _ClassVar[int]
    ARCHITECTURE_FIELD_NUMBER: _ClassVar[int]
    PARAMETER_COUNT_FIELD_NUMBER: _ClassVar[int]
    ACTIVE_PARAMETER_COUNT_FIELD_NUMBER: _ClassVar[int]
    VISION_PARAMETER_COUNT_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    name: str
    architecture: Architecture
    parameter_count: int
    active_parameter_count: int
    vision_parameter_count: int
    source: str
    def __init__(self, name: _Optional[str] = ..., architecture: _Optional[_Union[Architecture, _Mapping]] = ..., parameter_count: _Optional[int] = ..., active_parameter_count: _Optional[int] = ..., vision_parameter_count: _Optional[int] = ..., source: _Optional[str] = ...) -> None: ...
