#!/usr/bin/env bash
# The documentation agrees with the programs: the tables a program prints (config keys: build/train --help; the
# capacity planner's figures: build/plan) equal that program's output, and docs/demo.md's demo summary rests on the
# data and first steps the code gives now (tools/docs_tables.py --check, which says how); every relative
# link of README.md and docs/*.md leads to a file that exists and, with #anchor, to a heading there (GitHub's
# anchors); the README names every program `make` builds; the quick start's data recipe and the demo's are one list;
# every pointer in the sources, tests and docs to a section by its title (README, "title" / docs/F.md, "title"; in a
# Markdown file also see "title", a section of that file) names a heading or a bold paragraph lead of that file.
cd "$(dirname "$0")/.."
source tests/lib.sh

$PY tools/docs_tables.py --check >"$T/t" 2>&1 && ok "$(tail -n 1 "$T/t")" || bad "$(cat "$T/t")"

$PY - README.md docs/*.md >"$T/l" 2>&1 <<'PYEOF' && ok "links: $(tail -n 1 "$T/l")" || bad "links: $(head -n 5 "$T/l")"
import os, re, sys
def anchors(path):
    out, fence = set(), False
    for line in open(path, encoding="utf-8"):
        if line.startswith("```"):
            fence = not fence
            continue
        m = re.match(r"^#+ (.*)$", line.rstrip("\n"))
        if m and not fence:       # GitHub: lower case, punctuation but - and _ dropped, spaces to -
            out.add(re.sub(r"[^\w\- ]", "", m.group(1).strip().lower()).replace(" ", "-"))
    return out
bad, n = [], 0
for f in sys.argv[1:]:
    text = re.sub(r"```.*?```", "", open(f, encoding="utf-8").read(), flags=re.S)
    for m in re.finditer(r"\]\(([^)\s]+)\)", text):
        t = m.group(1)
        if re.match(r"^[a-z]+:", t):
            continue
        n += 1
        path, _, frag = t.partition("#")
        target = os.path.normpath(os.path.join(os.path.dirname(f), path)) if path else f
        if not os.path.exists(target):
            bad.append(f"{f}: ({t}): no file {target}")
        elif frag and target.endswith(".md") and frag not in anchors(target):
            bad.append(f"{f}: ({t}): no heading #{frag} in {target}")
for b in bad:
    print(b)
print(f"{n} relative links in {len(sys.argv) - 1} files lead to existing files and headings")
sys.exit(1 if bad else 0)
PYEOF

$PY - >"$T/s" 2>&1 <<'PYEOF' && ok "section pointers: $(tail -n 1 "$T/s")" || bad "section pointers: $(head -n 5 "$T/s")"
import glob, os, re
files = ["README.md"] + [f for pat in ("docs/*.md", "tools/**/*.py", "tools/**/*.sh", "tools/**/*.c", "tests/*.sh", "tests/*.py",
         "tests/*.c", "*/*.c", "*/*.h", "backend/*/*.cu") for f in glob.glob(pat, recursive=True)]
files += [f for f in glob.glob("tools/*") if os.path.isfile(f) and "." not in os.path.basename(f)]
# README, "title" | README's "title" | docs/x.md, "title" | README "title" (quotes possibly escaped in a string)
ref = re.compile(r"\b(README(?:\.md)?|docs/[\w.-]+\.md)(?:,|'s)? \(?\\?\"([A-Z][^\"\\$/]*)\\?\"")
def titles(path):
    text = open(path, encoding="utf-8").read()
    return [m.strip() for m in re.findall(r"^#+ (.*)$", text, re.M)] + re.findall(r"\*\*([^*\n]+?)\.?\*\*", text)
bad, n = [], 0
for f in sorted(set(files)):
    for i, line in enumerate(open(f, encoding="utf-8", errors="replace"), 1):
        refs = [(m.group(0), m.group(1), m.group(2)) for m in ref.finditer(line)]
        if f.endswith(".md"):
            refs += [(m.group(0), f, m.group(1)) for m in re.finditer(r'\bsee "([A-Z][^"]*)"', line)]
        for whole, where, title in refs:
            target = "README.md" if where.startswith("README") else where
            n += 1
            if not os.path.exists(target) or not any(t.startswith(title.strip()) for t in titles(target)):
                bad.append(f"{f}:{i}: {whole}: no such heading or bold lead in {target}")
for b in bad:
    print(b)
print(f"{n} pointers to sections by title name headings or bold leads of their files")
raise SystemExit(1 if bad or n < 3 else 0)
PYEOF

# the README's table of the docs names every ZeRO stage the trainer accepts (its refusal of zero = 9 lists them)
stages=$(build/train --zero 9 --train_data x 2>&1 | sed -nE 's/.*zero = 9 must be 0, (.*)$/\1/p' | sed 's/, \| or /\//g')
row=$(grep '^| \[Parallelism\](docs/parallelism.md) |' README.md)
[ -n "$stages" ] && [[ "$row" == *"ZeRO-$stages)"* ]] && ok "README's docs table: the parallelism row says ZeRO-$stages (the stages build/train accepts)" \
  || bad "README's docs table: the parallelism row does not say ZeRO-${stages:-?} (build/train's stages): $row"

progs=$(sed -n 's/^PROGRAMS *:= *$(addprefix $(BD)\/,\(.*\))$/\1/p' backend/cpu/backend.mk)
miss=""; for p in $progs; do grep -q "\`build/$p\`" README.md || miss+=" $p"; done
[ -n "$progs" ] && [ -z "$miss" ] && ok "README names every program make builds: $progs" || bad "README does not name:${miss:- (no PROGRAMS found)}"

grep -qF 'build/prepare --out data/code --doc-per dir --val-frac 0.2 $(tools/stdlib_docs.sh)' README.md \
  && grep -qF 'mapfile -t docs < <(tools/stdlib_docs.sh)' tools/experiments/demo.sh \
  && [ "$(tools/stdlib_docs.sh | grep -c .)" -ge 50 ] && ! tools/stdlib_docs.sh | grep -qE '/(test|__pycache__|lib-dynload|site-packages|dist-packages)$' \
  && ok "the quick start and the demo read one document list (tools/stdlib_docs.sh: $(tools/stdlib_docs.sh | grep -c .) paths, no tests or caches)" \
  || bad "quick start / demo data: not both tools/stdlib_docs.sh, or its list is off"
finish
