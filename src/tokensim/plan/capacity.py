"""Capacity planning: the cheapest deployments that serve `rate` requests/s within TTFT and TPOT objectives.

Two passes. The planner's vectorized evaluation screens every replica layout (chips, TP/PP/EP/DP, batch, weight and
KV precision) on one engine: a replica whose aggregated-serving TPOT and single-request TTFT already miss the
objectives is dropped; the others get the replicas their static throughput needs at UTILIZATION_TARGET (queueing
needs headroom below saturation), and are ranked by cost (rental $ per hour, else chips). The simulator then decides
near the knee: the cheapest candidates are served at the rate, Poisson arrivals, behind a least-outstanding-requests
router, their running batch capped at the screened batch; from the screened replica count the simulator tries fewer
while the objectives hold, or more (up to MAX_EXTRA_REPLICAS) until they do, and the cheapest that holds them is
the answer.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import numpy as np

from tokensim.deploy.deployment import Deployment, checked_launch
from tokensim.errors import TokensimError, bad_value
from tokensim.perf.context import fusions_on
from tokensim.plan.search import PlanRequest, plan
from tokensim.prediction.serving import LoadSpec, default_scheduler, engine_for, simulate_serving
from tokensim.specs.hardware.spec import HardwareSpec
from tokensim.specs.model.spec import ModelSpec

UTILIZATION_TARGET = 0.8      # screen replicas at 80 % of their static throughput: an M/G/c queue's wait stays short
MAX_EXTRA_REPLICAS = 2
SIMULATED_REQUESTS = 1500
MAX_REPLICAS = 1000           # the largest fleet a plan simulates: its 1,500 requests still reach every replica


@dataclass(frozen=True)
class CapacityRequest:
    model: ModelSpec
    hardware: tuple[HardwareSpec, ...]
    rate_per_s: float
    slo_ttft_s: float                  # on the 99th percentile of TTFT
    slo_tpot_s: float                  # on the mean time per output token
    input_tokens: int = 1024
    output_tokens: int = 256
    engine: str = "vllm"
    engine_version: str | None = None
    fusions: tuple[str, ...] | None = None   # kernel fusions the launch runs, on each chip as far as it has them
    max_chips_per_replica: int = 64
    candidates: int = 4                # how many screened candidates the simulator checks
    requests: int = SIMULATED_REQUESTS
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("rate_per_s", "slo_ttft_s", "slo_tpot_s"):
            v = getattr(self, name)
            if not (isinstance(v, (int, float)) and math.isfinite(v) and v > 0):
                raise bad_value(name, v, "a finite number > 0")
        object.__setattr__(self, "fusions", checked_launch(self.engine, self.engine_version, self.fusions))


@dataclass(frozen=True)
class Candidate:
    hardware: str
    deployment: Deployment             # one replica
    replicas: int
    chips: int
    usd_per_hour: float | None
    static_tpot_s: float
    static_ttft_s: float
    simulated: dict = field(default_factory=dict)   # ttft_p99_s, tpot_mean_s, meets, replicas tried

    def to_dict(self) -> dict:
        d = self.deployment
        return {"hardware": self.hardware, "replicas": self.replicas, "chips": self.chips, "usd_per_hour": self.usd_per_hour,
                "replica": {"tp": d.tp, "pp": d.pp, "ep": d.ep, "attn_dp": d.attn_dp, "batch": d.batch,
                            "weights": d.weights or "checkpoint", "kv": d.kv, "engine": d.engine,
                            "engine_version": d.engine_version, "fusions": list(d.fusions or ())},
                "static_tpot_s": self.static_tpot_s, "static_ttft_s": self.static_ttft_s, **self.simulated}


def screen(req: CapacityRequest) -> list[Candidate]:
    """Every replica layout that could meet the objectives, with the replicas the rate needs, cheapest first; a
    rate that needs more than MAX_REPLICAS of every such layout is refused (the simulator would build that fleet)."""
    preq = PlanRequest(req.model, req.hardware, max_chips=req.max_chips_per_replica, input_tokens=req.input_tokens,
                       output_tokens=req.output_tokens, engine=req.engine, speculative=False, disaggregation=False,
                       engine_version=req.engine_version, fusions=req.fusions)
    result = plan(preq)
    p = result.points
    ok = (p["fits"] & (p["dp"] == 1) & (p["time_per_output_token_s"] <= req.slo_tpot_s) & (p["ttft_s"] <= req.slo_ttft_s))
    hw_by_name = {h.name: h for h in req.hardware}
    seen: set = set()
    out = []
    fewest = math.inf
    for i in np.flatnonzero(ok):
        hw = hw_by_name[str(p["hardware"][i])]
        capacity = float(p["throughput_tokens_per_s"][i]) / req.output_tokens       # requests/s of one replica
        replicas = max(1, math.ceil(req.rate_per_s / (capacity * UTILIZATION_TARGET)))
        fewest = min(fewest, replicas)
        if replicas > MAX_REPLICAS:
            continue
        chips_per_replica = int(p["chips"][i])
        weights = str(p["weights"][i])
        dep = Deployment(tp=int(p["tp"][i]), pp=int(p["pp"][i]), ep=int(p["ep"][i]), attn_dp=int(p["attn_dp"][i]),
                         batch=int(p["batch"][i]), weights=None if weights == "checkpoint" else weights, kv=str(p["kv"][i]),
                         input_tokens=req.input_tokens, output_tokens=req.output_tokens, engine=req.engine,
                         engine_version=req.engine_version, overlap_comm=int(p["ep"][i]) > 1,
                         fusions=fusions_on(hw, req.fusions))
        key = (hw.name, dep, replicas)
        if key in seen:
            continue
        seen.add(key)
        price = hw.price_usd_per_hour * chips_per_replica * replicas if hw.price_usd_per_hour else None
        out.append(Candidate(hw.name, dep, replicas, chips_per_replica * replicas, price,
                             float(p["time_per_output_token_s"][i]), float(p["ttft_s"][i])))
    if not out and fewest < math.inf:
        raise bad_value("rate_per_s", req.rate_per_s, f"at most what {MAX_REPLICAS:,} replicas serve: the fewest replicas of "
                        f"any layout that meets the objectives is {fewest:,.0f} (plan a share of the load and scale it)")
    out.sort(key=lambda c: (c.usd_per_hour if c.usd_per_hour is not None else math.inf, c.chips, -c.deployment.batch))
    return out


def verify(req: CapacityRequest, c: Candidate) -> Candidate:
    """Serve the rate on the candidate in the simulator; add replicas (up to MAX_EXTRA_REPLICAS) until it holds."""
    hw = next(h for h in req.hardware if h.name == c.hardware)
    scheduler = default_scheduler(req.engine, hw, **({"max_num_seqs": c.deployment.batch,
                                                       "max_num_batched_tokens": max(c.deployment.batch, 2048)}
                                                      if req.engine in ("vllm", "default") else {}))
    engine = engine_for(req.model, hw, c.deployment, scheduler=scheduler)
    load = LoadSpec(req.requests, rate_per_s=req.rate_per_s, input_tokens=req.input_tokens,
                    output_tokens=req.output_tokens, seed=req.seed)
    tried: list[dict] = []

    def run(replicas: int) -> bool:
        s = simulate_serving(engine, load, replicas=replicas).summary
        ttft, tpot = s["ttft_s"]["p99"], s["tpot_s"]["mean"]
        meets = ttft is not None and tpot is not None and ttft <= req.slo_ttft_s and tpot <= req.slo_tpot_s
        tried.append({"replicas": replicas, "ttft_p99_s": ttft, "tpot_mean_s": tpot, "meets": meets})
        return meets

    # the knee decides: from the screened count, fewer replicas while the objectives hold, else more until they do
    held = None
    if run(c.replicas):
        held = c.replicas
        while held > 1 and len(tried) <= MAX_EXTRA_REPLICAS and run(held - 1):
            held -= 1
    else:
        for replicas in range(c.replicas + 1, c.replicas + MAX_EXTRA_REPLICAS + 1):
            if run(replicas):
                held = replicas
                break
    if held is None:
        last = tried[-1]
        return replace(c, simulated={"ttft_p99_s": last["ttft_p99_s"], "tpot_mean_s": last["tpot_mean_s"],
                                     "meets": False, "tried": tried})
    final = next(t for t in tried if t["replicas"] == held)
    per_replica = c.chips // c.replicas
    price = (c.usd_per_hour / c.replicas * held) if c.usd_per_hour is not None else None
    return replace(c, replicas=held, chips=per_replica * held, usd_per_hour=price,
                   simulated={"ttft_p99_s": final["ttft_p99_s"], "tpot_mean_s": final["tpot_mean_s"], "meets": True,
                              "tried": tried})


def capacity_plan(req: CapacityRequest, progress=None) -> tuple[Candidate | None, list[Candidate]]:
    """(the cheapest candidate the simulator confirms, every candidate checked)."""
    screened = screen(req)
    if not screened:
        raise TokensimError(f"no replica layout of {req.model.name} on {', '.join(h.name for h in req.hardware)} (up to "
                            f"{req.max_chips_per_replica} chips) meets TPOT <= {req.slo_tpot_s:g} s and TTFT <= "
                            f"{req.slo_ttft_s:g} s even unloaded: loosen an objective or allow more chips per replica")
    checked = []
    for c in screened[:req.candidates]:
        checked.append(verify(req, c))
        if progress:
            progress()
    passing = [c for c in checked if c.simulated.get("meets")]
    best = min(passing, key=lambda c: (c.usd_per_hour if c.usd_per_hour is not None else math.inf, c.chips)) \
        if passing else None
    return best, checked
