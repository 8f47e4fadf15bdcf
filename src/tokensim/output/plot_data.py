"""Sweeps that feed the plots: predictions over batches and over pipeline depths, as plain point dicts."""
from __future__ import annotations

from dataclasses import replace

from tokensim.deploy.deployment import Deployment
from tokensim.deploy.layout import fit_error
from tokensim.errors import TokensimError
from tokensim.prediction.predictor import predict, predict_deployment
from tokensim.specs.hardware.catalog import load_hardware
from tokensim.specs.hardware.spec import HardwareSpec
from tokensim.specs.model.catalog import load_model

DEFAULT_BATCHES = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)


def speed_vs_batch_points(model: str, hardware: list[str | HardwareSpec], batches=DEFAULT_BATCHES, **predict_kw) -> list[dict]:
    """tokens/s per user at each batch on each chip (`predict_kw` go to tokensim.predict: tp, weights, ...).
    A batch that does not fit is left out; a chip where no batch can be predicted raises the first reason."""
    points = []
    for hw_name in hardware:
        hw = load_hardware(hw_name)
        first_error = None
        found = 0
        for batch in batches:
            try:
                p = predict(model, hw, batch=batch, **predict_kw)
            except TokensimError as exc:
                first_error = first_error or exc
                continue
            found += 1
            points.append({"hardware": hw.name, "family": hw.family, "batch": batch, "chips": p.chips,
                           "tokens_per_s_per_user": p.tokens_per_s_per_user,
                           "throughput_tokens_per_s_per_chip": p.throughput_tokens_per_s_per_chip})
        if not found:
            raise TokensimError(f"{hw.name}: no batch of {list(batches)} can be predicted ({first_error})")
    return points


def ttft_vs_depth_points(model: str, hardware: str | HardwareSpec = "cs-3", depths=None, **deployment_kw) -> list[dict]:
    """TTFT of one chip per stage (tp 1) at each pipeline depth, from the fewest stages that hold the model to one
    layer per stage (`depths` narrows the range; `deployment_kw` are Deployment fields: input_tokens, weights, ...)."""
    m, hw = load_model(model), load_hardware(hardware)
    base = Deployment(**deployment_kw)
    points = []
    for pp in depths or range(1, m.n_layers + 1):
        dep = replace(base, tp=1, pp=pp)
        if fit_error(m, hw, dep) is not None:
            continue
        p = predict_deployment(m, hw, dep)
        points.append({"model": m.name, "hardware": hw.name, "family": hw.family, "pp": pp, "ttft_s": p.ttft_s,
                       "tokens_per_s_per_user": p.tokens_per_s_per_user})
    if not points:
        raise TokensimError(f"model {m.name} fits at no pipeline depth of one {hw.name} per stage")
    return points
