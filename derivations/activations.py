"""Activation memory of one transformer layer, tensor by tensor, for the architectures Plan uses."""

import sympy

from analytic.fit.derive import Derivation, S


def derive() -> Derivation:
    d = Derivation(
        "Activations saved for the backward pass",
        "Which tensors does one layer keep, and how many bytes are they?",
    )
    lse, out, qkv, swiglu, head_part, seq_part = _layer(d)
    _op_checkpointing(d, lse, out)
    norms, gelu = _halves(d, lse, out, qkv, swiglu)
    _freed_and_gathered(d, norms, out)
    _korthikanti(d, gelu, head_part, seq_part)
    return d


def _layer(d: Derivation):
    """A layer's activations with a fused attention kernel."""
    s, b, h, a, a_kv, d_h, h_ff, t = S(
        "seq_len", "microbatch_size", "hidden", "heads", "kv_heads", "head_dim", "ffn_hidden", "tp"
    )
    two = 2  # bytes of a 16-bit element
    seq_part = d.step(
        "Inputs of the two norms and of the QKV and MLP matmuls, [s, b, h] each in 16 bits "
        "(replicated over TP unless sequence parallelism splits them)",
        4 * two * s * b * h,
    )
    qkv = d.step(
        "Q, K and V as flash attention saves them (GQA: a_kv key/value heads)",
        two * s * b * (a * d_h + 2 * a_kv * d_h),
    )
    out = d.step("The attention output (input of the output projection)", two * s * b * a * d_h)
    lse = d.step(
        "Flash attention's softmax statistics, one fp32 value per query row and head", 4 * s * b * a
    )
    swiglu = d.step(
        "Fused SwiGLU: the gate and up projections and their product (input of the down"
        " projection)",
        3 * two * s * b * h_ff,
    )
    gelu = d.step("A GELU MLP instead: the fc1 output and the GELU output", 2 * two * s * b * h_ff)
    head_part = qkv + out + lse
    d.check(
        seq_part + (head_part + swiglu) / t,
        "memory.activations.layer_flash_swiglu",
        "Llama-style layer, TP without SP: heads and h_ff split t ways",
    )
    d.check(
        (seq_part + head_part + swiglu) / t, "memory.activations.layer_flash_swiglu_sp", "with SP:"
    )
    d.check(seq_part + (head_part + gelu) / t, "memory.activations.layer_flash_gelu")
    d.check((seq_part + head_part + gelu) / t, "memory.activations.layer_flash_gelu_sp")
    return lse, out, qkv, swiglu, head_part, seq_part


def _op_checkpointing(d: Derivation, lse, out):
    """What TorchTitan's op-level selective checkpointing keeps, eager and compiled."""
    s, b, h, a, a_kv, d_h, h_ff, t = S(
        "seq_len", "microbatch_size", "hidden", "heads", "kv_heads", "head_dim", "ffn_hidden", "tp"
    )
    two = 2  # bytes of a 16-bit element
    d.step(
        "TorchTitan's op-level selective checkpointing saves the outputs of a block's matmuls, of"
        " flash attention and of its reduce-scatters, except every second matmul; a Llama block"
        " runs wq, wk, wv, wo, w1, w3, w2, so wq, wv, w1 and w2 are kept and the norms, K, wo, w3"
        " and the SwiGLU product recomputed"
    )
    block_input = d.step("The block's input, which the checkpoint keeps", two * s * b * h)
    kept = d.step(
        "Q and V (the first and third matmuls), the attention output with its statistics, w1's"
        " output",
        two * s * b * (a * d_h + a_kv * d_h) + out + lse + two * s * b * h_ff,
    )
    w2_out = d.step("w2's output, [s, b, h] before TP's reduction whatever t is", two * s * b * h)
    d.check(
        block_input + w2_out + kept / t,
        "memory.activations.layer_flash_swiglu_op_sac",
        "TP without SP:",
    )
    scattered = d.step(
        "With SP the block input is split t ways and the outputs of the two reduce-scatters (after"
        " wo and w2) are kept as well",
        2 * two * s * b * h / t,
    )
    d.check(
        block_input / t + w2_out + kept / t + scattered,
        "memory.activations.layer_flash_swiglu_op_sac_sp",
    )
    d.step(
        "TorchTitan compiles each checkpointed block (torch.compile after the AC wrapper); the"
        " partitioner saves only what the backward and the recomputation read. Eager checkpointing"
        " caches every saved op's output until the recomputation; the residual sum after w2 reads"
        " w2's output and needs nothing of it backward"
    )
    d.check(
        block_input + kept / t,
        "memory.activations.layer_flash_swiglu_op_sac_compiled",
        "Compiled, TP without SP: w2's output is not kept",
    )
    d.check(
        block_input / t + kept / t + scattered / 2,
        "memory.activations.layer_flash_swiglu_op_sac_compiled_sp",
        "Compiled, with SP: nor is the reduce-scatter after w2; the one after wo is, the recomputed"
        " ffn_norm reads it",
    )


