"""The source text's formula-level numbers, computed through the catalogue and presets.
Tolerances follow the text's rounding (stated per test)."""

import pytest

import analytic as an

f = an.formula
H100 = an.hardware("h100-sxm")


def test_s02_model_states_of_405b():
    assert f("memory.model_states.zero0").evaluate(params=405e9).to(
        "TB"
    ).magnitude == pytest.approx(6.48, rel=1e-12)


def test_s05_one_h100_years():
    t = f("compute.train_time").evaluate(
        flops="3.8e25 FLOP", gpus=1, peak_flops=H100.peak_flops("bf16"), mfu=0.4
    )
    assert t.to("year").magnitude == pytest.approx(3043, abs=0.5)  # printed as an integer


def test_s16_deepseek_throughput():
    c = f("compute.training_flops").evaluate(params=37e9, tokens=1e12)
    tput = f("compute.achieved_flops").evaluate(flops=c, step_time="180e3 hour", gpus=1)
    assert tput.to("TFLOP/s").magnitude == pytest.approx(342.6, abs=0.05)
    h800 = an.hardware("h800")
    mfu = f("compute.mfu")
    assert mfu.evaluate(
        flops=c, step_time="180e3 hour", gpus=1, peak_flops=h800.peak_flops("bf16")
    ).magnitude == pytest.approx(0.346, abs=5e-4)
    assert mfu.evaluate(
        flops=c, step_time="180e3 hour", gpus=1, peak_flops=h800.peak_flops("fp8")
    ).magnitude == pytest.approx(0.173, abs=5e-4)


def test_s21_tp_message():
    b = f("parallelism.tp.allreduce_bytes").evaluate(
        seq_len=8192, microbatch_size=1, hidden=16384, element_bytes="2 byte"
    )
    assert b.to("MB").magnitude == pytest.approx(268.4, abs=0.05)


def test_s23_stage_output_over_nic():
    t = f("collectives.broadcast.time").evaluate(
        message="268.435456 MB", ranks=2, bandwidth=H100.scale_out_bandwidth, latency="0 s"
    )
    assert t.to("ms").magnitude == pytest.approx(5.37, abs=0.005)


def test_s24_logits():
    b = f("memory.logits").evaluate(
        seq_len=8192, microbatch_size=1, vocab=128256, element_bytes="2 byte"
    )
    assert b.to("GB").magnitude == pytest.approx(2.10, abs=0.005)


def test_s25_dp_traffic_and_time():
    kw = dict(message="6.3 GB", ranks=64)
    sent = f("collectives.all_reduce.bytes_sent").evaluate(**kw)
    assert sent.to("GB").magnitude == pytest.approx(12.40, abs=0.005)
    t = f("collectives.all_reduce.time").evaluate(**kw, bandwidth="50 GB/s", latency="0 s")
    assert t.to("s").magnitude == pytest.approx(0.248, abs=0.0005)


def test_s27_step_time_with_text_inputs():
    c = f("compute.training_flops").evaluate(params=405e9, tokens=16e6)
    assert c.magnitude == pytest.approx(3.888e19, rel=1e-12)
    t = f("compute.train_time").evaluate(
        flops=c, gpus=8192, peak_flops=H100.peak_flops("bf16"), mfu=0.4
    )
    assert t.to("s").magnitude == pytest.approx(11.99, abs=0.005)


def test_s28_steps():
    assert f("compute.steps").evaluate(tokens=15.6e12, batch_tokens=16e6).magnitude == 975_000


def test_s29_larger_clusters():
    c = f("compute.training_flops").evaluate(params=405e9, tokens=16e6)
    t16k = f("compute.train_time").evaluate(flops=c, gpus=16384, peak_flops="400 TFLOP/s", mfu=1)
    assert t16k.to("s").magnitude == pytest.approx(5.93, abs=0.005)
    tb200 = f("compute.train_time").evaluate(
        flops=c, gpus=8000, peak_flops=an.hardware("b200").peak_flops("bf16"), mfu=0.4
    )
    assert tb200.to("s").magnitude == pytest.approx(5.40, abs=0.005)
