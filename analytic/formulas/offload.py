"""Memory that offloading moves to host memory, and what it leaves on the device: activations
(TransformerEngine's CPU offload), the optimizer (Megatron-Core's HybridDeviceOptimizer, DeepSpeed's
ZeRO-Offload) and the buffers DeepSpeed keeps for it."""

from ..core.algebra import Max, Min
from ._catalogue import S, define

Psi, V, h, h_ff, t = S("params", "vocab", "hidden", "ffn_hidden", "tp")

TE_OFFLOAD = (
    "NVIDIA TransformerEngine, transformer_engine/pytorch/cpu_offload.py,"
    " AsyncDoubleBufferGroupOffloadHandler (Megatron-LM's --cpu-offloading; MaxText's remat"
    " policies name the same 'offload')"
)
M_k, n_fl = S("kept_bytes", "layers_in_flight")
define(
    "memory.offload.device_activations",
    M_k * Min(n_fl, 2),
    "byte",
    f"{TE_OFFLOAD}: bulk offload with delay, bulk reload with prefetch, through two device buffers",
    (
        (
            "each layer's kept activations are copied to pinned host memory after its forward and"
            " back before its backward; the device holds the layer in use and the one in transit"
        ),
        (
            "the copies run on their own streams and are hidden when a layer's compute outlasts its"
            " copy (the handler's own statement): they are not timed"
        ),
    ),
    "kept activations a stage holds on the device when they are offloaded (two layers' worth at"
    " most)",
)
define(
    "memory.offload.host_activations",
    M_k * n_fl,
    "byte",
    f"{TE_OFFLOAD}: every offloaded tensor has its own pinned host copy",
    ("every kept activation of the layer-microbatches in flight lives in host memory",),
    "host memory one accelerator's offloaded activations take at the stage's peak",
)

HYBRID = (
    "NVIDIA/Megatron-LM megatron/core/optimizer/cpu_offloading/hybrid_optimizer.py,"
    " HybridDeviceOptimizer (param_update_in_fp32, pinned fp32 copies and gradients on the host,"
    " CPU Adam); Megatron-Core docs, Optimizer CPU offload package (--optimizer-cpu-offload"
    " --optimizer-offload-fraction F --use-precision-aware-optimizer)"
)
ZERO_OFFLOAD = (
    "DeepSpeed ZeRO-Offload, deepspeed/runtime/zero/stage_1_and_2.py and stage3.py with"
    " offload_optimizer device cpu (the fp32 partition, a pinned fp32 gradient partition and"
    " DeepSpeedCPUAdam's moments on the host; offload_config.py ratio: the share, ZeRO-3 only); Ren"
    " et al. 2021, ZeRO-Offload, arXiv 2101.06840 §4"
)
f_o, M_o = S("optimizer_offload", "optimizer_bytes")
OFFLOADED = (
    (
        "the first share f_o of a rank's parameters, in order, is updated on the host; the rest on"
        " the device"
    ),
    (
        "no fp32 master weights on the device for the offloaded share (Megatron's precision-aware"
        " optimizer keeps none beside the optimizer's own copies; DeepSpeed keeps its fp32"
        " partition on the host)"
    ),
)
define(
    "memory.offload.device_optimizer",
    (1 - f_o) * M_o,
    "byte",
    f"{HYBRID}; {ZERO_OFFLOAD}",
    OFFLOADED,
    "optimizer state left on the device when a share f_o of the step runs on the host",
)
define(
    "memory.offload.host_optimizer",
    16 * f_o * Psi,
    "byte",
    f"{HYBRID}; {ZERO_OFFLOAD}: an fp32 copy of each offloaded parameter (4 bytes), its gradient"
    " copied into pinned fp32 (4), CPU Adam's two fp32 moments (4 + 4)",
    OFFLOADED
    + (
        "Ψ: the parameters this rank's optimizer updates (its ZeRO shard)",
        (
            "DeepSpeed's ZeRO-3 also keeps its 16-bit gradient partition in host memory: "
            "memory.offload.host_zero3_gradients"
        ),
    ),
    "host memory one rank's offloaded optimizer takes (16 bytes a parameter)",
    coefficient_unit="byte",
)
define(
    "memory.offload.zero_offload_staging",
    2 * Max(V, h_ff) * h / t,
    "byte",
    "DeepSpeed deepspeed/runtime/zero/stage_1_and_2.py DeepSpeedZeroOptimizer.__init__ with"
    " cpu_offload (temp_grad_buffer_for_gpu_offload: largest_param_numel 16-bit elements on the"
    " device, allocated with the optimizer and kept; async_accumulate_grad_in_cpu_via_gpu stages a"
    " parameter's host-accumulated gradient through it)",
    (
        "ZeRO-1 and 2 under ZeRO-Offload; ZeRO-3 allocates no such buffer",
        (
            "the largest parameter is the embedding (or output layer), V·h/t elements on a TP"
            " rank, or an MLP matrix, f·h/t; a SwiGLU's gate and up projections are two tensors"
            " (Hugging Face's); fused into one of 2f·h (Megatron-DeepSpeed's) it is larger only"
            " where 2f > V, in no preset"
        ),
        "2 bytes: the model's bf16 or fp16",
    ),
    "DeepSpeed's ZeRO-Offload device buffer for one parameter's gradient, the largest",
    coefficient_unit="byte",
)
define(
    "memory.offload.host_accumulated_gradients",
    2 * Psi,
    "byte",
    "DeepSpeed deepspeed/runtime/zero/stage_1_and_2.py"
    " DeepSpeedZeroOptimizer.copy_grads_in_partition with cpu_offload and"
    " gradient_accumulation_steps > 1 (async_accumulate_grad_in_cpu_via_gpu: each parameter of the"
    " partition gets a pinned 16-bit host buffer of its gradient, accumulated_grads_in_cpu, created"
    " once and kept)",
    (
        (
            "Ψ: the parameters of this rank's partition (a parameter cut by the partition's edge"
            " counted by its part)"
        ),
        "ZeRO-1 and 2 under ZeRO-Offload with more than one microbatch a step",
        "2 bytes: the model's bf16 or fp16",
    ),
    "host memory DeepSpeed's ZeRO-Offload takes to accumulate gradients over microbatches",
    coefficient_unit="byte",
)
define(
    "memory.offload.host_zero3_gradients",
    2 * Psi,
    "byte",
    "DeepSpeed deepspeed/runtime/zero/stage3.py DeepSpeedZeroOptimizer_Stage3"
    " (grad_partitions_flat_buffer: the gradient partition, in the model's 16-bit dtype by default"
    " (engine.py get_data_types), allocated on self.device, the host under offload_optimizer, and"
    " pinned)",
    (
        "Ψ: the parameters of this rank's ZeRO-3 partition",
        (
            "2 bytes: the gradient accumulation dtype is the model's bf16 or fp16 unless"
            " data_types.grad_accum_dtype says otherwise"
        ),
    ),
    "host memory DeepSpeed's ZeRO-3 under ZeRO-Offload takes for its 16-bit gradient partition",
    coefficient_unit="byte",
)
