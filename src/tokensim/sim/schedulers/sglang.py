"""SGLang's default scheduling (python/sglang/srt/managers/scheduler.py, schedule_policy.py).

Each loop either runs a prefill batch or a decode batch, not both (unless mixed chunked
prefill is on). A prefill batch is formed by `PrefillAdder`: the unfinished chunked request
first, then waiting requests first-come first-served (the default `fcfs` policy) while
- the KV pool, less a reservation for the running requests' future tokens (each one's
  remaining max_new_tokens, clipped at 4096, times `new_token_ratio`), still exceeds the new
  request's prompt plus its own clipped max_new_tokens;
- `max_prefill_tokens` input tokens and `chunked_prefill_size` chunk tokens remain; a request
  longer than the chunk left is cut there and continues next time.
When a decode step does not fit in the KV pool, requests are retracted (fewest output tokens
first, longest prompt on ties) until 20 decode steps of the rest fit; they go back to the end of
the queue with their KV dropped, and `new_token_ratio` jumps to what the survivors have used.
Otherwise `new_token_ratio` decays linearly from 0.7 to 0.7 x 0.14 over 600 decode steps.
The radix cache reuses cached prefixes with LRU eviction (a page size of 1 token).
With `scheduler_recv_interval` N > 1 (managers/scheduler_recv_skipper.py, `SchedulerRecvSkipper`) the scheduler
takes new requests off its socket only when a counter reaches N: each decode step (or idle loop) adds 1, any other
step (prefill, mixed) adds 1,000, so it receives right after a prefill step and otherwise every N decode steps; a
request that arrives in between waits in the socket. An idle engine spins its loop and receives at once.
With `ignore_eos` (every request runs to its max_new_tokens and the radix cache is off), PrefillAdder takes its
add_one_req_ignore_eos path instead: no max_prefill_tokens check before a request joins (the batch stops once the
input budget is spent), and a request is admitted only if the pool, less its prompt, would hold every running and
admitted request to its full max_new_tokens, requests retiring in order of the tokens they have left and keeping
IGNORE_EOS_RESERVE_TOKENS per request spare; the reservation for running requests is 1.0 of what they have left,
not new_token_ratio of it.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from tokensim.errors import require


class _State:
    __slots__ = ("ratio", "chunked", "recv_s", "counter", "counted_s", "last_weight")

    def __init__(self, ratio: float, interval: int) -> None:
        self.ratio = ratio
        self.chunked = None
        self.recv_s = -math.inf          # requests queued after this are still in the socket
        self.counter = interval          # the skipper starts full: the first loop receives
        self.counted_s = math.nan        # the loop (time) whose step the counter last took in
        self.last_weight = 0


# scheduler_recv_skipper.py: _WEIGHT_OF_FORWARD_MODE (DECODE, TARGET_VERIFY, None: 1), _DEFAULT_WEIGHT 1000
RECV_WEIGHT_DECODE = 1
RECV_WEIGHT_OTHER = 1000
IGNORE_EOS_RESERVE_TOKENS = 1          # schedule_policy.py: tokens kept spare per request on the ignore-EOS path


def fits_to_completion(left: np.ndarray, held: np.ndarray, free_tokens: float) -> bool:
    """PrefillAdder.add_one_req_ignore_eos's check: requests that have `left` tokens to generate and hold `held`
    tokens of KV, retired in order of `left` (each freeing what it holds), never leave fewer than
    IGNORE_EOS_RESERVE_TOKENS per request still running out of `free_tokens` (the pool less the new prompt)."""
    order = np.argsort(left, kind="stable")
    left, held = left[order], held[order]
    running = len(left) - np.arange(len(left))
    freed = np.concatenate(([0], np.cumsum(held)[:-1]))
    return bool(np.all(free_tokens + freed - left * running > IGNORE_EOS_RESERVE_TOKENS * running))


@dataclass(frozen=True)
class SglangScheduler:
    # server_args.py: chunked_prefill_size from GPU memory: < 35 GB (A10, L40, 4090) 2048,
    # < 160 GB (A100, H100, H200) 8192, else (B200, MI300) 16384.
    chunked_prefill_size: int = 8192
    max_prefill_tokens: int = 16384              # ServerArgs.max_prefill_tokens
    # ServerArgs.max_running_requests: derived from memory when unset; None = KV-limited here.
    max_running_requests: int | None = None
    enable_mixed_chunk: bool = False             # ServerArgs.enable_mixed_chunk
    # ServerArgs.disable_overlap_schedule False: the next batch is scheduled while one runs, so
    # a request arriving during a step is first seen at the next one.
    overlap_schedule: bool = True
    schedule_conservativeness: float = 1.0       # ServerArgs.schedule_conservativeness
    # environ.py: SGLANG_INIT_NEW_TOKEN_RATIO, SGLANG_MIN_NEW_TOKEN_RATIO_FACTOR,
    # SGLANG_NEW_TOKEN_RATIO_DECAY_STEPS, SGLANG_RETRACT_DECODE_STEPS,
    # SGLANG_CLIP_MAX_NEW_TOKENS_ESTIMATION.
    init_new_token_ratio: float = 0.7
    min_new_token_ratio_factor: float = 0.14
    new_token_ratio_decay_steps: int = 600
    retract_decode_steps: int = 20
    clip_max_new_tokens: int = 4096
    # ServerArgs.scheduler_recv_interval: 1, receive every loop
    scheduler_recv_interval: int = 1
    # Requests sent with ignore_eos to a server started with --disable-radix-cache take PrefillAdder's
    # add_one_req_ignore_eos path (schedule_policy.py, add_one_req: `req.sampling_params.ignore_eos and
    # tree_cache.disable`); False: the regular path.
    ignore_eos: bool = False
    # ServerArgs.page_size: 1 token.
    default_block_size: ClassVar[int] = 1

    def __post_init__(self) -> None:
        for name in ("chunked_prefill_size", "max_prefill_tokens", "new_token_ratio_decay_steps",
                     "retract_decode_steps", "clip_max_new_tokens", "scheduler_recv_interval"):
            v = getattr(self, name)
            require(isinstance(v, int) and v >= 1, name, v, "a whole number >= 1")
        if self.max_running_requests is not None:
            require(isinstance(self.max_running_requests, int) and self.max_running_requests >= 1,
                    "max_running_requests", self.max_running_requests, "a whole number >= 1 or None")
        require(self.schedule_conservativeness > 0, "schedule_conservativeness",
                self.schedule_conservativeness, "a number > 0")

    @property
    def _init_ratio(self) -> float:
        return min(self.init_new_token_ratio * self.schedule_conservativeness, 1.0)

    @property
    def _min_ratio(self) -> float:
        return min(self._init_ratio * self.min_new_token_ratio_factor, 1.0)

    def max_running(self) -> int:
        return self.max_running_requests or (1 << 62)

    def new_state(self, engine) -> _State:
        return _State(self._init_ratio, self.scheduler_recv_interval)

    def reject_reason(self, engine, r) -> str | None:
        # PrefillAdder needs prompt + clipped max_new_tokens below the pool to ever admit it.
        if r.prompt_tokens + min(r.output_tokens, self.clip_max_new_tokens) >= engine.kv.num_blocks * engine.block_size:
            return "kv_capacity"
        return None

    def schedule(self, eng, lane: int, plan, now: float) -> None:
        st = eng.sched
        dec = eng.lanes[lane]
        if not eng.waiting and st.chunked is None and eng.running == 0:
            st.ratio = self._init_ratio          # idle: the estimate starts over
        if self.scheduler_recv_interval > 1:
            self._receive(eng, st, now)
        if self._prefill(eng, dec, plan, st, now):
            if self.enable_mixed_chunk and dec.n and eng.try_decode_blocks(lane):
                plan.decode = True
            st.last_weight = RECV_WEIGHT_OTHER
            return
        if dec.n:
            self._decode(eng, lane, dec, plan, st, now)
        st.last_weight = RECV_WEIGHT_DECODE
        plan.steady = not eng.waiting and st.chunked is None

    def _receive(self, eng, st: _State, now: float) -> None:
        """The recv skipper's count for the step that just ended (once per loop, however often the engine asks),
        and the receive when it is due; an engine with nothing running loops idle and receives at once."""
        if now != st.counted_s:
            st.counted_s = now
            st.counter += st.last_weight
        if st.counter >= self.scheduler_recv_interval or (eng.running == 0 and st.chunked is None):
            st.counter = 0
            st.recv_s = now

    def repeat_steady(self, eng, steps: int) -> None:
        """`steps` more decode steps like the last one: the ratio decays once per step."""
        st = eng.sched
        st.counter += steps * RECV_WEIGHT_DECODE
        st.ratio = max(st.ratio - steps * (self._init_ratio - self._min_ratio) / self.new_token_ratio_decay_steps,
                       self._min_ratio)

    def _prefill(self, eng, dec, plan, st: _State, now: float) -> bool:
        if not eng.waiting and st.chunked is None:
            return False
        running_bs = eng.decoding_count()
        limit = self.max_running()
        if running_bs >= limit and st.chunked is None:
            return False
        bs = eng.block_size
        clip = self.clip_max_new_tokens
        reserve = 0.0
        if dec.n:
            left = dec.end[:dec.n] - dec.contexts()
            reserve = float(np.minimum(left, clip).sum()) * st.ratio
        cur_rem = eng.kv.available() * bs          # PrefillAdder.cur_rem_tokens
        rem_total = cur_rem - reserve
        rem_input = self.max_prefill_tokens
        rem_chunk = self.chunked_prefill_size
        if self.enable_mixed_chunk:
            rem_input -= running_bs
            rem_chunk -= running_bs
            cur_rem -= running_bs
        r = st.chunked
        if r is not None:
            extend = min(r.num_tokens - r.scheduled, rem_chunk)
            if extend <= 0 or not eng.grow(r, extend):
                return False
            eng.schedule_chunk(plan, r, extend)
            rem_total -= extend
            cur_rem -= extend
            rem_input -= extend
            rem_chunk -= extend
            if r.scheduled < r.num_tokens:
                return True
            st.chunked = None
        waiting = eng.waiting
        states = None                              # (tokens left, tokens held) of every request, ignore-EOS path
        while waiting:
            if running_bs + len(plan.prefills) >= limit:
                break
            if rem_total <= 0 or rem_input <= 0 or rem_chunk <= 0 or cur_rem <= 0:
                break
            r = waiting[0]
            if r.kv_ready or (self.overlap_schedule and eng.unseen(r)) or (
                    self.scheduler_recv_interval > 1 and r.queued_s > st.recv_s):
                break
            hit = eng.lookup(r)
            extend = r.num_tokens - hit.tokens
            max_new = min(r.output_tokens - r.output, clip)
            if self.ignore_eos:
                if extend > min(cur_rem, rem_total):
                    break
                if states is None:
                    states = self._states(eng, plan)
                states = (np.append(states[0], r.output_tokens - r.output), np.append(states[1], r.num_tokens))
                if not fits_to_completion(states[0], states[1], cur_rem - extend):
                    break
            elif extend + max_new >= rem_total or (extend <= rem_chunk and extend > rem_input and plan.prefills):
                break
            if extend <= rem_chunk:
                if not eng.admit(r, hit, extend, plan, now):
                    break
                rem_total -= extend + max_new
                cur_rem -= extend
                rem_input -= extend
                rem_chunk -= extend
            else:                                   # the chunk that fits; the rest next time
                trunc = rem_chunk // bs * bs
                if trunc <= 0 or not eng.admit(r, hit, trunc, plan, now):
                    break
                st.chunked = r
                break
        return bool(plan.prefills)

    @staticmethod
    def _states(eng, plan) -> tuple[np.ndarray, np.ndarray]:
        """Tokens left to generate and tokens held of the running requests (every lane) and those this batch has
        admitted, as add_one_req_ignore_eos lists them (its req_states)."""
        left, held = [], []
        for d in eng.lanes:
            if d.n:
                ctx = d.contexts()
                left.append(d.end[:d.n] - ctx)        # max_new_tokens less the tokens sampled
                held.append(ctx + 1)                  # prompt and sampled tokens
        for q in plan.prefills:
            left.append(np.array([q.output_tokens - q.output]))
            held.append(np.array([q.num_tokens]))
        if not left:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
        lft, hld = np.concatenate(left), np.concatenate(held)
        keep = lft > 0
        return lft[keep], hld[keep]

    def _decode(self, eng, lane: int, dec, plan, st: _State, now: float) -> None:
        if eng.try_decode_blocks(lane):
            st.ratio = max(st.ratio - (self._init_ratio - self._min_ratio) / self.new_token_ratio_decay_steps,
                           self._min_ratio)
            plan.decode = True
            return
        # Retract: fewest output tokens first (longest prompt on ties) until 20 steps fit.
        cands = [r for j, d in enumerate(eng.lanes) if j == lane or not eng.lane_busy[j] for r in d.reqs]
        order = sorted(cands, key=lambda r: (eng.lanes[r.lane].context(r) - r.prompt_tokens, -r.prompt_tokens),
                       reverse=True)
        bs = eng.block_size
        first = True
        while len(order) > 1 and (first or eng.kv.available() * bs < len(order) * self.retract_decode_steps):
            first = False
            eng.preempt(order.pop(), now, front=False, park=False)
        while dec.n and not eng.try_decode_blocks(lane):
            if len(order) > 1:
                eng.preempt(order.pop(), now, front=False, park=False)
            elif st.chunked is not None and st.chunked.scheduled == st.chunked.computed:
                eng.preempt(st.chunked, now, front=False, park=False)   # the partial prefill yields
                st.chunked = None
            else:
                return                      # nothing left to retract: wait for blocks to free
        produced = sum(eng.lanes[r.lane].context(r) - r.prompt_tokens + 1 for r in order)
        wanted = sum(r.output_tokens for r in order)
        st.ratio = min(1.0, (produced + self.retract_decode_steps * len(order)) / max(wanted, 1))
        plan.decode = dec.n > 0
