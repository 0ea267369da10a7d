"""The choice lists of the library and its defaults for sequence parallelism and the stack, declared
once (plain data: the command line reads them without importing sympy or pint). A symbolic choice is
its index in these tuples."""

ZERO_STAGES = (0, 1, 2, 3)
#: the ZeRO stages quantized primary weights (Layout quantized_params) run at: Megatron-Core's
#: distributed optimizer (megatron/training/arguments.py: "--fp8-param-gather only supported with
#: distributed optimizer"; its FSDP's quantized gathers are not modelled)
QUANTIZED_PARAMS_ZERO = (1, 2)
RECOMPUTE = ("none", "selective", "full")
#: the submodules recompute="selective" recomputes (NVIDIA/Megatron-LM
#: TransformerConfig.recompute_modules; none given means its default, the attention core): the
#: attention core, and output-discarding the two norms, MLA's up-projections with RoPE and the MoE
#: experts' activation (DeepSeek-V3 §3.2.3, §3.3.2), and a dense layer's MLP from its input
RECOMPUTE_MODULES = ("core_attn", "layernorm", "mla_up_proj", "mlp", "moe_act")
#: tensors a stack's layer saves beyond the fused count (presets/stacks.toml saved_extra;
#: Megatron-LM's model before Megatron-Core): hidden-dropout masks, a contiguous copy of the
#: attention output, an unfused SiLU's output
SAVED_EXTRAS = ("dropout_masks", "attention_output_copy", "silu_output")
#: what a sequence-parallel column-parallel matmul saves of its input (presets/stacks.toml
#: sp_saved_inputs): its shard, all-gathered again in the backward (Megatron, Korthikanti et al.
#: §4.2.2), or the gathered input (DTensor TP)
SP_SAVED_INPUTS = ("split", "gathered")
#: how a stack runs a share of the optimizer step on the host (presets/stacks.toml
#: optimizer_offload): Megatron-Core's HybridDeviceOptimizer (ZeRO 0-2, any share), DeepSpeed's
#: ZeRO-Offload (ZeRO 1-3, the whole partition, its gradients on the host from ZeRO-2)
OPTIMIZER_OFFLOADS = ("hybrid", "zero-offload")
#: how a stack's Adam updates the parameters (presets/stacks.toml optimizer_kernel): in place in one
#: kernel (fused), a kernel per operation over all tensors at once, whose square roots of the second
#: moments are a tensor of their size (foreach, memory.optimizer_step.foreach; PyTorch's for-loop
#: AdamW makes the same passes), or Composer's DecoupledAdamW, a kernel per operation a tensor at a
#: time, its first moment in two passes (decoupled-adamw); each pass moves its bytes
#: (compute.optimizer.bytes_per_param*)
OPTIMIZER_KERNELS = ("fused", "foreach", "decoupled-adamw")
#: whose ZeRO optimizer a stack runs where it allocates beyond the model states (presets/stacks.toml
#: zero_optimizer): DeepSpeed's, with its reduce bucket (memory.zero_reduce_bucket) and its step's
#: fp32 copy of the gradient partition (memory.optimizer_step.fp32_gradient_copy)
ZERO_OPTIMIZERS = ("deepspeed",)
#: whose FP8 weight cache a stack keeps (presets/stacks.toml fp8_weight_cache): Transformer
#: Engine's, the FP8 weight and its transpose of each of its linears (memory.fp8_weight_cache)
FP8_WEIGHT_CACHES = ("transformer-engine",)
#: whose rules decide what a stack's Transformer Engine linears save of their inputs under a
#: low-precision recipe (presets/stacks.toml quantized_saved_inputs): Megatron-Core's, each linear
#: its quantized copy except where Megatron-Core sets save_original_input
#: (memory.activations.fp8_freed.*, memory.activations.quantized_copy.*)
QUANTIZED_SAVED_INPUTS = ("megatron-core",)
#: how a stack runs context-parallel attention where its backward's buffers are counted
#: (presets/stacks.toml cp_attention): PyTorch's context_parallel, K and V all-gathered
#: (memory.activations.backward.cp_ring_attention)
CP_ATTENTIONS = ("pytorch-allgather",)
SCHEDULES = ("1f1b", "interleaved", "gpipe", "zb-h1", "zb-h2", "dualpipe")
#: the discrete choices a symbol can leave open, by keyword
CHOICES = {
    "zero": tuple(str(z) for z in ZERO_STAGES),
    "recompute": RECOMPUTE,
    "schedule": SCHEDULES,
}
CONVENTIONS = ("6nd", "palm", "megatron", "megatron-core")
#: training dtypes: mixed precision with 16-bit weights, gradients and activations and fp32 Adam
#: state (ZeRO §3.1); the low-precision ones run the linear layers' matmuls in their format and the
#: rest in bf16 (DeepSeek-V3 §3.3.1): fp8 (per-tensor or blockwise scales, FP8_RECIPES), mxfp8 and
#: nvfp4 (block scales; presets/precisions.toml). TF32 (fp32 storage) training is not modelled
TRAINING_DTYPES = ("bf16", "fp16", "fp8", "mxfp8", "nvfp4")
LOW_PRECISION = ("fp8", "mxfp8", "nvfp4")
#: optimizers: Adam (AdamW), and Muon on the blocks' matrices with AdamW on the embedding and the
#: output layer (Liu et al. 2025, arXiv 2502.16982 §2); a stack runs Muon where presets/stacks.toml
#: says so
OPTIMIZERS = ("adam", "muon")
#: the block-scaled ones: run only on the stacks presets/stacks.toml says run them
BLOCK_SCALED = ("mxfp8", "nvfp4")
#: how an FP8 plan scales its tensors (presets/precisions.toml [fp8.recipes]): "delayed"
#: (Transformer Engine's DelayedScaling, Megatron-LM's --fp8-recipe default), "tensorwise"
#: (per-tensor current scaling), "blockwise" (DeepSeek-V3's 1×128 and 128×128 blocks)
FP8_RECIPES = ("delayed", "tensorwise", "blockwise")
#: how an MoE layer's tokens reach their experts (Megatron-Core's --moe-token-dispatcher-type):
#: "alltoall" (each token sent to its k experts' ranks), "allgather" (every rank of the
#: expert-parallel group gathers all its tokens and keeps its experts'), "flex" (DeepEP: a token
#: crosses to each node it reaches once, forwarded inside it)
DISPATCHERS = ("alltoall", "allgather", "flex")
#: routing imbalances by name (Plan's ``routing_imbalance``): "balanced" (1: every expert its share,
#: as benchmarks force it) and "dropless" (learned routing without a capacity, as fitted:
#: presets/calibration.toml [routing])
ROUTINGS = ("balanced", "dropless")
#: gradient accumulation buffers: 16-bit (ZeRO §3.1's accounting) or fp32 (Megatron-LM's main_grad
#: buffers, its default for bf16 training: 18 bytes per parameter with its optimizer; Llama 3
#: §3.3.2)
GRAD_DTYPES = ("bf16", "fp32")
#: Adam's moments: fp32 (ZeRO §3.1's K = 12 with the fp32 master weights) or bf16 (DeepSeek-V3
#: §3.3.3; Megatron-Core's precision-aware optimizer, --exp-avg-dtype/--exp-avg-sq-dtype bf16: K =
#: 8)
MOMENT_DTYPES = ("fp32", "bf16")
AXES = ("tp", "cp", "dp", "pp", "ep")
#: the parts of a pipeline stage's memory per GPU at its peak, which sum to its total: the optimizer
#: step's temporaries where the step is the peak (the activations and gathered copies then freed),
#: else 0
MEMORY_PARTS = ("weights", "gradients", "optimizer", "gathered", "activations", "optimizer_step")
#: whether a stage fits (Plan.memory_verdict): its predicted peak does; only its count does, the
#: allocator at the device's limit; its count does not
MEMORY_VERDICTS = ("fits", "fits at the allocator's limit", "does not fit")
#: the op classes of a step's compute, in the order of the time breakdown
OP_CLASSES = ("gemm", "attention", "memory_bound", "optimizer")
#: the parts of a step's time: the op classes, the bubble, the slowest stage's excess over the
#: average, each axis's exposed communication
TIME_PARTS = (*OP_CLASSES, "bubble", "imbalance", "tp", "cp", "pp", "dp", "ep")
#: how ZeRO-3 gathers parameters: one collective per transformer block, issued ahead so it overlaps
#: compute (PyTorch FSDP's per-block units; DeepSpeed since v0.4.1, deepspeedai/DeepSpeed PR #1188),
#: or one blocking collective per parameter tensor (DeepSpeed ZeRO-3 of 2021:
#: torch.cuda.synchronize() before each all-gather, deepspeedai/DeepSpeed issue #1069, PR #1188),
#: issued from module hooks that also fire in a recomputed forward
#: (plan.degrees.Degrees.zero3_gathers_per_microbatch)
ZERO3_GATHERS = ("per-block", "per-tensor")
#: what layout search and plan.best() optimise: the predicted step time, the cost in GPU-seconds per
#: token (step time × GPUs / tokens per step) or the predicted MFU (6·N·D, largest first)
#: the questions `analytic solve` answers
SOLVE_QUESTIONS = ("smallest", "bubble", "mfu", "tp-break-even")
OBJECTIVES = ("step_time", "cost", "mfu")
#: what a co-design sweep ranks a point's layouts by: search's objectives, and the most memory left
#: free
CODESIGN_OBJECTIVES = (*OBJECTIVES, "headroom")


#: the software platforms an accelerator runs (Hardware.platform; a stack's ``platforms`` in
#: presets/stacks.toml)
PLATFORMS = ("cuda", "rocm", "tpu", "neuron")
#: the software stack a plan models when none is named (presets/stacks.toml) ...
DEFAULT_STACK = "megatron-core"
#: ... on a platform Megatron-Core does not run on: the stack of that platform's vendor
DEFAULT_STACKS = {"tpu": "maxtext", "neuron": "neuronx-distributed"}


def default_stack(platform: str) -> str:
    """The stack a plan on ``platform`` models when none is named ("" , a hand-made device:
    DEFAULT_STACK)."""
    return DEFAULT_STACKS.get(platform, DEFAULT_STACK)


def sequence_parallel_default(tp) -> bool:
    """Sequence parallelism wherever tp > 1, unless said otherwise (the CLI's and search's default):
    in this model it never costs time (its reduce-scatter + all-gather equals the all-reduce it
    replaces) and always saves activation memory."""
    return bool(tp > 1)
