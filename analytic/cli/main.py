"""The ``analytic`` command: its flags and subcommands, and the entry point. User errors print one
line on stderr and exit 2."""

from __future__ import annotations

import argparse
import difflib
import functools
import os
import sys

from ..core.choices import (
    DISPATCHERS,
    FP8_RECIPES,
    GRAD_DTYPES,
    MOMENT_DTYPES,
    OBJECTIVES,
    OPTIMIZERS,
    RECOMPUTE,
    RECOMPUTE_MODULES,
    SCHEDULES,
    SOLVE_QUESTIONS,
    ZERO3_GATHERS,
    ZERO_STAGES,
)
from ..core.errors import shown
from .check_commands import cmd_calibrate, cmd_derive, cmd_validate
from .codesign_command import add_parser as add_codesign
from .commands import cmd_formula, cmd_memory, cmd_plot, cmd_search, cmd_solve, cmd_step
from .flags import CLIError, Parser
from .output import ClosedOutput, prepare


def _unrecognized(top: argparse.ArgumentParser, command: str | None, extra: list) -> CLIError:
    """Arguments the given command does not take, with its close matches for a mistyped flag, or the
    commands that do take the flag."""
    commands = top._subparsers._group_actions[0].choices
    p = commands.get(command, top)
    message = f"{p.prog}: unrecognized arguments: {' '.join(extra)}"
    flag = extra[0].split("=")[0]
    if flag.startswith("--"):
        elsewhere = [
            name for name, q in commands.items() if q is not p and flag in q._option_string_actions
        ]
        close = difflib.get_close_matches(flag, sorted(p._option_string_actions), n=3)
        if elsewhere:
            message += f" ({flag} is an option of {', '.join(elsewhere)})"
        elif close:
            message += f" (did you mean {', '.join(close)}?)"
    return CLIError(message)


def _layout_args(g) -> None:
    """The plan flags of its model, hardware and parallel layout."""
    g.add_argument(
        "--model",
        help=(
            f"preset model name ({', '.join(_preset_names('models'))}) or a Hugging Face "
            "config.json (PATH.json)"
        ),
    )
    g.add_argument(
        "--hardware", help=f"preset hardware name ({', '.join(_preset_names('hardware'))})"
    )
    g.add_argument("--gpus", help="GPU count; dp is inferred as gpus / (tp·cp·pp)")
    for axis in ("tp", "pp", "dp", "cp", "ep", "vpp"):
        g.add_argument(f"--{axis}", help=f"{axis} degree")
    g.add_argument(
        "--etp",
        help=(
            "expert tensor-parallel degree: the expert layers' TP (default: tp), folded with "
            "ep over tp·cp·dp (Megatron-Core's --expert-tensor-parallel-size)"
        ),
    )
    g.add_argument("--zero", choices=[str(z) for z in ZERO_STAGES], help="ZeRO stage")
    g.add_argument(
        "--sp", dest="sequence_parallel", action="store_true", default=None,
        help="sequence parallelism",
    )
    g.add_argument(
        "--no-sp", dest="sequence_parallel", action="store_false", help="no sequence parallelism"
    )
    g.add_argument(
        "--allow-cross-node-tp",
        dest="allow_cross_node_tp",
        action="store_true",
        default=None,
        help=(
            "let a TP group span scale-up domains (its collectives then cross the scale-out"
            " network)"
        ),
    )
    g.add_argument(
        "--async-tp",
        dest="async_tp",
        action="store_true",
        default=None,
        help=(
            "TP collectives overlapped with their GEMMs (PyTorch async TP, Megatron TP comm"
            " overlap)"
        ),
    )
    g.add_argument(
        "--comm-sms",
        dest="comm_sms",
        help="SMs reserved for communication kernels (DeepSeek-V3: 20 of the H800's 132)",
    )
    g.add_argument(
        "--zero3-gather",
        dest="zero3_gather",
        choices=ZERO3_GATHERS,
        help=(
            "how ZeRO-3 gathers parameters: per-block, prefetched (default; FSDP), or per-tensor, "
            "blocking, again in a recomputed forward (DeepSpeed ZeRO-3 of 2021)"
        ),
    )


