"""A deployment: how a model is laid on chips, at which precisions, serving which batch.

Built and checked once; everything that depends on the model too is checked in `resolve` (plan.py).
"""
from __future__ import annotations

from dataclasses import dataclass

from tokensim.errors import bad_value, require
from tokensim.perf.engines import FUSIONS, canonical_engine, engine_profiles, parse_release
from tokensim.specs.precision import COMPUTE_ORDER, get_precision

# Bounds on what a library caller may ask for (files are bounded by tokensim.inputs): far beyond any real deployment,
# low enough that no computation on them runs away.
MAX_DEGREE = 65_536          # chips along one parallel dimension
MAX_BATCH = 100_000_000      # concurrent sequences
MAX_TOKENS = 2**31 - 1       # tokens of one sequence


@dataclass(frozen=True)
class SpecDecode:
    """Speculative decoding: `draft_tokens` proposed per step, accepted with `acceptance` (one rate or per position)."""

    method: str = "mtp"                      # "mtp" / "eagle" (heads on the target) or "draft" (a separate model)
    draft_tokens: int = 1                    # k
    acceptance: tuple[float, ...] = (0.8,)   # a, or a_1..a_k per position
    draft_model: str | None = None           # catalog name or config path, for method "draft"

    def __post_init__(self) -> None:
        require(self.method in ("mtp", "eagle", "draft"), "spec.method", self.method, '"mtp", "eagle" or "draft"')
        require(self.draft_tokens >= 1, "spec.draft_tokens", self.draft_tokens, "an integer >= 1")
        require(len(self.acceptance) in (1, self.draft_tokens), "spec.acceptance", self.acceptance,
                f"one rate or {self.draft_tokens} per-position rates")
        for a in self.acceptance:
            require(0.0 <= a < 1.0, "spec.acceptance", a, "a rate in [0, 1)")
        require(self.method != "draft" or bool(self.draft_model), "spec.draft_model", self.draft_model,
                "a model name or config path when method is draft")

    def rates(self) -> tuple[float, ...]:
        return self.acceptance * self.draft_tokens if len(self.acceptance) == 1 else self.acceptance

    @property
    def expected_tokens_per_step(self) -> float:
        """1 + sum_i prod_{j<=i} a_j; with one rate a this is (1 - a^(k+1)) / (1 - a) (Leviathan et al. 2023)."""
        total, run = 1.0, 1.0
        for a in self.rates():
            run *= a
            total += run
        return total


