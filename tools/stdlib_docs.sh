#!/usr/bin/env bash
# stdlib_docs.sh — the documents of the quick start and the demo, one path a line: this machine's Python standard
# library (data that does not change with this repository's code), as build/prepare --doc-per dir reads them:
# each package directory one document (a whole codebase as one document), each top-level module file one more.
# Left out: tests, IDLE, lib2to3, compiled extensions (lib-dynload), caches, installed packages
# (site-packages, dist-packages), the build configuration (config-*) and the tables of encodings/ and pydoc_data/
# (data, not code: 2 MB that would dominate a held-out split). Usage:
#   build/prepare --out data/code --doc-per dir --val-frac 0.2 $(tools/stdlib_docs.sh)
set -eu
stdlib=$(/usr/bin/python3 -c 'import sysconfig; print(sysconfig.get_paths()["stdlib"])')
for d in "$stdlib"/*/; do
  case "$(basename "$d")" in
    test|tests|idlelib|lib2to3|lib-dynload|site-packages|dist-packages|__pycache__|__phello__|config-*|encodings|pydoc_data) ;;
    *) echo "${d%/}" ;;
  esac
done
for f in "$stdlib"/*.py; do [ -f "$f" ] && [ ! -L "$f" ] && echo "$f"; done   # (a link: its target is listed)
