"""Step schedulers, one per engine, each with that engine's documented defaults."""
from tokensim.sim.schedulers.sglang import SglangScheduler
from tokensim.sim.schedulers.static import StaticBatchScheduler
from tokensim.sim.schedulers.trtllm import TrtllmScheduler
from tokensim.sim.schedulers.vllm import VllmScheduler

__all__ = ["SglangScheduler", "StaticBatchScheduler", "TrtllmScheduler", "VllmScheduler"]
