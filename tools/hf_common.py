"""hf_common.py — helpers shared by tools/hf_export.py, tools/hf_import.py and tools/prepare_hf.py.

ringlm checkpoints (checkpoint/FORMAT.md) are read and written with h5py + numpy; safetensors files are read
and written here directly (the format is an 8-byte little-endian header length, a JSON header naming each
tensor's dtype, shape and byte range, then the raw little-endian bytes), so export and import need only
h5py and numpy.

Errors: every expected failure (bad input, an I/O error such as a full disk or a read-only directory, no memory)
is one line on stderr, 'PROG: message', and exit status 1; main_guard() turns exceptions into that line, runs
the registered clean-ups first (temporary files and directories, open HDF5 files) and leaves with os._exit, so no
library finalizer runs after a failure. Everything read from a file is checked for type and range before it is
used (Fields, load_json, st_read, tokenizer_info), and the message names the file and the field.
"""
import argparse
import errno
import json
import math
import os
import re
import shutil
import signal
import struct
import sys
import warnings

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.realpath(__file__)))
PROG = os.path.basename(sys.argv[0]).removesuffix(".py")
GOLDEN = np.uint64(0x9E3779B97F4A7C15)
FORMAT, FORMAT_VERSION = "ringlm-checkpoint", 1
RNG_TEXT = "counter-based: initial weights and data order are pure functions of seed"
INT32_MAX = 2**31 - 1                      # the C config's T_INT range (model/config.c set_key)
INT64_MAX = 2**63 - 1
FLT_MAX = float(np.finfo(np.float32).max)


class Fail(Exception):
    """One-line error: the tools print it as 'PROG: message' and exit 1."""


class Terminated(BaseException):
    """SIGTERM or SIGHUP: the tool stops as on an error (clean-ups run, one line)."""


# ----------------------------------------------------------------------------------------------- failures
_cleanups = []          # [(key, fn)]: run, newest first, when the tool fails
_note = [""]            # appended to a failure's line (e.g. "; the output directory is as it was")


def failure_note(text):
    """Set the text appended to the line of any failure from now on ("" to clear)."""
    _note[0] = text


def on_failure(fn):
    """Register fn() to run if the tool fails; returns a key for forget()."""
    key = object()
    _cleanups.append((key, fn))
    return key


def forget(key):
    _cleanups[:] = [(k, f) for k, f in _cleanups if k is not key]


def remove_on_failure(path):
    """Remove PATH (a file or a directory tree) if the tool fails; returns a key for forget()."""
    def rm():
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path, ignore_errors=True)
        else:
            try:
                os.remove(path)
            except OSError:
                pass
    return on_failure(rm)


def run_cleanups():
    while _cleanups:
        _, fn = _cleanups.pop()
        try:
            fn()
        except BaseException:   # a clean-up must never replace the message of the failure
            pass


def fault(point):
    """Test hook: raise the error of a full disk at POINT when $RINGLM_TEST_HF_FAIL names it (comma-separated)."""
    if point in os.environ.get("RINGLM_TEST_HF_FAIL", "").split(","):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC) + " (RINGLM_TEST_HF_FAIL)")


def fault_signal(point):
    """Test hook: send this process SIGTERM at POINT when $RINGLM_TEST_HF_FAIL names it (a signal at a known moment)."""
    if point in os.environ.get("RINGLM_TEST_HF_FAIL", "").split(","):
        os.kill(os.getpid(), signal.SIGTERM)


def os_error(e, what=None):
    """One line for an OSError: what was done, to which file, and why ('disk full' for ENOSPC / EDQUOT)."""
    why = e.strerror or str(e) or e.__class__.__name__
    if e.errno in (errno.ENOSPC, errno.EDQUOT):
        why += " (disk full)"
    if what is None and e.filename is None:
        return why
    name = what or f"'{os.fsdecode(e.filename)}'"
    if e.filename2 is not None and not what:
        name += f" -> '{os.fsdecode(e.filename2)}'"
    return f"{name}: {why}"


def h5_error(e):
    """The reason inside an h5py / HDF5 error message (errno and 'error message = ...' when it names them)."""
    s = " ".join(str(e).split())
    m = re.search(r"errno = (\d+)", s)
    if m:
        code = int(m.group(1))
        return os.strerror(code) + (" (disk full)" if code in (errno.ENOSPC, errno.EDQUOT) else "")
    return s[:160] or e.__class__.__name__


def die(msg, code=1):
    """Print 'PROG: msg' (one line), run the clean-ups and leave at once (os._exit: no finalizer of h5py or
    tokenizers runs after a failure; a failed HDF5 flush at interpreter exit crashed)."""
    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):   # a second signal must not cut the clean-up short
        try:
            signal.signal(sig, signal.SIG_IGN)
        except (ValueError, OSError):
            pass
    run_cleanups()
    line = f"{PROG}: {' '.join(str(msg).split())}{_note[0] if code == 1 else ''}\n"
    try:
        sys.stdout.flush()
    except BaseException:
        pass
    try:
        sys.stderr.write(line)
        sys.stderr.flush()
    except BaseException:
        pass
    os._exit(code)


class ArgParser(argparse.ArgumentParser):
    """argparse with one-line errors (the tools' convention) instead of usage + message + exit 2."""

    def error(self, message):
        raise Fail(f"{message} (see --help)")


def f32_json(x):
    """The shortest decimal that reads back as the same fp32 value (config.json numbers: 1e-05, not 9.99999975e-06)."""
    return float(str(np.float32(float(x))))


def main_guard(fn, prog=None):
    """Run fn(); its return value is the exit status. Every exception becomes one line (see die)."""
    global PROG
    if prog:
        PROG = prog
    warnings.simplefilter("ignore")          # a library warning on stderr would break the one-line rule

    def terminated(sig, frame):
        raise Terminated(signal.Signals(sig).name)
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, terminated)
    for stream in (sys.stdout, sys.stderr):  # paths that are not UTF-8 are printed as their bytes
        try:
            stream.reconfigure(errors="surrogateescape")
        except (AttributeError, ValueError):
            pass
    try:
        with np.errstate(all="ignore"):
            rc = fn()
        sys.stdout.flush()
    except Fail as e:
        die(e)
    except KeyboardInterrupt:
        die("interrupted")
    except Terminated as e:
        die(f"terminated ({e})")
    except MemoryError:
        die("out of memory")
    except BrokenPipeError:
        die("output closed (broken pipe)")
    except OSError as e:
        die(os_error(e))
    except RecursionError:
        die("input nested too deeply")
    except SystemExit as e:
        if e.code not in (0, None):
            die(e.code if isinstance(e.code, str) else "exit", e.code if isinstance(e.code, int) else 1)
        raise
    except BaseException as e:  # a bug, or a library's own exception type (tokenizers raises PanicException)
        if os.environ.get("RINGLM_DEBUG"):
            run_cleanups()
            raise
        die(f"internal error: {e.__class__.__name__}: {' '.join(str(e).split())[:200]} (a bug; RINGLM_DEBUG=1 shows "
            "the traceback)")
    sys.exit(rc)


# ----------------------------------------------------------------------------------------------- JSON input
def kind(v):
    """The JSON type of a value, for messages."""
    if v is None:
        return "null"
    return {bool: "a boolean", int: "an integer", float: "a number", str: "a string", list: "a list",
            dict: "an object"}.get(type(v), type(v).__name__)


