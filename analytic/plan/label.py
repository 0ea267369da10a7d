"""A plan in one line: the source every quantity's Formula names and its repr (no sympy)."""


def provenance(plan) -> str:
    """The plan in one line: the source every quantity's Formula names."""
    lay = plan.layout
    return (f"analytic Plan: {plan.model.name or 'model'} on {plan.hardware.key or plan.hardware.name}, "
            f"tp={lay.tp} pp={lay.pp} dp={lay.dp} cp={lay.cp} ep={lay.ep}{'' if lay.etp is None else f' etp={lay.etp}'} "
            f"vpp={lay.vpp} zero={lay.zero} "
            f"sp={lay.sequence_parallel}{' async_tp' if lay.async_tp else ''}"
            f"{' zero3_gather=per-tensor' if lay.zero3_gather == 'per-tensor' else ''}"
            f"{f' comm_sms={lay.comm_sms}' if lay.comm_sms else ''} {lay.savers_label}"
            f"{f' first_stage_layers={lay.first_stage_layers}' if lay.first_stage_layers is not None else ''}"
            f"{f' last_stage_layers={lay.last_stage_layers}' if lay.last_stage_layers is not None else ''}"
            f"{' ends_as_layers' if lay.ends_as_layers else ''}"
            f"{f' pipeline_layout={lay.pipeline_layout}' if lay.pipeline_layout is not None else ''} "
            f"schedule={lay.schedule}, "
            f"seq_len={plan.seq_len} global_batch={plan.global_batch} microbatch_size={plan.microbatch_size} "
            f"dtype={plan.dtype}{'' if plan.fp8_recipe is None else f' fp8_recipe={plan.fp8_recipe}'}"
            f"{'' if plan.flash_attention else ' no flash attention'}"
            f"{'' if plan.grad_dtype == 'bf16' else f' grad_dtype={plan.grad_dtype}'}"
            f"{'' if plan.moment_dtype == 'fp32' else f' moment_dtype={plan.moment_dtype}'}"
            f"{'' if plan.optimizer == 'adam' else f' optimizer={plan.optimizer}'} stack={plan.stack}")
