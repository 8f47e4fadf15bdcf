"""Number formats: storage width (with group scales) and the compute rate they use.

The width of every element comes from this one table; no bare `2` for bf16 anywhere else.
Group-scale overheads: int4 g128 with an fp16 scale is 4.125 bits (Marlin's 3.87x ideal
speed-up over fp16, https://github.com/IST-DASLab/marlin); NVFP4 is blocks of 16 with an
FP8 E4M3 scale, 4.5 bits (https://docs.nvidia.com/cuda/cublas/#d-block-quantization);
MXFP4 is blocks of 32 with an 8-bit E8M0 scale, 4.25 bits (OCP Microscaling spec v1.0,
https://www.opencompute.org/documents/ocp-microscaling-formats-mx-v1-0-spec-final-pdf);
DeepSeek FP8 uses 128x128 blocks with an fp32 scale (https://huggingface.co/deepseek-ai/DeepSeek-V3).
"""
from __future__ import annotations

from dataclasses import dataclass

from tokensim.errors import bad_value


@dataclass(frozen=True)
class Precision:
    name: str
    value_bits: int          # bits per stored element, before scales
    group_size: int          # elements sharing one scale (0: no per-group scale)
    scale_bits: int          # bits of each group scale
    native_compute: str      # the tensor-core rate this format can run at when the chip supports it

    @property
    def bytes_per_element(self) -> float:
        scale = self.scale_bits / self.group_size if self.group_size else 0.0
        return (self.value_bits + scale) / 8.0


PRECISIONS: dict[str, Precision] = {
    p.name: p
    for p in (
        Precision("fp32", 32, 0, 0, "fp32"),
        Precision("bf16", 16, 0, 0, "bf16"),
        Precision("fp16", 16, 0, 0, "bf16"),
        Precision("fp8", 8, 128 * 128, 32, "fp8"),
        Precision("int8", 8, 0, 0, "bf16"),    # weight-only W8A16 (gpt-fast, TRT-LLM int8 weight-only)
        Precision("int4", 4, 128, 16, "bf16"),
        Precision("int4-g32", 4, 32, 16, "bf16"),
        # llama.cpp Q4_K_M mixes Q4_K (4.5 bpw) and Q6_K (6.56 bpw) tensors: ~4.85 bits on average
        # (llama.cpp examples/quantize README table), written as 4 bits + 27 bits per 32-element group.
        Precision("q4_k_m", 4, 32, 27, "bf16"),
        Precision("mxfp4", 4, 32, 8, "fp4"),
        Precision("nvfp4", 4, 16, 8, "fp4"),
        Precision("fp4", 4, 16, 8, "fp4"),
    )
}

# Compute formats, slowest first; a chip without a rate for one falls back to the next slower one.
COMPUTE_ORDER = ("fp32", "bf16", "int8", "fp8", "fp4")
COMPUTE_BITS = {"fp32": 32, "bf16": 16, "int8": 8, "fp8": 8, "fp4": 4}   # operand width of each compute format

# Words found in configs, CLI flags and measurement tables, mapped to the table above.
ALIASES: dict[str, str] = {
    "bfloat16": "bf16", "float16": "fp16", "16-bit": "bf16", "16bit": "bf16", "float32": "fp32",
    "e4m3": "fp8", "float8": "fp8", "8-bit": "fp8", "fp8-kv": "fp8", "w8a8": "fp8",
    "int8 weight-only": "int8", "w8a16": "int8",
    "4-bit": "int4", "w4a16": "int4", "int4 weight-only": "int4", "q4_k_m gguf": "q4_k_m",
    "mx-fp4": "mxfp4", "mxfp4-pack-quantized": "mxfp4", "nv-fp4": "nvfp4",
}


def get_precision(name: str, field: str = "precision") -> Precision:
    if not isinstance(name, str):
        raise bad_value(field, name, f"a precision name, one of {', '.join(PRECISIONS)}")
    key = name.strip().lower()
    key = ALIASES.get(key, key)
    if key not in PRECISIONS:
        raise bad_value(field, name, f"one of {', '.join(PRECISIONS)}")
    return PRECISIONS[key]
