#!/usr/bin/env bash
# test_plots.sh — tools/plot_metrics.py (training curves as SVG + CSV) and tools/metrics_to_tensorboard.py (event
# files written by hand) on real runs: run a (40 steps) and run b (30 steps with a checkpoint at 20, resumed from it
# to 40 with a longer schedule, so the trainer moves its records 21..30 to metrics.superseded.jsonl; b_appended is
# the file as a plain append would leave it: 1..20, the superseded 21..30, the resumed 21..40).
#  - the SVG is well-formed XML with four panels, one line per run per panel, the legend's labels (escaped), the
#    validation points, every point inside its frame and, read back through the tick labels, equal to the trainer's
#    records (for b: the resumed values, not the superseded ones); the CSV beside it; runs of different lengths;
#    nan / inf / missing / non-numeric values; --smooth, --x tokens, --log
#  - the event files decode with a parser written here (TFRecord framing, CRC-32C checked bit by bit, protobuf) to
#    one event per step with every key's float32 value; a converted directory is replaced, not added to; with
#    tensorboard from PyPI in build/tbenv (made here once; one "skip:" line where it cannot be) its own readers agree
#  - bad inputs: one line on stderr, exit status 1
cd "$(dirname "$0")/.."
source tests/lib.sh
PLOT=tools/plot_metrics.py TB=tools/metrics_to_tensorboard.py

build/prepare --out "$T/d" --val-frac 0.1 model attention >/dev/null || { bad "build/prepare (run make)"; finish; }
TR=(build/train -c configs/tiny.conf --train_data "$T/d/train_*.bin" --val_data "$T/d/val_*.bin" --val_every 10)
"${TR[@]}" --out_dir "$T/a" --max_steps 40 --tensorboard_dir "$T/a_tb" >"$T/a.out" 2>&1 || { bad "run a: $(tail -n 2 "$T/a.out")"; finish; }
"${TR[@]}" --out_dir "$T/b" --max_steps 30 --lr 1e-3 --seed 7 --ckpt_every 20 --keep_last 0 --tensorboard_dir "$T/b_tb" >"$T/b1.out" 2>&1 &&
  "${TR[@]}" --out_dir "$T/b" --max_steps 40 --lr 1e-3 --seed 7 --resume "$T/b/ckpt_00000020.h5" --tensorboard_dir "$T/b_tb" >"$T/b2.out" 2>&1 ||
  { bad "run b: $(tail -n 2 "$T/b1.out" "$T/b2.out")"; finish; }
mkdir -p "$T/b_appended" "$T/short"
{ head -n 20 "$T/b/metrics.jsonl"; cat "$T/b/metrics.superseded.jsonl"; tail -n +21 "$T/b/metrics.jsonl"; } >"$T/b_appended/metrics.jsonl"
head -n 25 "$T/a/metrics.jsonl" >"$T/short/metrics.jsonl"
n_sup=$(grep -c '' "$T/b/metrics.superseded.jsonl")
[ "$n_sup" -eq 10 ] && [ "$(grep -c '' "$T/b_appended/metrics.jsonl")" -eq 50 ] &&
  ok "runs: a 40 steps, b resumed at 20 (10 superseded records; the appended file has 50 lines)" ||
  bad "runs: $n_sup superseded records, expected 10"

# the checker: python3 chk.py MODE ARGS (exit status 0: the check holds; the last line says what was seen)
cat >"$T/chk.py" <<'PYEOF'
import csv, json, math, os, re, struct, sys
import xml.etree.ElementTree as ET

NS = "{http://www.w3.org/2000/svg}"
PANELS = ["loss", "lr", "tokens_per_s", "grad_norm"]


def records(path):
    """step -> record of a trainer-written metrics.jsonl (each step once there)."""
    out = {}
    for line in open(path):
        r = json.loads(line)
        assert r["step"] not in out, f"step {r['step']} twice in {path}"
        out[r["step"]] = r
    return out


def num(label):
    m = re.fullmatch(r"(-?[0-9.e+-]+)([kMGT]?)", label)
    assert m, f"tick label {label!r}"
    return float(m.group(1)) * {"": 1, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}[m.group(2)]


def pts(poly):
    s = poly.get("points").split()
    return [tuple(float(v) for v in p.split(",")) for p in s]


class Panel:
    def __init__(self, g):
        self.g = g
        fr = g.find(f"{NS}rect[@class='frame']")
        self.x0, self.y0 = float(fr.get("x")), float(fr.get("y"))
        self.x1, self.y1 = self.x0 + float(fr.get("width")), self.y0 + float(fr.get("height"))
        self.xt = [(float(t.get("x")), num(t.text)) for t in g.find(f"{NS}g[@class='x-ticks']").iter(f"{NS}text")]
        self.yt = [(float(t.get("y")) - 4, num(t.text)) for t in g.find(f"{NS}g[@class='y-ticks']").iter(f"{NS}text")]
        self.title = g.find(f"{NS}text[@class='panel-title']").text

    def inside(self, x, y):
        return self.x0 - 0.051 <= x <= self.x1 + 0.051 and self.y0 - 0.051 <= y <= self.y1 + 0.051

    @staticmethod
    def inv(ticks, p):
        (p1, v1), (p2, v2) = min(ticks), max(ticks)
        slope = (v2 - v1) / (p2 - p1)
        return v1 + (p - p1) * slope, abs(slope)

    def runs(self):
        return self.g.findall(f"{NS}g[@class='run']")


