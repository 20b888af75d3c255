"""MoE token dispatch and combine across the expert-parallel group, and the host work around them.

Read from Megatron-Core at NVIDIA/Megatron-LM d98e8a64dd
(``megatron/core/transformer/moe/token_dispatcher.py``):

- **all-to-all** (``MoEAlltoAllTokenDispatcher``): the router's tokens are permuted into one row
  per chosen expert (top-k rows per token) and exchanged with NCCL's all-to-all over the EP group
  (then gathered over the expert-TP group when ETP > 1); combine sends them back. Each rank sends
  ``tokens x top-k x hidden`` bytes, a share ``1 / EP`` to each member. Before the exchange the
  host needs the split sizes: the token counts are gathered over the TP x EP group and copied to
  the host, and the host waits for them (``cuda_sync_point``, ``before_ep_alltoall``): every MoE
  layer's forward synchronises the host with the GPU.
- **all-gather** (``MoEAllGatherTokenDispatcher``, Megatron-LM's default): every rank gathers the
  TP x EP group's tokens and keeps its experts' rows; the token counts also go to the host.
- **flex** (``MoEFlexTokenDispatcher``, DeepEP or HybridEP over the TP x EP group): a token is
  sent once to each rank holding at least one of its experts (replicated over expert TP), not once
  per expert, and across nodes once per node, then forwarded inside the node over NVLink
  (DeepEP's "normal kernels with NVLink and RDMA forwarding", deepseek-ai/DeepEP docs/legacy.md at
  dd758caf; HybridEP's hierarchy the same).

Routing is taken as balanced (Bridge's benchmarks force it, ``moe_router_force_load_balancing``):
a token's top-k experts are k distinct experts drawn uniformly, within its ``group_topk`` groups
where the router is group-limited (``moe_router_num_groups``), so the ranks and nodes a token
reaches follow from the hypergeometric law (:func:`reached`).
"""

from __future__ import annotations

from math import comb

from memtune.catalog.network import Network
from memtune.config.derived import Derived
from memtune.perf import constants as K
from memtune.perf.collectives import Group, all_to_all, exchange_seconds

BF16 = 2


def _none_of(pool: int, held: int, topk: int) -> float:
    """Probability that none of ``topk`` distinct experts drawn from ``pool`` is among ``held``."""
    if held >= pool:
        return 0.0
    return comb(pool - held, topk) / comb(pool, topk) if topk <= pool - held else 0.0


def reached(experts: int, topk: int, held: int, groups: int | None, group_topk: int | None) -> float:
    """Probability that a token's top-k experts include at least one of ``held`` experts that sit
    together (one rank's, or one node's): uniform over all experts, or over the experts of
    ``group_topk`` of ``groups`` equal groups (group-limited routing)."""
    if not groups or not group_topk or group_topk >= groups:
        return 1 - _none_of(experts, held, topk)
    per_group = experts // groups
    pool = per_group * group_topk
    if held <= per_group:
        # the held experts lie in one group: it must be chosen, then one of them drawn
        return group_topk / groups * (1 - _none_of(pool, held, topk))
    covered = min(groups, held // per_group)  # whole groups held: reached when any is chosen
    return 1 - comb(groups - covered, group_topk) / comb(groups, group_topk)


def dispatch_s(d: Derived, tokens: float, network: Network) -> float:
    """Seconds for one dispatch (a combine costs the same) of a rank's ``tokens`` over the EP group
    (members ETP apart: Megatron's expert order ``tp-ep-dp-pp``) by the job's dispatcher."""
    m = d.model
    ep, etp = d.ep, d.etp
    if ep * etp <= 1:
        return 0.0
    h, k = m.hidden_size, m.moe_router_topk
    experts = m.num_moe_experts or 1
    group = Group(ep, stride=etp)
    per_node = group.per_domain(network)  # EP ranks sharing the rank's NVLink domain
    nodes = group.domains(network)
    token = BF16 * h
    if m.moe_token_dispatcher_type != "flex":
        copies = tokens * k * token
        if m.moe_token_dispatcher_type == "allgather":
            # every rank receives the whole group's tokens (not top-k rows: the mask selects them)
            copies = tokens * token * ep
        return all_to_all(copies, group, network)
    local = experts // ep
    rank_p = reached(experts, k, local, m.moe_router_num_groups, m.moe_router_group_topk)
    node_p = reached(experts, k, local * per_node, m.moe_router_num_groups, m.moe_router_group_topk)
    remote_nodes = (nodes - 1) * node_p
    remote_ranks = (ep - per_node) * rank_p
    return exchange_seconds(
        tokens * token * etp * ((per_node - 1) * rank_p + remote_ranks - remote_nodes),
        network.nvlink_bytes_per_s * K.DEEPEP_NVLINK_FRACTION,
        tokens * token * etp * remote_nodes,
        network.nic_bytes_per_s_per_gpu * K.DEEPEP_RDMA_FRACTION,
    )


def moe_layer_host_s(d: Derived) -> tuple[float, float]:
    """Host work a MoE layer's forward and backward add to a dense layer's whatever it
    exchanges, beyond its local experts' own: the router, the dispatcher's bookkeeping and the
    permutes (``MOE_LAYER_HOST_S``), and the dispatcher's splits and sorts per expert of the
    model (``MOE_EXPERT_HOST_S``); none measured for the flex dispatcher, whose whole-step
    constant carries it."""
    dispatcher = d.model.moe_token_dispatcher_type
    experts = d.model.num_moe_experts or 1
    layer = K.MOE_LAYER_HOST_S.get(dispatcher, (0.0, 0.0))
    per_expert = K.MOE_EXPERT_HOST_S.get(dispatcher, (0.0, 0.0))
    return layer[0] + experts * per_expert[0], layer[1] + experts * per_expert[1]


def dispatcher_host_fwd_s(d: Derived) -> float:
    """Host work an MoE layer's forward adds under expert or tensor parallelism beyond
    :func:`moe_layer_host_s`, by dispatcher (its backward ``backward_factor`` times it): the
    collectives' launches and the host's waits on them (``MOE_DISPATCHER_HOST_FWD_S``). Under
    PyTorch's fake process group, whose exchanges move nothing, it is not there
    (``memtune/perf/layer.py``, ``exchanges``)."""
    if d.ep * d.etp <= 1 and d.tp <= 1:
        return 0.0
    return K.MOE_DISPATCHER_HOST_FWD_S[d.model.moe_token_dispatcher_type]