@dataclass(frozen=True)
class Deployment:
    tp: int = 1
    pp: int = 1
    ep: int = 1
    dp: int = 1                         # independent replicas (each holds every weight)
    attn_dp: int = 1                    # attention data-parallel ranks inside a replica (SGLang --enable-dp-attention)
    redundant_experts: int = 0          # extra expert slots so that ep divides them (DeepSeek: 32 at EP144)
    stage_layers: tuple[int, ...] | None = None   # layers per pipeline stage, in order; None splits evenly
    weights: str | None = None          # stored precision of every linear weight (embedding/LM head keep the model's)
    expert_weights: str | None = None   # stored precision of routed experts only (wins over `weights`)
    compute: str | None = None          # compute format; None: the weights' native format if the chip has it, else bf16
    kv: str = "bf16"
    batch: int = 1                      # concurrent sequences over the whole deployment
    input_tokens: int = 1024
    output_tokens: int = 256
    engine: str = "default"
    engine_version: str | None = None   # the engine's release ('0.6.1'); its traits (data/engines releases) may change a step
    spec: SpecDecode | None = None
    micro_batches: int | None = None    # pipeline micro-batches in flight; None: min(pp, batch)
    overlap_comm: bool = False          # EP/AFD communication hidden behind compute (two-micro-batch overlap)
    fusions: tuple[str, ...] | None = None   # kernel fusions the launch runs (perf.engines.FUSIONS); None or (): none

    def __post_init__(self) -> None:
        for name in ("tp", "pp", "ep", "dp", "attn_dp"):
            v = getattr(self, name)
            require(isinstance(v, int) and not isinstance(v, bool) and 1 <= v <= MAX_DEGREE, name, v,
                    f"an integer from 1 to {MAX_DEGREE:,}")
        require(isinstance(self.batch, int) and not isinstance(self.batch, bool) and 1 <= self.batch <= MAX_BATCH,
                "batch", self.batch, f"an integer from 1 to {MAX_BATCH:,}")
        for name in ("input_tokens", "output_tokens"):
            v = getattr(self, name)
            require(isinstance(v, int) and not isinstance(v, bool) and 1 <= v <= MAX_TOKENS, name, v,
                    f"an integer from 1 to {MAX_TOKENS:,}")
        engine = canonical_engine(self.engine) if isinstance(self.engine, str) else None
        require(engine is not None, "engine", self.engine, f"one of {', '.join(sorted(engine_profiles()))} (tokensim engines)")
        object.__setattr__(self, "engine", engine)       # one spelling per engine ("vLLM", "vllm-openai" -> "vllm")
        require(self.engine_version is None or isinstance(self.engine_version, str)
                and parse_release(self.engine_version) is not None, "engine_version", self.engine_version,
                "a release number such as 0.6.1 or 1.2.0rc3")
        for name in ("weights", "expert_weights"):
            if getattr(self, name) is not None:
                get_precision(getattr(self, name), name)
        get_precision(self.kv, "kv")
        require(self.compute is None or self.compute in COMPUTE_ORDER, "compute", self.compute, f"one of {COMPUTE_ORDER}")
        if self.stage_layers is not None:
            require(len(self.stage_layers) == self.pp, "stage_layers", self.stage_layers,
                    f"{self.pp} stage sizes (one per pipeline stage)")
            require(all(n >= 1 for n in self.stage_layers), "stage_layers", self.stage_layers,
                    "at least one layer in every stage")
        require((self.tp * self.attn_dp) % self.ep == 0, "ep", self.ep,
                f"a divisor of tp x attn_dp = {self.tp * self.attn_dp} (experts are spread over the chips of a stage)")
        require(self.redundant_experts >= 0, "redundant_experts", self.redundant_experts, "an integer >= 0")
        require(self.micro_batches is None or self.micro_batches >= 1, "micro_batches", self.micro_batches, "an integer >= 1")
        if self.fusions is not None:
            require(isinstance(self.fusions, tuple) and all(isinstance(f, str) and f in FUSIONS for f in self.fusions),
                    "fusions", self.fusions, f"a tuple of kernel fusions from {', '.join(FUSIONS)}")
            object.__setattr__(self, "fusions", tuple(sorted(set(self.fusions))) or None)   # () and None: no fusion

    @property
    def chips(self) -> int:
        return self.tp * self.attn_dp * self.pp * self.dp

    @property
    def stage_chips(self) -> int:
        """Chips of one pipeline stage of one replica."""
        return self.tp * self.attn_dp

    @property
    def moe_tp(self) -> int:
        """Tensor-parallel degree inside each routed expert."""
        return self.tp * self.attn_dp // self.ep

    @property
    def seqs_per_rank(self) -> int:
        """Sequences held by the busiest attention rank."""
        return -(-self.batch // (self.dp * self.attn_dp))

    @property
    def seqs_per_replica(self) -> int:
        """Sequences held by the busiest replica: the tokens its MoE layers route each decode step (its attention
        ranks together; seqs_per_rank x attn_dp would count a rank's rounding up once per rank)."""
        return -(-self.batch // self.dp)

    def stages(self, n_layers: int) -> tuple[int, ...]:
        """Layers per stage; an even split puts the remainder on the first stages."""
        if self.stage_layers is not None:
            if sum(self.stage_layers) != n_layers:
                raise bad_value("stage_layers", self.stage_layers,
                                f"stage sizes that add up to the model's {n_layers} layers "
                                f"(they add up to {sum(self.stage_layers)})")
            return self.stage_layers
        require(self.pp <= n_layers, "pp", self.pp, f"at most the model's {n_layers} layers")
        base, extra = divmod(n_layers, self.pp)
        return tuple(base + (1 if s < extra else 0) for s in range(self.pp))


def checked_launch(engine: str, engine_version: str | None, fusions: tuple[str, ...] | None) -> tuple[str, ...] | None:
    """A request's engine, release and fusions checked as a Deployment checks them (the field named on error), and
    the fusions in Deployment's one spelling (sorted, once each, None for none): for requests that build many
    deployments (the planner's, capacity planning's) and should refuse a bad launch before building any."""
    return Deployment(engine=engine, engine_version=engine_version, fusions=fusions).fusions