def _halves(d: Derivation, lse, out, qkv, swiglu):
    """A layer as an attention half and an MLP half, for each kind of either."""
    s, b, h, a, a_kv, d_h, h_ff, t = S(
        "seq_len", "microbatch_size", "hidden", "heads", "kv_heads", "head_dim", "ffn_hidden", "tp"
    )
    two = 2  # bytes of a 16-bit element
    d.step(
        "A layer as two halves, for the attention and MLP kinds the whole-layer counts do not"
        " cover; each half keeps its norm's input and output (2 × 2sbh, the sequence part)"
    )
    norms = 2 * two * s * b * h
    gqa = d.step("The GQA attention half", norms + (qkv + out + lse) / t)
    d.check(gqa, "memory.activations.attention_gqa", "TP without SP:")
    d.check((norms + qkv + out + lse) / t, "memory.activations.attention_gqa_sp")
    dense = d.step("The SwiGLU MLP half", norms + swiglu / t)
    d.check(dense, "memory.activations.mlp_swiglu")
    d.check((norms + swiglu) / t, "memory.activations.mlp_swiglu_sp")
    d.check(
        gqa + dense,
        "memory.activations.layer_flash_swiglu",
        "The halves add up to the Llama-style layer:",
    )
    r_q, r_kv, d_r = S("q_lora_rank", "kv_lora_rank", "rope_dim")
    latents = d.step(
        "MLA (DeepSeek-V2 §2.1) compresses queries to r_q and keys/values to r_kv (plus a d_r-wide"
        " RoPE key shared by the heads): the query latent and its norm's output, the key/value"
        " latent with the RoPE key, and its norm's output",
        two * s * b * (2 * r_q + (r_kv + d_r) + r_kv),
    )
    mla_heads = d.step(
        "Q and K of d_h + d_r per head, V of d_h, the attention output and its statistics",
        two * s * b * (2 * a * (d_h + d_r) + a * d_h) + out + lse,
    )
    d.check(norms + latents + mla_heads / t, "memory.activations.attention_mla", "TP without SP:")
    d.check(
        (norms + latents + mla_heads) / t,
        "memory.activations.attention_mla_sp",
        "With SP the latents are split like the sequence part:",
    )
    k, e_s, h_e = S("topk", "shared_experts", "expert_ffn_hidden")
    copies = d.step(
        "An MoE layer dispatches each token to its k experts: the k copies are the experts' matmul "
        "inputs, whole on each TP rank",
        k * two * s * b * h,
    )
    experts = d.step(
        "Gate, up and probability-weighted product of the k routed and E_s shared experts",
        3 * two * s * b * (k + e_s) * h_e,
    )
    d.check(norms + copies + experts / t, "memory.activations.mlp_moe")
    d.check(norms / t + copies + experts / t, "memory.activations.mlp_moe_sp")
    gelu = d.step(
        "An ungated MLP standing as a layer of its own (a hybrid model's '-'): the first matrix's"
        " output and the activation's output",
        2 * two * s * b * h_ff,
    )
    d.check(norms + gelu / t, "memory.activations.mlp_gelu")
    d.check((norms + gelu) / t, "memory.activations.mlp_gelu_sp")
    w_e = S("expert_width")
    wide = d.step(
        "With ungated experts (squared ReLU) each of the k routed and E_s shared experts keeps two"
        " h_e-wide tensors; the k copies are in the experts' width w (LatentMoE's latent size,"
        " or h)",
        2 * two * s * b * (k + e_s) * h_e,
    )
    d.check(norms + k * two * s * b * w_e + wide / t, "memory.activations.mlp_moe_gelu")
    d.check(norms / t + k * two * s * b * w_e + wide / t, "memory.activations.mlp_moe_gelu_sp")
    H_m, P_m, N_m, G_m = S("ssm_heads", "ssm_head_dim", "ssm_state", "ssm_groups")
    zxbcdt = d.step(
        "A Mamba-2 layer's fused kernel (mamba_split_conv1d_scan_combined) saves the input"
        " projection's output z, x, B, C, dt (H·P + (H·P + 2G·N) + H channels) and the scan's"
        " output (H·P), recomputing the convolution; Megatron-Core runs the group norm after the"
        " kernel, which saves its input, the gated output (H·P), and the output projection, which"
        " saves the norm's output (H·P)",
        two * s * b * ((2 * H_m * P_m + 2 * G_m * N_m + H_m) + H_m * P_m + 2 * H_m * P_m),
    )
    d.check(norms + zxbcdt / t, "memory.activations.mamba2")
    d.check((norms + zxbcdt) / t, "memory.activations.mamba2_sp")
    return norms, gelu


