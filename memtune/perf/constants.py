"""Every constant of the step model, in one place, each with its source.

Peak FLOP/s, HBM and NVLink bandwidth per GPU come from the GPU catalog
(``memtune/catalog/data/gpus.yaml``, vendor datasheets). What is here is how much of those peaks
real kernels and collectives reach, and the few figures the catalog has no column for.

GEMM efficiency follows a half-performance-size model (Hockney's ``n_1/2``):

    efficiency(M, N, K) = GEMM_PEAK_FRACTION / (1 + GEMM_HALF_SIZE / M + GEMM_HALF_SIZE / N + GEMM_HALF_SIZE / K)

so a GEMM whose every side is much larger than ``GEMM_HALF_SIZE`` runs at ``GEMM_PEAK_FRACTION``
of the tensor-core peak and one with a side of ``GEMM_HALF_SIZE`` loses about half. Smaller
tensor-parallel shards (a smaller N or K) therefore run less efficiently.

Where the numbers come from: ``benchmarks/gpu/gemm_calibration.py`` timed the forward GEMMs of
Llama-3 8B/70B/405B-, Qwen3-32B- and GPT-3-175B-like layers split over TP 1-8 at 4k and 8k tokens,
routed-expert GEMMs, and causal flash attention (torch SDPA, head dim 128) on the project's H200
(torch 2.11, 2026-12-01); ``--fit`` gives the two GEMM numbers below (mean error 6.0% over the
shapes; the worst, an expert GEMM of 128 rows, runs 82% slower than the curve says). Raw
timings: ``benchmarks/gpu/results/gemm-h200.json``. The step model (``memtune/perf/step.py``)
uses the curve only outside its measured tables (``memtune/perf/kernels.py``: bf16 and
FP8-tensorwise GEMMs, flash attention). Other GPUs scale by their catalog peak: the fraction
reached is assumed to be the same on every GPU.
"""

from __future__ import annotations

from dataclasses import dataclass

# --- compute -------------------------------------------------------------------------------
# Fitted to the H200's shard-shaped GEMMs (see the module docstring).
GEMM_HALF_SIZE = 299.5
GEMM_PEAK_FRACTION = 0.773

# Flash attention's backward does 2.5x the forward's FLOPs (five GEMMs against two); its rates
# come from the measured table (memtune/perf/kernels.py).
ATTENTION_BWD_FLOPS_FACTOR = 2.5

# Elementwise work around the GEMMs under Transformer Engine's fused kernels is bound by HBM
# bandwidth. The norms, residual adds, RoPE, dropout and bias: bytes moved per layer and token as
# a multiple of the hidden size in bf16, counted from Megatron-Core's layer: two norms (read +
# write), two residual adds (2 reads + 1 write), RoPE on q and k: about 10 hidden-sized passes
# forward. The MLP's fused activation (bias_swiglu / weighted_bias_swiglu and their kin,
# megatron/core/fusions) is counted at its own width apart from them (memtune/perf/layer.py
# ``elementwise``: it reads the fc1 output, gate x FFN wide, and writes FFN wide; a MoE layer's
# rows are its tokens x top-k). Backward twice the forward.
ELEMENTWISE_PASSES_FWD = 10
# Grouped experts' fused activation (Derived.experts_weighted_fused_activation; weighted_bias_swiglu:
# each row times its router probability, megatron-core 0.19.2 fusions/fused_bias_swiglu.py) takes this multiple of its
# forward in its backward, where it also reduces the probability's gradient over each row: timed
# with benchmarks/gpu/activation_bytes.py on an H100 (GPU-15461b6a, two passes,
# results/activation-bytes-h100-pass*.json): 3.13-3.34 at Qwen3-30B-A3B's and DeepSeek-V3's
# expert widths (mean 3.24); the dense SwiGLU's backward took 1.77-1.89 of its forward, priced
# at 2 with the rest of the layer's elementwise work.
WEIGHTED_ACTIVATION_BWD_RATIO = 3.2
# GPT-OSS's clamp (Derived.experts_clamp_eagerly): eager ops before the fused weighted
# quick-GeGLU (megatron-core 0.19.2 fusions/fused_bias_geglu.py: two clamps on the strided
# halves of the fc1 output and their concatenation; backward the clamps' gradients gathered into
# one), in multiples of that activation's priced forward (3 f elements a row at HBM speed).
# Their bytes count 8 f forward and 10 f backward (2.67x and 3.33x); timed with
# benchmarks/gpu/activation_bytes.py at GPT-OSS's expert width (16,384 rows of 2 x 2,880) on an
# H100 (GPU-d6431976, two passes, results/activation-bytes-h100-clamp-pass*.json) they took
# 3.46-4.99x forward and 7.54-7.56x backward: the mean of the two passes.
EXPERT_CLAMP_FWD_RATIO = 4.2
EXPERT_CLAMP_BWD_RATIO = 7.6
HBM_FRACTION = 0.80  # STREAM-like copy kernels reach about 80% of the datasheet HBM bandwidth

