#!/usr/bin/env python3
"""plot_metrics.py — training curves from build/train's OUT_DIR/metrics.jsonl: one SVG with four panels (loss with
the validation points, learning rate, tokens/s, grad norm), one colour per run, and a CSV of the plotted values
beside it. Python 3 standard library only.

  tools/plot_metrics.py RUN [RUN ...] [--label NAME ...] [--out FILE.svg] [--smooth N] [--x step|tokens]
                        [--log loss,grad_norm] [--title TEXT]

RUN is an out_dir (its metrics.jsonl is read) or a metrics file. --out (default: RUN/metrics.svg for one run,
./metrics.svg for several) names the SVG; the CSV (run,step,tokens_seen,loss,val_loss,lr,tokens_per_s,grad_norm,
the smoothed columns with --smooth, then start,layout: filled in the first record of each run) goes beside it with
the suffix .csv. --label names the runs in order
(default: the out_dir's name). --smooth N draws the trailing mean of the last N values of loss, tokens/s and grad
norm over the raw values (drawn faint); validation loss and the learning rate are never smoothed. --x tokens puts
tokens_seen on the x axis instead of the step. --log KEYS draws those panels (loss, lr, tokens_per_s, grad_norm)
on a log scale (values <= 0 left out; a panel without a value above 0 stays linear).

Records: one JSON object per line with an integer "step"; a missing key or a value that is not a number leaves
that point out, a nan / inf value (also C's bare nan, inf) is marked by a triangle on the top edge of its panel.
A resume is marked by a dashed vertical line in each panel, labelled in the loss panel (inside its frame, on two
lines when one would not fit) with the layout when it changed (build/train's first record of each run says "start": "new" | "resume" | "init_from" and its "layout").
A resumed run appends to the file: a step number that is not above the previous record's starts over there, so
the earlier records from that step on are dropped (the later lines win; a tail the resumed run did not reach again
goes too, as TensorBoard purges orphaned steps). A last line without a newline that does not parse (a run still
writing) is left out. Bad input — a missing file, a line that is not a JSON object with an integer step, a step
outside [0, 2^53], a finite value other than 0 whose magnitude lies outside [1e-300, 1e300] (no axis can show it), a
file without records — is one line on stderr (naming the line) and exit status 1.

SVG layout (pixels) as build/eval's plots (eval/report.c): each panel a PLOT_W x PLOT_H frame with its title above,
tick labels left and below, grid lines; the legend right of the panels. Coordinates have one decimal.
"""
import argparse
import bisect
import csv
import io
import json
import math
import os
import re
import sys

PROG = "plot_metrics"
PALETTE = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"]
PANELS = [  # (key, title, smoothable)
    ("loss", "loss (line: training, dots: validation)", True),
    ("lr", "learning rate", False),
    ("tokens_per_s", "tokens/s", True),
    ("grad_norm", "grad norm (before clipping)", True),
]
PLOT_W, PLOT_H = 440.0, 240.0      # one panel's frame
PAN_L, PAN_T, PAN_B, PAN_R = 70.0, 34.0, 50.0, 24.0   # room around a frame: tick labels, title, x labels
TOP = 46.0                        # the overall title
CHAR_W = 7.0                      # rough width of one 12px sans-serif character, for layout only
MAX_PTS = 4                       # points kept per pixel column of a long series (first, min, max, last)
CSV_KEYS = ["tokens_seen", "loss", "val_loss", "lr", "tokens_per_s", "grad_norm"]
MAX_STEP = 2 ** 53                # steps above this are no exact floats (the x axis computes in floats)
MIN_ABS, MAX_ABS = 1e-300, 1e300  # finite values outside these magnitudes overflow the axes' arithmetic


class Fail(Exception):
    """One-line error: printed as 'plot_metrics: message', exit status 1."""


class ArgParser(argparse.ArgumentParser):
    def error(self, message):
        raise Fail(f"{message} (see --help)")


# ----------------------------------------------------------------------------------------------- reading
_BARE = re.compile(r"([:\[,]\s*)(-?)(nan|inf|infinity)(?=\s*[,\]}])", re.IGNORECASE)


def _bare(m):
    word = "NaN" if m.group(3).lower() == "nan" else m.group(2) + "Infinity"
    return m.group(1) + word


