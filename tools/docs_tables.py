#!/usr/bin/env python3
"""docs_tables.py — the documentation's tables that a program prints, made from that program's output, so that the
docs and the programs cannot disagree: the config keys (build/train --help), the capacity planner's figures
(build/plan --json) and the demo's summary (tools/experiments/demo.sh). Python 3 standard library only; needs `make`
(build/train, build/plan, build/prepare).

  tools/docs_tables.py --check     exit 1, naming each table, when a table in the docs differs from the programs'
  tools/docs_tables.py --write     rewrite those tables in place (the demo's: see below; may run the demo, minutes)
  tools/docs_tables.py NAME        print one table (config_keys, plan_layouts, plan_grid, demo)

A table lives in a Markdown file between the lines
  <!-- generated: tools/docs_tables.py NAME (edit the program or this tool, then run tools/docs_tables.py --write) -->
  <!-- end NAME -->
Planner figures: GiB per rank at seq_len 128K without recomputation (the plan's total / 2^30, one decimal) and the
longest seq_len that fits per recompute mode, in K = 1024 tokens (rounded to the nearest) below 1024K, else in
M = 1024^2 tokens with two decimals.

The demo's summary (docs/demo.md, table demo) is what `make demo` printed last (out/demo/summary.txt), followed by
the demo's first three training losses (out/demo/metrics.jsonl); its two perplexity plots are copied beside it
(docs/demo_ppl_2048.svg, docs/demo_ppl_8192_yarn.svg) when the block is written. The demo takes minutes, so --check does not rerun
it; it checks, in seconds, what the summary rests on: the data's counts in the summary's data line equal those of
the demo's data prepared now (build/prepare with demo.sh's PREP options: exact counts, whatever the arithmetic),
and the first three losses equal those of the demo's model trained now for three steps on one process within
DEMO_TOL relative (every layout and BLAS kernel gives them within ~1e-8; a change of the data, its split or
packing, the model, its initialisation, the loss or the optimizer moves them far more). A change of rounding alone
(another summation order) passes the check but can move the 300-step numbers by a little: regenerate after such a
change too. --write takes out/demo as it is when it passes the same check against its own metrics.jsonl, and
otherwise runs tools/experiments/demo.sh first (out/demo and out/demo_data are rewritten).
"""
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile

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
DOCS = ["docs/config.md", "docs/parallelism.md", "docs/memory.md", "docs/demo.md"]
DEMO_SH, DEMO_OUT, DEMO_TOL = "tools/experiments/demo.sh", "out/demo", 1e-5
DEMO_PLOTS = ["ppl_2048.svg", "ppl_8192_yarn.svg"]   # out/demo/eval/X -> docs/demo_X, written with the block
DATA_LINE = re.compile(r"(\d+) documents: (\d+) trained on \(([\d,]+) tokens\), (\d+) held out \(([\d,]+) tokens\)")
LOSS_LINE = re.compile(r"^The demo's first training losses .*: ([-0-9.e, ]+)\.$")


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


def demo_now():
    """(counts, losses): the demo's data prepared now as demo.sh prepares it (train documents, tokens, val documents,
    tokens) and the first three losses of its model trained on it now, one process"""
    prep = re.search(r"^PREP=\(([^)]*)\)", open(os.path.join(ROOT, DEMO_SH)).read(), re.M)
    if not prep:
        sys.exit(f"docs_tables: {DEMO_SH} has no PREP=(...) line (build/prepare's options)")
    docs = [d for d in run(["tools/stdlib_docs.sh"]).split("\n") if d]
    tmp = tempfile.mkdtemp(prefix="docs_tables.")
    try:
        run(["build/prepare", "--out", f"{tmp}/data"] + shlex.split(prep.group(1)) + docs)
        m = json.load(open(f"{tmp}/data/meta.json"))
        run(["build/train", "-c", "configs/demo_long.conf", "--train_data", f"{tmp}/data/train_*.bin", "--val_data", "",
             "--out_dir", f"{tmp}/run", "--max_steps", "3", "--save_final", "0", "--peak_tflops", "1", "--log_every", "1000"])
        losses = [json.loads(l)["loss"] for l in open(f"{tmp}/run/metrics.jsonl")]
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return (m["documents"]["train"], m["tokens"]["train"], m["documents"]["val"], m["tokens"]["val"]), losses