def _pipeline_args(g) -> None:
    """The plan flags of its pipeline schedule and split, and of recomputation."""
    g.add_argument("--schedule", choices=SCHEDULES)
    for end in ("first", "last"):
        g.add_argument(
            f"--{end}-stage-layers",
            dest=f"{end}_stage_layers",
            help=(
                f"layers on the {end} pipeline stage, the rest split evenly (Megatron-LM's "
                f"--decoder-{end}-pipeline-num-layers)"
            ),
        )
    g.add_argument(
        "--pipeline-layout",
        dest="pipeline_layout",
        help=(
            "the layers of each model chunk in Megatron-Core's grammar"
            " (--pipeline-model-parallel-layout): E embedding, t layer, m MTP block, L loss, |"
            " between chunks, (...)*n repeats; e.g. 'Et|(tt|)*30mL' for DeepSeek-V3 on 8 stages ×"
            " 4 chunks"
        ),
    )
    g.add_argument(
        "--ends-as-layers",
        dest="ends_as_layers",
        action="store_true",
        default=None,
        help=(
            "count the embedding and the output layer + loss as a layer each in the pipeline split,"
            " the end chunks a layer fewer (Megatron-Core's"
            " --account-for-embedding/loss-in-pipeline-split; Llama 3)"
        ),
    )
    g.add_argument(
        "--ep-overlap",
        dest="ep_overlap",
        action="store_true",
        default=None,
        help=(
            "run each microbatch's forward beside another's backward, hiding the expert-parallel"
            " all-to-alls (Megatron-Core's --overlap-moe-expert-parallel-comm, combined 1F1B)"
        ),
    )
    g.add_argument("--recompute", choices=RECOMPUTE)
    g.add_argument(
        "--recompute-layers",
        dest="recompute_layers",
        help=(
            "with --recompute full: recompute only N layers of each stage and keep the others' "
            "activations (Megatron-LM's --recompute-method block --recompute-num-layers N)"
        ),
    )
    g.add_argument(
        "--recompute-modules",
        dest="recompute_modules",
        nargs="+",
        choices=RECOMPUTE_MODULES,
        help=(
            "what --recompute selective recomputes (Megatron-Core's --recompute-modules):"
            " core_attn, the default; layernorm, mla_up_proj and moe_act free their outputs"
            " (DeepSeek-V3 recomputes these three); mlp a dense layer's MLP from its input"
        ),
    )


def _memory_args(g) -> None:
    """The plan flags of what moves to the host and how attention keeps its state."""
    g.add_argument(
        "--offload-activations",
        dest="offload_activations",
        action="store_true",
        default=None,
        help=(
            "copy what each layer keeps for its backward to host memory and back"
            " (TransformerEngine's CPU offload, Megatron-LM's --cpu-offloading; MaxText's offload"
            " remat policies)"
        ),
    )
    g.add_argument(
        "--offload-optimizer",
        dest="offload_optimizer",
        metavar="SHARE",
        help=(
            "share in [0, 1] of each rank's parameters whose Adam step and state are on the host"
            " (Megatron-Core's --optimizer-cpu-offload --optimizer-offload-fraction, stack"
            " megatron-core; DeepSpeed's ZeRO-Offload, 1, stack deepspeed)"
        ),
    )
    g.add_argument(
        "--flash-attention",
        dest="flash_attention",
        action="store_true",
        default=None,
        help=(
            "a fused attention kernel (the default where the stack has one): no s×s tensor kept, "
            "QKᵀ recomputed in the backward"
        ),
    )
    g.add_argument(
        "--no-flash-attention",
        dest="flash_attention",
        action="store_false",
        help="attention as plain matmuls and softmax (Korthikanti's GPT layer: MHA, GELU)",
    )


