"""Measure this machine with short microbenchmarks and write it as a tokensim hardware file (kind "cpu").

What is measured (about 5 to 15 s in all):
- memory bandwidth: numpy copy (bytes read + bytes written, the STREAM convention) and sum (bytes
  read) over arrays far larger than the caches, on one thread and on every available core, best
  of several runs;
- matrix-multiply rate for each precision numpy offers (float32, float64) through its BLAS, best
  of several runs at a size that runs long enough to time; bf16 only through a library that has a
  bf16 matrix multiply (torch, in this interpreter or in the one `torch_python` names, e.g. an
  inference engine's virtual environment), else recorded as not measured;
- the cores this process may use (os.sched_getaffinity), the CPU model (/proc/cpuinfo), the memory
  size (/proc/meminfo) and the load average before and after.
These are achieved rates on this machine under its load at the time, not datasheet peaks.
"""
from __future__ import annotations

import importlib.util
import json
import os
import platform
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

from tokensim.errors import TokensimError, require

DEFAULT_ARRAY_BYTES = 512 * 2**20        # per array; L3 caches of current server CPUs are up to ~1 GB in all
GEMM_MIN_TIME_S = 0.1                   # grow the matrix until one multiply takes this long
GEMM_MAX_N = 4096
VENDORS = {"GenuineIntel": "Intel", "AuthenticAMD": "AMD", "0x41": "Arm", "0xc0": "Ampere", "0x48": "HiSilicon"}


@dataclass(frozen=True)
class HardwareProbe:
    cpu_model: str
    vendor: str
    cores: int                                    # cores this process may run on
    memory_capacity_bytes: float
    memory_bandwidth_bytes_per_s: float           # best of the bandwidth tests below
    bandwidth_tests_bytes_per_s: tuple[tuple[str, float], ...]    # ("copy_2_threads", 1.9e10), ...
    gemm_flops_per_s: tuple[tuple[str, float], ...]               # ("fp32", 7.8e10), ("fp64", ...)
    gemm_methods: tuple[tuple[str, str], ...]                     # how each rate was measured
    not_measured: tuple[tuple[str, str], ...]                     # ("bf16", why)
    array_bytes: int
    repeats: int
    load_average_before: tuple[float, ...]
    load_average_after: tuple[float, ...]
    measured_at: str                              # UTC, ISO 8601
    duration_s: float
    numpy_version: str


def probe_hardware(array_bytes: int | None = None, repeats: int = 5, torch_python: str | None = None) -> HardwareProbe:
    """Run the microbenchmarks; `array_bytes` per array (default 512 MiB, less if memory is short); the bf16 rate
    with torch in this interpreter or, when `torch_python` is given, in that Python (an engine's environment: the
    rate its kernels reach, e.g. with AMX, which numpy cannot show)."""
    require(repeats >= 1, "repeats", repeats, "1 or more runs")
    started = time.perf_counter()
    load_before = _load_average()
    info = _cpuinfo()
    capacity = _meminfo_bytes("MemTotal")
    available = _meminfo_bytes("MemAvailable") or capacity
    if array_bytes is None:
        array_bytes = int(min(DEFAULT_ARRAY_BYTES, available / 8)) if available else DEFAULT_ARRAY_BYTES
    require(array_bytes >= 2**20, "array_bytes", array_bytes, "1 MiB or more")
    cores = len(os.sched_getaffinity(0))
    bandwidth = _bandwidth_tests(array_bytes, cores, repeats)
    gemm, methods, missing = _gemm_tests(min(repeats, 3), torch_python)
    return HardwareProbe(
        cpu_model=info.get("model name") or info.get("Model") or platform.processor() or platform.machine(),
        vendor=VENDORS.get(info.get("vendor_id") or info.get("CPU implementer", ""), info.get("vendor_id", "unknown")),
        cores=cores, memory_capacity_bytes=float(capacity or 0),
        memory_bandwidth_bytes_per_s=max(rate for _, rate in bandwidth), bandwidth_tests_bytes_per_s=bandwidth,
        gemm_flops_per_s=gemm, gemm_methods=methods, not_measured=missing, array_bytes=array_bytes, repeats=repeats,
        load_average_before=load_before, load_average_after=_load_average(),
        measured_at=datetime.now(UTC).isoformat(timespec="seconds"),
        duration_s=time.perf_counter() - started, numpy_version=np.__version__)


def _load_average() -> tuple[float, ...]:
    try:
        with open("/proc/loadavg", encoding="ascii") as f:
            return tuple(float(x) for x in f.read().split()[:3])
    except (OSError, ValueError):
        return tuple(os.getloadavg())


def _cpuinfo() -> dict[str, str]:
    info: dict[str, str] = {}
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                key, sep, value = line.partition(":")
                if sep and key.strip() not in info:
                    info[key.strip()] = value.strip()
    except OSError:
        pass
    return info