def parse_line(text):
    """A JSON value; C's bare nan / inf / -inf are read as NaN / Infinity. ValueError when it does not parse."""
    try:
        return json.loads(text)
    except ValueError:
        fixed = _BARE.sub(_bare, text)
        if fixed == text:
            raise
        return json.loads(fixed)


def metrics_file(arg):
    """RUN → its metrics file: a directory's metrics.jsonl, or the file itself."""
    if os.path.isdir(arg):
        p = os.path.join(arg, "metrics.jsonl")
        if not os.path.exists(p):
            raise Fail(f"'{arg}' is a directory without metrics.jsonl (not a training out_dir?)")
        return p
    if not os.path.exists(arg):
        raise Fail(f"'{arg}': no such file or directory")
    return arg


def shown(v):
    """A number for a message: floats with 6 digits, long integers cut (their digits counted)."""
    if isinstance(v, float):
        return f"{v:.6g}"
    t = str(v)
    return t if len(t) <= 24 else f"{t[:12]}... ({len(t)} digits)"


def number(v):
    """A record's value as a float, or None when it is not a number (bool, string, null, missing)."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    return float(v)


class Run:
    """One run's records, in step order, each step once (see read_run)."""

    def __init__(self, path, label):
        self.path, self.label = path, label
        self.records = []        # dicts, strictly increasing "step"
        self.dropped = 0         # records superseded by later ones (resumes)
        self.partial = False     # an unfinished last line was left out

    def starts(self, xkey):
        """[(x, text)] where the trainer resumed (the first record of a resumed run: "start": "resume"), with the
        layout when it differs from the previous start's (build/train writes "start" and "layout" in its first record)"""
        out, layout = [], None
        for r in self.records:
            if not isinstance(r.get("start"), str):
                continue
            lay = r.get("layout") if isinstance(r.get("layout"), str) else None
            x = r["step"] if xkey == "step" else number(r.get(xkey))
            if r["start"] == "resume" and x is not None and math.isfinite(x):
                text = f"resumed at step {r['step'] - 1}"
                if lay and layout and lay != layout:
                    text += f": {layout} -> {lay}"
                out.append((float(x), text))
            layout = lay or layout
        return out

    def series(self, key, xkey):
        """[(x, y)] of the records that have both (y may be nan / inf)."""
        out = []
        for r in self.records:
            x = r["step"] if xkey == "step" else number(r.get(xkey))
            y = number(r.get(key))
            if x is not None and y is not None and math.isfinite(x):
                out.append((float(x), y))
        return out