def _precision_args(g) -> None:
    """The plan flags of its training precision and optimizer."""
    g.add_argument(
        "--dtype",
        help=(
            "training dtype: bf16 (default), fp16, or the linear layers' matmuls in fp8, "
            "mxfp8 or nvfp4 (block-scaled, on Blackwell; presets/precisions.toml)"
        ),
    )
    g.add_argument(
        "--fp8-recipe",
        dest="fp8_recipe",
        choices=FP8_RECIPES,
        help=(
            "fp8's scaling: delayed (Transformer Engine's default), tensorwise (per-tensor current)"
            " or blockwise (DeepSeek-V3's 1×128 and 128×128 blocks); default: the stack's first"
        ),
    )
    g.add_argument(
        "--fp8-activations",
        dest="fp8_activations",
        action="store_true",
        default=None,
        help=(
            "with --dtype fp8: cache the inputs of matmuls and of the SwiGLU in FP8 (DeepSeek-V3"
            " §3.3.2)"
        ),
    )
    g.add_argument(
        "--quantized-params",
        dest="quantized_params",
        action="store_true",
        default=None,
        help=(
            "with a low-precision --dtype: keep the linear layers' parameters only quantized and"
            " all-gather them so (Megatron-Core's --fp8-param-gather)"
        ),
    )
    g.add_argument(
        "--bf16-layers",
        dest="bf16_layers",
        metavar="FIRST,LAST",
        help=(
            "the layers at each end a low-precision plan keeps in BF16 (Megatron-LM's "
            "--first-last-layers-bf16 with its counts; default none)"
        ),
    )
    g.add_argument(
        "--grad-dtype",
        dest="grad_dtype",
        choices=GRAD_DTYPES,
        help=(
            "gradient buffers: bf16 (ZeRO's 16 bytes per parameter) or fp32 (Megatron's main_grad:"
            " 18); default: the stack's with ZeRO 0-2, bf16 with ZeRO-3"
        ),
    )
    g.add_argument(
        "--moment-dtype",
        dest="moment_dtype",
        choices=MOMENT_DTYPES,
        help=(
            "Adam's moments: fp32 (default, 12 bytes a parameter with the master weights) or bf16 "
            "(DeepSeek-V3's, 8)"
        ),
    )
    g.add_argument(
        "--optimizer",
        choices=OPTIMIZERS,
        help=(
            "adam (default), or muon on the blocks' matrices with AdamW on the ends (stack"
            " megatron-core, ZeRO-1: its layer-wise distributed optimizer)"
        ),
    )


def _moe_args(g) -> None:
    """The plan flags of an MoE layer's dispatch, capacity and routing."""
    g.add_argument(
        "--dispatcher",
        choices=DISPATCHERS,
        help=(
            "an MoE layer's token dispatcher: alltoall, allgather or flex (DeepEP: each token once"
            " to each node it reaches); default: the stack's first"
        ),
    )
    g.add_argument(
        "--expert-capacity",
        dest="expert_capacity",
        metavar="C",
        help=(
            "an MoE plan's experts padded to C times their balanced share of tokens"
            " (Megatron-Core's --moe-expert-capacity-factor with"
            " --moe-pad-expert-input-to-capacity); default dropless"
        ),
    )
    g.add_argument(
        "--drop-beyond-capacity",
        dest="drop_beyond_capacity",
        action="store_true",
        default=None,
        help=(
            "with --expert-capacity: the tokens beyond it dropped, the experts' input "
            "not padded (Megatron-Core's capacity factor without "
            "--moe-pad-expert-input-to-capacity)"
        ),
    )
    g.add_argument(
        "--routing-imbalance",
        dest="routing_imbalance",
        metavar="R",
        help=(
            "an MoE plan's busiest expert-parallel rank's routed tokens over "
            "its balanced share: balanced (1, the default, as benchmarks force "
            "it), dropless (fitted on published runs: presets/calibration.toml "
            "[routing]) or a number ≥ 1"
        ),
    )