def _meminfo_bytes(field: str) -> int | None:
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def _best_time_s(repeats: int, run, *args) -> float:
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        run(*args)
        best = min(best, time.perf_counter() - start)
    return best


def _bandwidth_tests(array_bytes: int, cores: int, repeats: int) -> tuple[tuple[str, float], ...]:
    n = array_bytes // 8
    src = np.ones(n)                    # np.ones and the first copy touch every page before timing
    dst = np.empty(n)
    np.copyto(dst, src)
    results = []
    for threads in sorted({1, cores}):
        bounds = np.linspace(0, n, threads + 1).astype(int)
        parts = [(src[a:b], dst[a:b]) for a, b in zip(bounds[:-1], bounds[1:], strict=True)]
        with ThreadPoolExecutor(threads) as pool:   # numpy releases the GIL inside copyto and sum
            on = f"{threads}_thread" + ("s" if threads > 1 else "")
            copy_s = _best_time_s(repeats, _on_all, pool, lambda part: np.copyto(part[1], part[0]), parts)
            sum_s = _best_time_s(repeats, _on_all, pool, lambda part: part[0].sum(), parts)
        results += [(f"copy_{on}", 2 * n * 8 / copy_s), (f"sum_{on}", n * 8 / sum_s)]
    return tuple(results)


def _on_all(pool: ThreadPoolExecutor, work, parts: list) -> None:
    list(pool.map(work, parts))


def _gemm_tests(repeats: int, torch_python: str | None = None) -> tuple[tuple, tuple, tuple]:
    rates, methods = [], []
    for name, dtype in (("fp32", np.float32), ("fp64", np.float64)):
        n = 256
        while True:
            a, b = np.ones((n, n), dtype), np.ones((n, n), dtype)
            elapsed = _best_time_s(1, np.matmul, a, b)
            if elapsed >= GEMM_MIN_TIME_S or n >= GEMM_MAX_N:
                break
            n *= 2
        elapsed = min(elapsed, _best_time_s(repeats, np.matmul, a, b))
        rates.append((name, 2 * n**3 / elapsed))
        methods.append((name, f"numpy {np.dtype(dtype).name} matmul {n}x{n}x{n}, 2*n^3 operations, best of "
                              f"{repeats + 1} runs"))
    missing = []
    bf16 = _torch_bf16(repeats) if torch_python is None else _torch_bf16_in(torch_python, repeats)
    if bf16 is None:
        missing.append(("bf16", "numpy has no bfloat16 matrix multiply and torch is not installed"))
    else:
        rates.append(("bf16", bf16[0]))
        methods.append(("bf16", bf16[1]))
    return tuple(rates), tuple(methods), tuple(missing)


def _torch_bf16(repeats: int) -> tuple[float, str] | None:
    if importlib.util.find_spec("torch") is None:
        return None
    import torch
    n = 2048
    a = torch.ones((n, n), dtype=torch.bfloat16)
    b = torch.ones((n, n), dtype=torch.bfloat16)
    torch.matmul(a, b)
    elapsed = _best_time_s(repeats, torch.matmul, a, b)
    return 2 * n**3 / elapsed, f"torch {torch.__version__} bfloat16 matmul {n}x{n}x{n} on the CPU, best of {repeats} runs"


_BF16_SCRIPT = """
import json, sys, time, torch
repeats, rate = int(sys.argv[1]), 0.0
for n in (1024, 2048):
    a = torch.ones((n, n), dtype=torch.bfloat16)
    b = torch.ones((n, n), dtype=torch.bfloat16)
    torch.matmul(a, b)
    for _ in range(repeats):
        start = time.perf_counter()
        torch.matmul(a, b)
        rate = max(rate, 2 * n**3 / (time.perf_counter() - start))
print(json.dumps({"flops_per_s": rate, "torch": torch.__version__, "threads": torch.get_num_threads()}))
"""
TORCH_PROBE_TIMEOUT_S = 120


def _torch_bf16_in(python: str, repeats: int) -> tuple[float, str]:
    """The bf16 matmul rate measured by torch in another interpreter (a fixed script, run with `python -c`)."""
    def refuse(why: str) -> TokensimError:
        return TokensimError(f"--torch-python: {python!r}: {why}; expected a Python interpreter with torch installed")
    try:
        done = subprocess.run([python, "-c", _BF16_SCRIPT, str(repeats)], capture_output=True, text=True,
                              timeout=TORCH_PROBE_TIMEOUT_S, check=False)
    except FileNotFoundError:
        raise refuse("no such file") from None
    except PermissionError:
        raise refuse("not executable") from None
    except subprocess.TimeoutExpired:
        raise refuse(f"the measurement did not finish in {TORCH_PROBE_TIMEOUT_S} s") from None
    except OSError as exc:
        raise refuse(str(exc.strerror or exc)) from None
    last = (done.stderr.strip().splitlines() or ["no output"])[-1]
    if done.returncode != 0:
        raise refuse(f"exited with {done.returncode} ({last[:200]})")
    try:
        out = json.loads(done.stdout.strip().splitlines()[-1])
        rate = float(out["flops_per_s"])
    except (ValueError, KeyError, IndexError, TypeError):
        raise refuse(f"printed {done.stdout[:200]!r}, not the measurement") from None
    if not (rate > 0 and rate < 1e18):
        raise refuse(f"measured {rate} FLOP/s")
    return rate, (f"torch {out.get('torch')} bfloat16 matmul, n x n x n for n = 1024 and 2048, on the CPU in {python} "
                  f"({out.get('threads')} threads), best of {repeats} runs of each")


