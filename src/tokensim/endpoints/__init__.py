"""Real endpoints: measure OpenAI-compatible servers, emulate a modelled deployment behind one, probe this machine.

- `run_bench(BenchConfig(...))` drives a server with Poisson or closed-loop load and returns
  statistics in the serving simulator's layout; `BenchResult.save_trace(folder)` writes a replayable trace.
- `run_emulator(source, ...)` serves /v1/chat/completions and /v1/completions with token timing
  from a timing source (the simulator's `OnlineSimulation`, or `FixedRateSource`).
- `probe_hardware()` and `write_hardware_file()` measure this CPU machine into a hardware file.
"""
from tokensim.endpoints.bench import BenchConfig, bench_async, run_bench
from tokensim.endpoints.emulator import RunningEmulator, create_app, run_emulator, start_emulator
from tokensim.endpoints.probe import HardwareProbe, probe_hardware, write_hardware_file
from tokensim.endpoints.results import BenchResult, RequestRecord
from tokensim.endpoints.timing import FixedRateSource, TimingSource, TokenEvent
from tokensim.endpoints.workload import RequestSpec, build_prompt, load_dataset

__all__ = [
    "BenchConfig", "BenchResult", "FixedRateSource", "HardwareProbe", "RequestRecord", "RequestSpec",
    "RunningEmulator", "TimingSource", "TokenEvent", "bench_async", "build_prompt", "create_app", "load_dataset",
    "probe_hardware", "run_bench", "run_emulator", "start_emulator", "write_hardware_file",
]