# --- communication -------------------------------------------------------------------------
# NCCL's bus bandwidth for all-gather / reduce-scatter inside an NVLink domain reaches about 80%
# of the per-direction link bandwidth (nccl-tests on DGX H100: about 360 of 450 GB/s; "NCCL can get
# an effective NVLink bandwidth of 370GB/s", NCCL's maintainer in NVIDIA/nccl-tests issue 212).
NVLINK_BUS_FRACTION = 0.80
# Inter-node: NCCL reaches about 80% of the adapters' line rate.
INTER_NODE_BUS_FRACTION = 0.80
# NCCL's all-to-all (the alltoall and allgather MoE dispatchers, memtune/perf/moe.py): inside an
# NVLink domain it reaches the bus bandwidth of NCCL's other non-all-reduce collectives ("450GB/s
# is the line rate. With the protocol overhead (~20%) NCCL can get an effective NVLink bandwidth
# of 370GB/s", NCCL's maintainer on DGX H100, NVIDIA/nccl-tests issue 212); across nodes a rank's
# exchange runs over its own adapter only ("Alltoall cannot aggregate the bandwidth of multiple
# NICs", NVIDIA/nccl-tests issue 267), which reaches 48-49 of a 400 Gb/s NIC's 50 GB/s (same issue).
ALL_TO_ALL_NVLINK_FRACTION = 370 / 450
ALL_TO_ALL_INTER_NODE_FRACTION = 48 / 50
# DeepEP's (and HybridEP's) dispatch and combine kernels (the flex dispatcher): 153-158 GB/s of an
# H800's ~160 GB/s NVLink inside a node, 43 GB/s of a 400 Gb/s adapter's ~50 across nodes at EP 16
# (deepseek-ai/DeepEP docs/legacy.md at dd758caf, "Normal kernels with NVLink and RDMA forwarding").
DEEPEP_NVLINK_FRACTION = 153 / 160
DEEPEP_RDMA_FRACTION = 43 / 50
# Transformer Engine's userbuffer overlap (tp_comm_overlap) runs a communication kernel on
# ``num_sm`` SMs beside an overlapped GEMM, which with ``set_sm_margin`` gives them up
# (Derived.userbuffer_gemm: Transformer Engine's defaults and the job's tp_comm_overlap_cfg): the
# GEMM's rate falls by that share of the GPU's SMs, here an H100's or H200's 132 (every GPU's:
# the catalog holds no SM counts; a B200 has 148). memtune/perf/layer.py `userbuffer_overlap`.
UB_REFERENCE_SMS = 132