def show(v, n=40):
    """A value as short JSON text, for messages."""
    try:
        s = json.dumps(v, ensure_ascii=True, allow_nan=True)
    except (TypeError, ValueError, RecursionError):
        s = repr(v)
    return s if len(s) <= n else s[:n] + "..."


def _pairs(pairs):
    d = {}
    for k, v in pairs:
        if k in d:
            raise Fail(f"\0duplicate key '{k[:60]}'")
        d[k] = v
    return d


def load_json(path, what=None, limit=64 << 20):
    """Parse a JSON file (at most LIMIT bytes, UTF-8, no duplicate keys); one line naming the file otherwise."""
    what = what or f"'{path}'"
    try:
        with open(path, "rb") as f:
            data = f.read(limit + 1)
    except OSError as e:
        raise Fail(os_error(e, f"cannot read {what}"))
    if len(data) > limit:
        raise Fail(f"{what} is larger than {limit >> 20} MiB (not a file this tool reads)")
    return parse_json(data, what)


def parse_json(data, what):
    try:
        text = data.decode("utf-8") if isinstance(data, (bytes, bytearray)) else data
        return json.loads(text, object_pairs_hook=_pairs)
    except Fail as e:
        raise Fail(f"{what} is not valid: {str(e).lstrip(chr(0))}")
    except UnicodeDecodeError:
        raise Fail(f"{what} is not UTF-8 text")
    except RecursionError:
        raise Fail(f"{what} is nested too deeply")
    except ValueError as e:
        raise Fail(f"{what} is not JSON ({' '.join(str(e).split())[:100]})")


MISSING = object()


class Fields:
    """Typed, range-checked access to the fields of a JSON object; each error is one line naming WHERE and the field.
    A field that is null counts as absent (HF configs write null for unset options)."""

    def __init__(self, obj, where, prefix=""):
        if not isinstance(obj, dict):
            field = f": '{prefix[:-1]}'" if prefix else ""
            raise Fail(f"{where}{field} must be a JSON object, not {show(obj)}" + ("" if obj is None else f" ({kind(obj)})"))
        self.obj, self.where, self.prefix = obj, where, prefix

    def name(self, key):
        return f"'{self.prefix}{key}'"

    def fail(self, key, want, v):
        raise Fail(f"{self.where}: {self.name(key)} must be {want}, not {show(v)}" + ("" if v is None else f" ({kind(v)})"))

    def has(self, key):
        return self.obj.get(key) is not None

    def raw(self, key, default=None):
        v = self.obj.get(key)
        return default if v is None else v

    def _get(self, key, default, want):
        v = self.obj.get(key)
        if v is None:
            if default is MISSING:
                raise Fail(f"{self.where}: {self.name(key)} is missing{' (null)' if key in self.obj else ''}; "
                           f"it must be {want}")
            return default, True
        return v, False

    def int(self, key, default=MISSING, lo=1, hi=INT32_MAX):
        want = f"an integer in [{lo}, {hi}]"
        v, dflt = self._get(key, default, want)
        if dflt:
            return v
        if isinstance(v, float) and v.is_integer() and lo <= v <= hi:
            v = int(v)                               # 4096.0: some writers store integers as floats
        if type(v) is not int or not lo <= v <= hi:
            self.fail(key, want, v)
        return v

    def num(self, key, default=MISSING, gt=None, ge=None, le=None, fp32=True):
        """A finite number (an integer or a float, never a boolean); with fp32 also finite as an fp32 value, which
        is what ringlm stores; gt / ge / le bound the value (for fp32, the fp32 value)."""
        rng = " ".join(x for x in ((f"> {gt:g}" if gt is not None else ""), (f">= {ge:g}" if ge is not None else ""),
                                   (f"<= {le:g}" if le is not None else "")) if x)
        want = f"a finite number{' ' + rng if rng else ''}"
        v, dflt = self._get(key, default, want)
        if dflt:
            return v
        if type(v) not in (int, float) or not math.isfinite(float(v)):
            self.fail(key, want, v)
        if fp32 and abs(float(v)) > FLT_MAX * (1 + 2**-25):
            self.fail(key, want + " that fits fp32 (at most 3.4e38 in magnitude)", v)
        x = float(np.float32(float(v))) if fp32 else float(v)
        if (gt is not None and not x > gt) or (ge is not None and not x >= ge) or (le is not None and not x <= le):
            raise Fail(f"{self.where}: {self.name(key)} must be {want}, not {show(v)}"
                       + (f" (its fp32 value is {x:g})" if fp32 and x != float(v) else f" ({kind(v)})"))
        return v

    def bool(self, key, default=MISSING):
        v, dflt = self._get(key, default, "true or false")
        if not dflt and type(v) is not bool:
            self.fail(key, "true or false", v)
        return v

    def str(self, key, default=MISSING):
        v, dflt = self._get(key, default, "a string")
        if not dflt and type(v) is not str:
            self.fail(key, "a string", v)
        return v

    def dict(self, key, default=MISSING):
        v, dflt = self._get(key, default, "an object")
        if not dflt and type(v) is not dict:
            self.fail(key, "an object", v)
        return v

    def list(self, key, default=MISSING):
        v, dflt = self._get(key, default, "a list")
        if not dflt and type(v) is not list:
            self.fail(key, "a list", v)
        return v

    def sub(self, key, default=MISSING):
        """The object at KEY as Fields (None when absent and default is None)."""
        d = self.dict(key, default)
        return None if d is None else Fields(d, self.where, f"{self.prefix}{key}.")


# ----------------------------------------------------------------------------------------------- config
def config_table():
    """The C key table (model/config.c): [(name, type, is_model, default)] in table order."""
    path = os.path.join(REPO, "model", "config.c")
    try:
        src = open(path, encoding="utf-8").read()
    except (OSError, ValueError) as e:
        raise Fail(f"cannot read the config key table {path}: {getattr(e, 'strerror', None) or e}")
    keys = re.findall(r'^\s*K\((\w+),\s*(T_\w+),\s*([01]),\s*"((?:[^"\\]|\\.)*)"', src, re.M)
    if not keys:
        raise Fail(f"no config keys found in {path}")
    return [(n, t, m == "1", d) for n, t, m, d in keys]


def canon(typ, value):
    """A value as the C side prints it (config_get): floats as %.9g of the fp32 value."""
    if typ == "T_FLOAT":
        return "%.9g" % float(np.float32(float(value)))
    if typ in ("T_INT", "T_I64"):
        return str(int(value))
    if typ == "T_BOOL":
        return "1" if int(value) else "0"
    return str(value)


def default_config():
    """{key: canonical default string} for every key of the C table, in table order."""
    return {n: canon(t, d) for n, t, _, d in config_table()}


def _c_int(s, lo, hi):
    """strtoll as model/config.c set_key uses it: the whole string an integer in [lo, hi], else None."""
    s = s.strip() if isinstance(s, str) else ""
    if not re.fullmatch(r"[+-]?\d+", s):
        return None
    v = int(s)
    return v if lo <= v <= hi else None