def load_svg(path):
    root = ET.parse(path).getroot()
    assert root.tag == NS + "svg", root.tag
    panels = {g.get("id")[len("panel-"):]: Panel(g) for g in root.iter(f"{NS}g") if g.get("class") == "panel"}
    legend = [t.text for t in root.iter(f"{NS}text") if t.get("class") == "legend-label"]
    return root, panels, legend


def svg_main(svg, labels, *truths):
    """4 panels, one series line per run per panel, legend = labels, validation points, each point in its frame
    and equal through the tick labels to the run's records (x: step)."""
    labels = labels.split("|")
    root, panels, legend = load_svg(svg)
    assert list(panels) == PANELS, list(panels)
    assert legend == labels, (legend, labels)
    truths = [records(t) for t in truths]
    npts = 0
    for key, p in panels.items():
        runs = p.runs()
        assert len(runs) == len(truths), (key, len(runs))
        assert len(p.xt) >= 3 and len(p.yt) >= 3, (key, p.xt, p.yt)
        for j, (g, tr) in enumerate(zip(runs, truths)):
            lines = g.findall(f"{NS}polyline[@class='series']")
            assert len(lines) == 1, (key, j, len(lines))
            want = sorted((s, r[key]) for s, r in tr.items() if key in r)
            got = pts(lines[0])
            assert len(got) == len(want), (key, j, len(got), len(want))
            for (x, y), (s, v) in zip(got, want):
                assert p.inside(x, y), (key, j, s, x, y, "outside the frame")
                xs, ex = Panel.inv(p.xt, x)
                vs, ey = Panel.inv(p.yt, y)
                assert abs(xs - s) <= 0.2 * ex, (key, j, s, xs)
                assert abs(vs - v) <= 0.2 * ey, (key, j, s, v, vs, ey)
                npts += 1
            vals = g.findall(f"{NS}circle[@class='val']")
            vwant = sorted((s, r["val_loss"]) for s, r in tr.items() if "val_loss" in r) if key == "loss" else []
            assert len(vals) == len(vwant), (key, j, len(vals), len(vwant))
            for c, (s, v) in zip(vals, vwant):
                x, y = float(c.get("cx")), float(c.get("cy"))
                assert p.inside(x, y)
                vs, ey = Panel.inv(p.yt, y)
                assert abs(vs - v) <= 0.2 * ey and abs(Panel.inv(p.xt, x)[0] - s) <= 0.2 * Panel.inv(p.xt, x)[1], (s, v, vs)
            if key == "loss":
                assert len(g.findall(f"{NS}polyline[@class='val']")) == 1
    nval = len([c for c in root.iter(f"{NS}circle") if c.get("class") == "val"])
    print(f"4 panels x {len(truths)} runs, {npts} points and {nval} validation points read back through the ticks; legend {legend}")


def csv_rows(path, run, nrows, steps):
    """the CSV has nrows rows of run, with these steps (a-b or a,b,c)"""
    rows = [r for r in csv.DictReader(open(path)) if r["run"] == run]
    want = list(range(int(steps.split("-")[0]), int(steps.split("-")[1]) + 1)) if "-" in steps else [int(s) for s in steps.split(",")]
    got = [int(r["step"]) for r in rows]
    assert len(rows) == int(nrows) and got == want, (len(rows), got)
    print(f"{run}: {len(rows)} rows, steps {got[0]}..{got[-1]}")


def lengths(svg):
    """runs of different lengths: the shorter run's lines end left of the frame's right edge, the longer at it"""
    root, panels, legend = load_svg(svg)
    p = panels["loss"]
    ends = [max(x for x, _ in pts(g.find(f"{NS}polyline[@class='series']"))) for g in p.runs()]
    assert abs(ends[0] - p.x1) < 0.06 and ends[1] < p.x1 - 50, (ends, p.x1)
    print(f"line ends at x {ends} (frame right edge {p.x1})")


def weird(svg, csvp):
    """nan / inf / missing / string values: left out of the lines, marked at the top edge"""
    root, panels, legend = load_svg(svg)
    want = {"loss": (4, 2), "lr": (4, 0), "tokens_per_s": (0, 0), "grad_norm": (2, 2)}
    for key, (n, nf) in want.items():
        g = panels[key].runs()[0]
        line = g.find(f"{NS}polyline[@class='series']")
        got = len(pts(line)) if line.get("points") else 0
        marks = g.findall(f"{NS}path[@class='nonfinite']")
        assert got == n and len(marks) == nf, (key, got, len(marks))
        for m in marks:
            y = [float(v) for v in re.findall(r"[-0-9.]+", m.get("d"))[1::2]]
            assert all(panels[key].y0 <= v <= panels[key].y0 + 10 for v in y), (key, y)
    assert [t.text for t in panels["tokens_per_s"].g.iter(f"{NS}text") if t.get("class") == "no-data"] == ["no tokens_per_s in the metrics"]
    rows = list(csv.DictReader(open(csvp)))
    assert [r["loss"] for r in rows] == ["5", "nan", "4", "3.5", "3"], [r["loss"] for r in rows]
    assert [r["grad_norm"] for r in rows] == ["", "inf", "2", "-inf", "1"] and rows[2]["lr"] == "", rows
    print("lines of 4, 4, 0, 2 points; 2 + 2 markers; 'no tokens_per_s' note; nan / inf / empty in the CSV")


