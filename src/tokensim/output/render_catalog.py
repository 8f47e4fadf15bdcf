"""The model and hardware catalogs as rows (for --json) and as tables."""
from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table


def model_rows() -> list[dict[str, Any]]:
    from tokensim.specs.model.catalog import catalog_model, entries

    rows = []
    for name, e in entries().items():
        m = catalog_model(name)
        rows.append({"name": name, "layers": m.n_layers, "total_params": m.total_params,
                     "active_params": m.active_params, "source": e.source})
    return rows


def print_models(rows: list[dict[str, Any]], console: Console) -> None:
    t = Table("name", "layers", "total", "active", "source")
    for r in rows:
        t.add_row(r["name"], str(r["layers"]), f"{r['total_params'] / 1e9:.1f}B", f"{r['active_params'] / 1e9:.2f}B",
                  r["source"])
    console.print(t)


def hardware_rows() -> list[dict[str, Any]]:
    from tokensim.specs.hardware.catalog import catalog

    rows = []
    for h in catalog().values():
        tier = h.weight_tier
        rows.append({"name": h.name, "display_name": h.display_name, "kind": h.kind,
                     "memory_bytes": tier.capacity_bytes, "memory_tier": tier.tier,
                     "bandwidth_bytes_per_s": tier.bandwidth_bytes_per_s, "flops_per_s": dict(h.flops_per_s),
                     "price_usd_per_hour": h.price_usd_per_hour})
    return rows


def print_hardware(rows: list[dict[str, Any]], console: Console) -> None:
    t = Table("name", "kind", "memory", "bandwidth", "bf16 dense", "$/h")
    for r in rows:
        bf16 = r["flops_per_s"].get("bf16")
        t.add_row(r["name"], r["kind"], f"{r['memory_bytes'] / 1e9:.3g} GB {r['memory_tier']}",
                  f"{r['bandwidth_bytes_per_s'] / 1e12:.3g} TB/s", f"{bf16 / 1e12:.0f} TF" if bf16 else "-",
                  f"{r['price_usd_per_hour']:.2f}" if r["price_usd_per_hour"] else "-")
    console.print(t)
