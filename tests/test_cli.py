import io
import json
import re
import sys

import pytest

import analytic as an
from analytic.cli.main import main
from analytic.core.values import batch_tokens

#: Llama 3 405B's layout on 8,192 H100s (Llama 3 §3.3.2, Table 4): TP 8, PP 16 interleaved over 8
#: chunks, DP 64 with ZeRO-2, the ends counted as layers
LLAMA3_8192 = an.Layout(
    tp=8, pp=16, dp=64, zero=2, sequence_parallel=True, schedule="interleaved", vpp=8,
    ends_as_layers=True,
)


def run(capsys, *argv):
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def entries(out: str) -> list[str]:
    """A command's output as entries: each row with the continuation rows under it (indented four
    spaces or more beyond the row's own indent) joined by spaces."""
    rows = []
    for row in out.splitlines():
        indent = len(row) - len(row.lstrip())
        if rows and row.strip() and indent >= rows[-1][0] + 4:
            rows[-1][1] += " " + row.strip()
        else:
            rows.append([indent, row])
    return [text for _, text in rows]


def test_step_default_is_the_text_story(capsys):
    code, out, err = run(capsys, "step")
    assert code == 0, err
    assert "16,777,216" in out and "(text: 16M)" in out
    assert "268.4 MB" in out and "[parallelism.tp.allreduce_bytes]" in out
    assert "12.6 s" in out and "(text: 12.0 s: 16·10⁶ tokens a step)" in out
    assert "929,832" in out and "(text: 975,000: 16·10⁶ tokens a step)" in out


def test_step_issue_example_verbatim(capsys):
    code, out, err = run(
        capsys, "step", "--model", "llama3-405b", "--hardware", "h100-sxm", "--gpus", "8192",
        "--tp", "8", "--pp", "16", "--seq", "8192", "--batch-tokens", "16M", "--mfu", "0.40",
    )
    assert code == 0, err
    assert "read as 16 Mi = 16,777,216 tokens" in out
    assert "dp=64" in out


def test_step_moe_story(capsys):
    code, out, err = run(
        capsys, "step", "--model", "deepseek-v3", "--hardware", "h800", "--gpus", "2048", "--pp",
        "16", "--ep", "64", "--zero", "1", "--seq", "4096", "--global-batch", "15360", "--dtype",
        "fp8", "--schedule", "dualpipe", "--stack", "hai-llm",
    )
    assert code == 0, err
    assert "dp=128" in out and "two-level" in out
    assert "3.2" in out and "12.8" in out  # DeepSeek-V3's 3.2 experts per node, ≈ 13 over 4 nodes


def test_dp_time_in_the_story_is_the_modelled_one(capsys):
    """DP traffic over one NIC only when every DP peer is in another node (the text's layout, S25);
    a DP group inside and across nodes gets the modelled time of its collectives instead."""
    code, out, err = run(capsys, "step", "--json")
    keys = {ln["key"]: ln for ln in json.loads(out)["lines"]}
    nic = an.hardware("h100-sxm").scale_out_bandwidth.to("GB/s").magnitude
    assert keys["dp_bytes"]["unit"] == "GB" and keys["dp_time"]["unit"] == "s"
    assert keys["dp_time"]["value"] == pytest.approx(keys["dp_bytes"]["value"] / nic, rel=1e-9)
    argv = (
        "step",
        "--model",
        "gpt3-175b",
        "--hardware",
        "a100-80g",
        "--dp",
        "64",
        "--zero",
        "1",
        "--seq",
        "2048",
        "--global-batch",
        "64",
    )
    code, out, err = run(capsys, *argv, "--json")
    keys = {ln["key"]: ln for ln in json.loads(out)["lines"]}
    assert "dp_time" not in keys
    plan = an.Plan(
        an.model("gpt3-175b"), an.hardware("a100-80g"), an.Layout(dp=64, zero=1), seq_len=2048,
        global_batch=64,
    )
    assert plan.placement()["dp"]["link"] == "two-level"
    assert (
        f"{plan.communication_time()['dp'].to('s'):.3g~P} on its links" in keys["dp_bytes"]["label"]
    )


def test_step_json_round_trips(capsys):
    code, out, _ = run(capsys, "step", "--json")
    data = json.loads(out)
    keys = {ln["key"]: ln for ln in data["lines"]}
    assert keys["microbatches"]["value"] == 32
    assert keys["tp_message"]["unit"] == "MB"


# a flag of another command: named as such
@pytest.mark.parametrize(
    "argv,needle",
    [
        (["step", "--tpp", "3"], "--tp"),
        (["search", "--topp", "3"], "did you mean --top"),
        (["step", "--top", "3"], "--top is an option of search"),
        (
            ["formula", "compute.mfu", "--hardware", "h100-sxm"],
            "analytic formula: unrecognized arguments: --hardware",
        ),
        (["step", "--model", "llama3-405b", "--hardware", "h100"], "h100-sxm"),
        (
            (
                "step --model llama3-405b --hardware h100-sxm --gpus 8192 --tp 3 --seq 8192"
                " --global-batch 2048"
            ).split(),
            "tp",
        ),
        (
            (
                "step --model llama3-405b --hardware h100-sxm --gpus 100 --tp 8 --seq 8192"
                " --global-batch 2048"
            ).split(),
            "gpus",
        ),
        (["step", "--mfu", "1.5"], "mfu"),
        (["formula", "memory.model_states.zero9"], "zero0"),
        (
            [
                "formula",
                "collectives.all_reduce.time",
                "--set",
                "message=1e9",
                "--set",
                "ranks=8",
                "--set",
                "bandwidth=50 GB/s",
                "--set",
                "latency=0 s",
            ],
            "message",
        ),
        (["nonsense"], "invalid choice"),
    ],
)
def test_user_errors_are_one_line_exit_2(capsys, argv, needle):
    code, out, err = run(capsys, *argv)
    assert code == 2
    assert len(err.strip().splitlines()) == 1 and needle in err
    assert "Traceback" not in err


@pytest.mark.parametrize(
    "argv,line",
    [
        (["step", "--tp", "x"], "--tp: expected an integer ≥ 1, got 'x'"),
        (
            (
                "memory --model llama3-8b --hardware h100-sxm --gpus 12 --tp 8 --seq 8192"
                " --global-batch 8"
            ).split(),
            "--gpus: 12 is not divisible by tp·cp·pp = 8",
        ),
        (
            (
                "step --model llama3-8b --hardware h100-sxm --gpus 8 --seq 8192 --batch-tokens"
                " 16.5"
            ).split(),
            "analytic: --batch-tokens: '16.5' is not a whole number of 8192-token sequences",
        ),
    ],
)
def test_a_mistaken_count_is_said_before_sympy_and_pint_are_imported(argv, line):
    """The command reads every count and the batch first: its one line comes without the heavy
    libraries imported (a new interpreter, so that nothing imported them before)."""
    import subprocess
    import sys

    code = (
        "import sys\nfrom analytic.cli.main import main\nrc = main(sys.argv[1:])\n"
        "print(rc, [m for m in ('sympy', 'pint', 'numpy') if m in sys.modules])"
    )
    done = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True)
    assert done.stdout.strip() == "2 []" and done.stderr.strip() == line


def test_formula_evaluates_with_units(capsys):
    code, out, _ = run(
        capsys, "formula", "memory.model_states.zero0", "--set", "params=405e9", "--json"
    )
    assert code == 0
    assert json.loads(out)["value"] == pytest.approx(6.48e12)


def test_formula_partially_applied(capsys):
    """Some inputs given: the expression in the others (what Formula.subs gives), not an error."""
    code, out, err = run(
        capsys, "formula", "memory.model_states.zero1", "--set", "params=405e9", "--json"
    )
    assert code == 0, err
    data = json.loads(out)
    assert data["free"] == ["dp"] and "value" not in data
    assert data["partial"] == str(an.formula("memory.model_states.zero1").subs(params=405e9).expr)


def test_formula_list(capsys):
    code, out, _ = run(capsys, "formula", "--list")
    assert "memory.model_states.zero3" in out and code == 0


def test_memory_table(capsys):
    """The source text's configuration: its fullest stage, the first, does not fit an H100's 81,559
    MiB (85.52 GB); --stages gives every stage, the headroom is HBM less the least memory measured
    outside the allocator (TorchRec's rank 0: 81,920 − 17,272 − 62,875 MiB) less the worst stage's
    total."""
    code, out, _ = run(capsys, "memory", "--json", "--stages")
    data = json.loads(out)
    assert data["fits"] is False and data["stage"] == 0 and len(data["stages"]) == 16
    assert data["outside"] == pytest.approx((81920 - 17272 - 62875) * 2**20 / 1e9, rel=1e-12)
    assert data["headroom"] == pytest.approx(
        81559 * 2**20 / 1e9 - data["outside"] - data["total"], rel=1e-9
    )
    assert (
        max(s["total"] for s in data["stages"]) == data["total"]
        and data["stages"][-1]["fits"] is True
    )
    code, out, _ = run(capsys, "memory", "--stages")
    assert (
        "stage 0 of 16, the worst" in out
        and f"does not fit: {-data['headroom']:.4g} GB over" in out
    )
    assert -data["headroom"] == pytest.approx(4.296 + 1.859, abs=1e-3)
    assert len([line for line in out.splitlines() if line.strip()[:2].strip().isdigit()]) == 16


def test_batch_tokens_parsing():
    assert batch_tokens("16777216", 8192) == (16777216, "")
    assert batch_tokens("16Mi", 8192) == (16777216, "")
    tokens, note = batch_tokens("16M", 8192)
    assert tokens == 16777216 and "16 Mi" in note
    assert batch_tokens("8M", 1000)[0] == 8_000_000


def test_plan_and_search_read_a_batch_as_the_cli_does(tmp_path, monkeypatch):
    """One reading of --batch-tokens / batch_tokens= everywhere: '16M' at 8,192 tokens is 16Mi, said
    in .notes and as a ReinterpretedWarning."""
    import pytest

    import analytic as an

    monkeypatch.setenv("ANALYTIC_CACHE", str(tmp_path))
    m, hw = an.model("llama3-8b"), an.hardware("h100-sxm")
    with pytest.warns(an.errors.ReinterpretedWarning, match="16 Mi"):
        plan = an.Plan(
            m, hw, an.Layout(tp=8, sequence_parallel=True), seq_len=8192, batch_tokens="16M"
        )
    assert plan.global_batch == 2048 and len(plan.notes) == 1
    with pytest.warns(an.errors.ReinterpretedWarning, match="16 Mi"):
        res = an.search(m, hw, gpus=8, seq_len=8192, batch_tokens="16M", progress=False, top=1)
    assert res.notes == plan.notes
    exact = an.Plan(
        m, hw, an.Layout(tp=8, sequence_parallel=True), seq_len=8192, batch_tokens="16Mi"
    )
    assert exact.global_batch == 2048 and exact.notes == []
    with pytest.raises(an.InputError, match="whole number"):
        an.Plan(
            m, hw, an.Layout(tp=8, sequence_parallel=True), seq_len=8192, batch_tokens="15000001"
        )


