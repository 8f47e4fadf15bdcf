"""What the bench sends: request lengths (fixed or from a dataset file) and prompts of a stated length.

A prompt of N tokens is N words, each a common lowercase English word that BPE vocabularies
(GPT-2, cl100k, Llama 3, Qwen) hold as one token with its leading space, and that a WordLevel
tokenizer and the emulator count as one token. The words are drawn per request from a seeded
generator rather than one word repeated: identical prompts would hit a server's prefix cache and
measure a cache, not prefill. A chat template adds a few tokens; the bench records the server's
`usage.prompt_tokens` to show the ratio achieved.
"""
from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path

from tokensim.errors import TokensimError, require

PROMPT_WORDS = (
    "the", "of", "and", "to", "in", "is", "that", "it", "for", "was", "on", "are", "as", "with", "they", "at",
    "be", "this", "have", "from", "or", "one", "had", "by", "word", "but", "not", "what", "all", "were", "we",
    "when", "your", "can", "said", "there", "use", "an", "each", "which", "she", "do", "how", "their", "if",
    "will", "up", "other", "about", "out", "many", "then", "them", "these", "so", "some", "her", "would", "make",
    "like", "him", "into", "time", "has", "look", "two", "more", "write", "go", "see", "number", "no", "way",
    "could", "people", "my", "than", "first", "water", "been", "call", "who", "its", "now", "find", "long",
    "down", "day", "did", "get", "come", "made", "may", "part",
)
LENGTH_KEYS = (("input_tokens", "output_tokens"), ("input_toks", "output_toks"))   # bench datasets; traces


@dataclass(frozen=True)
class RequestSpec:
    input_tokens: int
    output_tokens: int

    def __post_init__(self) -> None:
        require(_count(self.input_tokens) and self.input_tokens >= 1, "input_tokens", self.input_tokens, "an integer >= 1")
        require(_count(self.output_tokens) and self.output_tokens >= 1, "output_tokens", self.output_tokens,
                "an integer >= 1")


def _count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def build_prompt(input_tokens: int, seed: int) -> str:
    """`input_tokens` words drawn from PROMPT_WORDS by a generator seeded with `seed`."""
    rng = random.Random(seed)
    return " ".join(rng.choices(PROMPT_WORDS, k=input_tokens))


def load_dataset(path: str | Path) -> list[RequestSpec]:
    """Request lengths from JSONL: `input_tokens`/`output_tokens` per line, or a trace's `input_toks`/`output_toks`."""
    path = Path(path)
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise TokensimError(f"dataset {path}: cannot read ({exc.strerror or exc})") from None
    specs = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except ValueError:
            raise TokensimError(f"dataset {path}:{number}: not a JSON object") from None
        keys = next((k for k in LENGTH_KEYS if isinstance(row, dict) and k[0] in row and k[1] in row), None)
        if keys is None:
            raise TokensimError(f"dataset {path}:{number}: expected input_tokens and output_tokens "
                                f"(or input_toks and output_toks)")
        try:
            specs.append(RequestSpec(row[keys[0]], row[keys[1]]))
        except TokensimError as exc:
            raise TokensimError(f"dataset {path}:{number}: {exc}") from None
    if not specs:
        raise TokensimError(f"dataset {path}: no requests in the file")
    return specs
