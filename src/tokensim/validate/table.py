"""Read a measurements CSV (the columns of shared/data/measurements.csv) with clear errors on bad input.

Count cells are read by validate.parse.count ('~2k', '2,048', '128k', 'n/s'); how each was read is kept in
Row.readings so that a prediction can list it among its assumptions."""
from __future__ import annotations

import csv
import re
from dataclasses import dataclass
from pathlib import Path

from tokensim.errors import TokensimError
from tokensim.validate.parse import count

COLUMNS = ("id", "provider_or_engine", "hardware", "n_chips", "model", "total_params_B", "active_params_B",
           "weight_precision", "kv_precision", "batch_or_concurrency", "input_tokens", "output_tokens",
           "spec_decode", "metric", "value", "source_url", "source_date", "notes")
METRICS = ("output_tps_per_user", "ttft_s", "throughput_tps_total", "throughput_tps_per_chip")


@dataclass(frozen=True)
class Row:
    id: str
    provider_or_engine: str
    hardware: str
    n_chips: int | None
    model: str
    weight_precision: str
    kv_precision: str
    batch: int | None
    batch_approximate: bool
    input_tokens: int | None
    output_tokens: int | None
    spec_decode: str
    metric: str
    value: float
    source_url: str
    source_date: str
    notes: str
    readings: tuple[str, ...] = ()      # how free-text cells were read ('input_tokens '8K' read as 8192')

    @property
    def source_key(self) -> str:
        """The source document (URL without fragment), for leave-one-source-out."""
        return self.source_url.split("#")[0].rstrip("/")


def parse_number(text: str, field: str, row_id: str) -> float | None:
    """'~1088', '1,200', '5-10' (midpoint) or '' -> a number or None; anything else is an error."""
    t = text.strip().replace(",", "").lstrip("~").strip()
    if not t:
        return None
    m = re.fullmatch(r"(\d+(?:\.\d+)?)\s*(?:-|to)\s*(\d+(?:\.\d+)?)", t)
    if m:
        return (float(m.group(1)) + float(m.group(2))) / 2.0
    try:
        return float(t)
    except ValueError:
        raise TokensimError(f"row {row_id}: {field} = {text!r}: expected a number, '~number', a range 'a-b' or empty") from None


def read_rows(path: str | Path) -> list[Row]:
    path = Path(path)
    try:
        handle = path.open(newline="", encoding="utf-8")
    except OSError as exc:
        raise TokensimError(f"{path}: cannot read ({exc.strerror})") from None
    with handle:
        reader = csv.DictReader(handle)
        header = reader.fieldnames or []
        missing = [c for c in COLUMNS if c not in header]
        if missing:
            raise TokensimError(f"{path}: missing columns {', '.join(missing)}; expected the columns {', '.join(COLUMNS)}")
        rows = []
        for n, raw in enumerate(reader, start=2):
            rid = (raw.get("id") or f"line {n}").strip()
            metric = (raw["metric"] or "").strip().lower()
            if metric not in METRICS:
                raise TokensimError(f"row {rid}: metric = {metric!r}: expected one of {', '.join(METRICS)}")
            value = parse_number(raw["value"] or "", "value", rid)
            if value is None or value <= 0:
                raise TokensimError(f"row {rid}: value = {raw['value']!r}: expected a positive number")
            cell = {c: (raw.get(c) or "").strip() for c in COLUMNS}
            chips = count(cell["n_chips"], "n_chips", rid)
            batch = count(cell["batch_or_concurrency"], "batch_or_concurrency", rid)
            inp = count(cell["input_tokens"], "input_tokens", rid, tokens=True)
            out = count(cell["output_tokens"], "output_tokens", rid, tokens=True)
            rows.append(Row(
                id=rid, provider_or_engine=cell["provider_or_engine"], hardware=cell["hardware"], n_chips=chips.value,
                model=cell["model"], weight_precision=cell["weight_precision"], kv_precision=cell["kv_precision"],
                batch=batch.value, batch_approximate=batch.approximate,
                input_tokens=inp.value, output_tokens=out.value, spec_decode=cell["spec_decode"], metric=metric,
                value=value, source_url=cell["source_url"], source_date=cell["source_date"], notes=cell["notes"],
                readings=tuple(c.note for c in (chips, batch, inp, out) if c.note),
            ))
    return rows