def read_run(path, label):
    """Reads a metrics.jsonl. A step not above the last kept one restarts there (the later records win)."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise Fail(f"cannot read '{path}': {e.strerror or e}")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise Fail(f"'{path}' is not a metrics.jsonl: not UTF-8 text (byte {e.start})")
    run = Run(path, label)
    steps = []                   # the kept records' steps, for bisect
    lines = text.split("\n")
    for i, line in enumerate(lines):
        s = line.strip()
        if not s:
            continue
        try:
            rec = parse_line(s)
        except (ValueError, RecursionError):
            if i == len(lines) - 1 and run.records:   # no newline after it: a record still being written
                run.partial = True
                continue
            raise Fail(f"'{path}' line {i + 1} is not JSON: {s[:60]!r}{'...' if len(s) > 60 else ''}")
        if not isinstance(rec, dict):
            raise Fail(f"'{path}' line {i + 1}: a JSON {type(rec).__name__}, not an object of one step's metrics")
        step = rec.get("step")
        if isinstance(step, float) and step.is_integer():
            step = int(step)
        if isinstance(step, bool) or not isinstance(step, int):
            raise Fail(f"'{path}' line {i + 1}: no integer \"step\" in the record")
        if not 0 <= step <= MAX_STEP:
            raise Fail(f"'{path}' line {i + 1}: \"step\" {shown(rec['step'])} is outside [0, 2^53] (not a training step)")
        rec["step"] = step
        for key in CSV_KEYS:   # the values drawn: their ranges must leave room for axis arithmetic
            v = rec.get(key)
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                continue
            try:
                f = float(v)
            except OverflowError:
                f = math.inf if v > 0 else -math.inf
            if math.isfinite(f) and f != 0 and not MIN_ABS <= abs(f) <= MAX_ABS or isinstance(v, int) and not math.isfinite(f):
                raise Fail(f"'{path}' line {i + 1}: \"{key}\" {shown(v)} is outside the values a plot can show "
                           f"(0, or a magnitude in [1e-300, 1e300])")
        cut = bisect.bisect_left(steps, step)       # records from this step on are superseded
        if cut < len(steps):
            run.dropped += len(steps) - cut
            del steps[cut:], run.records[cut:]
        steps.append(step)
        run.records.append(rec)
    if not run.records:
        raise Fail(f"'{path}' has no records (empty file)" if not text.strip() else f"'{path}' has no records")
    return run


def default_labels(files):
    """The out_dir's name per file (or the file's name when it is not metrics.jsonl), made unique with parents."""
    parts = []
    for f in files:
        p = os.path.abspath(f)
        d, base = os.path.split(p)
        comps = [c for c in d.split(os.sep) if c]
        if base != "metrics.jsonl":
            comps.append(base[:-6] if base.endswith(".jsonl") and len(base) > 6 else base)
        parts.append(comps or [base])
    labels = []
    for i, c in enumerate(parts):
        n = 1
        while n < len(c) and any(o != c and o[-n:] == c[-n:] for o in parts):
            n += 1
        labels.append("/".join(c[-n:]))
    seen = {}
    for i, l in enumerate(labels):   # still equal (the same file twice): number them
        seen[l] = seen.get(l, 0) + 1
        if seen[l] > 1:
            labels[i] = f"{l} ({seen[l]})"
    return labels


def smooth(points, n):
    """Trailing mean of the last n finite values (the non-finite points are left out)."""
    if n <= 1:
        return points
    out, win = [], []
    for x, y in points:
        if not math.isfinite(y):
            continue
        win.append(y)
        if len(win) > n:
            win.pop(0)
        out.append((x, math.fsum(win) / len(win)))
    return out


# ----------------------------------------------------------------------------------------------- axes
class Axis:
    """value → pixel, affine in v (linear) or log10(v) (log)."""

    def __init__(self, log, d0, d1, p0, p1):
        self.log, self.d0, self.d1, self.p0, self.p1 = log, d0, d1, p0, p1

    def t(self, v):
        return math.log10(v) if self.log else v

    def ok(self, v):
        return math.isfinite(v) and (v > 0 or not self.log)

    def map(self, v):
        return self.p0 + (self.t(v) - self.d0) / (self.d1 - self.d0) * (self.p1 - self.p0)

    def inside(self, v):
        if not self.ok(v):
            return False
        lo, hi = min(self.d0, self.d1), max(self.d0, self.d1)
        eps = 1e-9 * (hi - lo)
        return lo - eps <= self.t(v) <= hi + eps


def nice_step(rng, target):
    raw = rng / target
    mag = 10 ** math.floor(math.log10(raw))
    r = raw / mag
    return (1 if r < 1.5 else 2 if r < 3.5 else 5 if r < 7.5 else 10) * mag


def ticks_linear(lo, hi, target, integer=False):
    """Multiples of a nice step inside [lo, hi] (of at least 1 when integer)."""
    if not hi > lo:
        return [lo]
    step = nice_step(hi - lo, target)
    if integer:
        step = max(step, 1.0)
    k0, k1 = math.ceil(lo / step - 1e-9), math.floor(hi / step + 1e-9)
    return [0.0 if k == 0 else float(f"{k * step:.12g}") for k in range(k0, k1 + 1)][:64]


def ticks_log10(lo, hi):
    """log10 ticks inside [10^lo, 10^hi]: 1-2-5 per decade over a short span, else every k-th decade."""
    out = []
    if hi - lo <= 3:
        for e in range(math.floor(lo), math.ceil(hi) + 1):
            for m in (1, 2, 5):
                v = float(f"{m * 10.0 ** e:.12g}")
                if lo - 1e-9 <= math.log10(v) <= hi + 1e-9:
                    out.append(v)
    else:
        step = math.ceil((hi - lo) / 8)
        out = [10.0 ** e for e in range(math.ceil(lo - 1e-9), math.floor(hi + 1e-9) + 1, step)]
    if len(out) < 2:                     # a narrow range: nice linear values instead
        out = [v for v in ticks_linear(10 ** lo, 10 ** hi, 4) if v > 0]
    return out


def y_axis(values, log, top):
    """The y axis of a panel whose frame starts at pixel row top: the finite values (positive when log), padded."""
    if log and not any(math.isfinite(v) and v > 0 for v in values):
        log = False                                # nothing a log scale could show: linear
    vals = [v for v in values if math.isfinite(v) and (v > 0 or not log)]
    p0, p1 = top + PLOT_H, top
    if not vals:
        return Axis(False, 0.0, 1.0, p0, p1)
    lo, hi = min(vals), max(vals)
    if log:
        l0, l1 = math.log10(lo), math.log10(hi)
        pad = 0.05 * (l1 - l0) if l1 > l0 else 0.15
        return Axis(True, l0 - pad, l1 + pad, p0, p1)
    pad = 0.06 * (hi - lo) if hi > lo else 0.05 * abs(hi) if hi != 0 else 0.5
    lo, hi = lo - pad, hi + pad
    step = nice_step(hi - lo, 5)                   # widen to whole steps so the frame ends on ticks
    d0, d1 = math.floor(lo / step) * step, math.ceil(hi / step) * step
    if vals and min(vals) >= 0 and d0 < 0:         # no negative axis under values that cannot be negative
        d0 = 0.0
    return Axis(False, d0, d1, p0, p1)


def fmt_num(v):
    """A tick label: 0.0003, 2.5, 120k, 1.5M."""
    a = abs(v)
    if a >= 1e4:
        for div, suf in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
            if a >= div:
                return f"{v / div:.4g}{suf}"
    return f"{v:.4g}"


# ----------------------------------------------------------------------------------------------- SVG
def xml_text(s):
    """XML text / attribute content: & < > " ' escaped, control characters and lone surrogates as '?'."""
    out = []
    for ch in s:
        o = ord(ch)
        if ch == "&":
            out.append("&amp;")
        elif ch == "<":
            out.append("&lt;")
        elif ch == ">":
            out.append("&gt;")
        elif ch == '"':
            out.append("&quot;")
        elif ch == "'":
            out.append("&apos;")
        elif ch == "\t":
            out.append(" ")
        elif o < 0x20 or o == 0x7F or 0xD800 <= o <= 0xDFFF or o in (0xFFFE, 0xFFFF):
            out.append("?")
        else:
            out.append(ch)
    return "".join(out)