def test_search_405b_beats_the_published_layout(capsys):
    """The issue's command: a ranked table of fitting layouts, fastest first, whose best is at least
    as fast (by the model) as Llama 3's TP8 PP16 DP128 under 1F1B; with --ends-as-layers (126
    layers and the two ends over 16 × 2 chunks, the split the paper's interleaved schedule needs on
    Megatron-Core) at least as fast as that layout interleaved, and its rows are their plans'."""
    import analytic as an

    argv = (
        "search --model llama3-405b --hardware h100-sxm --gpus 16384 --seq 8192 --batch-tokens 16M"
        " --top 5"
    ).split()
    m, hw = an.model("llama3-405b"), an.hardware("h100-sxm")
    hbm = hw.hbm.to("GB").magnitude
    for ends, (schedule, vpp) in ((False, ("1f1b", 1)), (True, ("interleaved", 2))):
        code, out, err = run(capsys, *argv, "--json", *(["--ends-as-layers"] if ends else []))
        assert code == 0, err
        res = json.loads(out)
        times = [r["step_time_s"] for r in res["ranked"]]
        assert (
            len(times) == 5
            and times == sorted(times)
            and all(r["memory_GB"] <= hbm for r in res["ranked"])
            and all(r["ends_as_layers"] is ends for r in res["ranked"])
        )
        lay = dict(tp=8, pp=16, dp=128, zero=1, sequence_parallel=True)
        published = an.Plan(
            m, hw, an.Layout(**lay, schedule=schedule, vpp=vpp, ends_as_layers=ends),
            seq_len=8192, global_batch=2048,
        )
        assert times[0] <= published.step_time().to("s").magnitude
        best = res["ranked"][0]
        plan = an.Plan(
            m, hw,
            an.Layout(
                **{k: best[k] for k in ("tp", "cp", "pp", "dp", "vpp", "zero", "schedule")},
                recompute=best["recompute"], sequence_parallel=best["tp"] > 1, ends_as_layers=ends,
            ),
            seq_len=8192, global_batch=2048, microbatch_size=best["microbatch_size"],
        )
        assert times[0] == pytest.approx(plan.step_time().to("s").magnitude, rel=1e-9)
    code, out, err = run(capsys, *argv, "--ends-as-layers")
    line = (
        f"{res['evaluated']:,} layouts evaluated, {res['fitting']:,} fit at their predicted peak in"
        " 85.52 GB with 1.859 GB outside"
    )
    assert code == 0 and line in out and "step (s)" in out and res["ranked"][0]["verdict"] == "fits"


def _step_time(text: str) -> float:
    """The predicted step time of `analytic step --json`'s output."""
    return next(line["value"] for line in json.loads(text)["lines"] if line["key"] == "step_time")


def test_step_comm_sms(capsys):
    """--comm-sms reserves SMs for communication: the DeepSeek-V3 step is slower by the model, and a
    count the GPU does not have is one line and exit 2."""
    argv = (
        "step --model deepseek-v3 --hardware h800 --gpus 2048 --pp 16 --ep 64 --zero 1 --schedule"
        " dualpipe --stack hai-llm --seq 4096 --global-batch 15360 --dtype fp8 --json"
    ).split()
    code, out, err = run(capsys, *argv)
    assert code == 0, err
    code, out20, err = run(capsys, *argv, "--comm-sms", "20")
    assert code == 0, err
    assert _step_time(out20) > _step_time(out)
    assert "comm_sms=20" in json.loads(out20)["plan"]
    assert any("on 112 of 132 SMs" in line["label"] for line in json.loads(out20)["lines"])
    code, out, err = run(capsys, *argv, "--comm-sms", "200")
    assert code == 2 and len(err.strip().splitlines()) == 1 and "comm_sms" in err


def test_step_zero3_gather(capsys):
    """--zero3-gather per-tensor: a slower step that says how it gathers; without ZeRO-3, one line
    and exit 2."""
    argv = (
        "step --model gpt3-175b --hardware a100-80g --dp 768 --zero 3 --recompute full --seq 2048"
        " --global-batch 1536 --dtype fp16 --no-flash-attention --json"
    ).split()
    code, out, err = run(capsys, *argv)
    assert code == 0, err
    code, slow, err = run(capsys, *argv, "--zero3-gather", "per-tensor")
    assert code == 0, err
    assert _step_time(slow) > _step_time(out)
    assert "zero3_gather=per-tensor" in json.loads(slow)["plan"]
    code, out, err = run(
        capsys, *[a if a != "3" else "2" for a in argv], "--zero3-gather", "per-tensor"
    )
    assert code == 2 and len(err.strip().splitlines()) == 1 and "--zero3-gather" in err
    search = (
        "search --model llama3-8b --hardware h100-sxm --gpus 64 --seq 4096 --global-batch 256"
        " --top 2"
    ).split()
    code, out, err = run(capsys, *search, "--zero", "1", "--zero3-gather", "per-tensor")
    assert code == 2 and len(err.strip().splitlines()) == 1 and "--zero3-gather" in err
    code, out, err = run(
        capsys, *search, "--zero", "3", "--zero3-gather", "per-tensor", "--async-tp"
    )
    assert (
        code == 0
        and (
            "the megatron family; async TP wherever tp > 1; ZeRO-3 gathering tensor by tensor, "
            "blocking (--stack"
        )
        in out
        and "stack megatron-core (Megatron-Core" in out
    )
    code, out, err = run(capsys, *search)
    assert code == 0 and out.startswith(
        "stack megatron-core (Megatron-Core with Transformer Engine (2024-2025)): "
        f"{_fitted('megatron-core')}, fitted on the megatron family"
    )


def _layout(row: dict) -> an.Layout:
    """The Layout of a search or codesign row: its degrees and choices as the JSON gives them."""
    keys = ("tp", "pp", "dp", "cp", "vpp", "zero", "recompute", "schedule", "sequence_parallel")
    return an.Layout(**{k: row[k] for k in keys if k in row})


def _fitted(stack: str) -> str:
    """A stack's fitted efficiency and its standard error as the first lines print them."""
    cal = an.presets.calibration(stack)
    return f"efficiency {cal.stack_efficiency:.3f} ± {cal.standard_error:.3f}"


def test_search_counts_the_layouts_on_the_stack_it_is_given(capsys):
    """--stack reaches the search: its table says the stack, each row's memory is that stack's
    Plan's, and an unknown stack is refused in one line naming the choices."""
    base = (
        "search --model llama3-8b --hardware h100-sxm --gpus 64 --seq 4096 --global-batch 256"
        " --zero 1 --recompute none --schedule 1f1b"
    ).split()
    code, out, err = run(capsys, *base, "--top", "2", "--stack", "torchtitan")
    assert (
        code == 0
        and f"{_fitted('torchtitan')}, fitted on the torchtitan family" in out.splitlines()[0]
    ), err
    code, out, err = run(capsys, *base, "--json", "--stack", "torchtitan")
    data = json.loads(out)
    assert (
        code == 0
        and data["stack"] == "torchtitan"
        and {r["stack"] for r in data["ranked"]} == {"torchtitan"}
    )
    row = data["ranked"][0]
    layout = an.Layout(
        **{k: row[k] for k in ("tp", "pp", "dp", "cp", "zero", "recompute", "schedule")}
    )
    plan = an.Plan(
        an.model("llama3-8b"), an.hardware("h100-sxm"), layout, seq_len=4096, global_batch=256,
        microbatch_size=row["microbatch_size"], stack="torchtitan",
    )
    assert row["memory_GB"] == pytest.approx(plan.memory().total.to("GB").magnitude, rel=1e-9)
    code, out, err = run(capsys, *base, "--stack", "torchtitn")
    assert (
        code == 2
        and len(err.strip().splitlines()) == 1
        and "'torchtitan'" in err
        and "stack" in err
    )


def test_an_output_path_that_cannot_be_written_is_one_line(capsys, tmp_path):
    pytest.importorskip("matplotlib")
    missing = tmp_path / "no such folder" / "bubble.png"
    code, out, err = run(capsys, "plot", "bubble", "--out", str(missing))
    assert code == 2 and len(err.strip().splitlines()) == 1 and str(missing) in err
    code, out, err = run(capsys, "plot", "bubble", "--out", str(tmp_path / "bubble.png"))
    assert code == 0 and (tmp_path / "bubble.png").stat().st_size > 0


def test_step_on_a_preset_without_a_link_bandwidth_still_tells_the_rest(capsys):
    """TPU7x's preset has no sourced scale-up bandwidth: the story keeps memory and FLOPs and says
    why communication and the step time are missing, instead of failing as a whole."""
    argv = (
        "step --model llama3-70b --hardware tpu7x --gpus 64 --tp 4 --zero 3 --seq 8192"
        " --global-batch 64"
    ).split()
    code, out, err = run(capsys, *argv)
    assert code == 0, err
    assert (
        "total per GPU" in out
        and "communication times unavailable" in out
        and "scale-up-bandwidth" in out
    )
    assert "TP traffic per GPU per step" in out  # bytes need no bandwidth
    code, out, err = run(
        capsys, *argv, "--scale-up-bandwidth", "600 GB/s", "--scale-out-bandwidth", "400 Gbit/s"
    )
    assert code == 0 and "TP traffic per GPU per step" in out and "unavailable" not in out


def test_search_reads_its_constraints_and_refuses_what_it_would_ignore(capsys):
    """--zero, --recompute, --schedule, --microbatch-size, --vpp, a pinned degree (--tp 2) and the
    link overrides narrow or shape the search; a step-only flag (--mfu, --no-sp) is an error, not a
    silent no-op."""
    base = (
        "search --model llama3-8b --hardware h100-sxm --gpus 64 --seq 8192 --global-batch 256"
        " --json"
    ).split()
    code, out, err = run(capsys, *base)
    assert code == 0, err
    everything = json.loads(out)
    code, out, err = run(capsys, *base, "--zero", "3", "--recompute", "full")
    assert code == 0, err
    narrowed = json.loads(out)
    assert narrowed["evaluated"] < everything["evaluated"]
    assert {(r["zero"], r["recompute"]) for r in narrowed["ranked"]} == {(3, "full")}
    code, out, err = run(capsys, *base, "--tp", "2", "--pp", "4")
    assert code == 0, err
    pinned = json.loads(out)
    assert pinned["ranked"] and {
        (r["tp"], r["pp"], r["dp"] * r["cp"]) for r in pinned["ranked"]
    } == {(2, 4, 8)}
    assert pinned["evaluated"] < everything["evaluated"]
    for extra, flag in ((["--mfu", "0.4"], "--mfu"), (["--no-sp"], "--sp/--no-sp")):
        code, out, err = run(capsys, *base, *extra)
        assert code == 2 and len(err.strip().splitlines()) == 1 and flag in err
    code, out, err = run(
        capsys, "memory", "--model", "llama3-8b", "--hardware", "h100-sxm", "--gpus", "8", "--seq",
        "8192", "--global-batch", "8", "--tokens", "1e12",
    )
    assert code == 2 and "--tokens" in err