def _c_float(s):
    """strtod + the cast to float as set_key: the fp32 value, or None (not a number, or not finite as fp32)."""
    try:
        x = float(s)
    except (TypeError, ValueError):
        return None
    if not math.isfinite(x) or s.strip().lower() in ("nan", "inf", "infinity", "+inf", "-inf"):
        return None
    f = float(np.float32(x))
    return f if math.isfinite(f) else None


def parse_config(cfg, where):
    """{key: value} of a config of strings, read as the C reader reads them (set_key), for the keys of the C table
    present in cfg; one line naming the key otherwise."""
    out = {}
    for n, t, _, _ in config_table():
        if n not in cfg:
            continue
        s = cfg[n]
        if t in ("T_INT", "T_BOOL"):
            v = _c_int(s, -INT32_MAX, INT32_MAX)
            if v is None or (t == "T_BOOL" and v not in (0, 1)):
                raise Fail(f"{where}: key '{n}' has invalid value '{s}' (expected {'0 or 1' if t == 'T_BOOL' else 'an integer'})")
        elif t == "T_I64":
            v = _c_int(s, -2**63, INT64_MAX)
            if v is None:
                raise Fail(f"{where}: key '{n}' has invalid value '{s}' (expected an integer)")
        elif t == "T_FLOAT":
            v = _c_float(s)
            if v is None:
                raise Fail(f"{where}: key '{n}' has invalid value '{s}' (expected a number, finite as fp32)")
        else:
            v = s
        out[n] = v
    return out


def check_config(cfg, where):
    """model/config.c config_validate, for the keys every ringlm program checks in a checkpoint's /config (the model
    keys and the training keys' defaults): the same limits, so that what passes here is what ringlm accepts."""
    c = parse_config(cfg, where)

    def bad(msg):
        raise Fail(f"{where}: {msg}")
    for k in ("vocab_size", "d_model", "n_layer", "n_head", "n_kv_head", "d_ff", "max_seq_len", "seq_len", "batch_size",
              "micro_batch", "rope_original_max_seq_len", "log_every"):
        if k in c and c[k] <= 0:
            bad(f"{k} = {c[k]} must be > 0")
    g = c.get
    if g("d_model", 1) % g("n_head", 1):
        bad(f"d_model = {c['d_model']} is not divisible by n_head = {c['n_head']}")
    if g("n_head", 1) % g("n_kv_head", 1):
        bad(f"n_head = {c['n_head']} is not divisible by n_kv_head = {c['n_kv_head']}")
    if "d_model" in c and "n_head" in c:
        hd = c["d_model"] // c["n_head"]
        if hd > 2048:
            bad(f"head_dim = d_model / n_head = {hd} exceeds 2048")
        if hd % 2:
            bad(f"head_dim = d_model / n_head = {hd} must be even for RoPE")
    if "seq_len" in c and "max_seq_len" in c and c["seq_len"] > c["max_seq_len"]:
        bad(f"seq_len = {c['seq_len']} exceeds max_seq_len = {c['max_seq_len']}")
    if g("batch_size", 1) % g("micro_batch", 1):
        bad(f"batch_size = {c['batch_size']} is not divisible by micro_batch = {c['micro_batch']}")
    if "rope_scaling" in c and c["rope_scaling"] not in ("none", "linear", "yarn"):
        bad(f"rope_scaling = '{c['rope_scaling']}' must be none, linear or yarn")
    for k, lo, strict in (("rope_theta", 1, True), ("rope_factor", 0, True), ("norm_eps", 0, True), ("init_std", 0, True)):
        if k in c and not c[k] > lo:
            bad(f"{k} = {c[k]:g} must be > {lo}")
    tp, cp = g("tp", 1), g("cp", 1)
    if tp <= 0 or cp <= 0:
        bad(f"tp = {tp} and cp = {cp} must be >= 1")
    parts = 2 * cp if g("cp_layout", "zigzag") == "zigzag" else cp
    if "seq_len" in c and c["seq_len"] % parts:
        bad(f"seq_len = {c['seq_len']} is not divisible by {parts} (cp = {cp}, {g('cp_layout', 'zigzag')} layout)")
    for k in ("n_head", "n_kv_head", "d_ff"):
        if k in c and c[k] % tp:
            bad(f"{k} = {c[k]} is not divisible by tp = {tp}")
    if "eod" in c and "vocab_size" in c and not -1 <= c["eod"] < c["vocab_size"]:
        bad(f"eod = {c['eod']} must be -1 or a token id below vocab_size = {c['vocab_size']}")
    return c


# ----------------------------------------------------------------------------------------------- checksum
def xsum64(a, chunk=1 << 22):
    """FORMAT.md's xsum64 of an fp32 array (32-bit patterns) or a bf16 array stored as uint16."""
    a = np.ascontiguousarray(a).reshape(-1)
    if a.dtype == np.float32:
        bits = a.view(np.uint32)
    elif a.dtype == np.uint16:
        bits = a
    else:
        raise Fail(f"checksum of dtype {a.dtype}")
    total = np.uint64(0)
    c1, c2 = np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB)
    with np.errstate(over="ignore"):
        for s in range(0, a.size, chunk):
            x = np.arange(s, min(s + chunk, a.size), dtype=np.uint64)
            x *= GOLDEN
            np.add(x, bits[s:s + chunk], out=x, casting="unsafe")
            x += GOLDEN
            t = x >> np.uint64(30)
            x ^= t
            x *= c1
            np.right_shift(x, np.uint64(27), out=t)
            x ^= t
            x *= c2
            np.right_shift(x, np.uint64(31), out=t)
            x ^= t
            total += x.sum(dtype=np.uint64)
    return int(total)


def nonfinite(a, chunk=1 << 24):
    """The number of elements of A that are inf or NaN: fp32 (or fp16 / fp64) values, or bf16 bits stored as uint16
    (all exponent bits set); in blocks, so that no copy of A is made."""
    a = np.asarray(a).reshape(-1)
    n = 0
    for s in range(0, a.size, chunk):
        b = a[s:s + chunk]
        if b.dtype == np.uint16:
            n += int(np.count_nonzero((b & np.uint16(0x7F80)) == np.uint16(0x7F80)))
        else:
            n += int(b.size - np.count_nonzero(np.isfinite(b)))
    return n


# ----------------------------------------------------------------------------------------------- bf16
def bf16_to_f32(u16):
    return (np.asarray(u16, dtype=np.uint16).astype(np.uint32) << np.uint32(16)).view(np.float32)