# --- optimizer and offload -----------------------------------------------------------------
# The step model times Adam from the measured table (memtune/perf/kernels.py) and adds
# Megatron's own work around it, per parameter at HBM speed, keyed by use_distributed_optimizer:
# the gradient norm (read 4 B) and clipping (read + write 8 B), the copy of the fp32 main weights
# into the bf16 model (6 B; without the distributed optimizer the local path's copy goes through
# an fp32 product, 14 B). Fitted by benchmarks/fit_step_constants.py (least squares, with the
# loop's step_s and OPTIMIZER_PER_TENSOR_S) to the optimizer seconds of the shared H200 half (19
# runs, all with the distributed optimizer) and the ctime- tune runs: 11-12 B, below the count
# with clipping, which a step whose gradient norm is under clip_grad skips.
OPTIMIZER_STEP_BYTES_PER_PARAM = {False: 10.6, True: 11.6}
# Host side of optimizer offload: the gradient goes down (4 B) and the weight comes back (2 B)
# over the GPU's host link (memtune/perf/offload.py), and the CPU runs Adam. ZeRO-Offload (Ren et
# al., USENIX ATC 2021, Table 3) reports its vectorised CPU-Adam at about 1.3 s for 10 B
# parameters on a multi-core host, shared here by the node's 8 GPUs.
CPU_ADAM_PARAMS_PER_S_PER_GPU = 10e9 / 1.3 / 8
OPTIMIZER_OFFLOAD_BYTES_PER_PARAM = 6.0
# The share of a GPU's host-link line rate (Network.host_link_bytes_per_s: the system's PCIe x16
# port or its NVLink-C2C share, memtune/catalog/data/networks.yaml) that pinned copies on a
# side stream reach, one direction (memtune/perf/offload.py). Measured by
# benchmarks/gpu/host_link.py on one H100 80GB HBM3 (PCIe Gen5 x16, 63 GB/s line rate;
# benchmarks/gpu/results/host-link-h100.json): 51-55 GB/s one direction for 64 MiB-2 GiB
# copies, median 54.1 GB/s. Both directions at once reached 31-35 GB/s each on that host, so
# where a pass copies both ways at once this over-prices the link.
HOST_COPY_EFFICIENCY = 0.86
# Fine-grained activation offload shows part of its copying even where the passes' compute is
# longer than the copies (memtune/perf/offload.py), as a share of the copies' one-way time,
# keyed by whether the job runs with one hardware queue (CUDA_DEVICE_MAX_CONNECTIONS=1). Traced on
# a lent H200 (the aoffm-l8w runs, every module offloaded, 117 ms of copies a step each way):
# with CUDA's default queues the compute stream's kernels took 4 ms longer (the copies' share of
# HBM) and its idle gaps grew 21 ms (the offload manager's host work per group and tensor); with
# one queue 31 ms of its gaps end as a device-to-host copy ends (the compute queued behind the
# copy waits for it). Fitted on the aoffm- tune pairs (benchmarks/measured/matrix.py
# offload_exposure, timed on a lent H100; benchmarks/offload_exposure.py --fit: the ratio of
# sums of exposed to modelled copy seconds, the rule set before fitting).
FINE_GRAINED_OFFLOAD_EXPOSED_SHARE = {False: 0.083, True: 0.278}


# --- fixed costs and FP8 (the step model, memtune/perf/step.py) -----------------------------
@dataclass(frozen=True)
class HostFloor:
    """The host side of a training loop: Python, kernel launches and small kernels per layer,
    per microbatch and per step, which small models and small shards cannot hide."""

    layer_fwd_s: float  # one layer's forward (perf/simulate.py runs the host ahead of the GPU)
    backward_factor: float  # a layer's backward, as a multiple of its forward
    microbatch_s: float  # a microbatch's own (schedule, P2P bookkeeping, loss)
    step_s: float  # a step's (optimizer launches over many tensors, gradient norm, finalize)


