#!/usr/bin/env python3
"""metrics_to_tensorboard.py — build/train's metrics.jsonl as TensorBoard event files (one scalar per key), written
with the Python 3 standard library only: neither tensorflow nor tensorboard is needed to convert, only to view.

  tools/metrics_to_tensorboard.py RUN [RUN ...] [--logdir DIR] [--label NAME ...]

RUN is an out_dir (its metrics.jsonl is read) or a metrics file, read as tools/plot_metrics.py reads it (a resumed
run's superseded records dropped, C's bare nan / inf accepted; bad input is one line on stderr, exit status 1).
Without --logdir each run's events go to RUN/tensorboard/; with it to DIR/LABEL/ (LABEL: --label, in order, or
the out_dir's name), so that `tensorboard --logdir DIR` shows the runs side by side. A converted directory's
earlier file from this tool (events.out.tfevents.*.ringlm) is replaced, so converting again while a run goes on
is safe; other event files there are left alone.

Tags: every numeric key but step, as GROUP/KEY — loss/loss, loss/val_loss; optim/lr, optim/grad_norm;
speed/tokens_per_s, speed/gflops, speed/step_ms, speed/tokens_seen; ring/cp_*; traffic/sent_*; verify/verify_*;
other/KEY for any other key. Values are float32 (TensorBoard's simple_value); nan and inf are kept, a finite value
beyond float32 becomes inf. The wall time of each step is rebuilt from step_ms, ending at the metrics file's
modification time (validation and checkpoint time are not in step_ms, so it runs a little behind the real clock).

File format (TensorFlow's TFRecord framing and event.proto / summary.proto, encoded here by hand): records of
  uint64 length | uint32 masked crc32c(length) | data | uint32 masked crc32c(data)   (little-endian;
  masked = ((crc >> 15 | crc << 17) + 0xa282ead8) mod 2^32, crc32c = CRC-32 with the Castagnoli polynomial),
each data an Event: wall_time (field 1, double), step (2, int64), file_version (3, string; "brain.Event:2" in the
first record), summary (5, message Summary: value (1, repeated message Value: tag (1, string), simple_value (2,
float))).
"""
import argparse
import math
import os
import re
import struct
import sys

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import plot_metrics as pm  # noqa: E402  (the reader, labels and one-line errors)

PROG = "metrics_to_tensorboard"
SUFFIX = ".ringlm"               # the event files this tool writes end so (and only those are replaced)
GROUPS = {"loss": "loss", "val_loss": "loss", "lr": "optim", "grad_norm": "optim", "tokens_per_s": "speed",
          "gflops": "speed", "step_ms": "speed", "tokens_seen": "speed"}
PREFIX_GROUPS = (("cp_", "ring"), ("sent_", "traffic"), ("verify_", "verify"))


def tag_of(key):
    g = GROUPS.get(key)
    if g is None:
        g = next((grp for pre, grp in PREFIX_GROUPS if key.startswith(pre)), "other")
    return f"{g}/{key}"


# ----------------------------------------------------------------------------------------------- crc32c
def _crc_table():
    t = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        t.append(c)
    return t


CRC_TABLE = _crc_table()


