"""The layout of a scenario file (see tokensim/scenarios/scenario.py and data/scenarios/claims/*.toml), checked
once. Tables a scenario may hold: [deployment], [speculative], [afd], [prefill], [workload], [claim] or
[[claims]], [[alternatives]], [report], [session], [constants]; top-level name, title, model or [model_config],
model_name, model_source, hardware, assumptions.

The model's own fields ([model_config]) are checked by the config reader (specs/model/hf_config.py), and the
deployment's fit against model and chip by deploy/; this module checks types, ranges and names.
"""
from __future__ import annotations

from dataclasses import fields
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import BeforeValidator, Field, create_model, model_validator

from tokensim.deploy.deployment import SpecDecode
from tokensim.inputs.base import MISSING, Count, InputModel, Name, Number, Text, field_error
from tokensim.perf.constants import Constants
from tokensim.perf.engines import FUSIONS

MAX_CHIPS = 1_000_000
MAX_LAYERS = 1_000                     # the config reader's bound on a model's layers
MAX_TOKENS = 100_000_000               # prompt or output tokens of one sequence
MAX_BATCH = 10_000_000
MAX_ENTRIES = 1_000                    # claims, alternatives, assumptions

Degree = Annotated[int, Count("a parallel degree", le=MAX_CHIPS)]
Stages = Annotated[int, Count("pipeline stages", le=MAX_LAYERS)]
Chips = Annotated[int, Count("chips", le=MAX_CHIPS)]
Batch = Annotated[int, Count("concurrent sequences", le=MAX_BATCH)]
MicroBatches = Annotated[int, Count("micro-batches", le=MAX_BATCH)]
ExtraExperts = Annotated[int, Count("extra expert slots", ge=0, le=MAX_CHIPS)]
StageLayers = Annotated[int, Count("layers in one stage", le=MAX_LAYERS)]
Tokens = Annotated[int, Count("tokens", le=MAX_TOKENS)]
FreshTokens = Annotated[int, Count("fresh input tokens per call", ge=0, le=MAX_TOKENS)]
Calls = Annotated[int, Count("model calls in the session", le=100_000)]
Sequences = Annotated[int, Count("sequences in the benchmark", le=1_000_000_000)]
DraftTokens = Annotated[int, Count("draft tokens per step", le=64)]
BytesPerS = Annotated[float, Number("bytes per second, one direction", gt=0, le=1e18)]
LatencyS = Annotated[float, Number("seconds", ge=0, le=10)]
ToolSeconds = Annotated[float, Number("seconds of tool time per call", ge=0, le=1e6)]
Rate = Annotated[float, Number("an acceptance rate", ge=0, lt=1)]
ClaimValue = Annotated[float, Number("the claimed value, in `unit`", ge=0, le=1e30)]
ConstantValue = Annotated[float, Number("the unit of data/constants.toml: a fraction, seconds or rows", ge=0, le=1e6)]
Precision = Annotated[str, Field(min_length=1, max_length=40, description="a precision name such as bf16, fp8, int4")]
Engine = Annotated[str, Field(min_length=1, max_length=40, description="an engine name, such as default")]
EngineVersion = Annotated[str, Field(min_length=1, max_length=40, description="an engine release, such as 0.6.1")]
FusionName = Literal[tuple(FUSIONS)]  # type: ignore[valid-type]  # the names perf.engines.FUSIONS prices
LayerRange = Annotated[str, Field(max_length=40, description='a layer range like "0-3" or a single layer "4"')]