def smooth(svg, csvp, truth, n):
    """--smooth N --x tokens --log loss: faint raw and solid smoothed lines; the trailing mean in the CSV"""
    n = int(n)
    root, panels, legend = load_svg(svg)
    tr = records(truth)
    for key in PANELS:
        for g in panels[key].runs():
            nraw, nser = len(g.findall(f"{NS}polyline[@class='raw']")), len(g.findall(f"{NS}polyline[@class='series']"))
            assert (nraw, nser) == ((0, 1) if key == "lr" else (1, 1)), (key, nraw, nser)
    assert panels["loss"].title.endswith("(log scale)") and not panels["lr"].title.endswith("(log scale)")
    xt = [v for _, v in panels["loss"].xt]
    assert max(xt) >= 10000 and all(v == int(v) for v in xt), xt   # the x axis counts tokens
    rows = list(csv.DictReader(open(csvp)))
    steps = sorted(tr)
    for i, r in enumerate(rows):
        for key in ("loss", "tokens_per_s", "grad_norm"):
            win = [tr[s][key] for s in steps[max(0, i - n + 1):i + 1]]
            assert abs(float(r[key + "_smooth"]) - math.fsum(win) / len(win)) <= 1e-8 * abs(float(r[key + "_smooth"])), (i, key)
    print(f"raw + smoothed lines, log-scale loss, tokens on x (ticks up to {max(xt):g}), {len(rows)} smoothed rows")


# ---- TensorBoard event files: an independent reader
def crc32c(data):
    crc = 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 & -(crc & 1))
    return crc ^ 0xFFFFFFFF


def unmask(m):
    r = (m - 0xA282EAD8) & 0xFFFFFFFF
    return ((r >> 17) | (r << 15)) & 0xFFFFFFFF


def frames(path):
    data = open(path, "rb").read()
    i, out = 0, []
    while i < len(data):
        assert i + 12 <= len(data), f"truncated header at {i}"
        hdr = data[i:i + 8]
        n, = struct.unpack("<Q", hdr)
        lcrc, = struct.unpack("<I", data[i + 8:i + 12])
        assert unmask(lcrc) == crc32c(hdr), f"length crc at {i}"
        body = data[i + 12:i + 12 + n]
        assert len(body) == n and i + 16 + n <= len(data), f"truncated record at {i}"
        dcrc, = struct.unpack("<I", data[i + 12 + n:i + 16 + n])
        assert unmask(dcrc) == crc32c(body), f"data crc at {i}"
        out.append(body)
        i += 16 + n
    return out


def fields(buf):
    """protobuf wire format: [(field, wire type, value)]"""
    i, out = 0, []
    def varint():
        nonlocal i
        shift = v = 0
        while True:
            b = buf[i]; i += 1
            v |= (b & 0x7F) << shift; shift += 7
            if not b & 0x80:
                return v
    while i < len(buf):
        key = varint()
        f, wt = key >> 3, key & 7
        if wt == 0:
            v = varint()
        elif wt == 1:
            v = buf[i:i + 8]; i += 8
        elif wt == 2:
            n = varint(); v = buf[i:i + n]; i += n
        elif wt == 5:
            v = buf[i:i + 4]; i += 4
        else:
            raise AssertionError(f"wire type {wt}")
        out.append((f, wt, v))
    assert i == len(buf)
    return out


def decode(path):
    evs = []
    for body in frames(path):
        ev = {"scalars": {}}
        for f, wt, v in fields(body):
            if f == 1 and wt == 1:
                ev["wall_time"], = struct.unpack("<d", v)
            elif f == 2 and wt == 0:
                ev["step"] = v - (1 << 64) if v >> 63 else v
            elif f == 3 and wt == 2:
                ev["file_version"] = v.decode()
            elif f == 7 and wt == 2:                   # SessionLog: status (1 = START)
                ev["session_log"] = {f2: x for f2, _, x in fields(v)}
            elif f == 5 and wt == 2:
                for f2, wt2, val in fields(v):
                    assert (f2, wt2) == (1, 2)
                    d = {f3: (wt3, x) for f3, wt3, x in fields(val)}
                    assert d[1][0] == 2 and d[2][0] == 5, d
                    ev["scalars"][d[1][1].decode()] = struct.unpack("<f", d[2][1])[0]
            else:
                raise AssertionError(f"unexpected field {f} (wire type {wt})")
        evs.append(ev)
    return evs


def f32(v):
    return struct.unpack("<f", struct.pack("<f", v))[0]


GROUP = {"loss": "loss", "val_loss": "loss", "lr": "optim", "grad_norm": "optim", "tokens_per_s": "speed", "gflops": "speed",
         "step_ms": "speed", "tokens_seen": "speed"}