def crc32c(data):
    c = 0xFFFFFFFF
    for b in data:
        c = CRC_TABLE[(c ^ b) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


def masked_crc(data):
    c = crc32c(data)
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def tfrecord(data):
    n = struct.pack("<Q", len(data))
    return n + struct.pack("<I", masked_crc(n)) + data + struct.pack("<I", masked_crc(data))


# ----------------------------------------------------------------------------------------------- protobuf
def varint(n):
    n &= (1 << 64) - 1                 # int64: a negative number is its 64-bit two's complement (10 bytes)
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def pb_key(field, wire):
    return varint(field << 3 | wire)


def pb_double(field, v):
    return pb_key(field, 1) + struct.pack("<d", v)


def pb_int64(field, v):
    return pb_key(field, 0) + varint(v)


def pb_bytes(field, b):
    return pb_key(field, 2) + varint(len(b)) + b


def f32(v):
    """v as float32 bytes; a finite value beyond float32's range becomes +-inf."""
    try:
        return struct.pack("<f", v)
    except OverflowError:
        return struct.pack("<f", math.copysign(math.inf, v))


def pb_float(field, v):
    return pb_key(field, 5) + f32(v)


def event(wall_time, step=None, file_version=None, scalars=()):
    """An Event message: wall_time (1), step (2), file_version (3), summary (5) of Values tag (1), simple_value (2)."""
    out = pb_double(1, wall_time)
    if step is not None:
        out += pb_int64(2, step)
    if file_version is not None:
        out += pb_bytes(3, file_version.encode())
    if scalars:
        summary = b"".join(pb_bytes(1, pb_bytes(1, tag.encode("utf-8", "replace")) + pb_float(2, v)) for tag, v in scalars)
        out += pb_bytes(5, summary)
    return out


# ----------------------------------------------------------------------------------------------- conversion
def events_of(run, mtime):
    """The file's bytes: the version record, then one event per step with every numeric key but step."""
    ms = [pm.number(r.get("step_ms")) for r in run.records]
    ms = [v if v is not None and math.isfinite(v) and v > 0 else 0.0 for v in ms]
    t = mtime - math.fsum(ms) / 1e3
    out = [tfrecord(event(t, step=0, file_version="brain.Event:2"))]
    for r, dt in zip(run.records, ms):
        t += dt / 1e3
        scalars = []
        for k, v in r.items():
            x = pm.number(v)
            if k != "step" and x is not None:
                scalars.append((tag_of(k), x))
        if scalars:
            out.append(tfrecord(event(t, step=r["step"], scalars=scalars)))
    return b"".join(out), math.floor(mtime - math.fsum(ms) / 1e3), len(out) - 1


def safe_name(label):
    s = re.sub(r"[^A-Za-z0-9._+-]+", "_", label).strip("._")
    return s or "run"


def write_events(d, name, data):
    try:
        os.makedirs(d, exist_ok=True)
        old = [f for f in os.listdir(d) if f.startswith("events.out.tfevents.") and f.endswith(SUFFIX)]
    except OSError as e:
        raise pm.Fail(f"cannot create '{d}': {e.strerror or e}")
    path, tmp = os.path.join(d, name), os.path.join(d, f".tmp-{os.getpid()}{SUFFIX}")
    try:
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
        for f in old:
            if f != name:
                os.unlink(os.path.join(d, f))
    except OSError as e:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise pm.Fail(f"cannot write '{path}': {e.strerror or e}")
    return path


def main(argv):
    ap = pm.ArgParser(prog="tools/metrics_to_tensorboard.py", description=__doc__.split("\n\n")[0],
                      formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__.split("\n\n", 2)[2])
    ap.add_argument("runs", nargs="+", metavar="RUN", help="an out_dir of build/train or a metrics.jsonl")
    ap.add_argument("--logdir", metavar="DIR", help="write DIR/LABEL/ per run (default: RUN/tensorboard/)")
    ap.add_argument("--label", action="append", default=[], metavar="NAME", help="the next run's name (repeat)")
    a = ap.parse_args(argv)
    if len(a.label) > len(a.runs):
        raise pm.Fail(f"{len(a.label)} --label for {len(a.runs)} runs")
    files = [pm.metrics_file(r) for r in a.runs]
    labels = pm.default_labels(files)
    labels[:len(a.label)] = a.label
    labels = [re.sub(r"[\x00-\x1f\x7f]", "?", l) for l in labels]
    dirs = []
    for f, l in zip(files, labels):
        d = os.path.join(a.logdir, safe_name(l)) if a.logdir else os.path.join(os.path.dirname(f) or ".", "tensorboard")
        if d in dirs:
            raise pm.Fail(f"two runs would write '{d}' (give each a different --label)")
        dirs.append(d)
    runs = [pm.read_run(f, l) for f, l in zip(files, labels)]   # every input checked before anything is written
    for run, d in zip(runs, dirs):
        try:
            mtime = os.stat(run.path).st_mtime
        except OSError as e:
            raise pm.Fail(f"cannot read '{run.path}': {e.strerror or e}")
        data, t0, n = events_of(run, mtime)
        path = write_events(d, f"events.out.tfevents.{t0:010d}{SUFFIX}", data)
        tags = {tag_of(k) for r in run.records for k, v in r.items() if k != "step" and pm.number(v) is not None}
        extra = f", {run.dropped} superseded records dropped" if run.dropped else ""
        print(f"wrote {path} ({run.label}: {n} steps to {run.records[-1]['step']}, {len(tags)} scalars{extra})")
    where = a.logdir if a.logdir else (dirs[0] if len(dirs) == 1 else ",".join(f"{safe_name(l)}:{d}" for l, d in zip(labels, dirs)))
    print(f"view: tensorboard --logdir{'_spec' if not a.logdir and len(dirs) > 1 else ''} {where}")
    return 0


if __name__ == "__main__":
    pm.cli(main, PROG, pm.Fail)