def write_hardware_file(path: str | Path, result: HardwareProbe, name: str = "this-machine") -> Path:
    """Write `result` as a hardware TOML file in the catalog's layout (kind "cpu"), achieved figures only."""
    require(bool(name) and name.replace("-", "").isalnum(), "name", name, "letters, digits and dashes")
    date = result.measured_at[:10]
    said = f"measured by tokensim hardware probe on {date}"
    op, _, on = max(result.bandwidth_tests_bytes_per_s, key=lambda t: t[1])[0].partition("_")
    bandwidth_method = f"{op} on {on.replace('_', ' ')}"
    methods = dict(result.gemm_methods)
    conditions = (f"{result.cores} cores available, load average {_floats(result.load_average_before)} before and "
                  f"{_floats(result.load_average_after)} after, numpy {result.numpy_version}")
    memory_source = (f"{said}: best of {result.repeats} runs of numpy {bandwidth_method} over two arrays of "
                     f"{result.array_bytes / 2**20:.0f} MiB (copy counts bytes read + written); capacity from "
                     f"/proc/meminfo MemTotal; {conditions}")
    catalog_formats = [(fmt, rate) for fmt, rate in result.gemm_flops_per_s if fmt != "fp64"]   # the catalog has no fp64
    compute_source = f"{said}: " + "; ".join(methods[fmt] for fmt, _ in catalog_formats) + f"; {conditions}"
    lines = [
        f"# {result.cpu_model}, {said}. Achieved figures under the load at the time, not datasheet peaks.",
        f"name = {_s(name)}",
        f"display_name = {_s(f'{result.cpu_model} ({result.cores} cores available), measured')}",
        f"vendor = {_s(result.vendor)}",
        'kind = "cpu"',
        'family = "cpu"',
        "aliases = []",
        'notes = """',
        f"Measured by tokensim hardware probe on {result.measured_at} in {result.duration_s:.1f} s: these are rates",
        "achieved by numpy (bf16: torch) on this machine, not datasheet peaks, so the model's achieved-fraction constants",
        "for CPUs should not be applied to them again. Conditions: " + conditions + ".",
        "Power and price are not measured. "
        + " ".join(f"{fmt} not measured: {why}." for fmt, why in result.not_measured),
        '"""',
        "",
        "[[memory]]",
        'tier = "dram"',
        f"capacity_bytes = {_f(result.memory_capacity_bytes)}",
        f"bandwidth_bytes_per_s = {_f(result.memory_bandwidth_bytes_per_s)}",
        f"source = {_s(memory_source)}",
        "",
        "[compute]",
        *[f"{fmt}_flops_per_s = {_f(rate)}" for fmt, rate in catalog_formats],
        f"source = {_s(compute_source)}",
        "",
        "[system]",
        "chips = 1",
        f"source = {_s(f'{said}: this machine counted as one device')}",
        "",
        "[probe]",
        f"measured_at = {_s(result.measured_at)}",
        f"cpu_model = {_s(result.cpu_model)}",
        f"cores = {result.cores}",
        f"duration_s = {_f(result.duration_s)}",
        f"array_bytes = {result.array_bytes}",
        f"load_average_before = [{_floats(result.load_average_before)}]",
        f"load_average_after = [{_floats(result.load_average_after)}]",
        *[f"gemm_{fmt}_flops_per_s = {_f(rate)}" for fmt, rate in result.gemm_flops_per_s],
        *[f"bandwidth_{test}_bytes_per_s = {_f(rate)}" for test, rate in result.bandwidth_tests_bytes_per_s],
        f"not_measured = [{', '.join(_s(f'{fmt}: {why}') for fmt, why in result.not_measured)}]",
    ]
    path = Path(path)
    try:
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    except OSError as exc:
        raise TokensimError(f"{path}: cannot write ({exc.strerror or exc})") from None
    return path


def _s(text: str) -> str:
    """A TOML basic string (JSON's escapes are TOML's, for the characters written here)."""
    return json.dumps(text, ensure_ascii=False).replace("\x7f", "\\u007f")


def _f(value: float) -> str:
    return repr(float(f"{value:.4g}"))


def _floats(values: tuple[float, ...]) -> str:
    return ", ".join(_f(v) for v in values)
