"""A discrete-event simulator of pipeline schedules (plain Python, no torch).

Stages run ops one at a time: F (forward of one microbatch through one model chunk), B (backward
for inputs) and W (backward for weights). An op starts when its stage is free and its inputs are
done; communication is free. GPipe, 1F1B and interleaved 1F1B run in Megatron's fixed op orders
(B and W fused into one full backward); ZB-H1 and ZB-H2 schedule greedily, B before F before W,
with the in-flight limits of Qi et al. (p − i and 2(p − i) − 1 microbatches on stage i).
"""

from __future__ import annotations

from dataclasses import dataclass

SCHEDULES = ("gpipe", "1f1b", "interleaved", "zb-h1", "zb-h2")


@dataclass
class Result:
    makespan: float
    bubble: float  # makespan minus one stage's busy time (equal on every stage)
    peak_in_flight: list  # per stage: most microbatches whose activations are held at once
    peak_layers: (
        list  # per stage: most layer-microbatches held at once (the layers of the chunks in flight)
    )


def _orders(schedule, p, m, v):
    """Fixed per-stage op lists (kind, microbatch, chunk)."""
    orders = []
    for i in range(p):
        if schedule == "gpipe":
            ops = [("F", j, 0) for j in range(m)] + [("BW", j, 0) for j in range(m)]
        elif schedule == "1f1b":
            warm = min(p - i - 1, m)
            ops = [("F", j, 0) for j in range(warm)]
            f, b = warm, 0
            while b < m:
                if f < m:
                    ops.append(("F", f, 0))
                    f += 1
                ops.append(("BW", b, 0))
                b += 1
        else:  # interleaved (Narayanan et al. 2021 §2.2.2, Megatron-LM's order)
            total = m * v

            def fwd(k):
                return ("F", (k // (p * v)) * p + k % p, (k // p) % v)

            def bwd(k):
                return ("BW", (k // (p * v)) * p + k % p, v - 1 - (k // p) % v)

            warm = min((p - i - 1) * 2 + (v - 1) * p, total)
            ops = [fwd(k) for k in range(warm)]
            f, b = warm, 0
            while b < total:
                if f < total:
                    ops.append(fwd(f))
                    f += 1
                ops.append(bwd(b))
                b += 1
        orders.append(ops)
    return orders


def simulate(schedule: str, p: int, m: int, v: int = 1, t_f: float = 1.0, t_b: float = 1.0,
             t_w: float = 1.0, layers=None, work=None) -> Result:
    """Run ``schedule`` on ``p`` stages with ``m`` microbatches (``v`` chunks per stage for the
    interleaved schedule); t_f, t_b, t_w are one microbatch's times on one stage (a chunk takes
    1/v). ``layers`` gives each of the p·v model chunks' layer count, in model order (chunk c of
    stage i is the (c·p + i)-th); None: one each. ``work`` scales each chunk's op times likewise (a
    stage with more layers, or the output layer, takes longer); None: 1 each."""
    if schedule not in SCHEDULES:
        raise ValueError(f"schedule: expected one of {SCHEDULES}, got {schedule!r}")
    if schedule == "interleaved" and m % p:
        raise ValueError("interleaved 1F1B needs m to be a multiple of p")
    v = v if schedule == "interleaved" else 1
    layers = [1] * (p * v) if layers is None else list(layers)
    if len(layers) != p * v:
        raise ValueError(f"layers: expected {p * v} chunks' layer counts, got {len(layers)}")
    work = [1.0] * (p * v) if work is None else [float(w) for w in work]
    if len(work) != p * v:
        raise ValueError(f"work: expected {p * v} chunks' factors, got {len(work)}")
    sim = _Simulation(
        p, v, {"F": t_f / v, "B": t_b / v, "W": t_w / v, "BW": (t_b + t_w) / v}, layers, work
    )
    if schedule in ("gpipe", "1f1b", "interleaved"):
        sim.fixed(_orders(schedule, p, m, v))
    else:
        sim.greedy(m, [(p - i) if schedule == "zb-h1" else 2 * (p - i) - 1 for i in range(p)])
    makespan = max(sim.free)
    busy = m * (t_f + t_b + t_w)
    return Result(makespan, makespan - busy, [pk / v for pk in sim.peak], sim.peak_layers)


class _Simulation:
    """The stages' state as ops run: when each op ended, when each stage is free, and the
    microbatches and layer-microbatches each holds (and their peaks)."""

    def __init__(self, p: int, v: int, dur: dict, layers: list, work: list):
        self.p, self.dur, self.layers, self.work = p, dur, layers, work
        self.last = p * v - 1
        self.done: dict = {}
        self.free = [0.0] * p
        self.held, self.peak = [0] * p, [0] * p
        self.held_layers, self.peak_layers = [0] * p, [0] * p

    def vs(self, i, c):
        """The model-order index of chunk ``c`` of stage ``i``."""
        return c * self.p + i

    def ready(self, kind, j, i, c):
        """When op ``kind`` of microbatch ``j`` on chunk ``c`` of stage ``i`` may start (None: not
        yet)."""
        p, done, s = self.p, self.done, self.vs(i, c)
        if kind == "F":
            if s == 0:
                return 0.0
            return done.get(("F", j, (s - 1) % p, (s - 1) // p))
        if kind in ("B", "BW"):
            own = done.get(("F", j, i, c))
            if own is None:
                return None
            if s == self.last:
                return own
            up = done.get(("B", j, (s + 1) % p, (s + 1) // p))
            return None if up is None else max(own, up)
        return done.get(("B", j, i, c))  # W after B

    def run(self, i, kind, j, c, start):
        s = self.vs(i, c)
        end = start + self.dur[kind] * self.work[s]
        self.free[i] = end
        self.done[(kind, j, i, c)] = end
        if kind == "BW":
            self.done[("B", j, i, c)] = self.done[("W", j, i, c)] = end
        if kind == "F":
            self.held[i] += 1
            self.peak[i] = max(self.peak[i], self.held[i])
            self.held_layers[i] += self.layers[s]
            self.peak_layers[i] = max(self.peak_layers[i], self.held_layers[i])
        if kind in ("B", "BW"):
            self.held[i] -= 1
            self.held_layers[i] -= self.layers[s]

    def fixed(self, orders: list) -> None:
        """Each stage runs its op list in order, an op as soon as its stage is free and its inputs
        done."""
        pos = [0] * self.p
        remaining = sum(len(o) for o in orders)
        while remaining:
            progressed = False
            for i in range(self.p):
                while pos[i] < len(orders[i]):
                    kind, j, c = orders[i][pos[i]]
                    t = self.ready(kind, j, i, c)
                    if t is None:
                        break
                    self.run(i, kind, j, c, max(self.free[i], t))
                    pos[i] += 1
                    remaining -= 1
                    progressed = True
            if not progressed:
                raise RuntimeError("schedule deadlocked")

    def greedy(self, m: int, limit: list) -> None:
        """Zero-bubble scheduling: the earliest op that can start runs next, B before F before W, a
        stage taking a new forward only below its in-flight ``limit``."""
        todo = [
            {(kind, j): None for kind in ("F", "B", "W") for j in range(m)} for _ in range(self.p)
        ]
        prio = {"B": 0, "F": 1, "W": 2}
        while any(todo):
            best = None
            for i in range(self.p):
                for kind, j in todo[i]:
                    if kind == "F" and self.held[i] >= limit[i]:
                        continue
                    t = self.ready(kind, j, i, 0)
                    if t is None:
                        continue
                    key = (max(self.free[i], t), prio[kind], j, i)
                    if best is None or key < best[0]:
                        best = (key, i, kind, j)
            if best is None:
                raise RuntimeError("schedule deadlocked")
            (start, _, _, _), i, kind, j = best
            self.run(i, kind, j, 0, start)
            del todo[i][(kind, j)]