def test_flash_attention_flags(capsys):
    """--no-flash-attention reaches the plan (step, memory) and the search; a GQA model without
    flash attention is refused in one line."""
    argv = (
        "--model gpt3-175b --hardware a100-80g --gpus 1024 --tp 8 --pp 16 --seq 2048"
        " --global-batch 1536 --json"
    ).split()
    executed = {}
    for flag in ("--flash-attention", "--no-flash-attention"):
        code, out, err = run(capsys, "step", *argv, flag)
        assert code == 0, err
        executed[flag] = next(
            ln["value"] for ln in json.loads(out)["lines"] if ln["key"] == "hardware_flops"
        )
    layout = an.Layout(tp=8, pp=16, dp=8, sequence_parallel=True)
    for flag, flash in (("--flash-attention", True), ("--no-flash-attention", False)):
        plan = an.Plan(
            an.model("gpt3-175b"), an.hardware("a100-80g"), layout, seq_len=2048, global_batch=1536,
            flash_attention=flash,
        )
        assert executed[flag] == pytest.approx(
            plan.hardware_flops().to("FLOP").magnitude, rel=1e-12
        )
    assert executed["--flash-attention"] > executed["--no-flash-attention"]
    search = (
        "search --model gpt3-175b --hardware a100-80g --gpus 64 --seq 2048 --global-batch 64"
        " --json"
    ).split()
    best = {
        flag: json.loads(run(capsys, *search, flag)[1])["ranked"][0]
        for flag in ("--flash-attention", "--no-flash-attention")
    }
    assert best["--flash-attention"] != best["--no-flash-attention"]
    code, out, err = run(
        capsys, "memory", "--model", "llama3-8b", "--hardware", "h100-sxm", "--gpus", "8", "--seq",
        "8192", "--global-batch", "8", "--no-flash-attention",
    )
    assert code == 2 and len(err.strip().splitlines()) == 1 and "flash_attention" in err


def test_search_without_a_valid_layout_says_so(capsys):
    code, out, err = run(
        capsys, "search", "--model", "llama3-8b", "--hardware", "h100-sxm", "--gpus", "64", "--seq",
        "8192", "--global-batch", "256", "--microbatch-size", "3",
    )
    assert code == 2 and len(err.strip().splitlines()) == 1 and "no valid layout" in err


def test_scale_up_domain_flag_moves_a_group_onto_nvlink(capsys):
    """DP 8 with TP 8 on GB200 trays: within a domain of 64 the DP group rides NVLink; with domains
    of 8 (one board) it goes through the NICs. A domain the layout cannot tile is one line, exit
    2."""
    base = (
        "step --model llama3-405b --hardware gb200-nvl72 --gpus 1024 --tp 8 --pp 16 --zero 1 --seq"
        " 8192 --global-batch 1024 --json"
    ).split()
    links = {}
    for domain in ("64", "8"):
        assert main([*base, "--scale-up-domain", domain]) == 0
        lines = json.loads(capsys.readouterr().out)["lines"]
        links[domain] = next(ln["value"] for ln in lines if ln["key"] == "link_dp")
    assert links == {"64": "scale-up", "8": "scale-out"}
    assert main([*base, "--scale-up-domain", "12"]) == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1


def test_selective_recomputation_under_flash_attention_is_called_out(capsys):
    """Under FlashAttention selective recomputation keeps the same activations and recomputes the
    attention core: the memory output says so with the FLOPs it costs (the executed FLOPs of the
    plan minus those of the same plan without recomputation), and the memory is the same as without
    it."""
    base = (
        "memory --model llama3-70b --hardware h100-sxm --gpus 64 --tp 8 --seq 8192 --global-batch"
        " 64 --json"
    ).split()
    outs = {}
    for rc in ("none", "selective"):
        assert main([*base, "--recompute", rc]) == 0
        outs[rc] = json.loads(capsys.readouterr().out)
    assert outs["none"]["activations"] == outs["selective"]["activations"]
    assert (
        not outs["none"]["notes"]
        and "saves no memory under FlashAttention" in outs["selective"]["notes"][0]
    )
    plans = {
        rc: an.Plan(
            an.model("llama3-70b"),
            an.hardware("h100-sxm"),
            an.Layout(tp=8, dp=8, recompute=rc, sequence_parallel=True),
            seq_len=8192,
            global_batch=64,
        )
        for rc in ("none", "selective")
    }
    extra = (
        (plans["selective"].hardware_flops() - plans["none"].hardware_flops()).to("FLOP").magnitude
    )
    assert f"{extra:.4g}" in outs["selective"]["notes"][0]


def test_step_prints_mfu_under_both_conventions(capsys):
    """The story's two MFUs differ by PaLM's attention term: (6N + 12·L·H·Q·T) / 6N per token, with
    Llama 3 405B's L = 126, H = 128 heads of Q = 128 and T = 8,192 (the default story's
    configuration)."""
    assert main(["step", "--json"]) == 0
    lines = {ln["key"]: ln["value"] for ln in json.loads(capsys.readouterr().out)["lines"]}
    n = an.model("llama3-405b").active_params
    ratio = (6 * n + 12 * 126 * 128 * 128 * 8192) / (6 * n)
    # the MFUs are rounded to 4 digits
    assert lines["mfu_palm"] / lines["mfu"] == pytest.approx(ratio, rel=2e-3)


def test_solve_answers_without_sympy(capsys):
    """`analytic solve`: the interleaved bubble target of 5% on 16 stages of 4 chunks needs 80
    microbatches (75 rounded up to a multiple of pp); Llama 3 405B with TP8 PP16 ZeRO-1 (fp32
    gradient buffers) fits at its predicted peak from dp = 173 (of 81,559 MiB) but the 2,048
    sequences split only at 256; DeepSeek-V3 without EP never fits, and the one-line error says
    which parts do not shrink."""
    assert (
        main("solve bubble --schedule interleaved --pp 16 --vpp 4 --target 0.05 --json".split())
        == 0
    )
    assert json.loads(capsys.readouterr().out)["microbatches"] == 80
    assert (
        main(
            (
                "solve smallest --free dp --model llama3-405b --hardware h100-sxm --tp 8 --pp 16"
                " --zero 1 --seq 8192 --global-batch 2048 --json"
            ).split()
        )
        == 0
    )
    out = json.loads(capsys.readouterr().out)
    assert (out["value"], out["fits_from"], out["verdict"]) == (
        256,
        173,
        "fits",
    ) and "global_batch" in out["skipped"]
    assert (
        main(
            (
                "solve smallest --free dp --model deepseek-v3 --hardware h800 --pp 16 --zero 1"
                " --seq 4096 --global-batch 15360 --dtype fp8"
            ).split()
        )
        == 2
    )
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "weights + gradients do not shrink with dp" in err
    for argv in (
        ["solve", "smallest", "--model", "llama3-8b", "--hardware", "h100-sxm", "--seq", "8192"],
        "solve smallest --free dp --dp 8 --model llama3-8b --hardware h100-sxm".split(),
        ["solve", "bubble", "--pp", "16", "--target", "0.05", "--tp", "8"],
    ):
        assert main(argv) == 2
        assert len(capsys.readouterr().err.strip().splitlines()) == 1


