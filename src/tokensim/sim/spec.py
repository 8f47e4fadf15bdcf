"""What an engine is, frozen: its scheduler policy, step timer, KV cache and options.

Schedulers follow the `Scheduler` protocol: `schedule(engine, lane, plan, now)` fills the
step's `Plan` through the engine's narrow calls; `max_running()` caps running requests;
`reject_reason(engine, r)` refuses requests the engine could never serve; `new_state(engine)`
holds any policy state of one engine in one simulation (SGLang's new-token ratio); an optional
`repeat_steady(engine, steps)` updates that state when identical decode steps are skipped.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from tokensim.errors import require
from tokensim.sim.timer import StepTimer


@dataclass(frozen=True)
class SpeculativeDecoding:
    """Draft-and-verify decoding: draft position j is accepted with probability
    acceptance_rates[j] given all earlier ones were, so a verify step yields 1 + accepted tokens
    and 1 + sum over j of prod(rates[:j+1]) tokens on average."""
    acceptance_rates: tuple[float, ...]

    def __post_init__(self) -> None:
        rates = tuple(self.acceptance_rates)
        require(len(rates) >= 1, "acceptance_rates", rates, "at least one draft position")
        for r in rates:
            require(isinstance(r, (int, float)) and 0.0 <= r <= 1.0, "acceptance_rates", rates,
                    "probabilities between 0 and 1")
        object.__setattr__(self, "acceptance_rates", tuple(float(r) for r in rates))

    @property
    def draft_tokens(self) -> int:
        return len(self.acceptance_rates)

    @property
    def expected_tokens_per_step(self) -> float:
        return 1.0 + float(np.cumprod(self.acceptance_rates).sum())


class Scheduler(Protocol):
    default_block_size: int

    def max_running(self) -> int: ...
    def new_state(self, engine) -> object: ...
    def schedule(self, engine, lane: int, plan, now: float) -> None: ...
    def reject_reason(self, engine, r) -> str | None: ...


@dataclass(frozen=True)
class EngineSpec:
    """A serving engine: its scheduler policy, step timer and KV cache size.

    block_size None takes the scheduler's engine default. The host tier keeps evicted prefix
    blocks in `host_kv_tokens` of host memory and restores them at
    `host_bandwidth_bytes_per_s`, with `kv_bytes_per_token` of KV per token. A pipeline of
    `pipeline_stages` splits each step evenly over the stages, or times stage s with
    `stage_timers[s]`.
    """
    scheduler: Scheduler
    timer: StepTimer
    kv_cache_tokens: int
    block_size: int | None = None
    max_model_len: int | None = None
    prefix_caching: bool = True
    host_kv_tokens: int = 0
    host_bandwidth_bytes_per_s: float | None = None
    kv_bytes_per_token: float | None = None
    speculative: SpeculativeDecoding | None = None
    pipeline_stages: int = 1
    stage_timers: tuple[StepTimer, ...] | None = None
    name: str = "engine"

    def __post_init__(self) -> None:
        require(hasattr(self.timer, "step_s"), "timer", self.timer, "an object with step_s(batch)")
        require(hasattr(self.scheduler, "schedule"), "scheduler", self.scheduler,
                "a scheduler (VllmScheduler, SglangScheduler, TrtllmScheduler, StaticBatchScheduler)")
        bs = self.block_size if self.block_size is not None else self.scheduler.default_block_size
        require(isinstance(bs, int) and bs >= 1, "block_size", self.block_size, "a whole number of tokens >= 1")
        require(isinstance(self.kv_cache_tokens, int) and self.kv_cache_tokens >= bs, "kv_cache_tokens",
                self.kv_cache_tokens, f"a whole number of tokens >= one block ({bs})")
        if self.max_model_len is not None:
            require(isinstance(self.max_model_len, int) and self.max_model_len >= 2, "max_model_len",
                    self.max_model_len, "a whole number of tokens >= 2")
        require(isinstance(self.pipeline_stages, int) and self.pipeline_stages >= 1, "pipeline_stages",
                self.pipeline_stages, "a whole number of stages >= 1")
        if self.stage_timers is not None:
            require(len(self.stage_timers) == self.pipeline_stages, "stage_timers",
                    len(self.stage_timers), f"one timer per stage ({self.pipeline_stages})")
        require(isinstance(self.host_kv_tokens, int) and self.host_kv_tokens >= 0, "host_kv_tokens",
                self.host_kv_tokens, "a whole number of tokens >= 0")
        if self.host_kv_tokens:
            for name in ("host_bandwidth_bytes_per_s", "kv_bytes_per_token"):
                v = getattr(self, name)
                require(isinstance(v, (int, float)) and math.isfinite(v) and v > 0, name, v,
                        "a finite number > 0 when host_kv_tokens is set")

    @property
    def resolved_block_size(self) -> int:
        return self.block_size if self.block_size is not None else self.scheduler.default_block_size
