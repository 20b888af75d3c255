"""A core-attention module on ``torch.nn.functional.scaled_dot_product_attention``.

Why it exists: without Transformer Engine, Megatron-Core's local layer spec only has
``DotProductAttention``, which materialises the ``[b, heads, s, s]`` score and probability
matrices (and keeps them for backward). A job configured with ``attention_backend: flash``
would run TE's flash attention on a real cluster, which keeps only the output and the softmax
statistics. This module gives the local spec that memory behaviour with PyTorch's own flash or
memory-efficient kernels, and it also accepts multi-latent attention (different query/key and
value head sizes, passed as ``k_channels``/``v_channels``) and grouped-query attention without
repeating keys and values.

It takes the constructor and forward arguments of Megatron-Core 0.19.2's
``DotProductAttention`` so the layer specs can use it in its place. Imported only inside the
measurement subprocess.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from megatron.core.process_groups_config import ProcessGroupCollection
from megatron.core.transformer.enums import AttnMaskType
from megatron.core.transformer.module import MegatronModule
from megatron.core.utils import divide
from torch.nn.attention import SDPBackend, sdpa_kernel

if TYPE_CHECKING:
    from megatron.core.packed_seq_params import PackedSeqParams
    from megatron.core.transformer.transformer_config import TransformerConfig

MEMORY_EFFICIENT_KERNELS = [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION]


class SDPAttention(MegatronModule):  # type: ignore[misc]  # megatron-core has no type information
    def __init__(
        self,
        config: TransformerConfig,
        layer_number: int,
        attn_mask_type: AttnMaskType,
        attention_type: str,
        attention_dropout: float | None = None,
        softmax_scale: float | None = None,
        cp_comm_type: str | None = None,
        pg_collection: ProcessGroupCollection | None = None,
        k_channels: int | None = None,
        v_channels: int | None = None,
    ) -> None:
        super().__init__(config=config)
        assert config.context_parallel_size == 1, "SDPAttention has no context parallelism"
        if pg_collection is None:
            pg_collection = ProcessGroupCollection.use_mpu_process_groups(required_pgs=["tp"])
        tp = pg_collection.tp.size()
        self.layer_number = max(1, layer_number)
        self.attn_mask_type = attn_mask_type
        self.heads = divide(config.num_attention_heads, tp)
        self.query_groups = divide(config.num_query_groups, tp)
        self.hidden_size_per_attention_head_v = v_channels or config.kv_channels
        head_dim = k_channels or config.kv_channels
        self.softmax_scale = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(head_dim)
        self.dropout = config.attention_dropout if attention_dropout is None else attention_dropout

    def forward(
        self,
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        attention_mask: torch.Tensor | None,
        attn_mask_type: AttnMaskType | None = None,
        attention_bias: torch.Tensor | None = None,
        packed_seq_params: PackedSeqParams | None = None,
    ) -> torch.Tensor:
        assert packed_seq_params is None, "SDPAttention takes no packed sequences"
        assert attention_bias is None, "SDPAttention takes no attention bias"
        # Training batches here are causal with no explicit mask (Megatron's mask convention,
        # True = hidden, is the opposite of SDPA's, so none is passed through).
        assert (attn_mask_type or self.attn_mask_type) == AttnMaskType.causal and attention_mask is None
        # Megatron lays tensors out [s, b, heads, dim]; SDPA wants [b, heads, s, dim]. The
        # permuted views keep the last dimension contiguous, which the kernels need.
        q, k, v = (t.permute(1, 2, 0, 3) for t in (query, key, value))
        with sdpa_kernel(MEMORY_EFFICIENT_KERNELS):
            out = F.scaled_dot_product_attention(
                q,
                k,
                v,
                dropout_p=self.dropout if self.training else 0.0,
                is_causal=True,
                scale=self.softmax_scale,
                enable_gqa=self.query_groups != self.heads,
            )
        seq, batch = query.shape[0], query.shape[1]
        return out.permute(2, 0, 1, 3).reshape(seq, batch, self.heads * out.shape[-1])
