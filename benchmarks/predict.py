"""Single predictions per second through the public API (plain Python, one core).

Run: python benchmarks/predict.py
"""
from __future__ import annotations

import time

import tokensim
from tokensim.deploy.deployment import Deployment
from tokensim.specs.hardware.catalog import load_hardware
from tokensim.specs.model.catalog import load_model

CASES = [("llama-3.1-8b", "h100-sxm", Deployment(batch=8)),
         ("llama-3.1-70b", "h200", Deployment(tp=4, batch=32)),
         ("deepseek-v3", "h200", Deployment(tp=8, batch=64)),
         ("kimi-k2.6", "cs-3", Deployment(pp=20, batch=1))]


def main(seconds: float = 2.0) -> None:
    for model_name, hw_name, dep in CASES:
        model, hw = load_model(model_name), load_hardware(hw_name)
        tokensim.predict_deployment(model, hw, dep)          # warm the catalogs
        n, start = 0, time.perf_counter()
        while time.perf_counter() - start < seconds:
            tokensim.predict_deployment(model, hw, dep)
            n += 1
        rate = n / (time.perf_counter() - start)
        print(f"{model_name:>14} on {hw_name:<9} ({model.n_layers:3d} layers): {rate:8.0f} predictions/s")


if __name__ == "__main__":
    main()