def demo_differs(counts, losses, now):
    """why a summary's counts and first losses are not those of now = demo_now(), or None"""
    (c, l) = now
    if counts != c:
        return f"the data's counts {counts} (train documents, tokens, held-out documents, tokens) are now {c}"
    if len(losses) != 3 or any(abs(a - b) > DEMO_TOL * abs(b) for a, b in zip(losses, l)):
        return f"the first losses {losses} are now {l} (tolerance {DEMO_TOL} relative)"
    return None


def demo_parse(lines):
    """(counts, losses) a demo block states"""
    text = "\n".join(lines)
    m = DATA_LINE.search(text)
    counts = (int(m.group(2)), int(m.group(3).replace(",", "")), int(m.group(4)), int(m.group(5).replace(",", ""))) if m else None
    losses = next(([float(x) for x in mm.group(1).split(",")] for mm in map(LOSS_LINE.match, lines) if mm), [])
    return counts, losses


def demo(now=None):
    """the demo block from out/demo (running the demo first when out/demo does not match the code and data now)"""
    now = now or demo_now()
    def made():
        try:
            summary = open(os.path.join(ROOT, DEMO_OUT, "summary.txt"), encoding="utf-8").read().rstrip("\n").split("\n")
            losses = [json.loads(l)["loss"] for l in open(os.path.join(ROOT, DEMO_OUT, "metrics.jsonl"))][:3]
        except (OSError, ValueError, KeyError):
            return None, f"no complete {DEMO_OUT}/summary.txt and metrics.jsonl"
        return (summary, losses), demo_differs(demo_parse(summary)[0], losses, now)
    got, why = made()
    if why:
        print(f"docs_tables: {DEMO_OUT} is not the demo of this code and data ({why}): running {DEMO_SH} (minutes)",
              file=sys.stderr)
        r = subprocess.run(["bash", DEMO_SH], cwd=ROOT, stdout=subprocess.DEVNULL)
        if r.returncode:
            sys.exit(f"docs_tables: {DEMO_SH} failed (exit {r.returncode}); run it to see why")
        got, why = made()
        if why:
            sys.exit(f"docs_tables: the demo just run does not give the demo's first steps on one process: {why}")
    summary, losses = got
    for name in DEMO_PLOTS:   # the plots docs/demo.md shows: the same run's
        shutil.copyfile(os.path.join(ROOT, DEMO_OUT, "eval", name), os.path.join(ROOT, "docs", "demo_" + name))
    return (["```"] + [l.rstrip() for l in summary] + ["```", "",
            "The demo's first training losses (`out/demo/metrics.jsonl`, steps 1–3), which `tests/test_docs.sh` reproduces "
            f"on one process within {DEMO_TOL:g} relative: {', '.join(f'{x:.9g}' for x in losses)}."])


def demo_check(lines, now):
    """--check of a demo block: None, or why it is stale"""
    counts, losses = demo_parse(lines)
    if counts is None or not losses:
        return "it states no data counts or first losses"
    why = demo_differs(counts, losses, now)
    return None if not why else f"{why}: regenerate with tools/docs_tables.py --write (runs the demo, minutes)"


TABLES = {"config_keys": config_keys, "plan_layouts": plan_layouts, "plan_grid": plan_grid, "demo": demo}
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
    bad, seen, now = [], set(), {}
    for path in DOCS:
        lines, regs = regions(path)
        for name, a, b in reversed(regs):
            if name not in TABLES:
                sys.exit(f"docs_tables: {path}: unknown table '{name}' (tables: {', '.join(TABLES)})")
            seen.add(name)
            if name == "demo":   # (see above: checked against what it rests on; written from out/demo)
                now.setdefault("demo", demo_now())
                why = demo_check(lines[a:b], now["demo"])
                have = os.path.exists(os.path.join(ROOT, DEMO_OUT, "summary.txt"))
                if argv == ["--write"] and (why or have):   # (a current block and no demo output: kept)
                    want = demo(now["demo"])
                    if want != lines[a:b]:
                        bad.append(f"{path}: table demo differs from the programs' output (first: {why or 'out/demo is newer'})")
                        lines[a:b] = want
                elif why:
                    bad.append(f"{path}: table demo is stale: {why}")
                continue
            want = TABLES[name]()
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