class Svg:
    def __init__(self):
        self.parts = []

    def raw(self, s):
        self.parts.append(s)

    def text(self, x, y, anchor, s, extra=""):
        self.raw(f'<text x="{x:.1f}" y="{y:.1f}" text-anchor="{anchor}"{" " + extra if extra else ""}>{xml_text(s)}</text>\n')

    def line(self, x1, y1, x2, y2, stroke, extra=""):
        self.raw(f'<line x1="{x1:.1f}" y1="{y1:.1f}" x2="{x2:.1f}" y2="{y2:.1f}" stroke="{stroke}"{" " + extra if extra else ""}/>\n')


def decimate(px):
    """Pixel points of a long series: per pixel column the first, lowest, highest and last point, in order."""
    if len(px) <= MAX_PTS * PLOT_W:
        return px
    out, i = [], 0
    while i < len(px):
        col = int(px[i][0])
        j = i
        while j < len(px) and int(px[j][0]) == col:
            j += 1
        seg = px[i:j]
        keep = {0, len(seg) - 1, min(range(len(seg)), key=lambda k: seg[k][1]), max(range(len(seg)), key=lambda k: seg[k][1])}
        out.extend(seg[k] for k in sorted(keep))
        i = j
    return out


def polyline(svg, ax, ay, pts, cls, col, width, extra=""):
    px = [(ax.map(x), ay.map(y)) for x, y in pts if ax.inside(x) and ay.inside(y)]
    px = decimate(px)
    coords = " ".join(f"{x:.1f},{y:.1f}" for x, y in px)
    svg.raw(f'<polyline class="{cls}" fill="none" stroke="{col}" stroke-width="{width}"{extra} points="{coords}"/>\n')
    if len(px) == 1 and cls == "series":         # a line of one point shows nothing: a dot
        svg.raw(f'<circle class="point" cx="{px[0][0]:.1f}" cy="{px[0][1]:.1f}" r="3" fill="{col}"/>\n')