def _freed_and_gathered(d: Derivation, norms, out):
    """What the recompute modules free, the head's inputs, SP's gathered copies, older extras."""
    s, b, h, a, a_kv, d_h, h_ff, t = S(
        "seq_len", "microbatch_size", "hidden", "heads", "kv_heads", "head_dim", "ffn_hidden", "tp"
    )
    two = 2  # bytes of a 16-bit element
    r_q, r_kv, d_r = S("q_lora_rank", "kv_lora_rank", "rope_dim")
    k, e_s, h_e = S("topk", "shared_experts", "expert_ffn_hidden")
    d.step(
        "Megatron-Core's recompute modules free outputs and recompute them from saved inputs:"
        " 'layernorm' the two norms' outputs, 'mla_up_proj' the latents' norms' outputs with Q, K"
        " and V, 'moe_act' the routed experts' product"
    )
    d.check(norms, "memory.activations.freed.layernorm")
    d.check(norms / t, "memory.activations.freed.layernorm_sp")
    up = two * s * b * (r_q + r_kv), two * s * b * (2 * a * (d_h + d_r) + a * d_h)
    d.check(up[0] + up[1] / t, "memory.activations.freed.mla_up_proj")
    d.check((up[0] + up[1]) / t, "memory.activations.freed.mla_up_proj_sp")
    d.check(two * s * b * k * h_e / t, "memory.activations.freed.moe_act")
    d.step(
        "'mlp' checkpoints a dense MLP on its input, the norm's output: of its half only the norm's"
        " input and output stay saved, and what the MLP saves inside it, a SwiGLU's gate, up and"
        " product (3 × 2sb·h_ff) or an ungated MLP's two h_ff-wide tensors, split by TP, is freed"
    )
    d.check(3 * two * s * b * h_ff / t, "memory.activations.freed.mlp_swiglu")
    d.check(2 * two * s * b * h_ff / t, "memory.activations.freed.mlp_gelu")
    head = d.step(
        "The last stage's head keeps the final norm's input and the output layer's input (the"
        " norm's output), [s, b, h] each, sequence parts like a layer's norms'",
        2 * two * s * b * h,
    )
    d.check(head, "memory.activations.head_inputs")
    d.check(head / t, "memory.activations.head_inputs_sp")
    d.step(
        "DTensor tensor parallelism (TorchTitan) all-gathers a sequence-parallel norm's output"
        " before the column-parallel matmuls, which save the gathered tensor: each of a layer's two"
        " norm outputs is kept whole instead of split by t, and the final norm's output likewise"
    )
    d.check(2 * two * s * b * h * (1 - 1 / t), "memory.activations.gathered.norm_outputs")
    d.check(
        2 * s * b * h - 2 * two * s * b * h / t,
        "memory.activations.gathered.norm_outputs_fp8",
        "Float8 TP casts them to 1 byte before the gather:",
    )
    d.check(two * s * b * h * (1 - 1 / t), "memory.activations.gathered.output_input")
    d.step(
        "Megatron-LM's model before Megatron-Core keeps three more kinds of tensor in a layer: the"
        " 1-byte masks of its two hidden dropouts, a contiguous [s, b, a·d_h] copy of the attention"
        " output for the output projection (the kernel's [b·s, a, d_h] output is already that"
        " layout when b = 1), and the SiLU's output of its unfused SwiGLU"
    )
    d.check(2 * s * b * h, "memory.activations.legacy.dropout_masks")
    d.check(2 * s * b * h / t, "memory.activations.legacy.dropout_masks_sp")
    d.check(
        sympy.Piecewise((out / t, b > 1), (0, True)),
        "memory.activations.legacy.attention_output_copy",
    )
    d.check(two * s * b * h_ff / t, "memory.activations.legacy.silu_output")


def _korthikanti(d: Derivation, gelu, head_part, seq_part):
    """Korthikanti et al.'s layer, without a fused attention kernel."""
    s, b, h, a, a_kv, d_h, h_ff, t = S(
        "seq_len", "microbatch_size", "hidden", "heads", "kv_heads", "head_dim", "ffn_hidden", "tp"
    )
    gpt = {a_kv: a, d_h: h / a, h_ff: 4 * h, t: 1}
    korthikanti = (
        (seq_part + head_part + gelu).subs(gpt) + 2 * s * b * h + 5 * a * s**2 * b - 4 * s * b * a
    )
    d.step(
        "For a GPT layer without flash attention, add Korthikanti's two 1-byte dropout masks (2sbh)"
        " and the stored scores, softmax and its dropout (5as²b), and drop the fp32 statistics",
        sympy.expand(korthikanti),
    )
    d.check(korthikanti, "memory.activations.layer")
    scores = 5 * a * s**2 * b
    tp_part = d.step(
        "With TP (no SP) the 10sbh of norm inputs, dropout masks and block inputs stay whole and"
        " the rest, scores included, splits t ways",
        10 * s * b * h + (korthikanti - 10 * s * b * h) / t,
    )
    d.check(tp_part, "memory.activations.layer_tp")
    d.check(
        tp_part - scores / t,
        "memory.activations.layer_tp_selective",
        "Selective recomputation drops the stored scores, softmax and its dropout mask",
    )
    d.check(
        (korthikanti - scores) / t,
        "memory.activations.layer_tp_sp_selective",
        "and with SP as well",
    )
    d.check(korthikanti / t, "memory.activations.layer_tp_sp")