# Megatron-LM's and Bridge's training loop (timers, loss reduction, logging around
# get_forward_backward_func): fitted, with the shared factors below, to the tune runs of the
# Megatron-LM functional tests (benchmarks/published/layouts/megatron-lm-ci) by
# benchmarks/fit_step_constants.py. Every prediction of a user's job uses it.
MEGATRON_LM_LOOP = HostFloor(layer_fwd_s=1.2e-3, backward_factor=1.75, microbatch_s=3.0e-3, step_s=40e-3)
# `memtune measure`'s own loop (memtune/measure/runner.py: get_forward_backward_func and
# optimizer.step, nothing around them), and the shared half's, which is the same: fitted by the
# same script to the tune runs timed alone on the H200; benchmarks/compute_accuracy.py compares
# those runs under it.
MEASURE_RUNNER = HostFloor(layer_fwd_s=1.6e-3, backward_factor=2.0, microbatch_s=5e-3, step_s=1.49e-3)
# Kernels inside a training step take this multiple of the same kernels' time in the tables
# (benchmarks/gpu/kernel_calibration.py): clocks, caches, the small kernels the model does not
# price one by one (bias, dropout, copies, casts), and the machine the tables were timed on.
# Fitted by benchmarks/fit_step_constants.py on memtune's own tune runs, timed on the machine the
# tables were timed on, and the Megatron-LM functional tests' tune runs. The shared half's H200s
# and the H100 of the crel- runs ran the same kernels an eighth and a fifth faster inside their
# steps: those sets are priced with their machines' own factor (benchmarks/compute_accuracy.py
# MACHINE_FACTORS), each fitted on its profiled kernel time, so one machine's clocks do not
# make every user's job faster. Which machine a user's job runs like is not known: the
# published multi-GPU runs (TFLOP/s over-predicted at 0.88, best near 1.04) side with 1.
IN_STEP_KERNEL_FACTOR = 1.0
# Blackwell GPUs (B200, GB200, and Blackwell Ultra's B300, GB300, whose BF16 and FP8 tensor cores
# are the B200's) have no kernel tables here and no published kernel figures at
# training shapes beyond a few square bf16 GEMMs (docs/plan.md, kernel efficiency): their kernels
# are the H200's fractions of their datasheet peak, which whole published steps on them do not
# reach. Their kernels inside a step take this multiple of that price, one per generation (Blackwell
# Ultra is other silicon at a higher power limit: 1.08 on its 21 dense GB300 tune runs; the B300,
# with none of its own, takes it): fitted by benchmarks/fit_blackwell_kernels.py on the dense tune
# runs on these GPUs of benchmarks/published/layouts (no MoE run, whose dispatch is priced apart;
# no holdout run), so that the median predicted throughput of those runs is the measured one (49
# runs on B200 and GB200, 21 on GB300). A whole-step
# figure, not a kernel measurement: every prediction on them says so (StepPrediction.unmeasured).
BLACKWELL_KERNEL_FACTOR = {"B200": 1.22, "GB200": 1.22, "B300": 1.08, "GB300": 1.08}
# FP8 attention (``Derived.fp8_attention``: cuDNN's fused FP8 kernels through Transformer Engine)
# takes these multiples of cuDNN's bf16 attention kernels' time in the tables. The forward's is
# measured: cuDNN's FP8 forward graph through its frontend on an H100 (benchmarks/gpu/
# fp8_attention.py, results/fp8-attention-h100-pass{1,2,3}.json), the median over seven Llama
# shapes and three passes (0.54-0.74; the same on any data, fp8_attention_data.py). Its backward
# graph timed 1.46 there, which whole published steps contradict: MLPerf's Llama 2 70B LoRA runs
# with FP8_DPA=1 run faster than the bf16 price gives them. Whether Transformer Engine's
# backward graph differs from the frontend's is open, so the backward's is fitted instead, by
# benchmarks/fit_fp8_attention.py on the published tune runs on H100 and H200 (whose kernels the
# tables measure) with FP8 attention: a whole-step figure, not a kernel measurement. Blackwell
# takes both (unmeasured there); every prediction says so (StepPrediction.unmeasured). The rule
# gave 0.61 when first run; rerun in session 28 it gave 0.55 (later changes to the step had moved
# it while the model's refits left this script out); 0.68 once COLLECTIVE_LAUNCH_S settled at
# 100 us with the Blackwell Ultra rows (session 29: the median of its 16 runs sits between two
# runs whose errors move apart with the launch price).
FP8_ATTENTION_FWD_FACTOR = 0.65
FP8_ATTENTION_BWD_FACTOR = 0.68
# A MoE layer's host work beyond a dense layer's, measured in the measure loop (Megatron's DDP,
# its schedule, the fake process group at the job's world size) by the `hostmoe-` runs
# (benchmarks/measured/matrix.py host_by_moe, rule fixed before their one run on a lent H100,
# GPU-9fda3b86; raw benchmarks/gpu/results/hostmoe-h100.results.jsonl, read by
# benchmarks/host_moe.py): tiny layers whose GPU waits on the host, 4 and 16 experts at EP 1,
# 32 and 128 at EP 8, per dispatcher, forward and backward together; split between them as
# benchmarks/gpu/moe_host.py's stack splits them (raw benchmarks/gpu/results/moe-host-h100.json:
# 0.442 of an expert's in the forward; of a layer's 0.783 with the all-gather dispatcher and
# 0.732 with the all-to-all one).
#
# Megatron-Core's SequentialMLP (Derived.experts_are_sequential_modules) runs the local
# experts one after another, each its own module: per local expert and layer the host's work
# grows by these, forward and backward; the GPU waits for it only where its kernels are
# shorter. The mean of the two dispatchers' slopes (381.6 us all-to-all, 435.3 us all-gather,
# forward and backward): an expert module's own work, whichever dispatcher feeds it.
SEQUENTIAL_EXPERT_FWD_S = 180.5e-6
SEQUENTIAL_EXPERT_BWD_S = 228.0e-6
# Host work every MoE layer adds to a dense one whatever it exchanges, by token dispatcher,
# (forward, backward): the router (gating GEMM, top-k, softmax, its load-balancing loss), the
# dispatcher's bookkeeping (the all-gather dispatcher's mask and tokens-per-expert copy to the
# host; the all-to-all dispatcher's split sizes and their copy) and the permutes: 2.123 ms
# (all-to-all) and 0.818 ms (all-gather) a layer, forward and backward. The flex dispatcher
# needs DeepEP or HybridEP and more than one rank: unmeasured, its whole-step constant below
# carries all of its host work.
MOE_LAYER_HOST_S = {"allgather": (0.641e-3, 0.177e-3), "alltoall": (1.554e-3, 0.569e-3)}
# And per expert of the model, by dispatcher (forward, backward): the all-to-all dispatcher's
# split and sort of its tokens per expert (``sort_chunks_by_idxs``), 2.4 us an expert forward
# and backward, split as its layer's work is. The rule's figure for the all-gather dispatcher
# came out negative (-16.9 us: its EP-8 runs sit 1.4 ms above what a cost per local expert,
# per expert of the model and per layer give), which no cost can be: none is taken, and its
# cost per local expert and per layer come from its EP-1 runs alone.
MOE_EXPERT_HOST_S = {"alltoall": (1.8e-6, 0.6e-6)}
# Host work an MoE layer's forward adds under expert or tensor parallelism beyond the measured
# MOE_LAYER_HOST_S and MOE_EXPERT_HOST_S, by token dispatcher (memtune/perf/moe.py): the
# collectives' launches and the host's waits on them, the all-to-all dispatcher's before every
# exchange. 2.7 ms is what the one Megatron-LM functional-test tune run with that dispatcher and
# no other unpriced cost (gpt3_moe_mcore_te_tp4_ep2_etp2_pp2_resume_torch_dist_dist_optimizer, 12
# MoE layers of width 512, TP 4, EP 2, ETP 2) leaves unexplained, on a 0.1 ms grid
# (benchmarks/fit_alltoall_host.py; unchanged with COLLECTIVE_LAUNCH_S at 100 us since the B300 and
# GB300 rows joined the tune runs, and at 110 us since the userbuffer
# chunks' GPU cost and cuDNN's windowed and sink attention are measured; 2.6 ms at 120 us after
# interleaved chunks reduced in the order their gradients are ready, 2.7 ms before, 3 ms before
# the hostmoe- runs were adopted). The all-gather dispatcher's tune run without other unpriced
# costs leaves nothing (0). The flex dispatcher (DeepEP, HybridEP: Python around fused kernels,
# the token counts the grouped GEMM takes on the host) shows only where it bounds a step, small
# MoE layers at micro-batch 1: 1.8 ms is what benchmarks/fit_flex_host.py fits on the tune runs
# it moves (eight since Bridge's B300 rows joined them, 1.9 ms on six before; six since a graphed
# MoE router gives up its host work, nine before: Qwen3-30B-A3B at
# MBS 1 on 16 H100s in three releases, Qwen3-235B-A22B on GB200 and B200; 2.0 ms before Bridge's
# summary rows took their own release's settings, which put several of them on the all-to-all
# dispatcher or off full-iteration CUDA graphs; 1.7 ms before the loop's backward factor was
# refitted), a whole-step fit, not a measurement.
MOE_DISPATCHER_HOST_FWD_S = {"allgather": 0.0, "alltoall": 2.7e-3, "flex": 1.8e-3}
# A layer captured whole in a CUDA graph (``cuda_graph_impl: local`` or ``transformer_engine``
# without a scope) costs the host one replay a pass, not its modules' Python and launches:
# an autograd function copies the inputs into the graph's static buffers and replays the forward
# graph; its backward replays the backward graph and hands the parameters' gradients back to
# autograd (megatron-core 0.19.2 transformer/cuda_graphs.py ``_CudagraphReplayNode``; Transformer
# Engine's ``make_graphed_callables``). Measured on an H100 with torch's make_graphed_callables
# on Megatron-Core 0.19.2 local-spec layers (benchmarks/gpu/graph_replay_host.py, results in
# benchmarks/gpu/results/graph-replay-host/; median of three processes; the same layers eager:
# 1.07 ms forward, 1.20 ms backward). A component measurement, every run read.
GRAPH_REPLAY_HOST_FWD_S = 71e-6
GRAPH_REPLAY_HOST_BWD_S = 257e-6
# A layer graphed in part (``cuda_graph_modules`` ``attn``, a dense layer's ``mlp``, a MoE layer's
# ``moe_router`` with ``moe_preprocess``) replays the graphed parts (one replay a pass, above) and
# runs the rest eagerly. Each graphed part takes its share of a dense layer's host work with it,
# forward and backward: the attention half (``TransformerLayer._forward_attention``: the input
# norm, the self-attention, its bias-dropout-add), the dense MLP half the rest, and a MoE layer's
# router part (the pre-MLP norm, the router, the dispatcher's preprocessing) by token dispatcher,
# in units of a dense layer's host work. Measured by benchmarks/gpu/graph_scope_host.py's rule 2
# on Megatron-Core 0.19 local-spec layers at tiny shapes, the GPU waiting on the host, every part
# against the dense layer timed beside it, the median of three passes (a lent H200's host,
# GPU-043caa40; results/graph-scope-host/rule2-h200.json). Rule 1 (another H200 host) gave the
# attention half 0.750 and 0.742; its MoE shares were unusable (above 1).
GRAPH_ATTENTION_HOST_SHARE = (0.711, 0.739)
GRAPH_ROUTER_HOST_SHARE = {"alltoall": (0.932, 0.602), "allgather": (0.677, 0.452)}
# What each TP, CP or LoRA collective of a layer costs beyond the bytes NCCL's tuner prices
# (memtune/perf/collectives.py): its launch and proxy work, and under Transformer Engine's
# userbuffer overlap each exchange's share of the split GEMMs' synchronisation. Fitted by
# benchmarks/fit_collective_launch.py on the tune runs (published layout sets and functional
# tests; the rule in its docstring), jointly with BLACKWELL_KERNEL_FACTOR's own rule: 100 us
# since Bridge's B300 and GB300 rows are tune data (the other rules iterated with it until none
# moved: BLACKWELL_KERNEL_FACTOR 1.08 for Blackwell Ultra, the flex dispatcher 1.8 ms, FP8
# attention's backward 0.68); 110 us since the userbuffer chunks' GPU cost (UB_CHUNK_DEVICE_S)
# and cuDNN's windowed and sink
# attention (WINDOW_ATTENTION_RATE, SINK_ATTENTION_BWD_S) are measured (the all-to-all
# dispatcher's below back at 2.7 ms; a second round moved neither); 120 us
# since interleaved chunks reduce their gradients in the order they are ready (simulate.py
# flush; with the all-to-all dispatcher's below at 2.6 ms, one round); 110 us since a MoE
# layer's host work is measured (hostmoe-; the rules of this constant and of the
# all-to-all dispatcher's below iterated until neither moved); 130 us since Transformer Engine's
# FP8 casts are counted per operand (Derived.fp8_cast_bytes); 100 us
# since the userbuffer overlap's extra GEMM calls cost the host (UB_CHUNK_HOST_S); 120 us before,
# 150 us from the first fit (9493768, on the functional tests alone).
COLLECTIVE_LAUNCH_S = 100e-6
# The host's work for each GEMM call Transformer Engine's userbuffer overlap adds to a layer
# (``ShapePricer.userbuffer_chunks``: a ring exchange runs a GEMM as TP calls, a pipelined
# reduce-scatter as its splits). Measured on a lent H100 by benchmarks/gpu/launch_host.py
# (results/launch-host-h100.json, ``gemm_calls``): an FP8 GEMM of Llama 3 70B's TP 8 shapes as
# 8 calls of 512 rows against one call of 4,096, the GPU held busy, 17-26 us a call more (the
# median of the four shapes, as the rule fixed before the run says). torch's dispatch is in it;
# the chunk's send, receive and events, a few C++ calls, are not.
UB_CHUNK_HOST_S = 19.3e-6
# The GPU's own cost of each extra GEMM call of the userbuffer overlap (a chunk waits for an event
# recorded on another stream and starts cold, where back-to-back GEMMs overlap one's tail with
# the next one's start), beyond the chunks' GEMMs at their back-to-back rate. Measured on a lent
# H100 by benchmarks/gpu/ub_chunk_device.py (results/ub-chunk-device-h100.json; its second rule,
# fixed before that run: the ring exchange's structure on one GPU, the work queued behind a sleep
# so the events time the GPU alone): 3.0 us, the median over twelve FP8 shapes of Llama 3 70B
# and GPT-3 175B at TP 4 and 8 in two passes (-1.5 ... 8.7 us). ``ShapePricer.userbuffer_overlap``.
UB_CHUNK_DEVICE_S = 3.0e-6
# cuDNN's fused attention within a sliding window (Transformer Engine's ``window_size`` [W, 0], a
# query seeing itself and W keys before it) runs slower than its share of the causal kernel's
# work at the causal kernel's rate: forward and backward, how many times that share's time it
# takes. And a learnable softmax offset (attention sinks, ``softmax_type: learnable``) costs the
# backward a fixed time per query row and head (its gradient's reduction), windowed or not, and
# the forward nothing (0.97-1.01 of the plain kernel). Measured on a lent H100 by
# benchmarks/gpu/sink_window_attention.py (results/sink-window-attention-h100.json; cuDNN 9.19 through
# the cuDNN frontend, GPT-OSS's heads at TP 1 and 2, micro-batches 1 and 4, sequences 4,096 and
# 8,192, and a Llama-like shape at head dim 128, W = 128, two passes): the window's rate the median
# of its rule (4.1-4.7 forward, 4.9-5.4 backward); the sink's backward the median over the causal
# shapes of (sink - plain) / (batch x heads x sequence), 1.32-1.67 ns (the windowed shapes 1.40-1.66).
# ``ShapePricer.core_attention``; the cuDNN kernel only.
WINDOW_ATTENTION_RATE = (4.38, 5.21)
WINDOW_ATTENTION_TIMED_KEYS = 128  # the window those rates were timed at (wider: capped at causal)
SINK_ATTENTION_BWD_S = 1.53e-9
# Host seconds of one of test_mode's consistency comparisons (Derived.qk_norm_consistency_checks):
# indexing the gathered copy, launching the equality and ``torch.all`` kernels, and waiting for
# the GPU to reach them (``assert`` on a CUDA tensor reads it on the host). Fitted on the two tune
# runs that set test_mode, Megatron-LM's functional test
# gpt3_mcore_te_tp4_pp1_resume_torch_dist_qk_layernorm_test_mode on DGX H100 (0.4125 s a step)
# and on GB200 (0.4096 s): they need 147 and 142 us (24 comparisons per layer forward, 48 layer
# forwards a step; their mean, to 5 us); about five operations at the rate the same CI hosts'
# layer floor implies (MEGATRON_LM_LOOP: 1.2 ms for a small layer's forward).
CONSISTENCY_CHECK_HOST_S = 145e-6
# One call of Megatron-Core's Sinkhorn router in training (Derived.sinkhorn_routing): its loop's
# kernels and the host's wait on each iteration's error. Measured on an H100 by
# benchmarks/gpu/sinkhorn_router.py (results/sinkhorn-h100.json: megatron-core's own function
# on a fresh router's logits, 2-3 iterations, 0.29-0.45 ms a call at 1k-8k tokens and 4-16
# experts): the median of its six shapes.
SINKHORN_ROUTER_HOST_S = 0.42e-3
# Megatron's VocabParallelCrossEntropy (megatron-core 0.19.2,
# megatron/core/tensor_parallel/cross_entropy.py) moves per logit 38 B forward (the fp32 copy 6,
# max 4, subtract 8, exp 8, sum 4, divide 8) and 14 B backward (the in-place multiply 8, the
# cast back to bf16 6): the forward's share of the measured forward + backward.
CROSS_ENTROPY_FORWARD_SHARE = 38 / 52
# Blackwell's block-scaled MXFP8 GEMM kernels run at this share of the tensorwise FP8 kernels'
# rate on the same shapes, their inputs already quantised: 6.812 / 7.161 ms, the per-layer GEMM
# totals (fprop, dgrad and wgrad of a 4,096-wide layer at 15,872 tokens) that Transformer
# Engine's GEMM profiling guide measured on a B300 (NVIDIA/TransformerEngine d0067d0,
# docs/examples/gemm_profiling/gemm_profiling.rst, "Autocast vs Pre-quantized"). Measured on a
# B300, applied to the B200 and GB200 (the same block-scaled MMA; not measured on them).
MXFP8_GEMM_RATE = 6.812 / 7.161

