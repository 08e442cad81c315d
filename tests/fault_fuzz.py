#!/usr/bin/env python3
"""fault_fuzz.py — the checkpoint fuzz test of tests/test_faults.sh (h5py + numpy only to find the data).

  fault_fuzz.py --src CKPT --dir DIR --n N [--seed S] [--jobs J] [--timeout SEC] --cmd 'PROGRAM ... {} ...' [--cmd ...]

Writes N mutants of the (small) checkpoint CKPT into DIR and runs mutant i with the i-th --cmd (round robin),
{} replaced by the mutant's path. Most mutations hit the file's metadata (every byte outside the datasets'
raw data): one byte set to 0xFF, 0x00 or a random value, one bit flipped, a run of 2-16 random or zero
bytes; some hit the raw data, a few truncate the file. Every run must end on its own within --timeout
seconds with exit status 0 or 1 (no crash, no abort, no hang), and a failing run must print exactly one
line on stderr. Prints one summary line (outcomes counted) and exits 0, or lists the first offenders
(mutation, command, status, stderr) and exits 1. Running the programs under ASan: see docs/reliability.md.
"""
import argparse, os, random, shlex, subprocess, sys, time
from concurrent.futures import ThreadPoolExecutor


def raw_ranges(path):
    import h5py
    out = []
    with h5py.File(path, "r") as f:
        def visit(name, obj):
            if isinstance(obj, h5py.Dataset):
                off = obj.id.get_offset()
                if off is not None:
                    out.append((off, off + obj.id.get_storage_size()))
                elif obj.chunks:   # chunked (reshard's output): every chunk
                    for i in range(obj.id.get_num_chunks()):
                        c = obj.id.get_chunk_info(i)
                        out.append((c.byte_offset, c.byte_offset + c.size))
        f.visititems(visit)
    return sorted(out)


def mutate(data, meta, rng):
    d = bytearray(data)
    r = rng.random()
    if r < 0.04:   # truncation
        cut = rng.randrange(1, len(d))
        return bytes(d[:cut]), f"truncated to {cut} bytes"
    off = rng.choice(meta) if r < 0.85 else rng.randrange(len(d))
    where = "metadata" if r < 0.85 else "anywhere"
    k = rng.random()
    if k < 0.25:
        d[off] = 0xFF; what = "byte = 0xFF"
    elif k < 0.40:
        d[off] = 0x00; what = "byte = 0x00"
    elif k < 0.60:
        bit = rng.randrange(8); d[off] ^= 1 << bit; what = f"bit {bit} flipped"
    elif k < 0.80:
        v = rng.randrange(256); d[off] = v; what = f"byte = {v:#04x}"
    else:
        n = rng.randrange(2, 17)
        zero = rng.random() < 0.3
        for j in range(off, min(off + n, len(d))):
            d[j] = 0 if zero else rng.randrange(256)
        what = f"{n} {'zero' if zero else 'random'} bytes"
    return bytes(d), f"{what} at offset {off} ({where})"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--src", required=True)
    ap.add_argument("--dir", required=True)
    ap.add_argument("--n", type=int, default=300)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--jobs", type=int, default=4)
    ap.add_argument("--timeout", type=float, default=30)
    ap.add_argument("--cmd", action="append", required=True)
    a = ap.parse_args()
    data = open(a.src, "rb").read()
    ranges = raw_ranges(a.src)
    inraw = bytearray(len(data))
    for lo, hi in ranges:
        inraw[lo:min(hi, len(data))] = b"\1" * (min(hi, len(data)) - lo)
    meta = [i for i in range(len(data)) if not inraw[i]]
    rng = random.Random(a.seed)
    os.makedirs(a.dir, exist_ok=True)
    jobs = []
    for i in range(a.n):
        m, desc = mutate(data, meta, rng)
        p = os.path.join(a.dir, f"m{i:04d}.h5")
        open(p, "wb").write(m)
        cmd = a.cmd[i % len(a.cmd)].replace("{}", shlex.quote(p))
        jobs.append((i, desc, cmd))

    def run(job):
        i, desc, cmd = job
        t0 = time.time()
        for attempt in range(3):   # 126/127: the program could not be started (being rebuilt?): again
            try:
                r = subprocess.run(cmd, shell=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                   timeout=a.timeout, start_new_session=True)
                rc, err = r.returncode, r.stderr.decode(errors="replace")
            except subprocess.TimeoutExpired as e:
                rc, err = "timeout", (e.stderr or b"").decode(errors="replace")
            if rc not in (126, 127):
                break
            time.sleep(2)
        return i, desc, cmd, rc, err, time.time() - t0

    t0 = time.time()
    with ThreadPoolExecutor(a.jobs) as ex:
        results = list(ex.map(run, jobs))
    counts, bad = {}, []
    for i, desc, cmd, rc, err, dt in results:
        lines = [l for l in err.splitlines() if l.strip()]
        prog = os.path.basename(shlex.split(cmd)[0])
        if rc == 0:
            kind = f"{prog} ok"
        elif rc == 1 and len(lines) == 1:
            kind = f"{prog} refused"
        else:
            kind = f"{prog} BAD"
            bad.append((i, desc, cmd, rc, lines))
        counts[kind] = counts.get(kind, 0) + 1
    summary = ", ".join(f"{v} {k}" for k, v in sorted(counts.items()))
    if bad:
        print(f"{len(bad)} of {a.n} mutants crashed, hung or printed more than one line ({summary}):")
        for i, desc, cmd, rc, lines in bad[:8]:
            print(f"  m{i:04d} ({desc}): {cmd}: exit {rc}, {len(lines)} stderr lines: {' | '.join(lines[:3])[:300]}")
        return 1
    print(f"{a.n} mutants ({len(meta)} metadata bytes of {len(data)}) in {time.time() - t0:.1f} s: {summary}; "
          "no crash, no hang, one line per refusal")
    return 0


if __name__ == "__main__":
    sys.exit(main())
