"""A plan in one line: the source every quantity's Formula names and its repr (no sympy)."""


def _given(name: str, value, usual=None) -> str:
    """`` name=value``, or nothing where ``value`` is the usual one."""
    return "" if value == usual else f" {name}={value}"


def provenance(plan) -> str:
    """The plan in one line: the source every quantity's Formula names."""
    lay = plan.layout
    layout = (f"tp={lay.tp} pp={lay.pp} dp={lay.dp} cp={lay.cp} ep={lay.ep}"
              f"{_given('etp', lay.etp)} vpp={lay.vpp} zero={lay.zero} sp={lay.sequence_parallel}"
              f"{' async_tp' if lay.async_tp else ''}{' ep_overlap' if lay.ep_overlap else ''}"
              f"{_given('zero3_gather', lay.zero3_gather, 'per-block')}"
              f"{f' comm_sms={lay.comm_sms}' if lay.comm_sms else ''} {lay.savers_label}"
              f"{_given('first_stage_layers', lay.first_stage_layers)}"
              f"{_given('last_stage_layers', lay.last_stage_layers)}"
              f"{' ends_as_layers' if lay.ends_as_layers else ''}"
              f"{_given('pipeline_layout', lay.pipeline_layout)} schedule={lay.schedule}")
    batch = (f"seq_len={plan.seq_len} global_batch={plan.global_batch} "
             f"microbatch_size={plan.microbatch_size}")
    precision = (f"dtype={plan.dtype}{_given('fp8_recipe', plan.fp8_recipe)}"
                 f"{'' if plan.flash_attention else ' no flash attention'}"
                 f"{_given('grad_dtype', plan.grad_dtype, 'bf16')}"
                 f"{_given('moment_dtype', plan.moment_dtype, 'fp32')}"
                 f"{_given('optimizer', plan.optimizer, 'adam')}")
    model, hardware = plan.model.name or "model", plan.hardware.key or plan.hardware.name
    return (f"analytic Plan: {model} on {hardware}, {layout}, {batch} {precision} "
            f"stack={plan.stack}")
