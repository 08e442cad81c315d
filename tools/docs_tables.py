#!/usr/bin/env python3
"""docs_tables.py — the documentation's tables that a program prints, made from that program's output, so that the
docs and the programs cannot disagree: the config keys (build/train --help) and the capacity planner's figures
(build/plan --json). Python 3 standard library only; needs `make` (build/train, build/plan).

  tools/docs_tables.py --check     exit 1, naming each table, when a table in the docs differs from the programs'
  tools/docs_tables.py --write     rewrite those tables in place
  tools/docs_tables.py NAME        print one table (config_keys, plan_layouts, plan_grid)

A table lives in a Markdown file between the lines
  <!-- generated: tools/docs_tables.py NAME (edit the program or this tool, then run tools/docs_tables.py --write) -->
  <!-- end NAME -->
Planner figures: GiB per rank at seq_len 128K without recomputation (the plan's total / 2^30, one decimal) and the
longest seq_len that fits per recompute mode, in K = 1024 tokens (rounded to the nearest) below 1024K, else in
M = 1024^2 tokens with two decimals.
"""
import json
import os
import re
import subprocess
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
PLAN_BASE = ["--dp", "1", "--micro_batch", "1", "--zero", "1", "--batch_size", "8"]
# the 8 x H200 plans by layout (docs/parallelism.md): (config, layout arguments)
LAYOUTS = [("1b", "--tp 8"), ("1b", "--tp 8 --tp_sp 1"), ("1b", "--tp 2 --cp 4"), ("1b", "--tp 2 --cp 4 --tp_sp 1"),
           ("1b", "--tp 2 --cp 4 --cp_comm a2a"), ("1b", "--tp 2 --cp 4 --cp_comm a2a+ring --cp_a2a 2 --tp_sp 1"),
           ("1b", "--cp 8"), ("1b", "--cp 8 --cp_comm a2a"), ("1b", "--cp 8 --cp_comm a2a+ring --cp_a2a 4"),
           ("125m", "--tp 2 --cp 4"), ("125m", "--tp 2 --cp 4 --tp_sp 1")]
# the 8 x H200 plans by tp x cp x dp (docs/memory.md)
GRID = [("125m", 1, 8, 1), ("125m", 2, 4, 1), ("125m", 4, 2, 1), ("125m", 1, 4, 2), ("125m", 2, 2, 2),
        ("1b", 1, 8, 1), ("1b", 2, 4, 1), ("1b", 4, 2, 1), ("1b", 8, 1, 1), ("1b", 1, 4, 2), ("1b", 2, 2, 2)]
DOCS = ["docs/config.md", "docs/parallelism.md", "docs/memory.md"]


def run(args):
    r = subprocess.run(args, cwd=ROOT, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"docs_tables: {' '.join(args)} failed: {(r.stderr or r.stdout).strip()[-300:]} (run make first)")
    return r.stdout


def tokens(n):
    return f"{n / 1024:.0f}K" if n < 1024 * 1024 else f"{n / 1024 ** 2:.2f}M"


def plan(config, args):
    d = json.loads(run(["build/plan", "-c", f"configs/llama_{config}_128k.conf"] + args + ["--json"]))
    lg = d["longest"]
    return [f"{d['total'] / 2 ** 30:.1f}"] + [tokens(lg[m]) for m in ("none", "mlp", "qkv", "full")]


def config_keys():
    text = run(["build/train", "--help"])
    rows = ["| key | meaning |", "|---|---|"]
    keys = text.split("\nconfig keys:\n", 1)[1]
    for line in keys.split("\n"):
        m = re.match(r"^  --(\w+) +(.*)$", line)
        if m:
            rows.append(f"| `{m.group(1)}` | {m.group(2).replace('|', chr(92) + '|')} |")
    return rows


def plan_layouts():
    rows = ["| config | layout | GiB at 128K (none) | longest none | mlp | qkv | full |", "|---|---|---:|---:|---:|---:|---:|"]
    for cfg, lay in LAYOUTS:
        rows.append("| " + " | ".join([cfg, lay] + plan(cfg, PLAN_BASE + lay.split())) + " |")
    return rows


def plan_grid():
    rows = ["| config | tp | cp | dp | GiB per rank at 128K (`none`) | longest `none` | `mlp` | `qkv` | `full` |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for cfg, tp, cp, dp in GRID:
        args = ["--tp", str(tp), "--cp", str(cp), "--dp", str(dp), "--micro_batch", "1", "--zero", "1"]
        rows.append("| " + " | ".join([cfg, str(tp), str(cp), str(dp)] + plan(cfg, args)) + " |")
    return rows


TABLES = {"config_keys": config_keys, "plan_layouts": plan_layouts, "plan_grid": plan_grid}
BEGIN = re.compile(r"^<!-- generated: tools/docs_tables.py (\w+) .*-->$")


def regions(path):
    """[(name, first line index of the table, index of its end marker)] of a Markdown file"""
    lines = open(os.path.join(ROOT, path), encoding="utf-8").read().split("\n")
    out = []
    for i, l in enumerate(lines):
        m = BEGIN.match(l)
        if m:
            end = next((j for j in range(i + 1, len(lines)) if lines[j] == f"<!-- end {m.group(1)} -->"), None)
            if end is None:
                sys.exit(f"docs_tables: {path}:{i + 1}: no '<!-- end {m.group(1)} -->' after the table")
            out.append((m.group(1), i + 1, end))
    return lines, out


def main(argv):
    if len(argv) == 1 and argv[0] in TABLES:
        print("\n".join(TABLES[argv[0]]()))
        return 0
    if argv not in (["--check"], ["--write"]):
        print(__doc__.strip())
        return 2
    bad, seen = [], set()
    for path in DOCS:
        lines, regs = regions(path)
        for name, a, b in reversed(regs):
            if name not in TABLES:
                sys.exit(f"docs_tables: {path}: unknown table '{name}' (tables: {', '.join(TABLES)})")
            want = TABLES[name]()
            seen.add(name)
            if lines[a:b] != want:
                diff = next((f"'{x}' vs '{y}'" for x, y in zip(lines[a:b], want) if x != y), f"{b - a} vs {len(want)} lines")
                bad.append(f"{path}: table {name} differs from the programs' output (first: {diff})")
                lines[a:b] = want
        if argv == ["--write"]:
            with open(os.path.join(ROOT, path), "w", encoding="utf-8") as f:
                f.write("\n".join(lines))
    missing = sorted(set(TABLES) - seen)
    if missing:
        bad.append(f"tables placed nowhere in {', '.join(DOCS)}: {', '.join(missing)}")
    for b in bad:
        print(f"docs_tables: {b}" + (" (rewritten)" if argv == ["--write"] and "differs" in b else ""))
    if argv == ["--check"]:
        if not bad:
            print(f"docs_tables: {len(seen)} tables equal the programs' output")
        return 1 if bad else 0
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
