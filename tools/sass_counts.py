#!/usr/bin/env python3
"""sass_counts.py — what the own bf16 attention kernels issue per tile, counted from their SASS.

    python3 tools/sass_counts.py [OBJ] [--arch sm_90a] [--inc FILE] [--ptxas BUILD_LOG]

OBJ (default build/cuda/obj/backend/cuda/attn_cuda.o, from `make cuda`) is disassembled with cuobjdump -sass (the
toolkit's, else the nvidia-cuda-cuobjdump wheel's: CUOBJDUMP=path). For each bf16 attention kernel (fwd_bf16_k,
dkdv_bf16_k; the older dq_bf16_k too) the main loop is the backward branch whose body holds the most HMMAs; in it:
  HMMA   mma.sync m16n8k16 (one per warp instruction)
  MUFU   special-function instructions (EX2, RCP, ...)
  smem   bytes through shared memory per warp: LDSM .x4 512, .x2 256, .x1 128; LDS/STS 32 lanes x width
  instr  every instruction, once (the loop body as laid out; an inner loop's body once)
  mask   the instructions of the largest region a forward branch skips that holds no HMMA, LDSM or cp.async (the
         per-element mask: tiles not on a causal or document boundary skip it), counted apart: instr excludes it
A key tile of the kernel is one trip of the main loop (forward: 128 query rows x the key tile; backward: the key
tile x 32 query rows). Prints a markdown table; --inc FILE writes backend/cuda/attn_model.h's rows (the anatomy's
model); --ptxas LOG adds the registers, spills and stack of each kernel from a `make cuda` log (-Xptxas -v).
"""
import os, re, shutil, subprocess, sys

FUN = re.compile(r"Function : (\S+)")
INS = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;")
CONFIG = {  # mangled name -> (backward, head dim, key tile, label)
    "_Z10fwd_bf16_kILi64ELi128EEv8AttnArgs": (0, 64, 128, "fwd_bf16_k<64, 128>"),
    "_Z10fwd_bf16_kILi64ELi64EEv8AttnArgs": (0, 64, 64, "fwd_bf16_k<64, 64>"),
    "_Z10fwd_bf16_kILi128ELi32EEv8AttnArgs": (0, 128, 32, "fwd_bf16_k<128, 32>"),
    "_Z11dkdv_bf16_kILi64EEv8AttnArgs": (1, 64, 128, "dkdv_bf16_k<64> (dK, dV, dQ)"),
    "_Z11dkdv_bf16_kILi128EEv8AttnArgs": (1, 128, 64, "dkdv_bf16_k<128> (dK, dV, dQ)"),
    # the kernels before the one-pass backward (commit ee57127), for comparison
    "_Z10fwd_bf16_kILi64EEv8AttnArgs": (0, 64, 64, "old fwd_bf16_k<64>"),
    "_Z10fwd_bf16_kILi128EEv8AttnArgs": (0, 128, 64, "old fwd_bf16_k<128>"),
    "_Z9dq_bf16_kILi64EEv8AttnArgs": (2, 64, 64, "old dq_bf16_k<64>"),
    "_Z9dq_bf16_kILi128EEv8AttnArgs": (2, 128, 32, "old dq_bf16_k<128>"),
}


def cuobjdump():
    c = os.environ.get("CUOBJDUMP") or shutil.which("cuobjdump")
    if not c:
        try:
            import nvidia.cu13 as m  # the nvidia-cuda-cuobjdump wheel
            c = os.path.join(list(m.__path__)[0], "bin", "cuobjdump")
        except ImportError:
            c = None
    if not c or not os.path.exists(c):
        sys.exit("sass_counts: no cuobjdump (the toolkit's, CUOBJDUMP=..., or pip install nvidia-cuda-cuobjdump)")
    return c


def functions(obj, arch):
    out = subprocess.run([cuobjdump(), "-sass", "-arch", arch, obj], capture_output=True, text=True)
    if out.returncode:
        sys.exit(f"sass_counts: cuobjdump failed: {out.stderr.strip()}")
    fun, name = {}, None
    for line in out.stdout.splitlines():
        m = FUN.search(line)
        if m:
            name = m.group(1)
            fun[name] = []
            continue
        m = INS.search(line)
        if m and name:
            fun[name].append((int(m.group(1), 16), m.group(2)))
    return fun


def opcode(text):
    t = text.split()
    if t and t[0].startswith("@"):
        t = t[1:]
    return t[0] if t else ""


def branch_target(text):
    m = re.search(r"\bBRA\s+(?:`\()?(?:\.L_x_\d+\))?\s*0x([0-9a-f]+)", text)
    return int(m.group(1), 16) if m else None


