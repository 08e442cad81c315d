#!/usr/bin/python3
"""sample_text — build/sample with a text prompt for a model of any tokenizer: encodes the prompt with the tokenizer
(Hugging Face `tokenizers`, no special tokens added), then runs build/sample with --prompt_ids and --tokenizer, which
prints the text through the same tokenizer.

  [mpirun -np tp*cp] tools/sample_text --ckpt PATH (--prompt TEXT | --prompt_file FILE) [--tokenizer TOKENIZER]
                                       [--print_ids] [build/sample's options ...]

TOKENIZER is a tokenizer.json or a directory holding one (a model's directory, e.g. the one tools/hf_import read);
default: the tokenizer the checkpoint's training data was prepared with (the checkpoint's data_meta, as
tools/prepare_hf's meta.json records it, SHA-256 checked). A byte-level model (its data prepared by build/prepare,
tokenizer "bytes") takes the text as it is. Every other option goes to build/sample unchanged (see build/sample
--help); under mpirun each rank encodes the prompt and becomes build/sample. --print_ids prints the prompt's ids as
training's sample_prompt takes them (ids:1,2,3) and runs nothing. Errors: one line on stderr, exit status 1.
"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hf_common as H  # noqa: E402

SAMPLE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "build", "sample")


def data_meta(ckpt):
    """The checkpoint's data_meta (its training data's meta.json) as a dict, or None when it has none."""
    import h5py
    path = H.resolve_ckpt(ckpt)
    try:
        with h5py.File(path, "r") as f:
            v = f.attrs.get("data_meta")
    except (OSError, ValueError, RuntimeError) as e:
        raise H.Fail(f"'{path}' cannot be opened as HDF5: {' '.join(str(e).split())[:120]}")
    if v is None:
        return None, path
    text = H._attr_str(v)
    try:
        return json.loads(text), path
    except ValueError:
        raise H.Fail(f"'{path}': its data_meta is not valid JSON")


def find_tokenizer(a):
    """(tokenizer.json path or None for the byte tokenizer)."""
    if a.tokenizer:
        return H.tokenizer_files(a.tokenizer)[0]
    meta, path = data_meta(a.ckpt)
    name = (meta or {}).get("tokenizer")
    if not name:
        raise H.Fail(f"'{path}' names no tokenizer (its training data had no meta.json naming one, or it was imported): "
                     "give --tokenizer TOKENIZER (a tokenizer.json or the model's directory)")
    if name == "bytes":
        return None
    if not os.path.isfile(name):
        raise H.Fail(f"the tokenizer '{name}' the training data was prepared with is missing: give --tokenizer TOKENIZER")
    import hashlib
    with open(name, "rb") as f:
        sha = hashlib.sha256(f.read()).hexdigest()
    want = meta.get("tokenizer_sha256")
    if want and sha != want:
        raise H.Fail(f"the tokenizer '{name}' has changed since the training data was prepared (SHA-256 {sha[:12]}..., "
                     f"recorded {want[:12]}...): give --tokenizer TOKENIZER")
    return name


def main():
    ap = H.ArgParser(prog="tools/sample_text", description=__doc__.split("\n\n")[0],
                     formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__.split("\n\n", 2)[2])
    ap.add_argument("--ckpt", help="a checkpoint, or a run directory (its latest); required")
    ap.add_argument("--prompt", help="the prompt's text")
    ap.add_argument("--prompt_file", "--prompt-file", dest="prompt_file", help="a file holding the prompt (UTF-8)")
    ap.add_argument("--tokenizer", help="a tokenizer.json or a directory holding one (default: see below)")
    ap.add_argument("--print_ids", "--print-ids", dest="print_ids", action="store_true",
                    help="print the prompt's ids (ids:1,2,3, as sample_prompt takes them) and run nothing")
    a, rest = ap.parse_known_args()
    if not a.ckpt:
        raise H.Fail("--ckpt PATH is required (see --help)")
    if (a.prompt is None) == (a.prompt_file is None):
        raise H.Fail("give one of --prompt TEXT and --prompt_file FILE")
    if any(r in ("--prompt_ids", "--prompt-ids") or r.startswith(("--prompt_ids=", "--prompt-ids=")) for r in rest):
        raise H.Fail("--prompt_ids goes to build/sample directly (tools/sample_text makes them from --prompt)")
    text = a.prompt
    if text is None:
        try:
            with open(a.prompt_file, "rb") as f:
                raw = f.read(64 << 20)
        except OSError as e:
            raise H.Fail(H.os_error(e, f"cannot read --prompt_file '{a.prompt_file}'"))
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise H.Fail(f"--prompt_file '{a.prompt_file}' is not UTF-8 text")
    tj = find_tokenizer(a)
    if tj is None:                                          # the byte tokenizer: the text as it is
        if a.print_ids:
            print("ids:" + ",".join(str(b) for b in text.encode("utf-8")))
            return 0
        cmd = [SAMPLE, "--ckpt", a.ckpt, "--prompt", text] + rest
    else:
        try:
            from tokenizers import Tokenizer
        except ImportError:
            raise H.Fail("the Python package 'tokenizers' is missing: run 'bash tools/setup/hf_env.sh'")
        try:
            ids = Tokenizer.from_file(tj).encode(text, add_special_tokens=False).ids
        except Exception as e:  # the library's plain Exceptions for a file it cannot load or encode with
            raise H.Fail(f"'{tj}' cannot encode the prompt: {' '.join(str(e).split())[:160]}")
        if a.print_ids:
            print("ids:" + ",".join(map(str, ids)))
            return 0
        cmd = [SAMPLE, "--ckpt", a.ckpt, "--tokenizer", tj] + (["--prompt_ids", ",".join(map(str, ids))] if ids else []) + rest
    if not os.access(SAMPLE, os.X_OK):
        raise H.Fail(f"build/sample is not built ('{os.path.normpath(SAMPLE)}' missing): run make first")
    sys.stdout.flush()
    os.execv(SAMPLE, cmd)


if __name__ == "__main__":
    H.main_guard(main, "sample_text")
