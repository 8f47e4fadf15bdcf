"""Human-readable tables (rich) for predictions; conversion to display units happens only here."""
from __future__ import annotations

from rich.console import Console
from rich.table import Table

from tokensim.output.units import fmt_si as _si
from tokensim.output.units import fmt_time as _time
from tokensim.prediction.predictor import Prediction

GB = 1e9




def prediction_table(p: Prediction) -> Table:
    d = p.deployment
    t = Table(title=f"{p.model} on {p.chips} x {p.hardware}", show_header=False, title_justify="left")
    t.add_column("quantity", style="bold")
    t.add_column("value")
    rows = [
        ("layout", f"tp {d.tp} x attn_dp {d.attn_dp} x pp {d.pp} x dp {d.dp}, ep {d.ep}; batch {d.batch}; "
                   f"{d.input_tokens} in / {d.output_tokens} out; engine {d.engine}"
                   + (f" {d.engine_version}" if d.engine_version else "")),
        ("tokens/s per user", f"{p.tokens_per_s_per_user_estimate:.1f}  (80 % range {p.tokens_per_s_per_user_range[0]:.1f}"
                              f"-{p.tokens_per_s_per_user_range[1]:.1f})"),
        ("  cost model's own figure", f"{p.tokens_per_s_per_user:.1f}  (what the breakdown adds up to; bandwidth bound "
                                      f"{p.bandwidth_bound_tokens_per_s_per_user:.1f})"),
        ("time per output token", _time(p.time_per_output_token_s) + "  (cost model)"),
        ("TTFT", f"{_time(p.ttft_s_estimate)}  (80 % range {_time(p.ttft_s_range[0])}-{_time(p.ttft_s_range[1])}; "
                 f"cost model {_time(p.ttft_s)})"),
        ("throughput", f"{p.throughput_tokens_per_s:.1f} tok/s  ({p.throughput_tokens_per_s_per_chip:.1f} per chip)"),
        ("memory per chip", f"{p.memory_per_chip_bytes / GB:.1f} GB of {p.capacity_per_chip_bytes / GB:.1f} GB usable "
                            f"(weights {p.weights_per_chip_bytes / GB:.1f}, KV {p.kv_per_chip_bytes / GB:.2f})"),
        ("bytes per step per chip", _si(p.bytes_per_step_per_chip, "B")),
        ("max batch at this context", str(p.max_batch)),
        ("power, energy", f"{p.power_w / 1e3:.3g} kW, {p.tokens_per_joule:.3g} tokens/J"),
        ("cost", (f"${p.usd_per_million_tokens:.3g} per M output tokens (rental)" if p.usd_per_million_tokens
                  else "no rental price")
                 + (f"; TCO ${p.tco_usd_per_million_tokens:.3g} per M" if p.tco_usd_per_million_tokens else "")),
        ("fewest chips by capacity", str(p.min_chips)),
    ]
    if p.tokens_per_step != 1.0:
        rows.append(("tokens per step (spec. decoding)", f"{p.tokens_per_step:.2f}"))
    for k, v in rows:
        t.add_row(k, v)
    if p.range_note:
        t.caption = f"estimate and range: {p.range_note}"
    return t


def breakdown_table(p: Prediction) -> Table:
    t = Table(title="decode step breakdown (one token through every stage)", title_justify="left",
              caption="bytes and FLOPs: per chip of each stage, summed over the stages a token passes")
    for col in ("op", "x", "time", "share", "bytes", "FLOPs", "bound"):
        t.add_column(col, justify="right" if col not in ("op", "bound") else "left")
    total = sum(op.time_s for op in p.breakdown) or 1.0
    for op in p.breakdown:
        t.add_row(op.name, str(op.count), _time(op.time_s), f"{op.time_s / total:.0%}",
                  _si(op.bytes, "B") if op.bytes else "-", _si(op.flops, "FLOP") if op.flops else "-", op.bound)
    return t


def print_prediction(p: Prediction, console: Console | None = None) -> None:
    console = console or Console()
    console.print(prediction_table(p))
    console.print(breakdown_table(p))
    for a in p.assumptions:
        console.print(f"[dim]assumption: {a}[/dim]")