def f32_to_bf16(x):
    """Round to nearest even, NaN stays NaN (as checkpoint/h5util.c)."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    nan = ((u & np.uint32(0x7F800000)) == np.uint32(0x7F800000)) & ((u & np.uint32(0x007FFFFF)) != 0)
    with np.errstate(over="ignore"):
        r = ((u + np.uint32(0x7FFF) + ((u >> np.uint32(16)) & np.uint32(1))) >> np.uint32(16)).astype(np.uint16)
    return np.where(nan, ((u >> np.uint32(16)) | np.uint32(0x40)).astype(np.uint16), r)


# ----------------------------------------------------------------------------------------------- tensors
def tensor_shapes(cfg):
    """{HF name: shape} in the parameter table's order (model/params.c), from a config of canonical strings."""
    V, C, L = int(cfg["vocab_size"]), int(cfg["d_model"]), int(cfg["n_layer"])
    H, KV, F = int(cfg["n_head"]), int(cfg["n_kv_head"]), int(cfg["d_ff"])
    hd = C // H
    s = {"model.embed_tokens.weight": (V, C)}
    for i in range(L):
        p = f"model.layers.{i}."
        s[p + "input_layernorm.weight"] = (C,)
        s[p + "self_attn.q_proj.weight"] = (H * hd, C)
        s[p + "self_attn.k_proj.weight"] = (KV * hd, C)
        s[p + "self_attn.v_proj.weight"] = (KV * hd, C)
        s[p + "self_attn.o_proj.weight"] = (C, H * hd)
        s[p + "post_attention_layernorm.weight"] = (C,)
        s[p + "mlp.gate_proj.weight"] = (F, C)
        s[p + "mlp.up_proj.weight"] = (F, C)
        s[p + "mlp.down_proj.weight"] = (C, F)
    s["model.norm.weight"] = (C,)
    if cfg["tie_embeddings"] != "1":
        s["lm_head.weight"] = (V, C)
    return s


def numel(shape):
    n = 1
    for d in shape:
        n *= int(d)
    return n


# ----------------------------------------------------------------------------------------------- tensors, lazily
class Lazy:
    """A tensor read (and converted) only when load() is called, so that the tools hold one tensor at a time:
    shape, dtype (a numpy dtype, or a safetensors dtype name) and a function returning the array. raw: the stored
    array (a view of the file) where there is one."""

    def __init__(self, shape, dtype, load, raw=None, where=None):
        self.shape, self.dtype, self._load, self.raw, self.where = tuple(shape), dtype, load, raw, where

    def load(self):
        return self._load()


def loaded(x):
    return x.load() if isinstance(x, Lazy) else x


# ----------------------------------------------------------------------------------------------- files
def fsync_path(path, directory=False):
    """fsync a file or a directory (its entries); a file system that cannot is not an error."""
    try:
        fd = os.open(path, os.O_RDONLY | (os.O_DIRECTORY if directory else 0))
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError as e:
        if e.errno not in (errno.EINVAL, errno.ENOTSUP, errno.EROFS):
            raise
    finally:
        os.close(fd)


def free_bytes(directory):
    try:
        st = os.statvfs(directory)
        return st.f_bavail * st.f_frsize
    except OSError:
        return None


def mib(n):
    return f"{n / 1048576:.1f} MiB"


def make_dirs(path, what):
    """os.makedirs with one line on failure (a path under a regular file, a read-only file system, ...)."""
    if os.path.isdir(path):
        return False
    p = path
    while p and not os.path.lexists(p):
        p = os.path.dirname(p)
    if p and not os.path.isdir(p):
        raise Fail(f"cannot create {what} '{path}': '{p}' is not a directory")
    try:
        os.makedirs(path)
    except OSError as e:
        raise Fail(os_error(e, f"cannot create {what} '{path}'"))
    return True


class Staging:
    """Outputs written into a temporary directory inside DIR, verified, then swapped in: the previous outputs
    (OLD names in DIR) are moved aside into a second temporary directory, the new ones renamed into DIR, and the
    previous ones removed only once all new ones are in place. Any failure before that leaves DIR as it was
    (and a DIR this run created is removed again); nothing is ever read from DIR after the swap begins."""

    def __init__(self, out, tag, created_out, note):
        import tempfile
        self.out, self.tag = out, tag
        if created_out:
            on_failure(lambda: os.rmdir(out))
        failure_note(note)
        # the signals that stop the tool wait while the directory is made and its removal registered: one arriving
        # between the two would leave the directory behind
        stops = {signal.SIGTERM, signal.SIGHUP, signal.SIGINT}
        held = signal.pthread_sigmask(signal.SIG_BLOCK, stops)
        try:
            self.dir = tempfile.mkdtemp(prefix=f".{tag}.new.", dir=out)
            fault_signal(f"{tag}:staging_made")   # (test hook: a SIGTERM between making it and registering it)
            self.key = remove_on_failure(self.dir)
        except OSError as e:
            raise Fail(os_error(e, f"cannot create a temporary directory in '{out}'"))
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, held)

    def path(self, name):
        return os.path.join(self.dir, name)

    def swap(self, old, new):
        """Replace the files OLD of DIR by the staged files NEW. Returns a note (or None). The signals that stop the
        tool wait until the swap is done (or undone): one in the middle of the renames would leave DIR half old,
        half new."""
        held = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM, signal.SIGHUP, signal.SIGINT})
        try:
            return self._swap(old, new)
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, held)

    def _swap(self, old, new):
        import tempfile
        for n in new:
            fsync_path(self.path(n))
        fsync_path(self.dir, True)
        try:
            aside = tempfile.mkdtemp(prefix=f".{self.tag}.old.", dir=self.out)
        except OSError as e:
            raise Fail(os_error(e, f"cannot create a temporary directory in '{self.out}'"))
        moved_old, moved_new = [], []
        failure_note("")                  # from here on every message says what became of the files
        what = "move the previous files aside in"
        try:
            for n in old:
                os.rename(os.path.join(self.out, n), os.path.join(aside, n))
                moved_old.append(n)
                fault(f"{self.tag}:swap")
            what = "move the new files into"
            for n in new:
                os.rename(self.path(n), os.path.join(self.out, n))
                moved_new.append(n)
                fault(f"{self.tag}:swap_new")
        except OSError as e:
            lost = []
            for n in moved_new:
                try:
                    os.rename(os.path.join(self.out, n), self.path(n))
                except OSError:
                    lost.append(n)
            for n in reversed(moved_old):
                try:
                    os.rename(os.path.join(aside, n), os.path.join(self.out, n))
                except OSError:
                    lost.append(n)
            msg = os_error(e, f"cannot {what} '{self.out}'")
            if lost:                 # never remove what could not be put back
                raise Fail(f"{msg}; putting the previous ones back failed too: they are in '{aside}'")
            try:
                os.rmdir(aside)
            except OSError:
                pass
            raise Fail(f"{msg}; the previous files are back in place")
        forget(self.key)
        fsync_path(self.out, True)
        note = None
        shutil.rmtree(aside, ignore_errors=True)
        if os.path.exists(aside):
            note = f"the replaced files could not all be removed: they are in '{aside}'"
        try:
            os.rmdir(self.dir)
        except OSError:
            pass
        return note


# ----------------------------------------------------------------------------------------------- checkpoints
def _attr_str(v):
    if isinstance(v, np.ndarray) and v.shape == ():
        v = v[()]
    if isinstance(v, (bytes, np.bytes_)):
        return bytes(v).decode("utf-8", "replace")
    return str(v)


def resolve_ckpt(spec):
    """A checkpoint file, or a run directory (its `latest`)."""
    if os.path.isdir(spec):
        lf = os.path.join(spec, "latest")
        try:
            with open(lf, "rb") as f:
                name = f.read(4096).split(b"\n")[0].decode("utf-8", "replace").strip()
        except OSError:
            raise Fail(f"'{spec}' has no 'latest' pointer (no completed checkpoint there)")
        if not name or "/" in name or "\0" in name:
            raise Fail(f"'{lf}' is empty or malformed")
        spec = os.path.join(spec, name)
    if not os.path.isfile(spec):
        raise Fail(f"checkpoint '{spec}' does not exist")
    return spec