def tag(k):
    return f"{GROUP.get(k) or ('ring' if k.startswith('cp_') else 'traffic' if k.startswith('sent_') else 'other')}/{k}"


def tb(d, truth, src=None):
    """DIR holds one event file: the version record, then one event per step with every key's float32 value; the
    wall times rise and end at the modification time of the converted file src (default: truth)"""
    assert crc32c(b"123456789") == 0xE3069283       # the reader's CRC-32C against the standard check value
    files = [f for f in os.listdir(d) if "tfevents" in f]
    assert len(files) == 1, files
    evs = decode(os.path.join(d, files[0]))
    tr = records(truth)
    assert evs[0].get("file_version") == "brain.Event:2" and not evs[0]["scalars"], evs[0]
    assert [e["step"] for e in evs[1:]] == sorted(tr), [e["step"] for e in evs[1:]]
    nval = 0
    for e in evs[1:]:
        want = {tag(k): f32(v) for k, v in tr[e["step"]].items() if k != "step" and not isinstance(v, str)}
        assert e["scalars"] == want, (e["step"], e["scalars"], want)
        nval += len(want)
    wt = [e["wall_time"] for e in evs]
    assert all(b > a for a, b in zip(wt[1:], wt[2:])) and abs(wt[-1] - os.stat(src or truth).st_mtime) < 1e-3, wt[-3:]
    tags = sorted({t for e in evs for t in e["scalars"]})
    assert {"loss/loss", "loss/val_loss", "optim/lr", "optim/grad_norm", "speed/tokens_per_s", "traffic/sent_hop_bytes"} <= set(tags)
    print(f"{len(evs)} records, CRCs valid, steps {evs[1]['step']}..{evs[-1]['step']}, {len(tags)} tags, {nval} values equal")


def live(d, written):
    """build/train's own event files (tensorboard_dir) in DIR, in name order: each a version record, then one event
    per record in the order the trainer wrote them (WRITTEN: the records as written, a resume's included), with every
    numeric key's float32 value under tools/metrics_to_tensorboard.py's tag; wall times rise within each file"""
    import importlib.util
    spec = importlib.util.spec_from_file_location("m2tb", "tools/metrics_to_tensorboard.py")
    m2tb = importlib.util.module_from_spec(spec); spec.loader.exec_module(m2tb)
    files = sorted(f for f in os.listdir(d) if "tfevents" in f)
    assert files and all(f.endswith(".ringlm-train") for f in files), files
    evs = []
    for f in files:
        e = decode(os.path.join(d, f))
        assert e[0].get("file_version") == "brain.Event:2" and not e[0]["scalars"] and "step" not in e[0], e[0]
        # then a SessionLog START at the file's first step (TensorBoard purges earlier files' steps from there on)
        assert e[1].get("session_log") == {1: 1} and not e[1]["scalars"] and e[1]["step"] == e[2]["step"], e[1]
        wt = [x["wall_time"] for x in e]
        assert all(b >= a for a, b in zip(wt, wt[1:])) and abs(wt[-1] - os.stat(os.path.join(d, f)).st_mtime) < 5, wt[-3:]
        evs += e[2:]
    recs = [json.loads(l) for l in open(written)]
    assert [e["step"] for e in evs] == [r["step"] for r in recs], ([e["step"] for e in evs], [r["step"] for r in recs])
    n = 0
    for e, r in zip(evs, recs):
        want = {m2tb.tag_of(k): f32(v) for k, v in r.items() if k != "step" and not isinstance(v, str)}
        assert e["scalars"] == want, (r["step"], e["scalars"], want)
        n += len(want)
    print(f"{len(files)} file(s), {len(evs)} events, {n} values equal to the records, tags as the conversion tool's")


