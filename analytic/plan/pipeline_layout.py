"""Megatron-Core's pipeline layouts (``--pipeline-model-parallel-layout``, ``pipeline_layout=``):
which layers each model chunk holds, in its grammar. ``E`` the embedding, ``t`` a transformer layer,
``m`` an MTP block, ``L`` the loss with the output layer; ``|`` ends a chunk; ``(...)*n`` and
``x*n`` repeat; commas are cosmetic. Chunk i runs on pipeline rank i mod pp as its virtual stage i
div pp (NVIDIA/Megatron-LM megatron/core/transformer/pipeline_parallel_layer_layout.py,
parse_str_to_list and __init__).

A hybrid model's layout is its pattern with ``|`` between the chunks, as Megatron-Core's
``--hybrid-layer-pattern`` marks them (megatron/core/models/hybrid/hybrid_layer_allocation.py,
select_pipeline_segment: segment v·pp + r on rank r as its virtual stage v): ``M`` Mamba-2, ``*``
attention, ``-`` MLP, ``E`` MoE, no repetition. A layout without the loss (``L``), a transformer
layer (``t``), a repetition or a digit is read so; the two grammars share no valid text."""

from __future__ import annotations

import re

from ..core.errors import LayoutError

#: characters a layout may hold before its repetitions are unrolled, and chunks after
MAX_TEXT, MAX_CHUNKS = 10_000, 100_000
_REPEATS = (re.compile(r"\(([^)]+)\)\*(\d+)", re.ASCII), re.compile(r"(.)\*(\d+)", re.ASCII))


#: a hybrid pattern's layers (presets.model's kinds)
HYBRID_LAYERS = "M*-E"


def is_hybrid(text: str) -> bool:
    """Whether layout ``text`` is a hybrid pattern with stage marks: no loss, transformer layer,
    repetition or digit."""
    return not any(c in text for c in "Lt()0123456789")


def chunks(text) -> list[str]:
    """The layout's chunks, in Megatron's order: strings of E, t, m and L (repetitions unrolled), or
    a hybrid pattern's segments."""
    if not isinstance(text, str) or not text.strip() or len(text) > MAX_TEXT:
        raise LayoutError(
            "pipeline_layout: expected Megatron-Core's layout text such as 'Et|(tt|)*30mL', or a"
            f" hybrid pattern with '|' between stages (at most {MAX_TEXT:,} characters), got"
            f" {text!r:.80}"
        )
    if is_hybrid(text):
        bad = sorted(set(text) - set(HYBRID_LAYERS + "|"))
        if bad:
            raise LayoutError(
                f"pipeline_layout: {bad[0]!r} is no layer of a hybrid pattern (M Mamba-2, *"
                " attention, - MLP, E MoE, | between chunks); Megatron-Core's layout grammar ends"
                " with the loss (L)"
            )
        return text.split("|")
    unrolled = text.replace(",", "").replace(" ", "")
    for pattern in _REPEATS:
        size = len(unrolled) + sum(
            len(m.group(1)) * int(m.group(2)) for m in pattern.finditer(unrolled)
        )
        if size > MAX_CHUNKS * 8:
            raise LayoutError(f"pipeline_layout: unrolls past {MAX_CHUNKS * 8:,} characters")
        unrolled = pattern.sub(lambda m: m.group(1) * int(m.group(2)), unrolled)
    bad = sorted(set(unrolled) - set("EtmL|"))
    if bad:
        raise LayoutError(
            f"pipeline_layout: {bad[0]!r} is no layer of Megatron-Core's layout (E embedding, t "
            "transformer layer, m MTP block, L loss, | between chunks, (...)*n and x*n repeats);"
            " a hybrid pattern with '|' marks holds no t, L, digit or parenthesis"
        )
    return unrolled.split("|")


def by_rank(parts: list, pp: int) -> list[list]:
    """Each of ``pp`` pipeline ranks' chunks of ``parts``, first to last: chunk i on rank i mod pp
    as its virtual stage i div pp."""
    return [parts[r::pp] for r in range(pp)]


def rank_layers(parts: list[str], pp: int, vpp: int) -> list[int]:
    """Each pipeline rank's transformer layers, first to last, of a layout of ``pp`` × ``vpp``
    chunks, Megatron-Core's checks of it applied, and the model's: the embedding first, the loss
    last, each once; MTP blocks after the layers, all in the last chunk of the last rank."""
    if len(parts) != pp * vpp:
        raise LayoutError(
            f"pipeline_layout: {len(parts)} chunks, not pp {pp} × vpp {vpp} = {pp * vpp}"
        )
    flat = "".join(parts)
    if not (
        flat.startswith("E")
        and flat.endswith("L")
        and flat.count("E") == 1
        and flat.count("L") == 1
    ):
        raise LayoutError(
            "pipeline_layout: the embedding (E) comes first and the loss (L) last, each once"
        )
    if "m" in flat and ("t" in flat[flat.index("m") :] or flat.count("m") != parts[-1].count("m")):
        raise LayoutError(
            "pipeline_layout: the MTP blocks (m) come after every layer, together in the last chunk"
            " of the last stage (Megatron-Core's standalone MTP stage on another rank is not"
            " modelled)"
        )
    return [sum(c.count("t") for c in own) for own in by_rank(parts, pp)]


def layer_counts(text) -> tuple[int, int]:
    """(transformer layers, MTP blocks) the layout places."""
    flat = "".join(chunks(text))
    return flat.count("t"), flat.count("m")