def read_ckpt(path, optimizer=False):
    """Open a ringlm checkpoint, verify format, /config (as every ringlm program checks it), every /model dataset's
    shape, xsum64 and finiteness (with optimizer also /optimizer's), one tensor at a time. Returns (config
    {key: string}, {HF name: Lazy of the stored array, fp32 or uint16 bf16 bits}, root attributes)."""
    import h5py
    try:
        f = h5py.File(path, "r")
    except (OSError, ValueError, RuntimeError):
        raise Fail(f"'{path}' cannot be opened as HDF5 (truncated, corrupt or not a checkpoint)")
    try:
        with f:
            return _read_ckpt(f, path, optimizer)
    except Fail:
        raise
    except (OSError, ValueError, RuntimeError, KeyError, TypeError, AttributeError) as e:
        raise Fail(f"'{path}' cannot be read as a ringlm checkpoint ({h5_error(e)})")


def _read_ckpt(f, path, optimizer):
    import h5py
    if _attr_str(f.attrs.get("format", b"")) != FORMAT:
        raise Fail(f"'{path}' is not a ringlm checkpoint (attribute 'format')")
    ver = f.attrs.get("format_version", -1)
    if not isinstance(ver, (int, np.integer)) or int(ver) != FORMAT_VERSION:
        raise Fail(f"'{path}' has format_version {_attr_str(ver)[:20]}; this tool reads version 1")
    if f.get("config", getclass=True) is not h5py.Group:
        raise Fail(f"'{path}' lacks the group /config")
    cfg = {k: _attr_str(v) for k, v in f["config"].attrs.items()}
    for k in ("vocab_size", "d_model", "n_layer", "n_head", "n_kv_head", "d_ff", "max_seq_len", "rope_theta",
              "rope_scaling", "rope_factor", "rope_original_max_seq_len", "norm_eps", "tie_embeddings"):
        if k not in cfg:
            raise Fail(f"'{path}' lacks the model config key /config:{k}")
    check_config(cfg, f"'{path}' holds an invalid /config")
    want = tensor_shapes(cfg)
    tensors = {}
    groups = ["model"] + [g for g in ("optimizer/m", "optimizer/v") if optimizer and g in f]
    for g in groups:
        if f.get(g, getclass=True) is not h5py.Group:
            raise Fail(f"'{path}' lacks the group /{g}")
        names = set(f[g].keys())
        if names != set(want):
            extra, miss = sorted(names - set(want)), sorted(set(want) - names)
            raise Fail(f"'{path}': /{g} does not hold the tensors of its config"
                       + (f"; missing {', '.join(miss[:3])}" if miss else "")
                       + (f"; unexpected {', '.join(extra[:3])}" if extra else ""))
        for n, shape in want.items():
            d = f[g][n]
            if not isinstance(d, h5py.Dataset):
                raise Fail(f"'{path}': /{g}/{n} is not a dataset")
            if d.shape != shape:
                hint = " (a padded vocabulary is never stored)" if "embed" in n or "lm_head" in n else ""
                raise Fail(f"'{path}': /{g}/{n} has shape {list(d.shape)}, the config says {list(shape)}{hint}")
            if d.dtype not in (np.dtype("<f4"), np.dtype("<u2")):
                raise Fail(f"'{path}': /{g}/{n} has dtype {d.dtype} (fp32 or bf16 expected)")
            want_sum = d.attrs.get("checksum")
            if want_sum is None or not isinstance(want_sum, (int, np.integer)):
                raise Fail(f"'{path}': /{g}/{n} has no checksum attribute (a uint64)")
            x = d[()]
            if xsum64(x) != int(want_sum):
                raise Fail(f"'{path}': checksum mismatch in /{g}/{n} (the file is corrupt)")
            bad = nonfinite(x)
            if bad:
                raise Fail(f"'{path}': /{g}/{n} holds {bad} inf or NaN values; ringlm refuses such a checkpoint")
            del x
            if g == "model":
                tensors[n] = Lazy(shape, d.dtype, lambda n=n: _read_dataset(path, "model/" + n))
    attrs = {k: (_attr_str(v) if isinstance(v, (bytes, str, np.bytes_)) else v) for k, v in f.attrs.items()}
    return cfg, tensors, attrs


def _read_dataset(path, name):
    import h5py
    try:
        with h5py.File(path, "r") as f:
            return f[name][()]
    except (OSError, ValueError, RuntimeError, KeyError) as e:
        raise Fail(f"'{path}': /{name} cannot be read ({h5_error(e)}; was the file changed?)")


def mix64(x):
    x = (x + 0x9E3779B97F4A7C15) & 0xFFFFFFFFFFFFFFFF
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & 0xFFFFFFFFFFFFFFFF
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & 0xFFFFFFFFFFFFFFFF
    return x ^ (x >> 31)


def state_checksum(*vals):
    """The root attribute state_checksum: sum mod 2^64 of mix64(i x golden + value_i) over (format_version, step,
    data_cursor, tokens_seen, adam_t) (checkpoint/validate.h)."""
    return sum(mix64((i * 0x9E3779B97F4A7C15 + v) & 0xFFFFFFFFFFFFFFFF) for i, v in enumerate(vals)) & 0xFFFFFFFFFFFFFFFF


def _str_attr(obj, name, value):
    """A fixed-length, NUL-terminated ASCII string attribute, the type the C reader expects."""
    import h5py
    b = value if isinstance(value, bytes) else value.encode("utf-8", "surrogateescape")
    tid = h5py.h5t.C_S1.copy()
    tid.set_size(len(b) + 1)
    tid.set_strpad(h5py.h5t.STR_NULLTERM)
    obj.attrs.create(name, np.array(b, dtype=f"S{len(b) + 1}"), dtype=h5py.Datatype(tid))


