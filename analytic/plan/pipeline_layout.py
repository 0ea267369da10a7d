"""Megatron-Core's pipeline layouts (``--pipeline-model-parallel-layout``, ``pipeline_layout=``):
which layers each model chunk holds, in its grammar. ``E`` the embedding, ``t`` a transformer layer,
``m`` an MTP block, ``L`` the loss with the output layer; ``|`` ends a chunk; ``(...)*n`` and
``x*n`` repeat; commas are cosmetic. Chunk i runs on pipeline rank i mod pp as its virtual stage i
div pp (NVIDIA/Megatron-LM megatron/core/transformer/pipeline_parallel_layer_layout.py,
parse_str_to_list and __init__)."""

from __future__ import annotations

import re

from ..core.errors import LayoutError

#: characters a layout may hold before its repetitions are unrolled, and chunks after
MAX_TEXT, MAX_CHUNKS = 10_000, 100_000
_REPEATS = (re.compile(r"\(([^)]+)\)\*(\d+)", re.ASCII), re.compile(r"(.)\*(\d+)", re.ASCII))


def chunks(text) -> list[str]:
    """The layout's chunks as strings of E, t, m and L, in Megatron's order (repetitions
    unrolled)."""
    if not isinstance(text, str) or not text.strip() or len(text) > MAX_TEXT:
        raise LayoutError(
            "pipeline_layout: expected Megatron-Core's layout text such as 'Et|(tt|)*30mL' (at"
            f" most {MAX_TEXT:,} characters), got {text!r:.80}"
        )
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
            "transformer layer, m MTP block, L loss, | between chunks, (...)*n and x*n repeats)"
        )
    return unrolled.split("|")


def stage_layers(parts: list[str], pp: int, vpp: int) -> tuple[int, int, int]:
    """(first, middle, last) pipeline ranks' transformer layers of a layout of ``pp`` × ``vpp``
    chunks, Megatron-Core's checks of it applied, and the model's: the embedding first, the loss
    last, each once; MTP blocks after the layers, all in the last chunk of the last rank; the middle
    ranks alike."""
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
    ranks = [sum(parts[v * pp + r].count("t") for v in range(vpp)) for r in range(pp)]
    middle = set(ranks[1:-1])
    if len(middle) > 1:
        raise LayoutError(
            f"pipeline_layout: the middle stages hold {', '.join(map(str, ranks[1:-1]))} layers; "
            "stages other than the first and the last are counted alike"
        )
    return ranks[0], middle.pop() if middle else ranks[0], ranks[-1]


def layer_counts(text) -> tuple[int, int]:
    """(transformer layers, MTP blocks) the layout places."""
    flat = "".join(chunks(text))
    return flat.count("t"), flat.count("m")