# --- relations of the step model fitted or counted from Megatron-Core's code ---------------
# Megatron's unfused attention (perf/layer.py unfused_attention): its batched score and value
# GEMMs, whose inner dimension is one head, reach this fraction of the peak, and its softmax's
# passes over the scores (unfused_score_bytes, counted from the code) this share of the HBM
# bandwidth figure. Fitted by benchmarks/fit_step_constants.py on the shared half's two unfused
# runs (sequence 4,096 with core_attn recompute; 2,048 at MBS 8), memtune's unfused tune runs and
# the Megatron-LM functional tests' tune runs (0.25 before the H200's eager kernels were timed by
# their traces: docs/plan.md, "The eager kernels' own time").
UNFUSED_BMM_FRACTION = 0.3
UNFUSED_SOFTMAX_HBM_SHARE = 0.7
# Each LoRA adapter's host work (its module's Python, the dropout, two GEMMs' and the scaled
# add's launches) as a share of a trained layer's (``layer_fwd_s``, forward and backward alike):
# measured on one machine, as shares carry to another whose host is faster or slower
# (benchmarks/measured/matrix.py host_lora_shares, rule fixed before measuring; raw
# benchmarks/gpu/results/hostlora3-h100*): the tiny host-bound block at 4 and 12 layers without
# adapters, with them on ``linear_qkv`` alone and on the four linears, two passes on a lent
# H100: 0.076 and 0.130 of a trained layer per adapter, the mean (python benchmarks/host_lora.py).
# The same runs put a layer of a frozen base with one adapter at 1.01 of a trained layer beside
# it (0.90 and 1.12): no less host work for the weight gradients it skips, so a LoRA layer keeps
# the whole floor.
LORA_ADAPTER_HOST_SHARE = 0.103
# Under selective recompute the replayed modules' forward runs again in the backward, Python and
# kernel launches included: each module's share of a layer's host launch work (``layer_fwd_s``),
# counted from the modules and kernels a local-spec layer's forward runs (megatron-core 0.19.2
# transformer_layer.py): the core attention, the MLP (or the MoE block's router, dispatcher and
# permutes, whose sequential experts add their own), the two norms. The MLP's share is fitted by
# benchmarks/fit_step_constants.py (tune runs with mlp and moe recompute); the others counted.
RECOMPUTE_HOST_SHARE = {"core_attn": 0.1, "mlp": 0.2, "layernorm": 0.1}
# The interleaved schedule's own host work per model chunk's forward or backward pass
# (megatron-core 0.19.2 pipeline_parallel/schedules.py: the chunk id, the virtual rank, the
# P2P calls and forward_step's bookkeeping for each chunk): what VPP adds to a stage's host side.
# Fitted by benchmarks/fit_step_constants.py (the shared half's VPP 4 middle stage beside its
# VPP 1 one, memtune's VPP tune runs with the crel- VPP 1/2/8 middle stages, the functional tests'
# tune runs).
VIRTUAL_CHUNK_PASS_S = 0.75e-3
# A multi-token-prediction layer's host work beyond its transformer layer's, in layers'
# launch work: its embedding, three norms, the projection and gathers, the output layer and
# loss on shifted labels, the acceptance count (transformer/multi_token_prediction.py). Fitted
# by benchmarks/fit_step_constants.py on the crel- MTP tune runs (depth 0/1 dense, 1 on a MoE rank;
# the code's count alone had given 1; 3 before the H200's eager kernels were traced).
MTP_EXTRA_HOST_LAYERS = 5.0
# DDP's backward hook adds each parameter's gradient into its main gradient with one mixed-dtype
# elementwise add (main_grad.add_(grad): a bf16 read, an fp32 read and write), which reaches this
# share of the HBM bandwidth figure. Fitted by benchmarks/fit_step_constants.py: micro-batch size
# at fixed tokens (the shared half's MBS 2 and 4 runs, memtune's mbs- and crel-mbs tune runs)
# moves with it.
GRAD_ACCUMULATION_HBM_SHARE = 1.0
# fp16's loss scaler unscales every main gradient and checks it for inf/NaN before the step
# (torch._amp_foreach_non_finite_check_and_unscale_: read and write the fp32 gradient).
FP16_UNSCALE_BYTES_PER_PARAM = 8
# The optimizer step's host and launch cost per parameter tensor of the rank's shard, by Adam's
# kernel (Derived.adam_kernel): the local multi-tensor path (no Apex or Transformer Engine) runs
# a norm and its .item() and the clipping's and copies' kernels tensor by tensor; the fused
# multi-tensor kernels batch them. The local path's is fitted with OPTIMIZER_STEP_BYTES_PER_PARAM
# (the shared half's TP 8 rank steps 51 tensors, its TP 1 rank one); the fused path's is a
# launch's worth (unmeasured: no Transformer Engine here).
OPTIMIZER_PER_TENSOR_S = {"foreach": 46e-6, "fused": 2e-6}
