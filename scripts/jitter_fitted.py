"""Write a copy of a fitted table with every fitted constant nudged by a relative step, for the null experiment that
measures how far the fit's out-of-sample figures move when nothing physical changes (docs/model.md 7).

Run:
    python scripts/jitter_fitted.py -o /tmp/jitter.toml [--step 0.002] [--seed 56] [--fitted FILE]
    TOKENSIM_FITTED=/tmp/jitter.toml tokensim fit --keep-constants -o /tmp/null.toml

Each constant that `tokensim fit` fits (validate/fit.py PARAMS) is multiplied by 1 + step or 1 - step (the sign drawn
from the seed), kept inside its bounds (a constant at a bound moves the other way); everything else is copied as it is.
"""
from __future__ import annotations

import argparse
import random
import re
import sys
import tomllib
from pathlib import Path

from tokensim.perf.constants import data_path
from tokensim.validate.fit import PARAMS

SECTION = re.compile(r"^\[constants\.(?P<family>[^.\]]+)\.(?P<engine>[^.\]]+)\]$")
VALUE = re.compile(r"^(?P<name>\w+) = (?P<value>[0-9.eE+-]+)(?P<rest>\s*#.*)?$")


def jittered(text: str, step: float, seed: int) -> tuple[str, int]:
    bounds = {(p.family, p.engine, p.name): (p.lo, p.hi) for p in PARAMS}
    rng = random.Random(seed)
    out, section, moved = [], None, 0
    for line in text.splitlines():
        m = SECTION.match(line)
        if m:
            section = (m["family"], m["engine"])
        elif line.startswith("["):
            section = None
        v = VALUE.match(line) if section else None
        key = (*section, v["name"]) if v else None        # v is only read inside a constants table
        if key in bounds:
            lo, hi = bounds[key]
            value, sign = float(v["value"]), rng.choice((-1.0, 1.0))
            new = min(max(value * (1 + sign * step), lo), hi)
            if new == value:
                new = min(max(value * (1 - sign * step), lo), hi)
            line = f"{v['name']} = {new:.6g}{v['rest'] or ''}"
            moved += 1
        out.append(line)
    return "\n".join(out) + "\n", moved


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-o", "--output", required=True, type=Path)
    ap.add_argument("--fitted", type=Path, default=None, help="the table to nudge (default: the shipped fitted.toml)")
    ap.add_argument("--step", type=float, default=0.002)
    ap.add_argument("--seed", type=int, default=56)
    a = ap.parse_args(argv)
    if not 0 < a.step < 0.5:
        print(f"--step: {a.step} is not a relative step in (0, 0.5)", file=sys.stderr)
        return 2
    source = a.fitted or data_path("fitted.toml")
    text, moved = jittered(Path(source).read_text(encoding="utf-8"), a.step, a.seed)
    tomllib.loads(text)                     # still a table the fit reads
    a.output.write_text(text, encoding="utf-8")
    print(f"{moved} constants nudged by {a.step:g} into {a.output}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
