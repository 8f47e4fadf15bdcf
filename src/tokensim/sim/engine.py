"""One serving engine: a scheduler, a KV cache and a step timer joined by a few lines per step.

`EngineSpec` (sim/spec.py) is the frozen description; `Engine` is the state one simulation
keeps for it.
Each step the scheduler fills a `Plan` (which lane's decoders run, which prefill chunks) through
the engine's narrow calls (`lookup`, `admit`, `grow`, `try_decode_blocks`, `preempt`); the
engine turns the plan into a `StepBatch`, asks the timer, and at the step's end hands out the
tokens. A pipeline of S stages keeps S lanes of decoders, one micro-batch in flight per lane.
"""
from __future__ import annotations

import math
from collections import deque

import numpy as np

from tokensim.sim.admission import DONE, RUNNING, WAITING, Admission, Plan
from tokensim.sim.decode import DecodeSet
from tokensim.sim.kv import KVCache
from tokensim.sim.request import Req
from tokensim.sim.series import Series
from tokensim.sim.spec import EngineSpec
from tokensim.sim.timer import StepBatch

_EMPTY = np.zeros(0, dtype=np.int64)
FIRST_PRICED_STEPS = 8      # decode steps priced before the rest of a run (`Engine._extend_run`)


class Engine(Admission):
    """The state of one engine in one simulation: intake, stepping and the step's end (the calls
    schedulers make, and the KV bookkeeping behind them, are in `Admission`)."""

    def __init__(self, spec: EngineSpec, sim, index: int, role: str = "both") -> None:
        self.spec = spec
        self.sim = sim
        self.index = index
        self.role = role
        self.name = f"{spec.name}[{index}]" if role == "both" else f"{spec.name}-{role}[{index}]"
        self.scheduler = spec.scheduler
        self.timer = spec.timer
        bs = spec.resolved_block_size
        self.block_size = bs
        null_blocks = getattr(spec.scheduler, "null_blocks", 0)   # blocks the engine keeps for itself
        self.kv = KVCache(spec.kv_cache_tokens // bs - null_blocks, bs, prefix_caching=spec.prefix_caching,
                          host_blocks=spec.host_kv_tokens // bs)
        self.restore_s_per_block = 0.0
        if spec.host_kv_tokens and spec.kv_bytes_per_token and spec.host_bandwidth_bytes_per_s:
            self.restore_s_per_block = bs * spec.kv_bytes_per_token / spec.host_bandwidth_bytes_per_s
        self.max_model_len = spec.max_model_len
        self.speculative = spec.speculative is not None
        self.spec_rates = np.array(spec.speculative.acceptance_rates if spec.speculative else (), dtype=np.float64)
        self.q = 1 + (spec.speculative.draft_tokens if spec.speculative is not None else 0)
        self.stages = spec.pipeline_stages
        self.waiting: deque[Req] = deque()
        self.prefilling: list[Req] = []
        self.lanes = [DecodeSet(bs, self.speculative) for _ in range(self.stages)]
        self.lane_busy = [False] * self.stages
        self.stage_free_s = [0.0] * self.stages
        self.next_lane = 0
        self.launch_pending = False
        self.seen_before_s = math.inf   # requests queued after this are not yet seen (async scheduling)
        self.fresh: list[Req] = []      # requests queued since the engine's last scheduling pass
        self.running = 0
        self.incoming = 0           # requests whose KV is on its way here (disaggregation)
        self.dropping: list[Req] = []   # cancelled requests still holding KV
        self.reserved_blocks = 0
        self._seq = 0
        self.max_running = spec.scheduler.max_running()
        self.sched = spec.scheduler.new_state(self)
        self.series = Series(sim.series_points)
        self.has_decode_run = hasattr(self.timer, "decode_run_s") and self.stages == 1
        # counters
        self.steps = 0
        self.prefill_tokens = 0
        self.decode_tokens = 0
        self.preemptions = 0
        self.busy_s = 0.0

    # -- intake ------------------------------------------------------------------------------
    @property
    def outstanding(self) -> int:
        return len(self.waiting) + self.running + self.incoming

    def reject_reason(self, r: Req) -> str | None:
        total = r.prompt_tokens + r.output_tokens
        if self.max_model_len is not None and total > self.max_model_len:
            return "context_limit"
        kv_tokens = r.prompt_tokens if self.role == "prefill" else total - 1
        if -(-kv_tokens // self.block_size) > self.kv.num_blocks:
            return "kv_capacity"
        return self.scheduler.reject_reason(self, r)

    def enqueue(self, r: Req, now: float) -> None:
        """Queue a request. An idle engine starts its step after the other events of this
        instant, so requests arriving together are scheduled together."""
        r.engine = self
        r.state = WAITING
        r.queued_s = now
        self.waiting.append(r)
        self.fresh.append(r)
        if not self.launch_pending and self.stage_free_s[0] <= now and not all(self.lane_busy):
            self.launch_pending = True
            self.sim.push(now, self._launch_event, None)
        else:
            self.poke(now)

    # -- stepping -----------------------------------------------------------------------------
    def poke(self, now: float) -> None:
        """Start a step now if the engine (its first pipeline stage) is free."""
        if self.launch_pending:
            return
        if self.stage_free_s[0] > now:
            if self.stages > 1 and not all(self.lane_busy):
                self.launch_pending = True
                self.sim.push(self.stage_free_s[0], self._launch_event, None)
            return
        self.launch(now)

    def _launch_event(self, now: float, _) -> None:
        self.launch_pending = False
        self.poke(now)

    def launch(self, now: float) -> None:
        """Form and start the next step (micro-batch) on a free lane, if there is work."""
        if self.fresh:
            # an engine loop takes in what arrived between its steps: vLLM's stamps a request QUEUED then
            # (EngineCore._process_input_queue -> Scheduler.add_request), not when the request reached it
            self.sim.on_seen(self.fresh, now)
            self.fresh.clear()
        preemptions = self.preemptions
        plan = self._plan_free_lane(now)
        if plan is None and self.waiting and (self.seen_before_s < math.inf or self.preemptions > preemptions):
            # an empty step: the scheduler looks again, now seeing the whole queue (an engine that schedules ahead
            # had not), and past the preemptions this look made (a step that preempts admits no waiting request:
            # with every running request preempted, no later event would call it)
            self.seen_before_s = math.inf
            plan = self._plan_free_lane(now)
        if plan is None:
            return
        lane = plan.lane
        prefills = plan.prefills
        waiting = self.waiting
        dec = self.lanes[lane]
        self.next_lane = (lane + 1) % self.stages
        if plan.decode:
            n, k = dec.n, dec.k                 # DecodeSet.contexts() and .context_sum(), inlined
            ctx, ctx_sum = dec.base[:n] + k, dec.base_sum + n * k
        else:
            ctx, ctx_sum = _EMPTY, 0
        if prefills:
            chunks = np.array(plan.chunks, dtype=np.int64)
            cached = np.array(plan.cached, dtype=np.int64)
        else:
            chunks = cached = _EMPTY
        batch = StepBatch(ctx, chunks, cached, self.q, ctx_sum)
        dt = self.timer.step_s(batch) + plan.extra_s
        series = self.series
        if series.due():
            series.add(now, ctx.size + chunks.size, self.kv.used_blocks, len(waiting))
        if self.speculative and plan.decode:
            plan.tokens = self._draw_tokens(dec)
        if self.stages == 1:
            end = now + dt
            if plan.steady and plan.decode and not prefills and plan.tokens is None and self.sim.fast_forward:
                end = self._extend_run(plan, dec, ctx, dt, now)
            self.stage_free_s[0] = end
        else:
            end = self._pipeline_times(batch, dt, plan.extra_s, now)
        self.busy_s += end - now
        self.lane_busy[lane] = True
        self.sim.push(end, self._complete, plan)
        if self.stages > 1:
            self.poke(now)

    def _plan_free_lane(self, now: float) -> Plan | None:
        if self.stages == 1:
            return None if self.lane_busy[0] else self._plan(0, now)
        for j in range(self.stages):
            lane = (self.next_lane + j) % self.stages
            if not self.lane_busy[lane]:
                plan = self._plan(lane, now)
                if plan is not None:
                    return plan
        return None

    def _plan(self, lane: int, now: float) -> Plan | None:
        if self.dropping:
            self._drop_cancelled()
        plan = Plan(lane, now)
        waiting = self.waiting
        while waiting and waiting[0].kv_ready and self.running < self.max_running:
            if not self.admit_ready(waiting[0], lane, now):
                break
        self.scheduler.schedule(self, lane, plan, now)
        return plan if plan.decode or plan.prefills else None

    def _pipeline_times(self, batch: StepBatch, dt: float, extra_s: float, now: float) -> float:
        stages = self.stages
        if self.spec.stage_timers is not None:
            taus = [t.step_s(batch) for t in self.spec.stage_timers]
            taus[0] += extra_s
        else:
            taus = [(dt - extra_s) / stages] * stages
            taus[0] += extra_s
        free = self.stage_free_s
        f = now
        for s in range(stages):
            f = max(f, free[s]) + taus[s]
            free[s] = f
        return f

    def _draw_tokens(self, dec: DecodeSet) -> np.ndarray:
        """Tokens each sequence gets from one verify step: 1 + its accepted drafts."""
        n = dec.n
        accept = self.sim.rng.random((n, self.spec_rates.size)) < self.spec_rates
        tokens = 1 + np.cumprod(accept, axis=1).sum(axis=1)
        np.minimum(tokens, dec.end[:n] - (dec.base[:n] + dec.k), out=tokens)
        return tokens

    def _extend_run(self, f: Plan, dec: DecodeSet, ctx: np.ndarray, dt: float, now: float) -> float:
        """Take as many identical decode steps as happen before the next event, the first
        finish, or the KV cache running out; returns when the last one ends."""
        m_max = dec.steps_to_first_finish()
        end1 = now + dt
        horizon = self.sim.horizon()
        if m_max <= 1 or end1 >= horizon:
            return end1
        avail = self.kv.available()
        if dec.run_blocks_needed_from(1, m_max - 1) > avail:
            lo, hi = 1, m_max
            while hi - lo > 1:
                mid = (lo + hi) // 2
                if dec.run_blocks_needed_from(1, mid - 1) <= avail:
                    lo = mid
                else:
                    hi = mid
            m_max = lo
            if m_max <= 1:
                return end1
        if self.has_decode_run:
            run_s = self.timer.decode_run_s  # type: ignore[attr-defined]
            # Step j's time does not depend on how many are asked for, so the first few are priced first: the next
            # event usually comes within them, and a run priced whole would be mostly thrown away.
            ask = min(m_max - 1, FIRST_PRICED_STEPS)
            while True:
                durations = np.asarray(run_s(ctx + 1, ask), dtype=np.float64)
                starts = end1 + np.concatenate(([0.0], np.cumsum(durations[:-1])))
                extra = int(np.searchsorted(starts, horizon, side="left"))
                if extra < ask or ask == m_max - 1:
                    break
                ask = m_max - 1
            durations = durations[:extra]
        else:
            vals: list[float] = []
            start = end1
            while len(vals) < m_max - 1 and start < horizon:
                d = self.timer.step_s(StepBatch(ctx + 1 + len(vals), _EMPTY, _EMPTY, 1))
                vals.append(d)
                start += d
            durations = np.array(vals, dtype=np.float64)
        if not durations.size:
            return end1
        self.kv.allocate(dec.run_blocks_needed_from(1, durations.size))
        repeat = getattr(self.scheduler, "repeat_steady", None)
        if repeat is not None:
            repeat(self, durations.size)       # the scheduler's own per-step bookkeeping
        f.steps = 1 + durations.size
        dec.committed = f.steps
        f.durations = durations
        end = end1 + float(durations.sum())
        self.steps += durations.size
        return end

    def _complete(self, now: float, f: Plan) -> None:
        lane = f.lane
        dec = self.lanes[lane]
        self.lane_busy[lane] = False
        sim = self.sim
        self.steps += 1
        dec.committed = 0
        if f.decode:
            n = dec.n
            if f.tokens is not None:
                done = dec.advance_tokens(f.tokens)
                self.decode_tokens += int(f.tokens.sum())
                dec.record_emit(now, sim.itl)
            else:
                done = dec.advance(f.steps)
                self.decode_tokens += n * f.steps
                if f.durations is None:
                    dec.record_emit(now, sim.itl)
                else:
                    dec.record_emit(now - float(f.durations.sum()), sim.itl)
                    sim.itl.add_many(f.durations, n)
                    dec.last_emit_s = now
            if sim.listener is not None:
                sim.listener.decoded(dec, f, now)
            for r in done:
                if r.cancelled:
                    continue                    # dropped at the next step boundary
                self._leave_decoding(r)
                r.last_token_s = now
                self._finish(r, now)
        for r, chunk in zip(f.prefills, f.chunks, strict=True):
            if r.state != RUNNING or r.engine is not self:
                continue
            r.computed += chunk
            self.prefill_tokens += chunk
            if r.prefix_id >= 0 and self.kv.prefix_caching and r.shared_blocks * self.block_size < r.prefix_tokens:
                self._publish_prefix(r)
            if r.computed < r.prompt_tokens + r.output or r.cancelled:
                continue
            self.prefilling.remove(r)
            r.output += 1
            sim.on_token(r, now)
            if r.output >= r.output_tokens:
                self._finish(r, now)
            elif self.role == "prefill":
                self.running -= 1
                sim.handoff(self, r, now)
            else:
                r.lane = lane
                dec.add(r, r.shared_blocks + r.private_blocks, now)
        # An engine that schedules step n+1 while step n runs (vLLM's async scheduling) has not
        # seen what arrived after step n began: the step starting now sees up to then. (Engines
        # do not overlap scheduling with pipeline parallelism.)
        if self.stages == 1:
            self.seen_before_s = now - float(f.durations[-1]) if f.durations is not None else f.start_s
        self.poke(now)
        self.seen_before_s = math.inf

    def _finish(self, r: Req, now: float) -> None:
        self._free_kv(r, park=False)
        r.state = DONE
        self.running -= 1
        self.sim.on_finish(r, now)

    def release_transferred(self, r: Req, now: float) -> None:
        """A prefill engine lets go of a request's KV once it reached the decode engine."""
        self._free_kv(r, park=False)
        self.poke(now)