def in_child(fn):
    """Run fn() in a forked child process whose stdout and stderr go to /dev/null; fn returns a string. Returns
    (True, that string) or (False, the one-line reason it failed: its Fail or exception, or how it died). HDF5 is
    driven this way when it writes: after a write error h5py reports further errors only as it frees objects (on
    stderr, 'Exception ignored ...') and the interpreter crashed at exit; none of that can reach the tool's output."""
    sys.stdout.flush()
    sys.stderr.flush()
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        code = 3
        try:
            for sig in (signal.SIGTERM, signal.SIGHUP):
                signal.signal(sig, signal.SIG_DFL)
            os.close(r)
            null = os.open(os.devnull, os.O_WRONLY)
            os.dup2(null, 1)
            os.dup2(null, 2)
            unraisable = []

            def hook(u):                       # said at once: HDF5 may crash before the child can report
                if not unraisable:
                    reason = h5_error(u.exc_value).encode("utf-8", "surrogateescape")
                    os.write(w, b"\x15" + reason[:300] + b"\n")
                unraisable.append(u.exc_value)
            sys.unraisablehook = hook
            try:
                with np.errstate(all="ignore"):
                    out = "\x06" + fn()
                import gc
                gc.collect()
                if unraisable:                 # errors h5py could only report while freeing an object
                    raise unraisable[0]
                code = 0
            except RuntimeError as e:
                out = h5_error(e)
            except Fail as e:
                out = str(e)
            except OSError as e:
                out = os_error(e) if e.errno else h5_error(e)
            except MemoryError:
                out = "out of memory"
            except BaseException as e:
                out = h5_error(e) if isinstance(e, RuntimeError) else f"{e.__class__.__name__}: {str(e)[:160]}"
            data = out.encode("utf-8", "surrogateescape")
            while data:
                data = data[os.write(w, data):]
        finally:
            os._exit(code)
    os.close(w)
    key = on_failure(lambda: os.kill(pid, signal.SIGKILL))    # the tool stopped (a signal): so does the child
    chunks = []
    while True:
        try:
            b = os.read(r, 1 << 16)
        except InterruptedError:
            continue
        if not b:
            break
        chunks.append(b)
    os.close(r)
    _, status = os.waitpid(pid, 0)
    forget(key)
    msg = b"".join(chunks).decode("utf-8", "surrogateescape")
    early = ""
    if msg.startswith("\x15"):                 # the first error h5py reported while freeing an object
        early, _, msg = msg[1:].partition("\n")
    if os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0 and msg.startswith("\x06"):
        return True, msg[1:]
    if msg and not msg.startswith("\x06"):
        return False, " ".join(msg.split())
    if early:
        return False, early
    if os.WIFSIGNALED(status):
        return False, f"the process writing it died of signal {os.WTERMSIG(status)}"
    return False, f"the process writing it failed (exit status {os.WEXITSTATUS(status)})"


def _write_h5(tmp, cfg, table, shapes, tensors, extra_attrs):
    """The HDF5 writing of write_ckpt (in a child). Returns the JSON of {name: xsum64}."""
    import h5py
    text = "".join(f"{n} = {cfg[n]}\n" for n, *_ in table)
    sums = {}
    with h5py.File(tmp, "w") as f:
        _str_attr(f, "format", FORMAT)
        for k, v in (("format_version", FORMAT_VERSION), ("step", 0), ("data_cursor", 0), ("tokens_seen", 0),
                     ("adam_t", 0), ("seed", int(cfg["seed"])), ("saved_tp", 1), ("saved_cp", 1), ("saved_dp", 1),
                     ("saved_zero", 0)):
            f.attrs.create(k, np.int64(v), dtype=np.int64)
        f.attrs.create("state_checksum", np.uint64(state_checksum(FORMAT_VERSION, 0, 0, 0, 0)), dtype=np.uint64)
        _str_attr(f, "rng", RNG_TEXT)
        _str_attr(f, "config", text)
        for k, v in (extra_attrs or {}).items():
            _str_attr(f, k, v)
        g = f.create_group("config")
        for n, *_ in table:
            _str_attr(g, n, cfg[n])
        m = f.create_group("model")
        for n, shape in shapes.items():
            x = np.ascontiguousarray(loaded(tensors[n]), dtype="<f4")
            if x.shape != shape:
                raise Fail(f"internal: {n} has shape {x.shape}, not {shape}")
            d = m.create_dataset(n, data=x)
            sums[n] = str(xsum64(x))
            d.attrs.create("checksum", np.uint64(int(sums[n])), dtype=np.uint64)
            del x, d
            fault("hf_import:write")
    return json.dumps(sums)


def _verify_h5(tmp, sums, cfg):
    """Read the written file back in a fresh process (child): every dataset's checksum and the config."""
    import h5py
    with h5py.File(tmp, "r") as r:
        for n, s in sums.items():
            d = r["model"][n]
            if xsum64(d[()]) != int(s) or int(d.attrs["checksum"]) != int(s):
                raise Fail(f"/model/{n} reads back differently")
        for k, v in cfg.items():
            if _attr_str(r["config"].attrs[k]) != v:
                raise Fail(f"/config:{k} reads back differently")
    return ""


def write_ckpt(path, cfg, tensors, extra_attrs=None):
    """A model-only step-0 checkpoint (no /optimizer: the C loader starts AdamW at zero), written as PATH.tmp,
    read back in full (every checksum) and renamed. cfg: {key: canonical string} holding every key of the C table;
    tensors: {HF name: fp32 array or Lazy}, loaded one at a time. The free space must hold the file before
    anything is written; the writing and the reading back run in child processes (in_child), so a failed write
    (disk full, read-only, I/O error) is one line, and PATH.tmp is removed."""
    table = config_table()
    missing = [n for n, *_ in table if n not in cfg]
    if missing:
        raise Fail(f"internal: config lacks {missing}")
    tmp = path + ".tmp"
    shapes = tensor_shapes(cfg)
    if os.path.lexists(tmp):
        if os.path.isdir(tmp):
            raise Fail(f"'{tmp}' (the temporary file of --out) is a directory")
        try:
            os.remove(tmp)
        except OSError as e:
            raise Fail(os_error(e, f"cannot remove the stale '{tmp}'"))
    try:
        os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))
    except OSError as e:
        raise Fail(os_error(e, f"cannot create '{tmp}'") + "; nothing was written")
    key = remove_on_failure(tmp)
    need = sum(numel(s) * 4 for s in shapes.values()) + (1 << 16) + 4096 * len(shapes)
    free = free_bytes(os.path.dirname(os.path.abspath(tmp)))
    if free is not None and free < need:
        raise Fail(f"not enough space for '{tmp}': it needs about {mib(need)}, {mib(free)} are free there (disk full); "
                   "nothing was written")
    ok, res = in_child(lambda: _write_h5(tmp, cfg, table, shapes, tensors, extra_attrs))
    if not ok:
        raise Fail(f"cannot write '{tmp}': {res}; it was removed")
    sums = json.loads(res)
    ok, res = in_child(lambda: _verify_h5(tmp, sums, cfg))
    if not ok:
        raise Fail(f"'{tmp}' did not verify after writing ({res}); it was removed")
    fsync_path(tmp)
    try:
        os.replace(tmp, path)
    except OSError as e:
        raise Fail(os_error(e, f"cannot rename '{tmp}' to '{path}'"))
    forget(key)
    fsync_path(os.path.dirname(os.path.abspath(path)), True)


# ----------------------------------------------------------------------------------------------- safetensors
# every dtype of the safetensors format (bytes per element); ringlm imports the float ones of ST_DTYPES
ST_ITEMSIZE = {"BOOL": 1, "U8": 1, "I8": 1, "F8_E5M2": 1, "F8_E4M3": 1, "F8_E8M0": 1, "I16": 2, "U16": 2, "F16": 2,
               "BF16": 2, "I32": 4, "U32": 4, "F32": 4, "C64": 8, "F64": 8, "I64": 8, "U64": 8}
ST_DTYPES = {"F32": "<f4", "F16": "<f2", "BF16": "<u2", "F64": "<f8"}
ST_MAX_HEADER = 100_000_000          # the format's limit (the reference implementation refuses larger headers)