class DeploymentTable(InputModel):
    """[deployment]: layout, batch, sequence lengths and precisions. All optional; tp and pp or chips."""

    tp: Degree | None = None
    pp: Stages | None = None
    ep: Degree | None = None
    dp: Degree | None = None
    attn_dp: Degree | None = None
    chips: Chips | None = None
    batch: Batch | None = None
    input_tokens: Tokens | None = None
    output_tokens: Tokens | None = None
    weights: Precision | None = None
    expert_weights: Precision | None = None
    compute: Precision | None = None
    kv: Precision | None = None
    engine: Engine | None = None
    engine_version: EngineVersion | None = None
    micro_batches: MicroBatches | None = None
    overlap_comm: bool | None = None
    fusions: Annotated[list[FusionName], Field(  # type: ignore[valid-type]
        max_length=len(FUSIONS), description="kernel fusions the engine launch runs (allreduce_norm, moe_gemm1); "
                                  "left out or []: none")] | None = None
    redundant_experts: ExtraExperts | None = None
    stage_layers: Annotated[list[StageLayers], Field(min_length=1, max_length=MAX_LAYERS,
                                                     description="a list of layer counts, one per pipeline stage")] | None = None
    stages: Annotated[list[LayerRange], Field(min_length=1, max_length=MAX_LAYERS,
                                              description='a list of layer ranges like ["0-3", "4-7"]')] | None = None

    def deployment_fields(self) -> dict[str, Any]:
        """The Deployment fields the table sets, apart from the layout (tp, pp, chips, stages), which
        deploy.layout.resolve_layout decides with the model and chip."""
        out = {k: v for k in _DEPLOYMENT_FIELDS if (v := getattr(self, k)) is not None}
        if self.fusions is not None:
            out["fusions"] = tuple(self.fusions)
        return out


_DEPLOYMENT_FIELDS = ("weights", "expert_weights", "compute", "kv", "engine", "engine_version",
                      "batch", "input_tokens", "output_tokens",
                      "ep", "dp", "attn_dp", "micro_batches", "redundant_experts", "overlap_comm")


def _as_list(value: Any) -> Any:
    return [value] if isinstance(value, (int, float)) and not isinstance(value, bool) else value


class SpeculativeTable(InputModel):
    """[speculative]: k draft tokens per step, accepted at one rate or one rate per position."""

    method: Literal["mtp", "eagle", "draft", "none"] = Field(
        "mtp", description='"mtp", "eagle" or "draft"; "none" turns speculative decoding off '
                           "(an alternative to a base that has it)")
    draft_tokens: DraftTokens = 1
    acceptance: Annotated[list[Rate], Field(min_length=1, max_length=64, description="one acceptance rate in [0, 1), "
                                            "or one per draft position"), BeforeValidator(_as_list)] = [0.8]
    draft_model: Name | None = None

    def to_spec(self) -> SpecDecode | None:
        """The SpecDecode the table describes; None for method "none" (speculation turned off)."""
        if self.method == "none":
            return None
        return SpecDecode(method=self.method, draft_tokens=self.draft_tokens, acceptance=tuple(self.acceptance),
                          draft_model=self.draft_model)

    @model_validator(mode="after")
    def _rates_per_position(self) -> SpeculativeTable:
        if len(self.acceptance) not in (1, self.draft_tokens):
            raise field_error("acceptance", self.acceptance, f"one rate or {self.draft_tokens} per-position rates")
        if self.method == "draft" and not self.draft_model:
            raise field_error("draft_model", MISSING, 'a model name or config path when method is "draft"')
        return self


class AfdTable(InputModel):
    """[afd]: attention on this scenario's hardware, the FFN/experts on `ffn_hardware`."""

    ffn_hardware: Name | None = None
    ffn_deployment: DeploymentTable | None = None
    link_bandwidth_bytes_per_s: BytesPerS | None = None
    link_latency_s: LatencyS | None = None
    link_name: Name | None = None
    micro_batches: Annotated[int, Count("micro-batches in ping-pong", le=64)] | None = None


class PrefillTable(InputModel):
    """[prefill]: prefill on its own hardware and deployment, KV shipped over a link."""

    hardware: Name | None = None
    deployment: DeploymentTable | None = None
    link_bandwidth_bytes_per_s: BytesPerS | None = None
    link_latency_s: LatencyS | None = None


class WorkloadTable(InputModel):
    sequences: Sequences = 1000