def _run_args(g) -> None:
    """The plan flags of its stack, batch, hardware overrides and output."""
    g.add_argument(
        "--stack",
        help=(
            "software stack of presets/stacks.toml (default: the platform's, megatron-core on CUDA"
            " and ROCm, maxtext on TPUs, neuronx-distributed on Trainium)"
        ),
    )
    g.add_argument(
        "--profile", help="a device profile written by 'analytic calibrate --gemm --write FILE'"
    )
    g.add_argument("--seq", help="sequence length")
    g.add_argument("--batch-tokens", help="tokens per step (16M, 16Mi, 16777216)")
    g.add_argument("--global-batch", help="sequences per step")
    g.add_argument("--microbatch-size", help="sequences per microbatch (default 1)")
    g.add_argument(
        "--scale-up-bandwidth",
        help="override the hardware's scale-up link, per direction (e.g. '600 GB/s')",
    )
    g.add_argument(
        "--scale-out-bandwidth",
        help="override the hardware's NIC, per direction (e.g. '400 Gbit/s')",
    )
    g.add_argument(
        "--hbm", help="override the hardware's HBM per GPU as the driver gives it (e.g. '141 GB')"
    )
    g.add_argument(
        "--scale-up-domain",
        help="override the GPUs per NVLink-class domain (e.g. 64 of an NVL72 rack's 72)",
    )
    g.add_argument(
        "--outside-bytes",
        dest="outside_bytes",
        help=(
            "memory a process holds outside the caching allocator, e.g. '1 GB' (default: the least"
            " of the measured snapshots, calibration.toml [memory])"
        ),
    )
    g.add_argument("--mfu", help="also give the step time at this MFU")
    g.add_argument("--tokens", help="training tokens, for steps and days (e.g. 15.6e12)")
    g.add_argument("--json", action="store_true", help="print JSON")


def _plan_args(p: argparse.ArgumentParser) -> None:
    """The flags that state a plan, in one group of the help."""
    g = p.add_argument_group("plan")
    _layout_args(g)
    _pipeline_args(g)
    _memory_args(g)
    _precision_args(g)
    _moe_args(g)
    _run_args(g)


def _solve_parser(sub) -> None:
    """`analytic solve` and its questions."""
    p = sub.add_parser(
        "solve",
        help=(
            "answer a planning question: smallest fitting degree, microbatches for a "
            "bubble, where MFU falls below a threshold, TP's break-even degree"
        ),
        allow_abbrev=False,
    )
    p.add_argument("question", choices=SOLVE_QUESTIONS)
    p.add_argument(
        "--free",
        choices=["tp", "pp", "dp", "cp", "ep"],
        help="smallest, mfu: the degree to solve for",
    )
    p.add_argument(
        "--target", help="bubble: the largest bubble, a fraction of the ideal time (e.g. 0.05)"
    )
    p.add_argument(
        "--threshold",
        help=(
            "mfu: the MFU to fall below (e.g. 0.3); tp-break-even: TP time over compute "
            "time (default 1)"
        ),
    )
    p.add_argument(
        "--link",
        choices=["scale-up", "scale-out"],
        help="tp-break-even: the link TP runs on (default scale-up)",
    )
    p.add_argument(
        "--at-limit",
        dest="at_limit",
        action="store_true",
        help=(
            "smallest: take a degree that fits at the allocator's limit (its count fits, its"
            " predicted peak does not); by default the smallest that fits at its predicted peak"
        ),
    )
    _plan_args(p)
    p.set_defaults(func=cmd_solve)


def _quiet(p) -> None:
    """--quiet, for a command that draws a progress bar."""
    p.add_argument(
        "--quiet",
        action="store_true",
        help="no progress bar (none is drawn when stderr is not a terminal)",
    )


def _step_parsers(sub) -> None:
    """`analytic step` and `analytic memory`: a plan's story and its memory table."""
    p = sub.add_parser("step", help="the story of one training step", allow_abbrev=False)
    _plan_args(p)
    p.add_argument(
        "--sources", action="store_true", help="every formula a line came from (else at most three)"
    )
    p.set_defaults(func=cmd_step)
    p = sub.add_parser("memory", help="memory per GPU as a table", allow_abbrev=False)
    _plan_args(p)
    p.add_argument("--stages", action="store_true", help="a row for every pipeline stage")
    p.set_defaults(func=cmd_memory)