def test_solve_mfu_and_tp_break_even(capsys):
    """`solve mfu`: the smallest dp of Llama 3 405B TP8 PP16 at which the predicted MFU falls below
    0.3, checked against plans either side; `solve tp-break-even`: TP's time over compute is k(t −
    1), so a tenth of the compute is reached a tenth of the way from t = 1, and over NICs far sooner
    than over NVLink."""
    flags = (
        "--model llama3-405b --hardware h100-sxm --tp 8 --pp 16 --zero 1 --seq 8192 --global-batch"
        " 2048"
    ).split()
    assert main(["solve", "mfu", "--free", "dp", "--threshold", "0.3", *flags, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    plan = an.Plan(
        an.model("llama3-405b"),
        an.hardware("h100-sxm"),
        an.Layout(tp=8, pp=16, dp=out["value"], zero=1, sequence_parallel=True),
        seq_len=8192,
        global_batch=2048,
    )
    assert plan.mfu() == pytest.approx(out["mfu"], rel=1e-12) and out["mfu"] < 0.3
    assert plan.replace(layout=plan.layout.replace(dp=out["value"] // 2)).mfu() >= 0.3
    answers = {}
    for link, threshold in (("scale-up", "1"), ("scale-up", "0.1"), ("scale-out", "1")):
        assert (
            main(
                [
                    "solve",
                    "tp-break-even",
                    "--model",
                    "llama3-405b",
                    "--hardware",
                    "h100-sxm",
                    "--seq",
                    "8192",
                    "--link",
                    link,
                    "--threshold",
                    threshold,
                    "--json",
                ]
            )
            == 0
        )
        answers[link, threshold] = json.loads(capsys.readouterr().out)["tp"]
    assert answers["scale-up", "0.1"] - 1 == pytest.approx(
        (answers["scale-up", "1"] - 1) / 10, rel=1e-9
    )
    assert answers["scale-out", "1"] < 8 < answers["scale-up", "1"]
    for argv in (
        ["solve", "mfu", "--free", "dp", *flags],  # no threshold
        ["solve", "smallest", "--free", "dp", "--threshold", "0.3", *flags],
        "solve tp-break-even --model llama3-8b --hardware h100-sxm --seq 8192 --tp 8".split(),
        ["solve", "bubble", "--pp", "16", "--target", "0.05", "--link", "scale-out"],
    ):
        assert main(argv) == 2
        assert len(capsys.readouterr().err.strip().splitlines()) == 1


def test_formula_value_in_a_unit(capsys):
    """A bare number of FLOPs is read in FLOP; a time prints in days rather than megaseconds, or in
    the unit asked for; a unit of another dimension or none known is one line and status 2."""
    argv = [
        "formula",
        "compute.train_time",
        "--set",
        "flops=1e25",
        "--set",
        "gpus=8192",
        "--set",
        "peak_flops=989 TFLOP/s",
        "--set",
        "mfu=0.4",
    ]
    days = 1e25 / (8192 * 989e12 * 0.4) / 86400
    assert main(argv) == 0
    assert f"= {days:.4g} d" in capsys.readouterr().out
    assert main([*argv, "--unit", "hour", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["value"] == pytest.approx(days * 24, rel=1e-12) and out["value_unit"] == "h"
    for unit, said in (
        ("GB", "cannot express s in 'GB'"),
        ("dayz", "unknown unit 'dayz'"),
        ("kilo%", "'kilo%' is not a unit"),
    ):
        assert main([*argv, "--unit", unit]) == 2
        assert capsys.readouterr().err.strip() == f"--unit: {said}"
    assert main(["formula", "compute.train_time", "--unit", "day"]) == 2
    capsys.readouterr()


def test_search_command_over_several_sizes(capsys):
    """--gpus 64,256,1024 --objective cost: the JSON rows carry their GPU count and cost; a plot
    takes one count."""
    argv = (
        "search --model llama3-70b --hardware h100-sxm --gpus 64,256,1024 --seq 8192"
        " --global-batch 64 --zero 1 --recompute none --top 3"
    ).split()
    assert main([*argv, "--objective", "cost", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    costs = [r["gpu_hours_per_million_tokens"] for r in out["ranked"]]
    assert (
        out["objective"] == "cost"
        and costs == sorted(costs)
        and {r["gpus"] for r in out["ranked"]} <= {64, 256, 1024}
    )
    assert main([*argv]) == 0
    assert "GPU-h/Mtok" in capsys.readouterr().out
    assert main(["plot", "pareto", "--out", "x.png", *argv[1:-2]]) == 2  # (no --top for plots)
    assert "one count" in capsys.readouterr().err


def test_recompute_layers_flag(capsys):
    """--recompute-layers N recomputes N layers of each stage under --recompute full: its
    activations lie between full recomputation's and none; without full it is one line and exit
    2."""
    flags = (
        "--model llama3-70b --hardware h100-sxm --tp 8 --pp 4 --dp 4 --seq 8192 --global-batch 64"
        " --json"
    ).split()
    acts = {}
    for extra in ([], ["--recompute", "full"], ["--recompute", "full", "--recompute-layers", "5"]):
        assert main(["memory", *flags, *extra]) == 0
        acts[len(extra)] = json.loads(capsys.readouterr().out)["activations"]
    assert acts[2] < acts[4] < acts[0]
    assert main(["memory", *flags, "--recompute-layers", "5"]) == 2
    assert "recompute_layers" in capsys.readouterr().err


def test_memory_carries_the_predicted_peak_and_its_range(capsys):
    """`analytic memory` gives the count times the allocator's reserve, and the range measured peaks
    lay in around such a prediction (calibration.toml [memory]), as Plan.memory_peak and
    Plan.memory_interval do; a plan that fits at the prediction but not at the top of that range
    says so."""
    fitted = an.presets.memory_reserve("pytorch")
    # every measured peak lay above the count
    assert fitted["low"] < 1 < fitted["high"] and 1 < fitted["reserve"]
    flags = (
        "--model llama3-70b --hardware h100-sxm --tp 8 --pp 4 --dp 4 --seq 8192 --global-batch 64"
        " --recompute full"
    ).split()
    assert main(["memory", *flags, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    peak = data["total"] * fitted["reserve"]
    assert data["peak"] == pytest.approx(peak, rel=1e-9)
    assert data["interval"] == [
        pytest.approx(peak * fitted["low"], rel=1e-9),
        pytest.approx(peak * fitted["high"], rel=1e-9),
    ]
    plan = an.Plan(
        an.model("llama3-70b"),
        an.hardware("h100-sxm"),
        an.Layout(tp=8, pp=4, dp=4, recompute="full", sequence_parallel=True),
        seq_len=8192,
        global_batch=64,
    )
    assert plan.memory_peak().to("GB").magnitude == pytest.approx(peak, rel=1e-9)
    assert [q.to("GB").magnitude for q in plan.memory_interval()] == pytest.approx(
        data["interval"], rel=1e-9
    )
    # 63 GB at the top
    assert main(["memory", *flags]) == 0 and "would not fit" not in capsys.readouterr().out
    # the source text's step recomputing 3 layers a stage: 66.4 GB by the count, 76.4 GB predicted,
    # 85.9 GB at the top with the mean outside the allocator
    essay = (
        "--model llama3-405b --hardware h100-sxm --tp 8 --pp 16 --dp 64 --zero 1 --seq 8192"
        " --global-batch 2048 --recompute full --recompute-layers 3"
    ).split()
    assert main(["memory", *essay]) == 0
    out = capsys.readouterr().out
    two = an.Plan(
        an.model("llama3-405b"),
        an.hardware("h100-sxm"),
        an.Layout(
            tp=8, pp=16, dp=64, zero=1, sequence_parallel=True, recompute="full", recompute_layers=3
        ),
        seq_len=8192,
        global_batch=2048,
    )
    count, peak = two.memory().total.to("GB").magnitude, two.memory_peak().to("GB").magnitude
    least, mean = two.memory().outside.to("GB").magnitude, two.memory_outside().to("GB").magnitude
    hbm = an.hardware("h100-sxm").hbm.to("GB").magnitude
    # fits by the count and at the prediction, each with the memory outside the allocator, not at
    # the top
    assert count + least < hbm < peak * fitted["high"] + mean and peak + mean < hbm
    assert (
        f"fits, {hbm - least - count:.4g} GB to spare" in out
        and f"{peak:.4g} GB, {fitted['reserve']:.3f}× the count" in out
        and f"with the memory outside it, {peak + mean:.4g} GB: fits" in out
        and "at its top it would not fit" in out
    )
    # the reserve was measured on TorchTitan's runs: a Megatron-Core plan is told it is carried
    # over, theirs are not
    stacks = ["torchtitan", "torchtitan-2025", "torchtitan-2025-eager", "torchtitan-eager"]
    assert fitted["stacks"] == stacks
    assert (
        "(fitted on measured peaks of torchtitan, torchtitan-2025, torchtitan-2025-eager and"
        " torchtitan-eager runs, calibration.toml [memory]; megatron-core has none of its own)"
        in out
    )
    assert main(["memory", *essay, "--stack", "torchtitan", "--zero", "3"]) == 0
    out = capsys.readouterr().out
    assert (
        "torchtitan-eager runs, calibration.toml [memory]);" in out and "none of its own" not in out
    )
    assert main(["memory", *essay, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["reserve_measured_on"] == stacks


def test_a_stack_on_another_allocator_gets_a_note_instead_of_a_peak(capsys):
    """MaxText's plans run on XLA's allocator, for which no reserve was fitted: `analytic memory`
    says so in a note and gives no peak, and Plan.memory_peak refuses."""
    maxtext = (
        "--model llama3-8b --hardware tpu-v6e --dp 8 --seq 8192 --global-batch 8 --stack maxtext"
        " --recompute full"
    ).split()
    assert main(["memory", *maxtext, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["peak"] is None and any("not xla's" in n for n in data["notes"])
    with pytest.raises(an.PresetError, match="pytorch's allocator, not xla's"):
        an.Plan(
            an.model("llama3-8b"), an.hardware("tpu-v6e"), an.Layout(dp=8), seq_len=8192,
            global_batch=8, stack="maxtext",
        ).memory_peak()


def test_memory_verdict_at_the_allocators_limit(capsys):
    """Llama 3's 8,192-GPU layout: its count fits an H100 and its predicted peak does not, which
    `analytic memory` prints as a run at the allocator's limit, by how much, and why it still runs;
    the source text's layout, whose count is above the HBM, does not fit."""
    flags = (
        "--model llama3-405b --hardware h100-sxm --tp 8 --pp 16 --dp 64 --zero 2 --sp --schedule"
        " interleaved --vpp 8 --ends-as-layers --seq 8192 --global-batch 2048"
    ).split()
    plan = an.Plan(
        an.model("llama3-405b"), an.hardware("h100-sxm"), LLAMA3_8192, seq_len=8192,
        global_batch=2048,
    )
    count, peak, hbm = (
        q.to("GB").magnitude for q in (plan.memory().total, plan.memory_peak(), plan.memory().hbm)
    )
    least, mean = plan.memory().outside.to("GB").magnitude, plan.memory_outside().to("GB").magnitude
    assert count + least < hbm < peak + mean
    assert main(["memory", *flags]) == 0
    out = capsys.readouterr().out
    assert f"fits, {hbm - least - count:.4g} GB to spare" in out
    assert (
        f"with the memory outside it, {peak + mean:.4g} GB: {peak + mean - hbm:.4g} GB over the HBM"
        " with the count within it: fits at the allocator's limit (short of memory, it releases"
        " its cached blocks and retries: num_alloc_retries of torch.cuda.memory_stats)" in out
    )
    # what lies outside the allocator is named, and the formula the headroom comes from says so
    assert (
        "(outside the allocator: the driver's reservation, the CUDA context, NCCL's buffers; at"
        f" least {least:.4g} GB, {mean:.4g} GB on average, in snapshots of training runs:"
        " memory.headroom)" in out
    )
    assert any("CUDA context" in a for a in an.formula("memory.headroom").assumptions)
    assert main(["memory", *flags, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["verdict"] == "fits at the allocator's limit" and data[
        "outside_mean"
    ] == pytest.approx(mean)
    from analytic.cli.story import lines

    line = next(ln for ln in lines(plan) if ln.key == "device_peak")
    assert (
        line.label.endswith("fits at the allocator's limit")
        and line.formula == "memory.device_peak"
        and line.value.to("GB").magnitude == pytest.approx(peak + mean)
    )
    assert (
        main(
            [
                "memory",
                *flags[:10],
                "--zero",
                "1",
                "--seq",
                "8192",
                "--global-batch",
                "2048",
                "--json",
            ]
        )
        == 0
    )
    data = json.loads(capsys.readouterr().out)
    assert data["verdict"] == "does not fit" and not data["fits"]


def test_a_plan_without_a_fitted_reserve_fits_by_its_count(capsys):
    """MaxText's layout on TPU v6e, whose allocator has no fitted reserve, fits by its count."""
    maxtext = (
        "--model llama3-8b --hardware tpu-v6e --dp 8 --seq 8192 --global-batch 8 --stack maxtext"
        " --recompute full --zero 3 --json"
    ).split()
    assert main(["memory", *maxtext]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["verdict"] == "fits" and data["fits"] and data["peak"] is None


def test_memory_with_offloaded_activations(capsys, docs):
    """--offload-activations: MaxText's Llama 3.1 70B on 256 v6e fits, its 80 layer inputs of
    671,088,640 bytes each (5 sequences of 8,192 tokens) in host memory, eight chips' worth a
    host."""
    flags = (
        "--model",
        "llama3-70b",
        "--hardware",
        "tpu-v6e",
        "--scale-up-domain",
        "256",
        "--gpus",
        "256",
        "--zero",
        "3",
        "--recompute",
        "full",
        "--seq",
        "8192",
        "--global-batch",
        "1280",
        "--microbatch-size",
        "5",
        "--stack",
        "maxtext",
    )
    code, out, _ = run(capsys, "memory", "--json", *flags)
    assert code == 0 and json.loads(out)["fits"] is False and json.loads(out)["host"] == 0
    code, out, _ = run(capsys, "memory", "--json", *flags, "--offload-activations")
    data = json.loads(out)
    assert (
        code == 0
        and data["fits"] is True
        and data["host"] == pytest.approx(80 * 671_088_640 / 1e9, rel=1e-12)
    )
    code, out, _ = run(capsys, "memory", *flags, "--offload-activations")
    assert "offloaded activations in host memory: 53.69 GB per GPU, 429.5 GB per node of 8" in out
    readme = docs
    total, hbm = next(
        line.split()[1:5:3] for line in out.splitlines() if line.strip().startswith("total")
    )
    assert (
        f"--offload-activations` gives {total} GB of the {hbm} GB, and 53.69 GB a chip in host"
        " memory" in readme
    )


def test_offloaded_activations_against_the_nodes_host_memory(capsys):
    """Llama 3 70B, TP8 PP4 DP4 with SP, 8,192 tokens: the first stage holds 4 microbatches of its
    20 layers in flight, each keeping 8192·(8h + 4·a·d_h + 4·a_kv·d_h + 4a + 6·h_ff)/8 = 281,280,512
    bytes (h 8192, a 64, d_h 128, a_kv 8, h_ff 28672), all of it offloaded: 22.50 GB a GPU, 180 GB a
    node. On a DGX H100 (2 TB of DIMMs a node, datasheet: 2 TiB) that fits; on a node with 100 GB it
    does not, and the story says so; TPU v6e has no host memory with a source, so nothing is
    claimed."""
    from analytic.cli.story import lines

    flags = (
        "--model",
        "llama3-70b",
        "--hardware",
        "h100-sxm",
        "--tp",
        "8",
        "--pp",
        "4",
        "--dp",
        "4",
        "--seq",
        "8192",
        "--global-batch",
        "64",
        "--offload-activations",
    )
    code, out, _ = run(capsys, "memory", "--json", *flags)
    data = json.loads(out)
    per_layer = 8192 * (8 * 8192 + 4 * 64 * 128 + 4 * 8 * 128 + 4 * 64 + 6 * 28672) // 8
    assert per_layer == 281_280_512
    assert data["host"] == pytest.approx(20 * 4 * per_layer / 1e9, rel=1e-12)
    assert data["host_memory"] == pytest.approx(2 * 2**40 / 1e9, rel=1e-12)
    code, out, _ = run(capsys, "memory", *flags)
    assert "22.5 GB per GPU, 180 GB per node of 8, of the node's 2.199 TB: fits" in out
    small = an.Plan(
        an.model("llama3-70b"),
        an.hardware("h100-sxm").replace(host_memory="100 GB"),
        an.Layout(tp=8, pp=4, dp=4, sequence_parallel=True, offload_activations=True),
        seq_len=8192,
        global_batch=64,
    )
    host = next(ln for ln in lines(small) if ln.key == "host")
    assert "the node's 0.1 TB: DOES NOT FIT" in host.label
    assert an.hardware("tpu-v6e").host_memory is None


def test_memory_stages_show_the_host_column_when_offloaded(capsys):
    """4 stages of 8 Llama 3 8B layers, 8 microbatches, full recomputation: stage k offloads 8·(4 −
    k) inputs of 2·4096·4096 bytes; the worst stage on the device is the last, the host figure the
    first's."""
    flags = (
        "--model",
        "llama3-8b",
        "--hardware",
        "h100-sxm",
        "--pp",
        "4",
        "--dp",
        "2",
        "--recompute",
        "full",
        "--seq",
        "4096",
        "--global-batch",
        "16",
        "--stages",
    )
    code, out, _ = run(capsys, "memory", *flags)
    assert code == 0 and out.splitlines()[-5].split()[-2:] == ["total", "fits"]
    code, out, _ = run(capsys, "memory", *flags, "--offload-activations", "--json")
    data = json.loads(out)
    kept = 2 * 4096 * 4096 / 1e9
    assert [s["host"] for s in data["stages"]] == pytest.approx(
        [8 * (4 - k) * kept for k in range(4)], rel=1e-12
    )
    assert data["stage"] == 3 and data["host"] == pytest.approx(32 * kept, rel=1e-12)
    code, out, _ = run(capsys, "memory", *flags, "--offload-activations")
    assert out.splitlines()[-5].split()[-2:] == ["host", "fits"]


def test_memory_with_deepseek_v3s_savers(capsys):
    """DeepSeek-V3's run with its published savers (§3.2.3 recomputation, §3.3.2 FP8 caching) in
    per-tensor FP8 on Megatron-Core (which refuses the layernorm and moe_act modules under delayed
    scaling): a middle rank's layers keep 162,432 bytes a token (tests/test_reference_saved.py)
    where, with Megatron-Core's linears saving their inputs in FP8 (455,296 in BF16 less 70,656
    freed and copied, tests/test_quantized_saved.py), they kept 384,640; the flags reach the
    plan."""
    flags = (
        "--model",
        "deepseek-v3",
        "--hardware",
        "h800",
        "--pp",
        "16",
        "--dp",
        "128",
        "--ep",
        "64",
        "--zero",
        "1",
        "--seq",
        "4096",
        "--global-batch",
        "15360",
        "--dtype",
        "fp8",
        "--fp8-recipe",
        "tensorwise",
    )
    savers = (
        "--recompute",
        "selective",
        "--recompute-modules",
        "layernorm",
        "mla_up_proj",
        "moe_act",
        "--fp8-activations",
    )
    middle = []
    for extra in ((), savers):
        code, out, err = run(capsys, "memory", "--json", "--stages", *flags, *extra)
        assert code == 0, err
        middle.append(json.loads(out)["stages"][7]["activations"])
    ratio = 162432 / (455296 - 7168 - 2048 - 8 * 7168 - 9 * 2048 + 2 * 7168)
    assert middle[1] / middle[0] == pytest.approx(ratio, rel=1e-12)
    code, out, _ = run(
        capsys, "memory", "--json", "--stages", *flags, "--moment-dtype", "bf16", *savers,
        "--first-stage-layers", "3", "--last-stage-layers", "2",
    )
    stages = json.loads(out)["stages"]
    # 3 dense layers on the first stage, 2 on the last, 4 on each other; under 1F1B the second
    # stage's 4 MoE layers with 15 microbatches in flight hold the most
    assert code == 0 and [s["layers"] for s in stages] == [3] + [4] * 14 + [2]
    assert max(stages, key=lambda s: s["total"])["stage"] == 1
    code, out, _ = run(
        capsys, "memory", *flags, *savers, "--first-stage-layers", "3", "--last-stage-layers", "2"
    )
    assert code == 0 and "recompute=selective(layernorm,mla_up_proj,moe_act) fp8_activations" in out


def test_memory_with_offloaded_optimizer(capsys):
    """--offload-optimizer 1: Llama 3 8B on 8 GPUs with ZeRO-1 keeps no optimizer state on the
    device and 16 bytes of each of its 1,003,782,656 parameters (8,030,261,248 / 8) on the host; the
    step says what it leaves untimed; a share outside [0, 1] is refused in one line; search counts
    every layout with it, at the ZeRO stages Megatron's hybrid offload runs (0-2)."""
    flags = (
        "--model",
        "llama3-8b",
        "--hardware",
        "h100-sxm",
        "--gpus",
        "8",
        "--zero",
        "1",
        "--seq",
        "8192",
        "--global-batch",
        "64",
    )
    code, out, _ = run(capsys, "memory", "--json", *flags, "--offload-optimizer", "1")
    data = json.loads(out)
    assert (
        code == 0
        and data["optimizer"] == 0
        and data["host"] == pytest.approx(16 * 1_003_782_656 / 1e9, rel=1e-12)
    )
    code, out, _ = run(capsys, "memory", *flags, "--offload-optimizer", "1")
    assert "offloaded optimizer in host memory: 16.06 GB per GPU, 128.5 GB per node of 8" in out
    code, out, _ = run(capsys, "step", *flags, "--offload-optimizer", "0.5")
    assert code == 0 and "the host's share of the Adam step not timed" in " ".join(out.split())
    code, _, err = run(capsys, "memory", *flags, "--offload-optimizer", "1.5")
    assert (
        code == 2 and err.strip() == "--offload-optimizer: expected a number in [0, 1], got '1.5'"
    )
    code, out, _ = run(
        capsys, "search", *flags[:6], "--seq", "8192", "--global-batch", "64",
        "--offload-optimizer", "1", "--json",
    )
    rows = json.loads(out)["ranked"]
    assert code == 0 and rows and all(r["offload_optimizer"] == 1 and r["zero"] <= 2 for r in rows)


def test_memory_with_the_ends_counted_as_layers(capsys):
    """--ends-as-layers: Llama 3 405B's 8 chunks of a layer a stage, the first stage's first chunk
    only the embedding; the first stage holds 112 layer-microbatches, the second 141 (Megatron's
    interleaved order, as the pipeline simulator counts them), each with a layer's backward
    gradients; a split that does not come out even is refused in one line, and search, which does
    not read the flag, refuses it."""
    flags = (
        "--model",
        "llama3-405b",
        "--hardware",
        "h100-sxm",
        "--tp",
        "8",
        "--pp",
        "16",
        "--dp",
        "64",
        "--zero",
        "2",
        "--seq",
        "8192",
        "--global-batch",
        "2048",
    )
    code, out, err = run(
        capsys, "memory", "--json", "--stages", *flags, "--vpp", "8", "--ends-as-layers"
    )
    assert code == 0, err
    stages = json.loads(out)["stages"]
    # a layer's SwiGLU backward gradients, on every stage but the last
    backward = 2 * 2 * 8192 * 53248 / 8 / 1e9
    assert (stages[1]["activations"] - backward) / (
        stages[0]["activations"] - backward
    ) == pytest.approx(141 / 112, rel=1e-12)
    assert max(stages, key=lambda s: s["total"])["stage"] == 1
    code, _, err = run(capsys, "memory", *flags, "--vpp", "3", "--ends-as-layers")
    assert code == 2 and "ends_as_layers" in err and len(err.strip().splitlines()) == 1
    code, out, err = run(
        capsys, "search", *flags[:4], "--gpus", "8192", *flags[-4:], "--ends-as-layers", "--json"
    )
    rows = json.loads(out)["ranked"]
    assert code == 0 and rows and all(r["ends_as_layers"] for r in rows)
    # 126 layers and the ends: 128 slots, so a power of two of stages × chunks
    assert all(128 % (r["pp"] * r["vpp"]) == 0 and r["pp"] > 1 for r in rows)


def test_outside_bytes_replaces_the_least_measured(capsys):
    """--outside-bytes (Plan's and search's outside_bytes=) is what a process holds outside the
    allocator: with 0 B the source text's headroom is an H100's 81,559 MiB less the count alone, and
    search keeps every layout whose predicted peak (the count times the allocator's reserve, and
    nothing outside) is within the HBM, more than with the least measured (1.86 GB) left free and
    the mean (2.85 GB) in the peak; a duration or a bare number is refused in one line."""
    assert main(["memory", "--outside-bytes", "0 B", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["outside"] == 0 and data["headroom"] == pytest.approx(
        81559 * 2**20 / 1e9 - data["total"], rel=1e-12
    )
    m, hw = an.model("llama3-405b"), an.hardware("h100-sxm")
    kw = dict(gpus=16384, seq_len=8192, batch_tokens=16_777_216, progress=False, top=1)
    bare, least = an.search(m, hw, outside_bytes="0 B", **kw), an.search(m, hw, **kw)
    hbm, memory = hw.hbm.to("byte").magnitude, bare.arrays["memory"]
    reserve = float(an.presets.memory_reserve("pytorch")["reserve"])
    mean = an.presets.memory_outside("pytorch")["outside"].to("byte").magnitude
    assert bare.outside == 0 and bare.fitting == int((memory * reserve <= hbm).sum())
    assert least.outside == (81920 - 17272 - 62875) * 2**20
    assert least.fitting == int(
        ((memory <= hbm - least.outside) & (memory * reserve + mean <= hbm)).sum()
    )
    assert least.fitting < bare.fitting
    for value in ("2 s", "3"):
        assert main(["memory", "--outside-bytes", value]) == 2
        assert len(capsys.readouterr().err.strip().splitlines()) == 1


def _command(*argv, env=None, encoding="utf-8"):
    import os
    import subprocess
    import sys

    return subprocess.run(
        [sys.executable, "-m", "analytic.cli", *argv],
        capture_output=True,
        encoding=encoding,
        env={**os.environ, **(env or {})},
    )


def test_a_full_or_closed_standard_output_is_one_line_and_exit_2():
    """``> /dev/full``: the write fails at the end, said in one line, exit 2; ``>&-``: no reader at
    all, a quiet exit 141 before anything runs (a closed pipe's code, as ``| head`` users
    expect)."""
    import subprocess
    import sys

    with open("/dev/full", "w") as full:
        done = subprocess.run(
            [sys.executable, "-m", "analytic.cli", "formula", "compute.mfu"],
            stdout=full,
            stderr=subprocess.PIPE,
            text=True,
        )
    assert (
        done.returncode == 2
        and done.stderr.strip() == "analytic: cannot write the output: No space left on device"
    )
    closed = subprocess.run(
        [sys.executable, "-m", "analytic.cli", "formula", "compute.mfu"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        pass_fds=(),
        preexec_fn=lambda: __import__("os").close(1),
    )
    assert closed.returncode == 141 and closed.stderr == ""


@pytest.mark.parametrize("encoding", ["ascii", "latin-1"])
def test_an_output_that_cannot_take_the_notation_gets_ascii(encoding):
    """What the stream's encoding lacks (Ψ in both, ≈ and – in Latin-1 too) is written in ASCII."""
    done = _command(
        "formula", "memory.model_states.zero1", env={"PYTHONIOENCODING": encoding},
        encoding=encoding,
    )
    assert done.returncode == 0, done.stderr
    assert (
        "Psi" in done.stdout
        and "Ψ" not in done.stdout
        and (encoding != "ascii" or done.stdout.isascii())
    )
    assert (
        "Ψ"
        in _command(
            "formula", "memory.model_states.zero1", env={"PYTHONIOENCODING": "utf-8"}
        ).stdout
    )


def test_json_has_no_nan():
    from analytic.cli.output import json_text

    text = json_text({"a": float("nan"), "b": [1.0, float("inf")], "c": "x"})
    assert json.loads(text, parse_constant=lambda c: pytest.fail(c)) == {
        "a": None,
        "b": [1.0, None],
        "c": "x",
    }


def test_the_command_line_finishes_its_sentences(capsys):
    """Advice names something the user can type: --allow-cross-node-tp exists and is what the TP
    error names; help lists the presets; calibrate alone lists its modes, and --ranks only with
    --backend and at least 2; without torch, --gemm is one line."""
    import subprocess
    import sys

    flags = (
        "--model llama3-70b --hardware h100-sxm --gpus 16 --tp 16 --seq 4096 --global-batch 16"
    ).split()
    code, out, err = run(capsys, "step", *flags)
    assert code == 2 and "--allow-cross-node-tp" in err
    code, out, err = run(capsys, "step", *flags, "--allow-cross-node-tp")
    assert code == 0 and "predicted step time" in out
    helped = subprocess.run(
        [sys.executable, "-m", "analytic.cli", "step", "--help"], capture_output=True, text=True
    )
    assert all(name in " ".join(helped.stdout.split()) for name in an.models() + an.hardwares())
    code, out, err = run(capsys, "calibrate")
    assert code == 2 and all(mode in err for mode in ("--published", "--gemm", "--backend"))
    code, out, err = run(capsys, "calibrate", "--published", "--ranks", "-1")
    assert code == 2 and "--ranks: read with --backend" in err
    code, out, err = run(capsys, "calibrate", "--backend", "gloo", "--ranks", "1")
    assert code == 2 and "--ranks: a collective needs at least 2 processes, got 1" in err
    no_torch = (
        "import sys; sys.modules['torch'] = None\nfrom analytic.cli.main import main\n"
        "sys.exit(main(['calibrate', '--gemm']))"
    )
    done = subprocess.run([sys.executable, "-c", no_torch], capture_output=True, text=True)
    assert (
        done.returncode == 2
        and len(done.stderr.strip().splitlines()) == 1
        and "[torch]" in done.stderr
    )


def test_a_story_that_does_not_fit_names_the_changes_that_would(capsys):
    """The default story (Llama 3 405B, TP8 PP16 DP64, ZeRO-1 on H100) does not fit; it names the
    least one-setting changes on the same GPUs that do (ZeRO-2, the lowest stage that fits, and full
    recomputation, as selective recomputation saves nothing under FlashAttention), each a plan that
    fits by its own count; ZeRO-1 itself does not."""
    code, out, _ = run(capsys, "step", "--json")
    rows = {r["key"]: r for r in json.loads(out)["lines"]} if code == 0 else {}
    base = an.Plan(
        an.model("llama3-405b"),
        an.hardware("h100-sxm"),
        an.Layout(tp=8, pp=16, dp=64, zero=1, sequence_parallel=True),
        seq_len=8192,
        global_batch=2048,
    )
    assert not base.memory().fits
    named = {k for k in rows if k.startswith("fits_with_")}
    assert named == {"fits_with_zero_2", "fits_with_recompute__full"}
    for key, change in (
        ("fits_with_zero_2", dict(zero=2)),
        ("fits_with_recompute__full", dict(recompute="full")),
    ):
        other = base.replace(layout=base.layout.replace(**change))
        assert other.memory().fits and rows[key]["value"] == pytest.approx(
            other.memory().total.to("GB").magnitude
        )


def test_a_story_line_names_at_most_three_formulas_unless_asked(capsys):
    """Each line shows at most three formula names and how many more; --sources shows every one, and
    the line's sources are the plan's (the bubble's: the compute's formulas and the schedule's)."""
    code, out, _ = run(capsys, "step")
    tags = [line.rsplit("[", 1)[1] for line in entries(out) if line.endswith("]")]
    assert (
        code == 0
        and all(t.count(", ") <= 2 for t in tags)
        and any("more (--sources)" in t for t in tags)
    )
    # the formulas on a row of their own where needed
    assert max(len(row) for row in out.splitlines()) <= 120
    code, out, _ = run(capsys, "step", "--sources")
    bubble = next(line for line in entries(out) if line.strip().startswith("bubble"))
    assert code == 0 and "more (--sources)" not in out and "pipeline.bubble_time.1f1b" in bubble


def test_the_default_story_says_why_the_texts_figures_differ_and_how_the_run_ran(capsys):
    """Where the source text's figure differs from ours, the line says why (the 2-byte gradients it
    counts, its 16·10⁶-token step); and the story gives the run as it ran (Llama 3: interleaved,
    ZeRO-2) with its memory, step and MFU beside the published 0.43, from the validation cases A01
    and A02."""
    code, out, _ = run(capsys, "step", "--json")
    lines = {ln["key"]: ln for ln in json.loads(out)["lines"]}
    assert "2-byte gradients" in lines["gradients"]["text_differs_because"]
    assert "16·10⁶" in lines["steps"]["text_differs_because"] and lines["steps"]["value"] == 929832
    assert lines["tp_message"]["text_differs_because"] == ""  # 268 MB: the same figure
    ran = lines["ran_mfu"]
    plan = an.Plan(
        an.model("llama3-405b"), an.hardware("h100-sxm"), LLAMA3_8192, seq_len=8192,
        global_batch=2048, stack="llama3-meta",
    )
    assert ran["value"] == pytest.approx(float(plan.value("mfu.palm").to("").magnitude), rel=1e-12)
    assert (
        "interleaved, 8 chunks a stage, ZeRO-2" in ran["label"]
        and "as published: 0.43" in ran["label"]
    )
    assert plan.memory_verdict() in ran["label"] and abs(ran["value"] - 0.43) < 0.1


def test_memory_names_the_changes_that_would_fit(capsys):
    """A plan that does not fit: `memory` names the least one-setting changes that fit on the same
    GPUs, each with its memory, verdict and step, as `step` does (text and JSON alike)."""
    code, out, _ = run(capsys, "memory", "--json")
    changes = json.loads(out)["fitting_changes"]
    plan = an.Plan(
        an.model("llama3-405b"),
        an.hardware("h100-sxm"),
        an.Layout(tp=8, pp=16, dp=64, zero=2, sequence_parallel=True),
        seq_len=8192,
        global_batch=2048,
    )
    assert (
        code == 0
        and changes[0]["change"] == "zero=2"
        and changes[0]["total"] == pytest.approx(plan.memory().total.to("GB").magnitude, rel=1e-12)
    )
    code, out, _ = run(capsys, "memory")
    assert code == 0 and f"fits on the same GPUs with zero=2: {changes[0]['total']:.4g} GB" in out
    code, out, _ = run(capsys, "memory", "--zero", "2", "--json")
    assert code == 0 and json.loads(out)["fitting_changes"] == []


class _Terminal(io.StringIO):
    def isatty(self):
        return True


@pytest.mark.parametrize("extra, drawn", [((), True), (("--quiet",), False), (("--json",), False)])
def test_a_search_draws_its_progress_on_a_terminal_unless_quiet(monkeypatch, capsys, extra, drawn):
    """A progress bar on a terminal's stderr (tqdm's), none under --quiet or --json, and none when
    stderr is not a terminal (every other test of this file)."""
    err = _Terminal()
    monkeypatch.setattr(sys, "stderr", err)
    code = main(
        [
            "search",
            "--model",
            "llama3-8b",
            "--hardware",
            "h100-sxm",
            "--gpus",
            "16",
            "--seq",
            "2048",
            "--global-batch",
            "32",
            "--top",
            "1",
            *extra,
        ]
    )
    assert code == 0 and ("layouts" in err.getvalue() and "search" in err.getvalue()) == drawn


def test_validate_draws_its_cases_progress_on_a_terminal(monkeypatch, tmp_path):
    """validate's bar counts the cases it runs (a folder of two identity cases: quick)."""
    (tmp_path / "claims.toml").write_text("")
    (tmp_path / "identities.toml").write_text(
        "\n".join(
            f'[[case]]\nid = "I{i}"\nkind = "identity"\nquantity = "q"\npublished = "{i}"\ncompute'
            f' = "{i}"\nsource = "s"\n'
            for i in (1, 2)
        )
    )
    err = _Terminal()
    monkeypatch.setattr(sys, "stderr", err)
    code = main(["validate", "--cases", str(tmp_path)])
    assert code == 0 and "cases:" in err.getvalue() and "/2 [" in err.getvalue()


def test_the_story_is_the_same_from_expressions_and_from_programs(tmp_path):
    """`step` tells one story whether its plan's numbers come from expressions (a first run), from
    its structure's programs lowered (the second) or read from the cache (the third): the same
    lines, the same numbers to 1e-12; a part the programs leave as rounding of a zero (a one-stage
    pipeline's slowest-stage excess) is no line."""
    import os
    import subprocess

    env = {**os.environ, "ANALYTIC_CACHE": str(tmp_path)}
    argv = [
        sys.executable,
        *(
            "-m analytic.cli step --model llama3-8b --hardware h100-sxm --gpus 16 --tp 2 --seq"
            " 2048 --global-batch 64 --json"
        ).split(),
    ]
    runs = [
        json.loads(
            subprocess.run(argv, env=env, capture_output=True, text=True, check=True).stdout
        )["lines"]
        for _ in range(3)
    ]
    keys = [[line["key"] for line in lines] for lines in runs]
    assert (
        keys[0] == keys[1] == keys[2] and "time_imbalance" not in keys[0] and "time_tp" in keys[0]
    )
    for lines in runs[1:]:
        for got, want in zip(lines, runs[0]):  # numbers to 1e-12, text (a link's kind) exactly
            expected = want["value"]
            if isinstance(expected, (int, float)):
                expected = pytest.approx(expected, rel=1e-12)
            assert got["value"] == expected, got["key"]


def test_the_storys_days_are_its_steps_at_the_predicted_step_and_at_the_mfu_asked():
    """Days of compute: the steps for the run's tokens times the predicted step time (and, asked an
    MFU, times the step at that MFU), by hand from the plan's own step and token counts; wall-clock
    days divide by the goodput."""
    from analytic.cli.story import lines

    plan = an.Plan(
        "llama3-8b", "h100-sxm", an.Layout(tp=2, dp=8), seq_len=4096, global_batch=256,
        training_tokens=1e12,
    )
    by_key = {ln.key: ln.value for ln in lines(plan, mfu=0.4)}
    steps = 1e12 / (256 * 4096)
    step_s = plan.step_time().to("s").magnitude
    assert by_key["steps"] == round(steps)
    assert by_key["days"].to("day").magnitude == pytest.approx(steps * step_s / 86400, rel=1e-12)
    at_mfu = plan.step_time(mfu=0.4).to("s").magnitude
    # the two steps differ, so a days line at the wrong one fails
    assert abs(at_mfu / step_s - 1) > 0.01
    assert by_key["days_mfu"].to("day").magnitude == pytest.approx(
        steps * at_mfu / 86400, rel=1e-12
    )
    goodput = plan.value("goodput").magnitude
    assert by_key["wall_days"].to("day").magnitude == pytest.approx(
        steps * step_s / goodput / 86400, rel=1e-12
    )


def test_solve_smallest_fits_at_the_predicted_peak_unless_told_the_allocators_limit(capsys):
    """Llama 3 405B, TP8 PP16 ZeRO-3: dp 64's count fits but its predicted peak does not (Plan's
    verdict: at the allocator's limit), so `solve smallest` answers the smallest dp whose plan fits,
    names 64 as the one at the limit, and takes it with --at-limit; each answer is
    Plan.memory_verdict's of that dp, and the dp below it that splits the batch does not fit by that
    rule."""
    flags = (
        "--free dp --model llama3-405b --hardware h100-sxm --tp 8 --pp 16 --zero 3 --seq 8192"
        " --global-batch 2048 --json"
    ).split()
    assert main(["solve", "smallest", *flags]) == 0
    fits = json.loads(capsys.readouterr().out)
    assert main(["solve", "smallest", *flags, "--at-limit"]) == 0
    limit = json.loads(capsys.readouterr().out)
    plan = lambda dp: an.Plan(
        "llama3-405b",
        "h100-sxm",
        an.Layout(tp=8, pp=16, dp=dp, zero=3, sequence_parallel=True),  # noqa: E731
        seq_len=8192,
        global_batch=2048,
    )
    assert (fits["value"], fits["verdict"], fits["at_limit_from"]) == (256, "fits", 64)
    assert (limit["value"], limit["verdict"]) == (64, "fits at the allocator's limit")
    assert plan(256).memory_verdict() == "fits" and plan(128).memory_verdict() != "fits"
    assert (
        plan(64).memory_verdict() == "fits at the allocator's limit"
        and plan(32).memory_verdict() == "does not fit"
    )
    assert fits["device_peak_GB"] <= fits["hbm_GB"] < limit["device_peak_GB"]
    assert main(["solve", "smallest", *flags[:-1], "--hbm", "141 GB"]) == 0
    assert (
        capsys.readouterr().out.startswith("dp = 2: fits")
        and plan(2).replace(hbm="141 GB").memory_verdict() == "fits"
    )


def test_a_plan_that_does_not_fit_says_so_first_with_the_layouts_that_do(capsys):
    """`step` and `memory` of Llama 3 70B at TP 8 on 256 H100s (182 GB a GPU): the first line says
    it does not fit, and the layouts that do are search's fastest of the same GPUs, each one that
    Plan finds fitting."""
    flags = (
        "--model llama3-70b --hardware h100-sxm --gpus 256 --tp 8 --seq 8192 --global-batch 512"
    ).split()
    assert main(["step", *flags]) == 0
    assert capsys.readouterr().out.startswith(
        "DOES NOT FIT: 182.1 GB counted per GPU of 85.52 GB HBM\n"
    )
    assert main(["memory", *flags, "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)["fitting_layouts"]
    res = an.search(
        "llama3-70b", "h100-sxm", gpus=256, seq_len=8192, global_batch=512, top=3, progress=False
    )
    assert [r["step_time_s"] for r in listed] == [r.step_time for r in res.ranked] and len(
        listed
    ) == 3
    for r in res.ranked:
        plan = r.plan("llama3-70b", "h100-sxm", seq_len=8192, global_batch=512)
        assert plan.memory_verdict() == "fits"


def test_the_layouts_that_fit_keep_the_plans_options(capsys):
    """Llama 3 70B at TP 8 on 256 H100s in FP8 with BF16 moments, its norms recomputed and its
    weights kept quantized, at its allocator's limit: each layout listed holds the same options,
    and its Plan with them gives the memory and step listed."""
    flags = (
        "--model llama3-70b --hardware h100-sxm --gpus 256 --tp 8 --seq 8192 --global-batch 512"
        " --dtype fp8 --fp8-recipe tensorwise --moment-dtype bf16 --recompute selective"
        " --recompute-modules layernorm --quantized-params --zero 1 --json"
    ).split()
    assert main(["memory", *flags]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["verdict"] == "fits at the allocator's limit" and len(out["fitting_layouts"]) == 3
    for row in out["fitting_layouts"]:
        assert (row["moment_dtype"], row["recompute_modules"], row["quantized_params"]) == (
            "bf16", ["layernorm"], True
        )
        keys = ("tp", "pp", "dp", "cp", "zero", "recompute", "schedule", "sequence_parallel")
        layout = an.Layout(**{k: row[k] for k in keys}, recompute_modules=("layernorm",),
                           quantized_params=True, vpp=row["vpp"])
        plan = an.Plan("llama3-70b", "h100-sxm", layout, seq_len=8192, global_batch=512,
                       microbatch_size=row["microbatch_size"], dtype="fp8", moment_dtype="bf16",
                       fp8_recipe="tensorwise")
        assert plan.memory().total.to("GB").magnitude == pytest.approx(row["memory_GB"], rel=1e-9)
        assert plan.step_time().to("s").magnitude == pytest.approx(row["step_time_s"], rel=1e-9)


def test_step_of_a_model_without_a_layout_takes_searchs_fastest_and_says_so(capsys):
    """`analytic step --model llama3-70b --gpus 256` gave TP 1, PP 1, DP 256, ZeRO-0 (1,457 GB a
    GPU) as if it ran: without layout flags, a default that does not fit gives way to search's
    fastest, named in a note."""
    assert (
        main(
            (
                "step --model llama3-70b --hardware h100-sxm --gpus 256 --seq 8192 --global-batch"
                " 512 --json"
            ).split()
        )
        == 0
    )
    out = json.loads(capsys.readouterr().out)
    best = an.search(
        "llama3-70b", "h100-sxm", gpus=256, seq_len=8192, global_batch=512, top=1, progress=False
    ).best
    lay = best.layout
    assert (
        f"tp={lay.tp} pp={lay.pp} dp={lay.dp} cp={lay.cp}" in out["plan"]
        and f"zero={lay.zero}" in out["plan"]
    )
    assert any(n.startswith("no layout given") for n in out["notes"]) and "verdict" not in out
    total = next(ln["value"] for ln in out["lines"] if ln["key"] == "total")
    assert total == pytest.approx(
        best.plan("llama3-70b", "h100-sxm", seq_len=8192, global_batch=512)
        .memory()
        .total.to("GB")
        .magnitude,
        rel=1e-12,
    )


def test_a_search_in_which_nothing_fits_names_the_closest_and_the_hbm_it_needs(capsys):
    """Llama 3 405B on 8 H100s: no layout fits; the search says which stood closest and the HBM at
    which its plan would fit at its predicted peak (Plan's verdict there 'fits', and 'does not fit'
    or 'at the limit' a tenth below)."""
    flags = "--model llama3-405b --hardware h100-sxm --gpus 8 --seq 8192 --global-batch 64".split()
    assert main(["search", *flags]) == 0
    assert (
        capsys.readouterr()
        .out.strip()
        .splitlines()[-1]
        .startswith("no layout of 8 GPUs fits; the closest")
    )
    assert main(["search", *flags, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    near = out["closest"]
    assert out["fitting"] == 0 and near["verdict"] == "does not fit"
    lay = _layout(near)
    plan = lambda gb: an.Plan(
        "llama3-405b",
        "h100-sxm",
        lay,
        seq_len=8192,
        global_batch=64,  # noqa: E731
        microbatch_size=near["microbatch_size"],
        hbm=f"{gb} GB",
    )
    assert plan(near["needs_hbm_GB"] * 1.001).memory_verdict() == "fits"
    assert plan(near["needs_hbm_GB"] * 0.9).memory_verdict() != "fits"


def test_step_names_its_stack_and_the_step_every_other_stack_of_the_platform_predicts(capsys):
    """The stack and its fitted efficiency lead the story, beside the step the other stacks that run
    on CUDA and run this layout predict; each as a plan of that stack gives it, and a stack of
    another platform (Trainium's) is not among them."""
    flags = (
        "--model llama3-70b --hardware h200 --gpus 256 --tp 8 --zero 1 --seq 8192 --global-batch"
        " 256"
    ).split()
    assert main(["step", *flags]) == 0
    first = entries(capsys.readouterr().out)[:2]
    assert first[0].startswith("stack megatron-core (") and _fitted("megatron-core") in first[0]
    assert (
        first[1].startswith("on the other ") and "stacks of cuda that run this layout" in first[1]
    )
    assert main(["step", *flags, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    others = out["other_stacks_s"]
    assert (
        out["stack"] == "megatron-core"
        and "neuronx-distributed" not in others
        and "megatron-core" not in others
    )
    lay = an.Layout(tp=8, dp=32, zero=1, sequence_parallel=True)
    for name in ("torchtitan-2025", "llama3-meta"):
        plan = an.Plan("llama3-70b", "h200", lay, seq_len=8192, global_batch=256, stack=name)
        assert others[name] == pytest.approx(plan.step_time().to("s").magnitude, rel=1e-12)
    assert (
        f"{min(others.values()):.3g} s" in first[1] and f"{max(others.values()):.3g} s" in first[1]
    )


def test_search_gives_the_step_every_other_stack_predicts_for_its_first_layout(capsys):
    """search names its stack and, for its first layout, the step each other stack of the platform
    predicts, as a plan of that layout on that stack gives it."""
    flags = (
        "--model llama3-8b --hardware h100-sxm --gpus 64 --seq 8192 --batch-tokens 4Mi --top 1"
    ).split()
    assert main(["search", *flags, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    best, others = out["ranked"][0], out["other_stacks_s"]
    lay = _layout(best)
    assert "megatron-core" not in others and "neuronx-distributed" not in others
    for name in ("torchtitan-2025", "deepspeed"):
        plan = an.Plan(
            "llama3-8b", "h100-sxm", lay, seq_len=8192, batch_tokens="4Mi",
            microbatch_size=best["microbatch_size"], stack=name,
        )
        assert others[name] == pytest.approx(plan.step_time().to("s").magnitude, rel=1e-12)
    assert main(["search", *flags]) == 0
    head = capsys.readouterr().out.splitlines()[:2]
    assert head[0].startswith("stack megatron-core (")
    low, high = min(others, key=others.get), max(others, key=others.get)
    assert (
        head[1] == f"on the other {len(others)} stacks of cuda that run layout #1: "
        f"{others[low]:.3g} s ({low}) to {others[high]:.3g} s ({high}), "
        f"against {best['step_time_s']:.3g} s here"
    )


def test_codesign_gives_the_step_other_stacks_predict_for_its_first_points_fastest_layout(capsys):
    """codesign's second line sets the first point's fastest layout of the first model on the other
    stacks of the platform; its step here is the sweep's first row's, and one other stack's as a
    plan of that layout on that stack (and that point's HBM) gives it."""
    flags = (
        "codesign --model llama3-8b --hardware h100-sxm --gpus 64 --seq 8192 --batch-tokens 4Mi"
        " --vary hbm=80GB,141GB --scheduler synchronous"
    ).split()
    assert main([*flags, "--json"]) == 0
    first = json.loads(capsys.readouterr().out)["rows"][0]
    assert main(flags) == 0
    line = entries(capsys.readouterr().out)[1]
    assert line.startswith("on the other ")
    assert "the fastest layout of llama3-8b at point 0: " in line
    assert line.endswith(f"against {first['step_time [s]']:.3g} s here")
    lay = _layout(first)
    hw = an.hardware("h100-sxm").replace(hbm="80 GB")
    ends = re.findall(r"([\d.]+) s \(([\w.-]+)\)", line.replace("- ", "-"))
    assert len(ends) == 2
    for step, name in ends:  # the fastest and the slowest of the other stacks
        plan = an.Plan(
            "llama3-8b", hw, lay, seq_len=8192, batch_tokens="4Mi",
            microbatch_size=first["microbatch_size"], stack=name,
        )
        assert f"{plan.step_time().to('s').magnitude:.3g}" == step


def test_search_gives_days_for_the_tokens_and_codesign_takes_the_layout_flags(capsys):
    """search --tokens: each row's days are its plan's steps for those tokens times its step;
    codesign pins degrees and choices as search does, and its rows are the API's with the same
    pins."""
    flags = (
        "--model llama3-70b --hardware h100-sxm --gpus 512 --seq 8192 --batch-tokens 4Mi --top 2"
        " --json"
    ).split()
    assert main(["search", *flags, "--tokens", "15T"]) == 0
    rows = json.loads(capsys.readouterr().out)["ranked"]
    for r in rows:
        lay = _layout(r)
        plan = an.Plan(
            "llama3-70b", "h100-sxm", lay, seq_len=8192, batch_tokens="4Mi",
            microbatch_size=r["microbatch_size"], training_tokens=15e12,
        )
        days = (plan.step_time() * plan.value("steps").magnitude).to("day").magnitude
        assert r["days"] == pytest.approx(days, rel=1e-9)
    pins = ["--tp", "8", "--pp", "16", "--zero", "1"]
    assert (
        main(
            [
                "codesign",
                "--model",
                "llama3-405b",
                "--hardware",
                "h100-sxm",
                "--gpus",
                "9216",
                "--seq",
                "8192",
                "--global-batch",
                "2304",
                "--vary",
                "scale_up_domain=8,72",
                "--scheduler",
                "synchronous",
                "--quiet",
                "--json",
                *pins,
            ]
        )
        == 0
    )
    got = json.loads(capsys.readouterr().out)["rows"]
    api = an.codesign(
        "llama3-405b", "h100-sxm", 9216, seq_len=8192, global_batch=2304,
        vary={"scale_up_domain": [8, 72]}, scheduler="synchronous", tp=8, pp=16, zero=(1,),
    )
    assert [(r["tp"], r["pp"], r["zero"]) for r in got] == [(8, 16, 1), (8, 16, 1)]
    assert [r["step_time [s]"] for r in got] == list(api["step_time [s]"])


@pytest.mark.parametrize(
    "command",
    [
        ["step"],
        (
            "search --model llama3-8b --hardware h100-sxm --gpus 16 --seq 2048 --global-batch 64"
        ).split(),
    ],
)
def test_a_closed_standard_error_costs_nothing_on_standard_output(command):
    """Run with standard error closed (a shell's 2>&-), a command still prints its answer and exits
    0 (the progress bar's check of the terminal read a stream Python had set to None)."""
    import shlex
    import subprocess

    line = (
        " ".join(shlex.quote(a) for a in [sys.executable, "-m", "analytic.cli", *command]) + " 2>&-"
    )
    done = subprocess.run(["sh", "-c", line], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and len(done.stdout.splitlines()) > 3


def test_search_reads_every_layout_flag_of_step(capsys):
    """--optimizer, --etp, --pipeline-layout, --dispatcher, --recompute-modules, --grad-dtype and
    --ends-as-layers are read by search as by step (each row counted with them); the flags of one
    layout alone are refused."""
    base = (
        "search --hardware h100-sxm --gpus 32 --seq 4096 --global-batch 128 --json --top 2"
    ).split()
    for extra in (
        ["--model", "llama3-8b", "--optimizer", "muon"],
        ["--model", "qwen3-30b-a3b", "--etp", "1"],
        [
            "--model",
            "llama3-8b",
            "--pipeline-layout",
            "Etttt|" + "tttt|" * 6 + "ttttL",
            "--pp",
            "4",
        ],
        ["--model", "qwen3-30b-a3b", "--dispatcher", "allgather", "--expert-capacity", "1.25"],
        ["--model", "llama3-8b", "--recompute-modules", "layernorm", "--grad-dtype", "bf16"],
        ["--model", "llama3-8b", "--ends-as-layers"],
    ):
        assert main([*base, *extra]) == 0, extra
        rows = json.loads(capsys.readouterr().out)["ranked"]
        assert rows, extra
        if "--optimizer" in extra:
            assert all(r["optimizer"] == "muon" and r["zero"] == 1 for r in rows)
        if "--etp" in extra:
            assert all(r["etp"] == 1 for r in rows)
        if "--pp" in extra:
            assert all(r["pp"] == 4 and r["vpp"] == 2 for r in rows)
        if "--dispatcher" in extra:
            assert all(
                r["dispatcher"] == "allgather" and r["expert_capacity"] == 1.25 for r in rows
            )
        if "--ends-as-layers" in extra:  # 32 layers and the two ends: 34 slots, whole chunks
            assert all(r["ends_as_layers"] and r["pp"] == 2 and r["vpp"] == 1 for r in rows)
        if "--recompute-modules" in extra:
            assert all(
                r["recompute"] == "selective" and r["recompute_modules"] == ["layernorm"]
                for r in rows
            )
    # one layout's alone: step's
    for alone in (["--recompute-layers", "4"], ["--no-sp"]):
        assert main([*base, "--model", "llama3-8b", *alone]) == 2


def test_step_with_the_expert_parallel_all_to_alls_overlapped(capsys):
    """--ep-overlap: Layout(ep_overlap=True), the step of the plan's; a layout Megatron-Core refuses
    it for is one line and exit 2; search keeps the layouts Megatron-Core pairs, each with it."""
    flags = ("--model", "qwen3-30b-a3b", "--hardware", "h100-sxm", "--dp", "16", "--ep", "16",
             "--zero", "1", "--seq", "4096", "--global-batch", "64", "--microbatch-size", "1",
             "--stack", "megatron-core")
    plan = an.Plan("qwen3-30b-a3b", "h100-sxm", an.Layout(dp=16, ep=16, zero=1, ep_overlap=True),
                   seq_len=4096, global_batch=64, microbatch_size=1, stack="megatron-core")
    code, out, err = run(capsys, "step", "--json", *flags, "--ep-overlap")
    assert code == 0, err
    assert "ep_overlap" in json.loads(out)["plan"]
    assert _step_time(out) == pytest.approx(plan.step_time().to("s").magnitude)
    code, _, err = run(capsys, "step", *flags, "--ep-overlap", "--recompute", "full")
    assert code == 2 and "ep_overlap" in err and len(err.strip().splitlines()) == 1
    code, out, err = run(capsys, "search", "--json", *flags[:4], "--gpus", "16", *flags[8:],
                         "--ep-overlap")
    rows = json.loads(out)["ranked"]
    assert code == 0 and rows and all(r["ep_overlap"] and r["ep"] > 1 for r in rows), err
