"""How a pipeline splits the model over its stages: each stage's layer count
(:func:`stage_layers`), and which layers of a hybrid model's pattern each holds, as Megatron-Core
places them (NVIDIA/Megatron-LM megatron/core/models/hybrid/hybrid_layer_allocation.py,
select_pipeline_segment): stage k holds the pattern's characters from its first layer on, in order,
or the segments a layout with '|' marks gives it, and the last stage also the MTP modules'
attention and FFN layers. A hybrid model's stages are placed where the pipeline degree is a number;
with pp a symbol a stage holds the pattern's mean layer."""

from __future__ import annotations

from itertools import accumulate

from ..core.algebra import Eq, Max, Min, Piecewise, ceiling
from ..core.terms import ratio
from ..core.values import is_number
from .inputs import Inputs
from .pipeline_layout import by_rank, chunks

#: the pattern's kinds of layer: attention, dense MLP, MoE, Mamba-2
KINDS = ("*", "-", "E", "M")


def stage_layers(inp: Inputs, layers=None) -> tuple:
    """(first, middle, last) stages' layer counts of the model's ``layers`` (default: its count):
    a pipeline layout's (the fullest middle stage's), the layout's uneven split (with the ends
    counted as layers, (L + 2)/p a stage, the two ends a layer fewer), or ⌈L/p⌉ each (where p
    does not divide L some stage holds that many, and the stages are counted as the fullest)."""
    lay = inp.deg
    layers = inp.model.layers if layers is None else layers
    own = laid(inp)
    if own is not None and len(own[0]) > 2:  # the fullest middle stage
        return own[0][0], max(own[0][1:-1]), own[0][-1]
    if inp.layout.ends_as_layers:
        per = ratio(layers + 2, lay.pp)
        return per - 1, per, per - 1
    first, last = inp.layout.first_stage_layers, inp.layout.last_stage_layers
    given = [x for x in (first, last) if x is not None]
    rest = lay.pp - len(given)
    if is_number(rest) and rest == 0:  # two stages, both given: no middle one
        return first, 0, last
    middle = ceiling(ratio(layers - sum(given), rest))
    return (middle if first is None else first, middle, middle if last is None else last)


def laid(inp: Inputs) -> tuple[list[int], list[int]] | None:
    """A transformer's pipeline layout, stage by stage, first to last: (its layers, the dense ones
    among them: the model's first ``dense_layers`` in the layout's order); None without a layout,
    or for a hybrid model (:func:`held`)."""
    m = inp.model
    if inp.layout.pipeline_layout is None or m.is_hybrid:
        return None
    sizes = _chunk_layers(inp)
    dense = sizes
    if m.is_moe:
        starts = accumulate(sizes, initial=0)
        dense = [
            Max(0, Min(m.dense_layers - s, n, decide=True), decide=True)
            for s, n in zip(starts, sizes)
        ]
    pp = int(inp.deg.pp)
    return [sum(own) for own in by_rank(sizes, pp)], [sum(own) for own in by_rank(dense, pp)]


def _chunk_layers(inp: Inputs) -> list[int]:
    """Layers of each of the pipeline layout's chunks, in Megatron's order: a transformer's ``t``,
    a hybrid pattern's characters."""
    hybrid = inp.model.is_hybrid
    return [len(c) if hybrid else c.count("t") for c in chunks(inp.layout.pipeline_layout)]


def placed(inp: Inputs) -> bool:
    """Whether ``inp``'s stages hold their own layers: a hybrid model on a numeric pipeline."""
    return inp.model.is_hybrid and is_number(inp.deg.pp)


def held(inp: Inputs) -> list[str]:
    """A hybrid model's layers on each stage, first to last, as the pattern's characters: segments
    v·pp + r of a layout with '|' marks on rank r, else :func:`stage_layers`'s counts of the
    pattern in order."""
    pp, pattern, text = int(inp.deg.pp), inp.model.layer_pattern, inp.layout.pipeline_layout
    if text is not None:
        return ["".join(own) for own in by_rank(chunks(text), pp)]
    counts = stage_counts(inp, len(pattern))
    return [pattern[sum(counts[:j]) : sum(counts[: j + 1])] for j in range(pp)]


def stage_counts(inp: Inputs, layers=None) -> list[int]:
    """:func:`stage_layers` for each stage of a numeric pipeline, first to last (a pipeline
    layout's own)."""
    own = laid(inp)
    if own is not None:
        return own[0]
    first, middle, last = (int(n) for n in stage_layers(inp, layers))
    pp = int(inp.deg.pp)
    return [first] if pp == 1 else [first, *[middle] * (pp - 2), last]


def table(inp: Inputs, mtp: bool = True) -> list[dict]:
    """kind → layers of it, for each stage first to last; the MTP modules' on the last where
    ``mtp``."""
    m, stages = inp.model, held(inp)
    rows = [{c: layers.count(c) for c in KINDS} for layers in stages]
    if mtp and m.mtp_modules:
        rows[-1]["*"] += m.mtp_modules
        rows[-1]["E" if m.is_moe else "-"] += m.mtp_modules
    return rows


def stage_kinds(inp: Inputs, k, mtp: bool = True) -> dict:
    """kind → layers of it on stage ``k`` (a number, or a term over the stages), the MTP modules'
    on the last where ``mtp``."""
    rows = table(inp, mtp)
    return {c: by_stage(k, [row[c] for row in rows]) for c in KINDS}


def chunk_blocks(inp: Inputs) -> list[list[int]] | None:
    """Blocks of each of stage k's chunks, first to last, for each stage: the layers a pipeline
    layout places in chunk v·pp + k (a transformer's ``t``, a hybrid pattern's characters), the
    MTP modules' blocks in the last stage's last chunk; None without a layout on a numeric
    pipeline."""
    lay = inp.deg
    if inp.layout.pipeline_layout is None or not (is_number(lay.pp) and is_number(lay.vpp)):
        return None
    rows = by_rank(_chunk_layers(inp), int(lay.pp))
    rows[-1][-1] += inp.model.mtp_layers
    return rows


def by_stage(k, values: list):
    """The value of stage ``k`` (a number or a term) of ``values``, one a stage: a number where
    all agree."""
    if is_number(k):
        return values[int(k)]
    if len(set(values)) == 1:
        return values[0]
    return Piecewise(*((v, Eq(k, j)) for j, v in enumerate(values[:-1])), (values[-1], True))


__all__ = [
    "KINDS", "by_stage", "chunk_blocks", "held", "laid", "placed", "stage_counts", "stage_kinds",
    "stage_layers", "table",
]