def _formula_parser(sub) -> None:
    """`analytic formula`: print or evaluate one of the catalogue's formulas."""
    p = sub.add_parser("formula", help="print or evaluate a catalogue formula", allow_abbrev=False)
    p.add_argument("name", nargs="?")
    p.add_argument(
        "--set",
        action="append",
        metavar="KEY=VALUE",
        help="evaluate with this input (units allowed)",
    )
    p.add_argument("--unit", help="print the value in this unit (e.g. day, GB, PFLOP)")
    p.add_argument("--list", action="store_true")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_formula)


def _validate_parser(sub) -> None:
    """`analytic validate`: the published cases."""
    p = sub.add_parser("validate", help="run the published validation cases", allow_abbrev=False)
    _quiet(p)
    p.add_argument("--json", action="store_true")
    p.add_argument(
        "--cases",
        metavar="DIR",
        help="the cases' folder (default: validation/ of this source checkout)",
    )
    p.add_argument(
        "--report",
        metavar="PATH",
        help="also write the Markdown report to PATH (validation/REPORT.md)",
    )
    p.set_defaults(func=cmd_validate)


def _calibrate_parser(sub) -> None:
    """`analytic calibrate`: fit the model's constants, on published runs or this device."""
    p = sub.add_parser("calibrate", help="fit the predictive model's constants", allow_abbrev=False)
    _quiet(p)
    p.add_argument(
        "--published",
        action="store_true",
        help=(
            "fit on the published measurements (prints the "
            "calibration file; --write PATH writes it)"
        ),
    )
    p.add_argument(
        "--cases",
        metavar="DIR",
        help="with --published: the cases' folder (default: validation/ of this source checkout)",
    )
    p.add_argument(
        "--backend", choices=["gloo", "nccl"], help="time real collectives with torch.distributed"
    )
    p.add_argument(
        "--gemm",
        action="store_true",
        help=(
            "time torch.matmul and a copy kernel on this device and fit "
            "the GEMM and HBM constants (--write FILE: a profile for Plan(..., profile=FILE))"
        ),
    )
    p.add_argument(
        "--device",
        choices=["cpu", "cuda"],
        help="with --gemm: the device (default cuda if present)",
    )
    p.add_argument(
        "--hardware",
        help="with --gemm: the preset whose peak and HBM bandwidth the efficiencies are shares of",
    )
    p.add_argument(
        "--peak-flops", dest="peak_flops", help="with --gemm: the device's peak, e.g. '1 TFLOP/s'"
    )
    p.add_argument(
        "--hbm-bandwidth",
        dest="hbm_bandwidth",
        help="with --gemm: its memory bandwidth, e.g. '50 GB/s'",
    )
    p.add_argument(
        "--ranks", type=int, help="with --backend: the processes to spawn (at least 2; default 4)"
    )
    p.add_argument("--write", metavar="PATH", help="write the fitted profile (TOML)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_calibrate)


def _derive_parser(sub) -> None:
    """`analytic derive`: the derivations."""
    p = sub.add_parser(
        "derive", help="run a derivation (or render them all to Markdown)", allow_abbrev=False
    )
    p.add_argument("name", nargs="?")
    p.add_argument("--markdown", action="store_true")
    p.add_argument("--list", action="store_true")
    p.set_defaults(func=cmd_derive)


def _search_parser(sub) -> None:
    """`analytic search`: every valid layout ranked."""
    p = sub.add_parser(
        "search", help="rank every valid layout by predicted step time", allow_abbrev=False
    )
    _quiet(p)
    _plan_args(p)
    p.add_argument("--top", default="10")
    p.add_argument(
        "--at-limit",
        dest="at_limit",
        action="store_true",
        help=(
            "rank the layouts at the allocator's limit too (their count fits, their predicted peak"
            " does not)"
        ),
    )
    p.add_argument(
        "--objective",
        choices=OBJECTIVES,
        default="step_time",
        help=(
            "rank by predicted step time, cost (GPU-hours per token) or MFU; with several --gpus "
            "counts (256,512,1024) they differ"
        ),
    )
    p.set_defaults(func=cmd_search)


def _plot_parser(sub) -> None:
    """`analytic plot`: a figure to a file."""
    p = sub.add_parser("plot", help="write a plot (needs the 'plot' extra)", allow_abbrev=False)
    _quiet(p)
    p.add_argument("kind", choices=["scaling", "memory", "bubble", "pareto", "codesign"])
    p.add_argument("--out", required=True)
    p.add_argument(
        "--gpus-range",
        dest="gpus_range",
        metavar="START:STOP",
        help=(
            "scaling: GPU counts from START doubling up to STOP (e.g. 64:16384), instead of --gpus"
        ),
    )
    p.add_argument(
        "--from",
        dest="from_",
        metavar="FILE.parquet",
        help="codesign: the sweep to draw (written by analytic codesign --out)",
    )
    _plan_args(p)
    p.set_defaults(func=cmd_plot)


def parser() -> argparse.ArgumentParser:
    top = Parser(
        prog="analytic",
        description="Closed-form models of distributed LLM training.",
        allow_abbrev=False,
    )
    sub = top.add_subparsers(dest="command", parser_class=Parser)
    _step_parsers(sub)
    _formula_parser(sub)
    _validate_parser(sub)
    _calibrate_parser(sub)
    _derive_parser(sub)
    _search_parser(sub)
    add_codesign(sub, _plan_args)
    _solve_parser(sub)
    _plot_parser(sub)
    return top


@functools.cache
def _preset_names(table: str) -> tuple[str, ...]:
    """The names of presets/TABLE.toml, parsed as the presets parse it (the command's help imports
    neither the presets nor pint nor sympy)."""
    from pathlib import Path

    from ..core.cache import package_toml

    return tuple(package_toml(Path(__file__).parent.parent / "presets" / f"{table}.toml"))


def _quiet_stdout() -> None:
    """Standard output that failed is not flushed again at exit (which would print a second
    error)."""
    try:
        sys.stdout = open(os.devnull, "w")
    except OSError:
        pass


def _one_line(text: str, limit: int = 1000) -> str:
    """The message on one line: control characters (a newline in a user's value) escaped, at most
    ``limit`` characters (a library message quoting a huge value)."""
    line = "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)
    return line if len(line) <= limit else line[: limit - 3] + "..."


def main(argv=None) -> int:
    try:
        top = parser()
        args, extra = top.parse_known_args(argv)
        if extra:
            raise _unrecognized(top, args.command, extra)
        if not getattr(args, "func", None):
            raise CLIError(
                "analytic: give a command: step, memory, search, codesign, solve, formula,"
                " validate, derive, calibrate, plot"
            )
        prepare()
        from ..core.progress import shown as progress_shown
        from ..core.units import as_data

        with (
            progress_shown(not getattr(args, "quiet", False) and not getattr(args, "json", False)),
            as_data(),
        ):
            # quantities as data: the command prints them, and imports no pint
            code = args.func(args)
        sys.stdout.flush()  # a full device says so now, not in the interpreter's exit
        return code
    # no reader at all: quiet, the shell's code for a closed pipe (128 + SIGPIPE)
    except ClosedOutput:
        return 141
    except CLIError as exc:
        print(_one_line(str(exc)), file=sys.stderr)
        return 2
    except BrokenPipeError:  # output piped into head and closed
        sys.stderr.close()
        return 0
    except KeyboardInterrupt:  # Ctrl-C: one line, the shell's code for SIGINT
        print("analytic: interrupted", file=sys.stderr)
        return 130
    # library errors are user errors; anything else is a bug and keeps its traceback
    except Exception as exc:
        from ..core.errors import AnalyticError

        if isinstance(exc, AnalyticError):
            print(_one_line(f"analytic: {exc}"), file=sys.stderr)
            return 2
        # a file the user named cannot be written or read
        if isinstance(exc, OSError) and exc.filename:
            print(
                _one_line(
                    f"analytic: {shown(exc.filename, 200, quote=False)}: {exc.strerror or exc}"
                ),
                file=sys.stderr,
            )
            return 2
        if isinstance(exc, OSError):  # standard output on a full device
            print(
                _one_line(f"analytic: cannot write the output: {exc.strerror or exc}"),
                file=sys.stderr,
            )
            _quiet_stdout()
            return 2
        raise


if __name__ == "__main__":
    sys.exit(main())