LABEL_CHAR_W = 6.0                # rough width of one 10px character (the resume labels)


def resume_label(svg, xx, y, left, right, text, col):
    """A resume's label inside the frame [left, right]: right of the line at xx, else left of it, else as near it as
    the frame allows; a text wider than the frame goes on more lines (after "resumed at step N:", before the new
    layout)."""
    lines = [text]
    if LABEL_CHAR_W * len(text) > right - left - 6 and ": " in text:
        head, tail = text.split(": ", 1)
        lines = [head + ":"] + ([tail] if LABEL_CHAR_W * len(tail) <= right - left - 6 else
                                [p + (" ->" if i == 0 else "") for i, p in enumerate(tail.split(" -> ", 1))])
    w = LABEL_CHAR_W * max(len(t) for t in lines)
    if xx + 3 + w <= right:
        x, anchor = xx + 3, "start"
    elif xx - 3 - w >= left:
        x, anchor = xx - 3, "end"
    else:
        x, anchor = max(left + 3, right - 3 - w), "start"
    extra = f'class="resume-label" font-size="10" fill="{col}"'
    if len(lines) == 1:
        svg.text(x, y, anchor, text, extra)
        return
    spans = "".join(f'<tspan x="{x:.1f}" dy="{0 if i == 0 else 12}">{xml_text(t)}</tspan>' for i, t in enumerate(lines))
    svg.raw(f'<text x="{x:.1f}" y="{y:.1f}" text-anchor="{anchor}" {extra}>{spans}</text>\n')


def panel(svg, key, title, left, top, ax, runs_data, log, smooth_n, xname):
    """One panel: frame, ticks, title, then per run its line(s), validation points and non-finite markers."""
    ys = []
    for d in runs_data:
        ys += [y for _, y in d["raw"]] + [y for _, y in d["val"]]
    ay = y_axis(ys, log, top)
    right, bot = left + PLOT_W, top + PLOT_H
    svg.raw(f'<g id="panel-{key}" class="panel">\n')
    svg.text(left + PLOT_W / 2, top - 12, "middle", title + (" (log scale)" if ay.log else ""),
             'class="panel-title" font-size="13" font-weight="bold"')
    svg.raw(f'<g id="{key}-x-ticks" class="x-ticks">\n')
    for v in ticks_linear(ax.d0, ax.d1, 6, integer=True):
        if not ax.inside(v):
            continue
        x = ax.map(v)
        svg.line(x, top, x, bot, "#e0e0e0")
        svg.line(x, bot, x, bot + 5, "black")
        svg.text(x, bot + 19, "middle", fmt_num(v), 'class="tick"')
    svg.raw("</g>\n")
    svg.raw(f'<g id="{key}-y-ticks" class="y-ticks">\n')
    for v in (ticks_log10(ay.d0, ay.d1) if ay.log else ticks_linear(ay.d0, ay.d1, 5)):
        if not ay.inside(v):
            continue
        y = ay.map(v)
        svg.line(left, y, right, y, "#e0e0e0")
        svg.line(left - 5, y, left, y, "black")
        svg.text(left - 8, y + 4, "end", fmt_num(v), 'class="tick"')
    svg.raw("</g>\n")
    svg.raw(f'<rect class="frame" x="{left:.1f}" y="{top:.1f}" width="{PLOT_W:.1f}" height="{PLOT_H:.1f}" fill="none" stroke="black"/>\n')
    svg.text(left + PLOT_W / 2, bot + 38, "middle", xname, 'class="axis-name" font-size="13"')
    if not any(d["raw"] or d["val"] for d in runs_data):
        svg.text(left + PLOT_W / 2, top + PLOT_H / 2, "middle", f"no {key} in the metrics", 'class="no-data" fill="#7f7f7f"')
    for j, d in enumerate(runs_data):
        col = PALETTE[j % 10]
        dash = ' stroke-dasharray="6 3"' if j >= 10 else ""
        svg.raw(f'<g id="{key}-run-{j}" class="run">\n')
        if smooth_n > 1 and d["smoothable"]:
            polyline(svg, ax, ay, [p for p in d["raw"] if math.isfinite(p[1])], "raw", col, 1, ' stroke-opacity="0.3"' + dash)
            polyline(svg, ax, ay, smooth(d["raw"], smooth_n), "series", col, 2, dash)
        else:
            polyline(svg, ax, ay, [p for p in d["raw"] if math.isfinite(p[1])], "series", col, 2, dash)
        val = [p for p in d["val"] if math.isfinite(p[1])]
        if val:
            polyline(svg, ax, ay, val, "val", col, 1.5, ' stroke-dasharray="2 3"')
            r, sw = (4, 2) if len(val) <= 40 else (2.5, 1.5)    # many validations: smaller markers
            for x, y in val:
                if ax.inside(x) and ay.inside(y):
                    svg.raw(f'<circle class="val" cx="{ax.map(x):.1f}" cy="{ay.map(y):.1f}" r="{r}" fill="white" stroke="{col}" stroke-width="{sw}"/>\n')
        for n, (x, text) in enumerate(d["starts"]):   # a resume: a dashed vertical line, labelled in the loss panel
            if ax.inside(x):
                xx = ax.map(x)
                svg.line(xx, top, xx, bot, col, f'class="resume" stroke-width="1" stroke-dasharray="4 4"')
                if key == "loss":
                    resume_label(svg, xx, top + 14 + 13 * ((j + n) % 3), left, right, text, col)
        for x, y in d["raw"] + d["val"]:          # a nan / inf value: a triangle pointing down from the top edge
            if not math.isfinite(y) and ax.inside(x):
                xx = ax.map(x)
                svg.raw(f'<path class="nonfinite" d="M{xx - 4:.1f},{top + 1:.1f} L{xx + 4:.1f},{top + 1:.1f} L{xx:.1f},{top + 8:.1f} Z" fill="{col}"/>\n')
        svg.raw("</g>\n")
    svg.raw("</g>\n")