def st_write(path, tensors, metadata=None):
    """tensors: [(name, Lazy)] whose dtype is "F32" (load() gives <f4) or "BF16" (load() gives <u2 bf16 bits);
    each is loaded and written in turn. Returns (bytes of tensor data, {name: xsum64 of what was written})."""
    header, off = {}, 0
    for name, t in tensors:
        n = numel(t.shape) * (4 if t.dtype == "F32" else 2)
        header[name] = {"dtype": t.dtype, "shape": list(t.shape), "data_offsets": [off, off + n]}
        off += n
    header["__metadata__"] = dict(metadata or {"format": "pt"})
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    sums = {}
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h)
        for name, t in tensors:
            a = np.ascontiguousarray(t.load(), dtype="<f4" if t.dtype == "F32" else "<u2")
            if a.shape != t.shape:
                raise Fail(f"internal: {name} has shape {a.shape}, not {t.shape}")
            f.write(memoryview(a).cast("B"))
            sums[name] = xsum64(a)
            fault("hf_export:write")
    return off, sums


def st_read(path):
    """{name: Lazy fp32 array} of a safetensors file (F32, F16 and BF16 exactly; F64 rounded to fp32), mapped
    from the file, converted when loaded; Lazy.raw is the stored array. The header is checked as the format
    requires: a JSON object of unique names; each entry an object with a known dtype, a shape of non-negative
    integers and data_offsets [begin, end] whose length is the shape's product times the dtype's size; the byte
    ranges, in order, start at 0, follow each other without gap or overlap and end exactly at the end of the file;
    __metadata__, if present, maps strings to strings."""
    where = f"'{path}'"
    try:
        f = open(path, "rb")
    except OSError as e:
        raise Fail(os_error(e, f"cannot read '{path}'"))
    with f:
        size = os.fstat(f.fileno()).st_size
        head = f.read(8)
        if len(head) < 8:
            raise Fail(f"{where} is not a safetensors file (too short: {size} bytes)")
        (n,) = struct.unpack("<Q", head)
        if n > size - 8:
            raise Fail(f"{where} is not a safetensors file (header length {n} exceeds the file's {size - 8} bytes after it; "
                       "truncated?)")
        if n > ST_MAX_HEADER:
            raise Fail(f"{where}: header length {n} exceeds the format's limit of {ST_MAX_HEADER} bytes")
        raw = f.read(n)
    if not raw.lstrip(b" \t\r\n").startswith(b"{"):
        raise Fail(f"{where} is not a safetensors file (its header is not a JSON object)")
    header = parse_json(raw, f"{where}: the safetensors header")
    if not isinstance(header, dict):
        raise Fail(f"{where}: the safetensors header must be a JSON object, not {kind(header)}")
    base, data_len = 8 + n, size - 8 - n
    meta = header.get("__metadata__")
    if "__metadata__" in header and (not isinstance(meta, dict) or not all(isinstance(v, str) for v in meta.values())):
        raise Fail(f"{where}: '__metadata__' must be an object of strings, not {show(meta)}")
    entries = []
    for name, t in header.items():
        if name == "__metadata__":
            continue
        e = Fields(t, where, f"{name}.") if isinstance(t, dict) else None
        if e is None:
            raise Fail(f"{where}: the header entry of tensor '{name[:80]}' must be an object, not {show(t)}"
                       + ("" if t is None else f" ({kind(t)})"))
        dt = e.str("dtype")
        if dt not in ST_ITEMSIZE:
            raise Fail(f"{where}: tensor '{name}' has an unknown dtype {show(dt)}")
        shape = e.list("shape")
        if not all(type(v) is int and 0 <= v <= INT64_MAX for v in shape):
            e.fail("shape", "a list of non-negative integers", shape)
        offs = e.list("data_offsets")
        if len(offs) != 2 or not all(type(v) is int and v >= 0 for v in offs):
            e.fail("data_offsets", "[begin, end], two non-negative integers", offs)
        a, b = offs
        if b < a:
            e.fail("data_offsets", "[begin, end] with begin <= end", offs)
        cnt = numel(shape)
        if cnt > INT64_MAX:
            raise Fail(f"{where}: tensor '{name}' has shape {show(shape, 80)}, whose product overflows 64 bits")
        if b - a != cnt * ST_ITEMSIZE[dt]:
            raise Fail(f"{where}: tensor '{name}' has data_offsets {offs} ({b - a} bytes), but {dt} x {show(shape)} "
                       f"needs {cnt * ST_ITEMSIZE[dt]} bytes")
        entries.append((a, b, name, dt, tuple(shape)))
    entries.sort(key=lambda x: (x[0], x[1]))
    pos, prev = 0, None
    for a, b, name, _, _ in entries:
        if a < pos:
            raise Fail(f"{where}: the bytes of tensor '{name}' [{a}, {b}) overlap those of '{prev}' (ending at {pos}); "
                       "the format forbids overlapping tensors")
        if a > pos:
            raise Fail(f"{where}: bytes [{pos}, {a}) of the data belong to no tensor (before '{name}'); the format "
                       "requires the tensors to cover the data without gaps")
        pos, prev = b, name
    if pos != data_len:
        if pos > data_len:
            raise Fail(f"{where}: tensor '{prev}' ends at byte {pos} of the data, which has {data_len} bytes "
                       "(truncated file?)")
        raise Fail(f"{where}: the data has {data_len} bytes, the tensors cover {pos} (the format requires them to "
                   "cover the data exactly)")
    out = {}
    mm = np.memmap(path, dtype=np.uint8, mode="r") if size else None
    for a, b, name, dt, shape in entries:
        if dt not in ST_DTYPES:
            raise Fail(f"{where}: tensor '{name}' has dtype {dt}; ringlm imports F32, F16, BF16 and F64 (quantized or "
                       "integer weights are not supported)")
        x = np.frombuffer(mm[base + a:base + b], dtype=ST_DTYPES[dt]).reshape(shape)

        def load(x=x, bf16=dt == "BF16"):
            with np.errstate(all="ignore"):
                return bf16_to_f32(x) if bf16 else x.astype(np.float32, copy=False)
        out[name] = Lazy(shape, "F32", load, raw=x, where=f"{where}: tensor '{name}' ({dt})")
    return out


def st_nonfinite(t, chunk=1 << 24):
    """(inf or NaN as stored, finite values that overflow fp32) of a tensor of st_read, in blocks."""
    x = t.raw.reshape(-1)
    bad = nonfinite(x, chunk)
    over = 0
    if x.dtype == np.float64:
        for s in range(0, x.size, chunk):
            b = x[s:s + chunk]
            with np.errstate(all="ignore"):
                over += int(np.count_nonzero(np.isfinite(b) & ~np.isfinite(b.astype(np.float32))))
    return bad, over


def parse_size(s):
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([KMG]i?B?|B)?\s*", s, re.I)
    if not m:
        raise Fail(f"invalid size '{s}' (e.g. 5GB, 500MB, 2GiB or a number of bytes)")
    unit = (m.group(2) or "B").upper().rstrip("B") or "B"
    mult = {"B": 1, "K": 10**3, "M": 10**6, "G": 10**9, "KI": 2**10, "MI": 2**20, "GI": 2**30}[unit]
    v = int(float(m.group(1)) * mult)
    if not 1 <= v <= INT64_MAX:
        raise Fail(f"invalid size '{s}' (at least 1 byte)")
    return v


# ----------------------------------------------------------------------------------------------- tokenizers
BOS_NAMES = ("<s>", "<|begin_of_text|>", "<bos>", "[BOS]", "<|startoftext|>")
EOS_NAMES = ("<|endoftext|>", "</s>", "<|end_of_text|>", "<eos>", "[EOS]", "<|im_end|>")
TOKENIZER_MAX = 1 << 30