class ClaimTable(InputModel):
    """One published claim the scenario checks."""

    id: Name
    text: Text = ""
    quantity: Name
    value: ClaimValue
    unit: Text = ""
    source: Text = ""
    kind: Text = ""
    of: Annotated[list[Name], Field(min_length=2, max_length=2,
                                    description="two scenario names (numerator, denominator)")] | None = None
    of_quantity: Name | None = None
    conditions: Annotated[list[Text], Field(max_length=100, description="what the claim's source states "
                                            "(speculation, precision, model size, ...)")] | None = None
    pairs: Annotated[list[Annotated[list[Name], Field(min_length=2, max_length=2)]],
                     Field(max_length=MAX_ENTRIES, description="pairs of alternative names")] | None = None

    @model_validator(mode="after")
    def _ratio_names_two(self) -> ClaimTable:
        if self.quantity == "ratio" and self.of is None:
            raise field_error("of", MISSING, "two scenario names for a ratio claim")
        return self


class ReportTable(InputModel):
    contexts: Annotated[list[Tokens], Field(max_length=32, description="context lengths in tokens")] = []
    kv_designs: Annotated[list[Name], Field(max_length=32, description="KV-cache design names")] = []


class SessionTable(InputModel):
    """[session]: the built-in coding loop's parameters (tokensim.scenarios.agent.coding_loop)."""

    calls: Calls | None = None
    output_tokens: Tokens | None = None
    fresh_input_tokens: FreshTokens | None = None
    tool_s: ToolSeconds | None = None


if TYPE_CHECKING:
    class ConstantsTable(InputModel):
        """[constants]: one optional finite value >= 0 per empirical constant (perf/constants.py)."""
else:
    ConstantsTable = create_model(      # one field per constant, so a new constant needs no change here
        "ConstantsTable", __base__=InputModel,
        __doc__="[constants]: one optional finite value >= 0 per empirical constant (perf/constants.py).",
        **{f.name: (ConstantValue | None, None) for f in fields(Constants)})


class _Tables(InputModel):
    """What a scenario and each of its alternatives may set."""

    name: Name | None = None
    title: Text | None = None
    model: Name | None = Field(None, description="a catalog name or a config.json path (relative to the file)")
    model_config_: dict[str, Any] | None = Field(None, alias="model_config",
                                                  description="an inline Hugging Face config (a table)")
    model_name: Name | None = None
    model_source: Text | None = None
    hardware: Name | None = Field(None, description="a catalog name or a hardware file path (relative to the file)")
    p2p: bool | None = Field(None, description="true or false: GPU peer-to-peer on the hardware's PCIe links (true: "
                             "bare metal with the IOMMU off; false: most VMs, GeForce drivers); unset: as the hardware "
                             "file states")
    assumptions: Annotated[list[Text], Field(max_length=MAX_ENTRIES, description="a list of assumptions (text)")] | None = None
    deployment: DeploymentTable | None = None
    speculative: SpeculativeTable | None = None
    afd: AfdTable | None = None
    prefill: PrefillTable | None = None
    workload: WorkloadTable | None = None
    report: ReportTable | None = None
    session: SessionTable | None = None
    constants: ConstantsTable | None = None
    study: bool | None = None


class Alternative(_Tables):
    """One [[alternatives]] entry: a name and the tables it changes (merged over the scenario's own), with the
    source that motivates it and the claim conditions it breaks, if any."""

    source: Text | None = None
    breaks: Annotated[list[Text], Field(max_length=100, description="the claim conditions this alternative "
                                        "does not keep")] | None = None


class ScenarioFile(_Tables):
    """A whole scenario file."""

    hardware: Name = Field(description="a catalog name or a hardware file path (relative to the file)")
    claim: ClaimTable | None = None
    claims: Annotated[list[ClaimTable], Field(max_length=MAX_ENTRIES, description="a list of [[claims]] tables")] | None = None
    alternatives: Annotated[list[Alternative], Field(max_length=MAX_ENTRIES,
                                                     description="a list of [[alternatives]] tables")] | None = None

    @model_validator(mode="after")
    def _has_a_model(self) -> ScenarioFile:
        if self.model is None and self.model_config_ is None:
            raise field_error("model", MISSING, "a catalog name, a config.json path or a [model_config] table")
        return self


__all__ = ["ScenarioFile", "Alternative", "DeploymentTable", "SpeculativeTable", "AfdTable", "PrefillTable",
           "WorkloadTable", "ClaimTable", "ReportTable", "SessionTable", "ConstantsTable"]