def draw(runs, xkey, smooth_n, logs, title):
    """The SVG text."""
    xname = "step" if xkey == "step" else "tokens seen"
    data = {}                                      # key → [per run {"raw", "val", "smoothable"}]
    xs = []
    for key, _, smoothable in PANELS:
        data[key] = []
        for r in runs:
            d = {"raw": r.series(key, xkey), "val": r.series("val_loss", xkey) if key == "loss" else [],
                 "smoothable": smoothable, "starts": r.starts(xkey)}
            data[key].append(d)
            xs += [x for x, _ in d["raw"]] + [x for x, _ in d["val"]]
    x0, x1 = (min(xs), max(xs)) if xs else (0.0, 1.0)
    if x1 <= x0:                                   # one x: a range around it (relative where 1 is below a float's step)
        pad = max(1.0, abs(x0) * 1e-6)
        x0, x1 = x0 - pad, x1 + pad
    maxlab = max(len(r.label) for r in runs)
    legend_w = max(50 + CHAR_W * maxlab, 230.0)
    cell_w, cell_h = PAN_L + PLOT_W + PAN_R, PAN_T + PLOT_H + PAN_B
    w, h = 2 * cell_w + legend_w, TOP + 2 * cell_h
    svg = Svg()
    svg.raw('<?xml version="1.0" encoding="UTF-8"?>\n')
    svg.raw(f'<svg xmlns="http://www.w3.org/2000/svg" version="1.1" width="{w:.0f}" height="{h:.0f}" '
            f'viewBox="0 0 {w:.0f} {h:.0f}" font-family="sans-serif" font-size="12">\n')
    svg.raw(f'<rect x="0" y="0" width="{w:.0f}" height="{h:.0f}" fill="white"/>\n')
    svg.text(2 * cell_w / 2, 28, "middle", title, 'class="title" font-size="16" font-weight="bold"')
    nonfinite = False
    for i, (key, ptitle, _) in enumerate(PANELS):
        left = (i % 2) * cell_w + PAN_L
        top = TOP + (i // 2) * cell_h + PAN_T
        ax = Axis(False, x0, x1, left, left + PLOT_W)
        panel(svg, key, ptitle, left, top, ax, data[key], key in logs, smooth_n, xname)
        nonfinite |= any(not math.isfinite(y) for d in data[key] for _, y in d["raw"] + d["val"])
    # legend: a swatch (line + marker) and the label per run, then what the line styles mean
    lx, ly = 2 * cell_w, TOP + PAN_T + 10
    svg.raw('<g id="legend">\n')
    for j, r in enumerate(runs):
        y = ly + 20.0 * j
        col = PALETTE[j % 10]
        svg.line(lx, y, lx + 24, y, col, 'stroke-width="2"' + (' stroke-dasharray="6 3"' if j >= 10 else ""))
        svg.raw(f'<circle cx="{lx + 12:.1f}" cy="{y:.1f}" r="3" fill="{col}"/>\n')
        svg.text(lx + 30, y + 4, "start", r.label, 'class="legend-label"')
    y = ly + 20.0 * len(runs) + 14
    grey = "#555555"
    svg.line(lx, y, lx + 24, y, grey, 'stroke-width="2"')
    svg.text(lx + 30, y + 4, "start", f"training (mean of {smooth_n} steps)" if smooth_n > 1 else "training", 'class="legend-key"')
    y += 20
    if smooth_n > 1:
        svg.line(lx, y, lx + 24, y, grey, 'stroke-width="1" stroke-opacity="0.3"')
        svg.text(lx + 30, y + 4, "start", "training, each step", 'class="legend-key"')
        y += 20
    svg.line(lx, y, lx + 24, y, grey, 'stroke-width="1.5" stroke-dasharray="2 3"')
    svg.raw(f'<circle cx="{lx + 12:.1f}" cy="{y:.1f}" r="4" fill="white" stroke="{grey}" stroke-width="2"/>\n')
    svg.text(lx + 30, y + 4, "start", "validation loss", 'class="legend-key"')
    if any(r.starts(xkey) for r in runs):
        y += 20
        svg.line(lx, y, lx + 24, y, grey, 'stroke-width="1" stroke-dasharray="4 4"')
        svg.text(lx + 30, y + 4, "start", "resumed (layout if changed)", 'class="legend-key"')
    if nonfinite:
        y += 20
        svg.raw(f'<path d="M{lx + 8:.1f},{y - 4:.1f} L{lx + 16:.1f},{y - 4:.1f} L{lx + 12:.1f},{y + 3:.1f} Z" fill="{grey}"/>\n')
        svg.text(lx + 30, y + 4, "start", "nan / inf at that step", 'class="legend-key"')
    svg.raw("</g>\n</svg>\n")
    return "".join(svg.parts)


def csv_text(runs, smooth_n):
    """The plotted values: one row per run and step (empty: not in the record)."""
    buf = io.StringIO()
    wr = csv.writer(buf, lineterminator="\n")
    smoothed = ["loss", "tokens_per_s", "grad_norm"] if smooth_n > 1 else []
    wr.writerow(["run", "step"] + CSV_KEYS + [k + "_smooth" for k in smoothed] + ["start", "layout"])
    sm = [{k: dict(smooth(r.series(k, "step"), smooth_n)) for k in smoothed} for r in runs]
    for r, s in zip(runs, sm):
        for rec in r.records:
            row = [r.label, rec["step"]]
            for k in CSV_KEYS:
                v = number(rec.get(k))
                row.append("" if v is None else int(v) if k == "tokens_seen" and v.is_integer() else f"{v:.10g}")
            for k in smoothed:
                v = s[k].get(float(rec["step"]))
                row.append("" if v is None else f"{v:.10g}")
            for k in ("start", "layout"):   # (the first record of each run: how it started, on which layout)
                row.append(rec[k] if isinstance(rec.get(k), str) else "")
            wr.writerow(row)
    return buf.getvalue()


def write_file(path, text):
    """Written whole (a temporary file renamed over it), so a viewer never sees half a file."""
    tmp = f"{path}.tmp{os.getpid()}"
    try:
        with open(tmp, "w", encoding="utf-8", errors="replace", newline="") as f:
            f.write(text)
        os.replace(tmp, path)
    except OSError as e:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise Fail(f"cannot write '{path}': {e.strerror or e}")


# ----------------------------------------------------------------------------------------------- main
def main(argv):
    ap = ArgParser(prog="tools/plot_metrics.py", description=__doc__.split("\n\n")[0],
                   formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__.split("\n\n", 2)[2])
    ap.add_argument("runs", nargs="+", metavar="RUN", help="an out_dir of build/train or a metrics.jsonl")
    ap.add_argument("--label", action="append", default=[], metavar="NAME", help="the next run's name in the legend (repeat)")
    ap.add_argument("--out", metavar="FILE.svg", help="the SVG (the CSV goes beside it as FILE.csv)")
    ap.add_argument("--smooth", type=int, default=1, metavar="N", help="trailing mean over N steps (default 1: none)")
    ap.add_argument("--x", choices=["step", "tokens"], default="step", help="the x axis (default step)")
    ap.add_argument("--log", default="", metavar="KEYS", help="comma list of panels on a log scale: loss,lr,tokens_per_s,grad_norm")
    ap.add_argument("--title", default=None, help="the title above the panels")
    a = ap.parse_args(argv)
    if a.smooth < 1:
        raise Fail(f"--smooth {a.smooth}: must be at least 1")
    logs = {k for k in a.log.split(",") if k}
    bad = logs - {k for k, _, _ in PANELS}
    if bad:
        raise Fail(f"--log: unknown panel '{sorted(bad)[0]}' (loss, lr, tokens_per_s, grad_norm)")
    if len(a.label) > len(a.runs):
        raise Fail(f"{len(a.label)} --label for {len(a.runs)} runs")
    files = [metrics_file(r) for r in a.runs]
    labels = default_labels(files)
    labels[:len(a.label)] = a.label
    labels = [re.sub(r"[\x00-\x1f\x7f]", "?", l) for l in labels]      # one line each (legend, CSV, output)
    runs = [read_run(f, l) for f, l in zip(files, labels)]
    xkey = "step" if a.x == "step" else "tokens_seen"
    if xkey == "tokens_seen":
        for r in runs:
            if not any(number(rec.get("tokens_seen")) is not None for rec in r.records):
                raise Fail(f"'{r.path}' has no \"tokens_seen\" (use --x step)")
    out = a.out or (os.path.join(os.path.dirname(files[0]) or ".", "metrics.svg") if len(runs) == 1 else "metrics.svg")
    stem = out[:-4] if out.lower().endswith(".svg") else out
    csv_path = stem + ".csv"
    if os.path.abspath(csv_path) == os.path.abspath(out):
        csv_path = out + ".csv"
    for f in files:
        for o in (out, csv_path):
            if os.path.abspath(o) == os.path.abspath(f) or (os.path.exists(o) and os.path.samefile(o, f)):
                raise Fail(f"--out would overwrite the input '{f}'")
    title = a.title if a.title is not None else f"training metrics by {'step' if xkey == 'step' else 'tokens seen'}"
    svg = draw(runs, xkey, a.smooth, logs, title)
    d = os.path.dirname(out)
    if d:
        try:
            os.makedirs(d, exist_ok=True)
        except OSError as e:
            raise Fail(f"cannot create '{d}': {e.strerror or e}")
    write_file(out, svg)
    write_file(csv_path, csv_text(runs, a.smooth))
    desc = []
    for r in runs:
        s = f"{r.label}: {len(r.records)} steps to {r.records[-1]['step']}"
        if r.dropped:
            s += f", {r.dropped} superseded records dropped"
        if r.partial:
            s += ", an unfinished last line left out"
        desc.append(s)
    print(f"wrote {out} and {csv_path} ({'; '.join(desc)})")
    return 0


def cli(main, prog, fail=None):
    """Run main(argv) as a program: its status, or one line on stderr and status 1 for a Fail (bad input), an
    interrupt, or a bug (no traceback)."""
    try:
        sys.exit(main(sys.argv[1:]))
    except (fail or Fail) as e:
        print(f"{prog}: {' '.join(str(e).split())}", file=sys.stderr)
        sys.exit(1)
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        sys.exit(1)
    except Exception as e:   # a bug, still one line (no traceback)
        print(f"{prog}: internal error: {type(e).__name__}: {' '.join(str(e).split())}", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    cli(main, PROG)
