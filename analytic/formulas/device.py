"""Device memory beyond the count: what an allocator reserves for it, and what a process holds
outside its allocator (the driver's reservation, the CUDA context, NCCL's buffers)."""

from ._catalogue import S, define

M_c, rho, M_x = S("counted_bytes", "allocator_reserve", "outside_bytes")
define(
    "memory.allocator_peak",
    M_c * rho,
    "byte",
    "fitted: `analytic calibrate --published` on the measured peaks of validation/memory.toml, each"
    " source weighted equally (calibration.toml [memory]); PyTorch docs, CUDA semantics, memory"
    " management (memory the caching allocator manages shows as reserved,"
    " torch.cuda.max_memory_reserved)",
    (
        "M_c: the count of a stage (model states, gathered parameters, activations)",
        (
            "rho: one factor per allocator (presets/stacks.toml allocator), for what the count"
            " leaves out: the allocator's cached and split blocks, the workspaces and the"
            " collectives' staging tensors it serves, casts"
        ),
        "a measured peak is the allocator's maximum reserved memory",
        (
            "the count holds the gradients at the activations' peak; a ZeRO-3 (FSDP2) step of one"
            " microbatch allocates its gradient shards only in the backward, on the reduce-scatter"
            " stream (torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py foreach_reduce), and"
            " frees them at zero_grad; a freed block is re-allocated on the stream that allocated"
            " it only (PyTorch c10/cuda/CUDACachingAllocator.cpp), so the next step's reserved peak"
            " still holds them while its allocated peak lacks them (analytic.reference.step_memory"
            " measures that lack as exactly their bytes)"
        ),
        (
            "what the process holds outside the allocator is in neither the count nor the peak:"
            " memory.device_peak"
        ),
        (
            "short of memory the allocator releases its cached blocks and retries before it fails"
            " (PyTorch docs, torch.cuda.memory_stats: num_alloc_retries), so a peak above what the"
            " device leaves it, with the count within it, is a run at the allocator's limit, not"
            " one out of memory"
        ),
    ),
    "peak memory per GPU an allocator reserves for a stage whose count is M_c",
)

define(
    "memory.device_peak",
    M_c * rho + M_x,
    "byte",
    "fitted: `analytic calibrate --published` on the snapshots of validation/outside.toml, each"
    " source weighted equally (calibration.toml [memory] outside_bytes); the CUDA context, 287 MB"
    " with lazy module loading against 667 MB without (pytorch/pytorch pull request 86509); NCCL's"
    " buffers, 4 MiB SIMPLE, 4.7 MiB LL128 and 0.5 MiB LL a connection a channel (NVIDIA/nccl"
    " src/init.cc computeBuffSizes)",
    (
        (
            "M_x: the device's memory (its HBM, the driver's total) less the allocator's reserved"
            " memory and the free memory, one figure per allocator: the driver's reservation, the"
            " CUDA context and the kernels it loaded, NCCL's communicators, other libraries' own"
            " allocations"
        ),
        (
            "it does not depend on the layout here: NCCL's share grows with the communicators a"
            " process uses and their channels, which the snapshots do not give; their spread is"
            " reported (calibration.toml outside_low_bytes, outside_high_bytes)"
        ),
        (
            "with rho the fitted reserve: the process's peak on the device; with rho = 1 and the"
            " smallest M_x measured: the least the device must hold for the count's tensors to live"
        ),
    ),
    "peak device memory per GPU of a process whose count is M_c",
)

H_bm = S("hbm")
define(
    "memory.headroom",
    H_bm - M_x - M_c,
    "byte",
    "derived: the device's memory (the driver's total) less what a process holds outside its"
    " allocator, less the count",
    (
        (
            "M_x: the least memory measured outside the stack's allocator (calibration.toml"
            " [memory] outside_low_bytes; 0 where none is fitted; Plan(..., outside_bytes=...)"
            " replaces it): the driver's reservation and the CUDA context do not give way, and NCCL"
            " allocates its buffers outside the allocator"
        ),
        "a stage fits where it is 0 or more",
    ),
    "memory left on a GPU once a stage's count M_c and the memory outside the allocator are placed",
)