def corrupt(path, out):
    """the reader notices a flipped byte (its CRC checks are live)"""
    data = bytearray(open(path, "rb").read())
    data[len(data) // 2] ^= 0x40
    open(out, "wb").write(data)
    try:
        frames(out)
    except AssertionError as e:
        print(f"flipped byte: {e}")
        return
    raise AssertionError("a flipped byte went unnoticed")


def tbpkg(d, truth):
    """tensorboard's own readers: the legacy EventAccumulator and the scalars plugin's (simple_value migrated)"""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.backend.event_processing import plugin_event_accumulator as pea
    from tensorboard.util import tensor_util
    tr = records(truth)
    ea = EventAccumulator(d, size_guidance={"scalars": 0})
    ea.Reload()
    pa = pea.EventAccumulator(d, size_guidance={"tensors": 0})
    pa.Reload()
    keys = {k for r in tr.values() for k, v in r.items() if k != "step" and not isinstance(v, str)}
    assert set(ea.Tags()["scalars"]) == {tag(k) for k in keys} == set(pa.PluginTagToContent("scalars")), ea.Tags()["scalars"]
    for k in keys:
        want = [(s, f32(r[k])) for s, r in sorted(tr.items()) if k in r]
        assert [(e.step, e.value) for e in ea.Scalars(tag(k))] == want, k
        assert [(e.step, float(tensor_util.make_ndarray(e.tensor_proto))) for e in pa.Tensors(tag(k))] == want, k
    print(f"tensorboard's EventAccumulator and the scalars plugin read {len(keys)} tags x {len(tr)} steps equal")


try:
    globals()[sys.argv[1]](*sys.argv[2:])
except AssertionError as e:
    print(f"{sys.argv[1]}: {e}")
    sys.exit(1)
PYEOF
chk() { $PY "$T/chk.py" "$@"; }

# ---- plot_metrics.py
LB='a|b & <resumed>'
$PY $PLOT "$T/a" "$T/b_appended" --label a --label 'b & <resumed>' --out "$T/p/two.svg" >"$T/o" 2>"$T/e"; rc=$?
[ $rc -eq 0 ] && [ "$(grep -c '' "$T/o")" -eq 1 ] && [ ! -s "$T/e" ] && grep -qF "wrote $T/p/two.svg and $T/p/two.csv" "$T/o" &&
  grep -qF "10 superseded records dropped" "$T/o" && ok "plot: one line: $(sed "s|$T/||g" "$T/o")" ||
  bad "plot: exit $rc: $(head -c 400 "$T/o" "$T/e")"
check "SVG: well-formed XML, 4 panels, one line per run per panel, legend, validation points, values through the ticks (b: resumed values)" \
  chk svg_main "$T/p/two.svg" "$LB" "$T/a/metrics.jsonl" "$T/b/metrics.jsonl"
$PY $PLOT "$T/b" --label b --out "$T/p/b_trainer.svg" >/dev/null && $PY $PLOT "$T/b_appended" --label b --out "$T/p/b_appended.svg" >/dev/null &&
  cmp -s "$T/p/b_trainer.svg" "$T/p/b_appended.svg" && cmp -s "$T/p/b_trainer.csv" "$T/p/b_appended.csv" &&
  ok "dedupe: the appended file gives the same SVG and CSV as the trainer's own metrics.jsonl" ||
  bad "dedupe: b_appended plots unlike b/metrics.jsonl"
check "CSV: 40 rows of a, steps 1..40" chk csv_rows "$T/p/two.csv" a 40 1-40
# resumes marked: b resumed at step 20 on the same layout (its first records say "start": "new" / "resume" and the
# layout); one dashed line per panel at step 21, labelled in the loss panel; a without a resume has none; a resume
# on another layout (the same records, the layout edited) names both layouts
sed '21s/"layout": "[^"]*"/"layout": "tp 1 x cp 2 x dp 1"/' "$T/b/metrics.jsonl" >"$T/lay.jsonl"
$PY $PLOT "$T/lay.jsonl" --out "$T/p/lay.svg" >/dev/null 2>&1
if [ "$(grep -c 'class="resume"' "$T/p/b_trainer.svg")" = 4 ] \
   && grep -q '"start": "new", "layout": "tp 1 x cp 1 x dp 1"}$' <(sed -n 1p "$T/b/metrics.jsonl") \
   && grep -q '"start": "resume", "layout": "tp 1 x cp 1 x dp 1"}$' <(sed -n 21p "$T/b/metrics.jsonl") \
   && [ "$(grep -c '"start"' "$T/b/metrics.jsonl")" = 2 ] \
   && grep -q 'class="resume-label"[^>]*>resumed at step 20</text>' "$T/p/b_trainer.svg" \
   && $PY $PLOT "$T/a" --out "$T/p/a.svg" >/dev/null && ! grep -q 'class="resume' "$T/p/a.svg" \
   && grep -q '>resumed at step 20: tp 1 x cp 1 x dp 1 -&gt; tp 1 x cp 2 x dp 1</text>' "$T/p/lay.svg"; then
  ok "resumes marked: b's resume at step 20 in each panel (labelled), a has none, a layout change names both layouts"
else bad "resume marks: $(grep -c 'class="resume"' "$T/p/b_trainer.svg") lines; $(grep -o 'resume-label[^<]*' "$T/p/b_trainer.svg" "$T/p/lay.svg" | head -3)"; fi
# a restart that does not reach its old tail again: 1..30 of a, then 21..25 of b -> 1..25, 21..25 from b
{ head -n 30 "$T/a/metrics.jsonl"; sed -n 21,25p "$T/b/metrics.jsonl"; } >"$T/restart.jsonl"
$PY $PLOT "$T/restart.jsonl" "$T/a" --out "$T/p/restart.svg" >"$T/o" 2>&1 &&
  check "restart without reaching the old tail: 25 steps, 10 dropped" chk csv_rows "$T/p/restart.csv" restart 25 1-25 &&
  $PY - "$T/p/restart.csv" "$T/b/metrics.jsonl" <<'PYEOF' && ok "restart: steps 21..25 hold the later run's losses" || bad "restart: $(cat "$T/o")"
import csv, json, sys
rows = {int(r["step"]): float(r["loss"]) for r in csv.DictReader(open(sys.argv[1])) if r["run"] == "restart"}
b = {r["step"]: r["loss"] for r in map(json.loads, open(sys.argv[2]))}
assert all(rows[s] == b[s] for s in range(21, 26)), rows
PYEOF
$PY $PLOT "$T/a" "$T/short" --out "$T/p/len.svg" >/dev/null && check "runs of different lengths (40 and 25 steps) on one x axis" chk lengths "$T/p/len.svg"
cat >"$T/weird.jsonl" <<'EOF'
{"step": 1, "loss": 5.0, "lr": 0.001}
{"step": 2, "loss": nan, "lr": 0.001, "grad_norm": inf}
{"step": 3, "loss": 4.0, "lr": "x", "grad_norm": 2.0, "val_loss": NaN}
{"step": 4.0, "loss": 3.5, "lr": 0.001, "grad_norm": -Infinity, "val_loss": 3.9}

{"step": 5, "loss": 3.0, "lr": 0.001, "grad_norm": 1.0, "val_loss": 3.5}
EOF
printf '{"step": 6, "loss": 2.' >>"$T/weird.jsonl"   # a record still being written
$PY $PLOT "$T/weird.jsonl" --out "$T/p/weird.svg" >"$T/o" 2>"$T/e" && grep -q "unfinished last line left out" "$T/o" &&
  check "nan, inf, missing and non-numeric values; an unfinished last line" chk weird "$T/p/weird.svg" "$T/p/weird.csv" ||
  bad "weird values: $(cat "$T/o" "$T/e")"
$PY $PLOT "$T/b" --smooth 5 --x tokens --log loss --out "$T/p/smooth.svg" >/dev/null &&
  check "--smooth 5 --x tokens --log loss" chk smooth "$T/p/smooth.svg" "$T/p/smooth.csv" "$T/b/metrics.jsonl" 5
$PY $PLOT "$T/a" >"$T/o" 2>&1 && [ -s "$T/a/metrics.svg" ] && [ -s "$T/a/metrics.csv" ] &&
  ok "default output of one run: RUN/metrics.svg and .csv" || bad "default output: $(cat "$T/o")"

# ---- resume labels inside the loss panel's frame (a label wider than the room on either side of its line used to
#      run off the left edge); a resume from zero 2 to zero 3 (2 ranks) names both layouts in the label and the CSV
cat >"$T/chk2.py" <<'PYEOF'
import csv, re, sys
import xml.etree.ElementTree as ET
NS = "{http://www.w3.org/2000/svg}"
CW = 6.0   # a 10px character's width at most (sans-serif averages below)


def labels(svg):
    """resume labels of the loss panel: [(text, [(x0, x1) per line], frame)]: each line's extent by its anchor"""
    root = ET.parse(svg).getroot()
    g = next(g for g in root.iter(f"{NS}g") if g.get("id") == "panel-loss")
    fr = g.find(f"{NS}rect[@class='frame']")
    x0, x1 = float(fr.get("x")), float(fr.get("x")) + float(fr.get("width"))
    out = []
    for t in g.iter(f"{NS}text"):
        if t.get("class") != "resume-label":
            continue
        parts = [(float(s.get("x")), s.text) for s in t.findall(f"{NS}tspan")] or [(float(t.get("x")), t.text)]
        ext = [(x - CW * len(s), x) if t.get("text-anchor") == "end" else (x, x + CW * len(s)) for x, s in parts]
        out.append((" ".join(s for _, s in parts), ext, (x0, x1)))
    return out


def inside(want, *svgs):
    """every resume label lies inside its frame; the labels' texts (lines joined by a space) are want ('|'-separated)"""
    got = []
    for svg in svgs:
        for text, ext, (x0, x1) in labels(svg):
            assert all(x0 <= a and b <= x1 for a, b in ext), (svg, text, ext, (x0, x1))
            got.append(text)
    assert got == want.split("|"), got
    print(f"{len(got)} labels inside their frames: {got}")


def zero_csv(path):
    rows = [r for r in csv.DictReader(open(path))]
    marked = [(r["step"], r["start"], r["layout"]) for r in rows if r["start"]]
    assert marked == [("1", "new", "tp 1 x cp 1 x dp 2, zero 2"), ("5", "resume", "tp 1 x cp 1 x dp 2, zero 3")], marked
    print(f"CSV start/layout: {marked}")


def ticks(g):
    """position of a pixel through the x tick labels (k = 1024)"""
    t = [(float(e.get("x")), float(e.text[:-1]) * 1024 if e.text.endswith("k") else float(e.text)) for e in g.iter(f"{NS}text")]
    (p1, v1), (p2, v2) = min(t), max(t)
    return lambda px: v1 + (px - p1) * (v2 - v1) / (p2 - p1)


def ppl(svg, per, keys, marks):
    """build/eval's perplexity plot: the y axis's unit, the legend's keys below the series (the band named, the marks),
    a band polygon drawn, and a vertical mark line at each of marks (positions, read back through the x ticks)"""
    root = ET.parse(svg).getroot()
    gs = {g.get("id"): g for g in root.iter(f"{NS}g")}
    texts = ["".join(t.itertext()) for t in root.iter(f"{NS}text")]
    assert f"perplexity per {per}" in texts or f"perplexity per {per} (log scale)" in texts, texts
    got = [t.text for t in gs["legend-keys"].iter(f"{NS}text")]
    assert got == keys.split("|"), got
    assert gs["legend-keys"].find(f"{NS}rect[@class='legend-band']") is not None
    assert any(k.startswith("band-") for k in gs), "no band drawn"
    pos = ticks(gs["x-ticks"])
    lines = [l for l in gs["marks"].iter(f"{NS}line") if l.get("class") == "mark"]
    want = [float(m) for m in marks.split(",") if m]
    seen = sorted(pos(float(l.get("x1"))) for l in lines)
    assert len(seen) == len(want) and all(abs(a - b) <= 1.0 for a, b in zip(seen, sorted(want))), (seen, want)
    assert all(l.get("x1") == l.get("x2") and float(l.get("y1")) < float(l.get("y2")) for l in lines)
    print(f"'perplexity per {per}', keys {got}, marks at positions {[round(x, 1) for x in seen]}")


globals()[sys.argv[1]](*sys.argv[2:])
PYEOF
ZT=(build/train -c configs/tiny.conf --train_data "$T/d/train_*.bin" --val_data "" --batch_size 4 --micro_batch 2 --out_dir "$T/z")
timeout $HANG_S $(launch 2) "${ZT[@]}" --zero 2 --max_steps 6 --ckpt_every 4 >"$T/z1.out" 2>&1 &&
  timeout $HANG_S $(launch 2) "${ZT[@]}" --zero 3 --max_steps 8 --resume "$T/z/ckpt_00000004.h5" >"$T/z2.out" 2>&1 &&
  $PY $PLOT "$T/z" --out "$T/p/z.svg" >/dev/null || bad "zero 2 -> 3 runs: $(tail -n 2 "$T/z1.out" "$T/z2.out")"
check "resume labels inside the loss frame, on two lines where one does not fit (the layout change above; zero 2 -> zero 3)" \
  $PY "$T/chk2.py" inside "resumed at step 20: tp 1 x cp 1 x dp 1 -> tp 1 x cp 2 x dp 1|resumed at step 4: tp 1 x cp 1 x dp 2, zero 2 -> tp 1 x cp 1 x dp 2, zero 3" \
  "$T/p/lay.svg" "$T/p/z.svg"
check "the CSV's start and layout columns: zero 2, then the resume at zero 3" $PY "$T/chk2.py" zero_csv "$T/p/z.csv"

# ---- build/eval's perplexity plots: per byte, the band named in the legend, the trained context and YaRN's design
#      ranges marked (b's checkpoint: trained at 128 with plain RoPE; evaluated at 256 with none, yarn:2:64 = 128 and
#      yarn:4:64 = 256; and at 128 with log buckets and packed windows, where the marks are the plot's context)
EV=(build/eval --ckpt "$T/b/ckpt_00000020.h5" --data "$T/d/val_*.bin" --docs 3 --out "$T/p")
"${EV[@]}" --rope none --rope yarn:2:64 --rope yarn:4:64 --seq_len 256 --bucket 32 --name ppl_yarn >"$T/ev.out" 2>&1 &&
  "${EV[@]}" --rope yarn:2:64 --seq_len 128 --log_buckets --doc_mask --name ppl_log >>"$T/ev.out" 2>&1 || bad "eval: $(tail -n 3 "$T/ev.out")"
check "perplexity plot at 2x the trained context: per byte, band and marks in the legend, lines at 128, 128 and 256" \
  $PY "$T/chk2.py" ppl "$T/p/ppl_yarn.svg" byte "shaded: ± 1 standard error over the documents|trained context 128|YaRN x2 design range 128 = 2 x 64|YaRN x4 design range 256 = 4 x 64" 128,128,256
check "log buckets at the trained context: marks at its end named in the legend (= the plot's context), units windows" \
  $PY "$T/chk2.py" ppl "$T/p/ppl_log.svg" byte "shaded: ± 1 standard error over the windows|trained context 128 (= this plot's context)|YaRN x2 design range 128 = 2 x 64 (= this plot's context)" ""

# ---- metrics_to_tensorboard.py
$PY $TB "$T/a" "$T/b_appended" --label a --label b --logdir "$T/tb" >"$T/o" 2>"$T/e"; rc=$?
[ $rc -eq 0 ] && [ ! -s "$T/e" ] && [ "$(grep -c '^wrote ' "$T/o")" -eq 2 ] && grep -qF "view: tensorboard --logdir $T/tb" "$T/o" &&
  ok "tensorboard: converted two runs ($(grep -c '' "$T/o") lines)" || bad "tensorboard: exit $rc: $(head -c 400 "$T/o" "$T/e")"
check "events of a: framing, CRCs, protobuf, one event per step, every key's float32 value" chk tb "$T/tb/a" "$T/a/metrics.jsonl"
check "events of b_appended: the resumed run's values (superseded records dropped)" chk tb "$T/tb/b" "$T/b/metrics.jsonl" "$T/b_appended/metrics.jsonl"
check "the reader catches a flipped byte" chk corrupt "$(ls "$T"/tb/a/events.out.tfevents.*)" "$T/flipped"
touch -d '+1 minute' "$T/a/metrics.jsonl"   # a run that went on: converting again replaces the file
$PY $TB "$T/a" >/dev/null 2>&1 && $PY $TB "$T/a" >"$T/o" 2>&1 && [ "$(ls "$T/a/tensorboard" | grep -c tfevents)" -eq 1 ] &&
  check "default RUN/tensorboard/, converted again: one event file" chk tb "$T/a/tensorboard" "$T/a/metrics.jsonl" ||
  bad "default logdir: $(ls "$T/a/tensorboard") $(cat "$T/o")"
# live: build/train's tensorboard_dir (a: one run; b: the run and its resume, two files in time order)
check "live events of a (tensorboard_dir): every record as written, same tags as the conversion" chk live "$T/a_tb" "$T/a/metrics.jsonl"
check "live events of b and its resume: two files, every record in the order written" chk live "$T/b_tb" "$T/b_appended/metrics.jsonl"
TBENV=${RINGLM_TBENV:-build/tbenv}
if [ ! -f "$TBENV/.ringlm-tensorboard" ]; then
  rm -rf "$TBENV"
  if timeout 150 /usr/bin/python3 -m venv "$TBENV" >"$T/venv.out" 2>&1 &&
     timeout 150 "$TBENV/bin/pip" install --disable-pip-version-check --no-input -q --retries 1 --timeout 20 tensorboard >>"$T/venv.out" 2>&1 &&
     "$TBENV/bin/python" -c 'import tensorboard' 2>>"$T/venv.out"; then touch "$TBENV/.ringlm-tensorboard"
  else rm -rf "$TBENV"; fi
fi
if [ -f "$TBENV/.ringlm-tensorboard" ]; then
  check "tensorboard's readers (in $TBENV): run a" "$TBENV/bin/python" "$T/chk.py" tbpkg "$T/tb/a" "$T/a/metrics.jsonl"
  check "tensorboard's readers (in $TBENV): run b" "$TBENV/bin/python" "$T/chk.py" tbpkg "$T/tb/b" "$T/b/metrics.jsonl"
  check "tensorboard's readers on the live files of a" "$TBENV/bin/python" "$T/chk.py" tbpkg "$T/a_tb" "$T/a/metrics.jsonl"
  check "tensorboard's readers on the live files of b and its resume (the superseded steps purged)" "$TBENV/bin/python" "$T/chk.py" tbpkg "$T/b_tb" "$T/b/metrics.jsonl"
else
  echo "skip: tensorboard's own reader: the tensorboard package could not be installed into $TBENV ($( (grep -E '^ERROR' "$T/venv.out" || cat "$T/venv.out") | tail -n 1 | head -c 160))"
fi

# ---- bad input: one line on stderr, exit status 1, for both tools
: >"$T/empty.jsonl"; echo 'step 1 loss 2' >"$T/text.jsonl"; echo '{"loss": 2}' >"$T/nostep.jsonl"
head -c 200 build/train >"$T/binary.jsonl"; mkdir -p "$T/nodir"
for tool in $PLOT $TB; do
  n=$(basename $tool .py)
  ERR_RC=1 expect_err "$n: missing file" "$n: |$T/nope|no such file" 1 $PY $tool "$T/nope"
  ERR_RC=1 expect_err "$n: directory without metrics.jsonl" "$n: |$T/nodir|without metrics.jsonl" 1 $PY $tool "$T/nodir"
  ERR_RC=1 expect_err "$n: empty file" "$n: |$T/empty.jsonl|no records" 1 $PY $tool "$T/a" "$T/empty.jsonl"
  ERR_RC=1 expect_err "$n: not JSON" "$n: |$T/text.jsonl|line 1 is not JSON" 1 $PY $tool "$T/text.jsonl"
  ERR_RC=1 expect_err "$n: no step" "$n: |$T/nostep.jsonl|line 1|step" 1 $PY $tool "$T/nostep.jsonl"
  ERR_RC=1 expect_err "$n: binary file" "$n: |$T/binary.jsonl|not UTF-8" 1 $PY $tool "$T/binary.jsonl"
  ERR_RC=1 expect_err "$n: more labels than runs" "$n: |--label" 1 $PY $tool "$T/a" --label x --label y
done
ERR_RC=1 expect_err "plot_metrics: unknown --log panel" "plot_metrics: |--log|foo" 1 $PY $PLOT "$T/a" --log foo --out "$T/p/x.svg"
ERR_RC=1 expect_err "plot_metrics: --out over an input" "plot_metrics: |overwrite" 1 $PY $PLOT "$T/a" --out "$T/a/metrics.jsonl"
ERR_RC=1 expect_err "plot_metrics: --x tokens without tokens_seen" "plot_metrics: |tokens_seen" 1 $PY $PLOT "$T/weird.jsonl" --x tokens --out "$T/p/x.svg"
ERR_RC=1 expect_err "plot_metrics: unwritable --out" "plot_metrics: |cannot" 1 $PY $PLOT "$T/a" --out /proc/nonexistent/x.svg
touch "$T/afile"
ERR_RC=1 expect_err "train: tensorboard_dir that is a file (2 ranks)" "train: tensorboard_dir|$T/afile|not a directory" 2 \
  "${TR[@]}" --out_dir "$T/tbbad" --max_steps 1 --cp 2 --tensorboard_dir "$T/afile"
ERR_RC=1 expect_err "metrics_to_tensorboard: two runs into one directory" "metrics_to_tensorboard: |--label" 1 $PY $TB "$T/a" "$T/b" --label x --label x --logdir "$T/tb2"
finish
