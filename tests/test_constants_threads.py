"""Empirical constants travel in a ConstantsTable, not in module state (issue 9): two tables used at once from
threads of one process must not see each other's values. Before, `constants.overridden` swapped module globals for
the length of a run, so a sweep on a thread pool mixed the scenarios' constants."""

from concurrent.futures import ThreadPoolExecutor

from tokensim import predict
from tokensim.perf.constants import default_table
from tokensim.specs.hardware.catalog import load_hardware


def _speed(table) -> float:
    return predict("llama-3.1-8b", "h100-sxm", batch=1, constants=table).tokens_per_s_per_user


def test_two_constant_tables_in_threads_do_not_mix():
    base = default_table()
    # Halving the usable HBM fraction roughly halves decode speed of a bandwidth-bound step (batch 1, 8B, H100):
    # the test only needs the two tables to give clearly different results.
    family = load_hardware("h100-sxm").family
    slow = base.with_overlay({family: {"default": {"hbm_bandwidth_fraction": 0.4}}})
    alone = {"base": _speed(base), "slow": _speed(slow)}
    assert alone["slow"] < 0.7 * alone["base"]
    with ThreadPoolExecutor(max_workers=8) as pool:
        jobs = [(name, pool.submit(_speed, base if name == "base" else slow)) for name in ["base", "slow"] * 20]
        for name, job in jobs:
            assert job.result() == alone[name], name
    # and the default table is left as it was
    assert _speed(default_table()) == alone["base"]