def smem_bytes(op):
    if op.startswith("LDSM"):
        return 512 if op.endswith(".4") else 256 if op.endswith(".2") else 128
    if op.startswith(("LDS", "STS")) and not op.startswith("LDSM"):
        w = re.search(r"\.(64|128|U8|S8|U16|S16)\b", op)
        width = {"64": 8, "128": 16, "U8": 1, "S8": 1, "U16": 2, "S16": 2}.get(w.group(1), 4) if w else 4
        return 32 * width
    return 0


def count(ins):
    loops = []
    for i, (a, t) in enumerate(ins):
        tgt = branch_target(t) if "BRA" in t else None
        if tgt is not None and tgt < a:
            body = [x for x in ins if tgt <= x[0] <= a]
            loops.append((sum(opcode(x[1]).startswith("HMMA") for x in body), tgt, a))
    if not loops:
        return None
    _, lo, hi = max(loops)
    body = [x for x in ins if lo <= x[0] <= hi]
    # forward branches inside the body: regions they skip; the mask = the largest without HMMA / LDSM / LDGSTS
    mask = set()
    for a, t in body:
        tgt = branch_target(t) if "BRA" in t else None
        if tgt is not None and a < tgt <= hi and t.lstrip().startswith("@"):
            reg = [x for x in body if a < x[0] < tgt]
            ops = [opcode(x[1]) for x in reg]
            if not any(o.startswith(("HMMA", "LDSM", "LDGSTS")) for o in ops) and len(reg) > len(mask):
                mask = {x[0] for x in reg}
    ops = [opcode(t) for a, t in body if a not in mask]
    return {"hmma": sum(o.startswith("HMMA") for o in ops), "mufu": sum(o.startswith("MUFU") for o in ops),
            "ex2": sum(o.startswith("MUFU.EX2") for o in ops), "smem": sum(smem_bytes(o) for o in ops),
            "instr": len(ops), "mask": len(mask)}


def ptxas(log):
    res, cur = {}, None
    for line in open(log, errors="replace"):
        m = re.search(r"Compiling entry function '(\S+)' for '(\S+)'", line)
        if m:
            cur = (m.group(1), m.group(2))
            continue
        m = re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", line)
        if m and cur:
            res.setdefault(cur, {}).update(stack=int(m.group(1)), spill=int(m.group(2)) + int(m.group(3)))
        m = re.search(r"Used (\d+) registers", line)
        if m and cur:
            res.setdefault(cur, {})["regs"] = int(m.group(1))
    return res


def main():
    args = sys.argv[1:]
    opt = {}
    for k in ("--arch", "--inc", "--ptxas"):
        if k in args:
            i = args.index(k)
            opt[k] = args[i + 1]
            del args[i:i + 2]
    obj = args[0] if args else "build/cuda/obj/backend/cuda/attn_cuda.o"
    arch = opt.get("--arch", "sm_90a")
    fun = functions(obj, arch)
    px = ptxas(opt["--ptxas"]) if "--ptxas" in opt else {}
    rows = []
    for name, ins in fun.items():
        if name not in CONFIG:
            continue
        c = count(ins)
        if c:
            rows.append((CONFIG[name], name, c))
    rows.sort(key=lambda r: (r[0][3].startswith("old"), r[0][0], r[0][1], -r[0][2]))
    print(f"| kernel ({arch}) | key tile | HMMA | MUFU (EX2) | smem bytes | smem bytes / HMMA | instructions | "
          f"instructions / HMMA | mask instructions |" + (" registers | spills | stack |" if px else ""))
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|" + ("---:|---:|---:|" if px else ""))
    for (bw, hd, tile, label), name, c in rows:
        line = (f"| {label} | {tile} | {c['hmma']} | {c['mufu']} ({c['ex2']}) | {c['smem']} | {c['smem'] / c['hmma']:.0f} | "
                f"{c['instr']} | {c['instr'] / c['hmma']:.1f} | {c['mask']} |")
        if px:
            p = px.get((name, arch), {})
            line += f" {p.get('regs', '?')} | {p.get('spill', '?')} | {p.get('stack', '?')} |"
        print(line)
    if "--inc" in opt:
        with open(opt["--inc"], "w") as f:
            f.write("// generated by tools/sass_counts.py from build/cuda/obj/backend/cuda/attn_cuda.o (" + arch + "): per tile\n"
                    "// and warp of each own bf16 attention kernel's main loop (without its mask branch):\n"
                    "// { backward, head dim, key tile, HMMA, MUFU, shared-memory bytes, instructions }\n")
            for (bw, hd, tile, label), name, c in rows:
                if not label.startswith("old"):
                    f.write(f"{{ {bw}, {hd}, {tile}, {c['hmma']}, {c['mufu']}, {c['smem']}, {c['instr']} }},   // {label}\n")


if __name__ == "__main__":
    main()