def tokenizer_files(spec):
    """(tokenizer.json path, directory) of a tokenizer.json or a directory holding one."""
    if os.path.isdir(spec):
        tj = os.path.join(spec, "tokenizer.json")
        if not os.path.isfile(tj):
            raise Fail(f"'{spec}' has no tokenizer.json (a Hugging Face fast tokenizer file is needed)")
        return tj, spec
    if not os.path.isfile(spec):
        raise Fail(f"tokenizer '{spec}' does not exist (a tokenizer.json or a directory holding one)")
    return spec, os.path.dirname(os.path.abspath(spec))


def _token_id(v, where, what):
    if type(v) is not int or not 0 <= v < INT32_MAX:
        raise Fail(f"{where}: {what} must be a token id (an integer in [0, {INT32_MAX - 1}]), not {show(v)} ({kind(v)})")
    return v


def tokenizer_info(spec, raw=None):
    """What a tokenizer.json (and a tokenizer_config.json beside it) says about its vocabulary and special tokens,
    read as JSON (no tokenizers library needed), every field used checked for type and range. Returns a dict: json,
    dir, data (the parsed tokenizer.json), vocab {token: id}, vocab_size (largest id + 1), bos / eos ((token, id) or
    None), prefix / suffix (the special token the post-processor puts before / after every text, or None)."""
    tj, d = tokenizer_files(spec)
    where = f"'{tj}'"
    j = parse_json(raw, where) if raw is not None else load_json(tj, where, TOKENIZER_MAX)
    top = Fields(j, where)
    model = top.sub("model")
    mv = model.raw("vocab", {})
    if isinstance(mv, dict):
        vocab = {}
        for t, i in mv.items():
            vocab[t] = _token_id(i, where, f"'model.vocab' entry {show(t)}")
    elif isinstance(mv, list):                                   # Unigram: [[piece, score], ...]
        vocab = {}
        for i, p in enumerate(mv):
            if not (isinstance(p, list) and len(p) == 2 and isinstance(p[0], str) and type(p[1]) in (int, float)):
                raise Fail(f"{where}: 'model.vocab' entry {i} must be [piece, score], not {show(p)}")
            vocab.setdefault(p[0], i)
        if len(mv) > INT32_MAX:
            raise Fail(f"{where}: 'model.vocab' has more than {INT32_MAX} entries")
    else:
        model.fail("vocab", "an object {token: id} or a list of [piece, score]", mv)
    special = {}
    for k, t in enumerate(top.list("added_tokens", [])):
        tf = Fields(t, where, f"added_tokens.{k}.")
        c, i = tf.str("content"), tf.int("id", lo=0, hi=INT32_MAX - 1)
        vocab[c] = i
        if tf.bool("special", False):
            special[c] = i
    if not vocab:
        raise Fail(f"{where} has an empty vocabulary")
    tc = {}
    tcp = os.path.join(d, "tokenizer_config.json")
    if os.path.isfile(tcp):
        tc = Fields(load_json(tcp, f"'{tcp}'"), f"'{tcp}'").obj

    def named(key):
        t = tc.get(key)
        if isinstance(t, dict):
            t = t.get("content")
            if t is not None and not isinstance(t, str):
                raise Fail(f"'{tcp}': '{key}.content' must be a string, not {show(t)} ({kind(t)})")
        elif t is not None and not isinstance(t, str):
            raise Fail(f"'{tcp}': '{key}' must be a string or an object with 'content', not {show(t)} ({kind(t)})")
        return (t, vocab[t]) if isinstance(t, str) and t in vocab else None

    prefix = suffix = None
    pp0 = top.sub("post_processor", None)
    procs = [] if pp0 is None else [pp0]
    if pp0 is not None and pp0.str("type", "") == "Sequence":
        procs = [Fields(p, where, f"post_processor.processors.{k}.") for k, p in enumerate(pp0.list("processors", []))]
    for pp in procs:
        typ = pp.str("type", "")
        if typ == "TemplateProcessing":
            toks = []
            for k, x in enumerate(pp.list("single", [])):
                xf = Fields(x, where, f"{pp.prefix}single.{k}.")
                if "Sequence" in x:
                    toks.append("A" if xf.sub("Sequence").str("id", "A") == "A" else "B")
                else:
                    toks.append(xf.sub("SpecialToken").str("id"))
            if "A" in toks:
                a = toks.index("A")
                if a > 0 and toks[a - 1] in vocab:
                    prefix = (toks[a - 1], vocab[toks[a - 1]])
                if a + 1 < len(toks) and toks[a + 1] in vocab:
                    suffix = (toks[a + 1], vocab[toks[a + 1]])
        elif typ in ("RobertaProcessing", "BertProcessing"):
            pair = []
            for key in ("cls", "sep"):
                v = pp.raw(key)
                if v is None:
                    pair.append(None)
                    continue
                if not (isinstance(v, list) and len(v) == 2 and isinstance(v[0], str)):
                    pp.fail(key, "[token, id]", v)
                pair.append((v[0], _token_id(v[1], where, f"'{pp.prefix}{key}' id")))
            prefix, suffix = pair
    bos = named("bos_token") or next(((n, special[n]) for n in BOS_NAMES if n in special), None)
    eos = named("eos_token") or next(((n, special[n]) for n in EOS_NAMES if n in special), None)
    vocab_size = max(vocab.values()) + 1
    for t in (prefix, suffix):
        if t is not None:
            vocab_size = max(vocab_size, t[1] + 1)
    if vocab_size > INT32_MAX:
        raise Fail(f"{where}: the vocabulary's largest id {vocab_size - 1} exceeds ringlm's vocab_size limit {INT32_MAX}")
    return {"json": tj, "dir": d, "data": j, "vocab": vocab, "vocab_size": vocab_size, "bos": bos, "eos": eos,
            "prefix": prefix, "suffix": suffix}


def separator(info, spec=None):
    """The document separator (token, id, why) of a tokenizer: SPEC (a token or an id) when given; else the token
    the tokenizer itself starts every text with (Llama's BOS), its BOS token, the token it ends every text with, its
    EOS token (GPT-2's <|endoftext|>, llm.c's convention). ringlm writes it before every document."""
    v = info["vocab"]
    if spec is not None:
        if spec in v:
            return spec, v[spec], "--sep"
        if re.fullmatch(r"\d+", spec):
            i = int(spec)
            inv = {b: a for a, b in v.items()}
            if i in inv:
                return inv[i], i, "--sep"
        raise Fail(f"--sep '{spec}' is neither a token nor an id of the tokenizer {info['json']}")
    for what, t in (("the tokenizer's post-processor starts every text with it", info["prefix"]),
                    ("the tokenizer's BOS token", info["bos"]),
                    ("the tokenizer's post-processor ends every text with it", info["suffix"]),
                    ("the tokenizer's EOS token", info["eos"])):
        if t:
            return t[0], t[1], what
    raise Fail(f"tokenizer {info['json']} names no BOS or EOS token (tokenizer_config.json, special tokens, "
               "post-processor); give the document separator with --sep TOKEN")
