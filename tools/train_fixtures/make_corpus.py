#!/usr/bin/env python3
"""Build the English training corpus for the trained test models from what Debian packages installed here ship.

Runs on a developer machine (Debian 12, Python 3 standard library, man-db's groff), not in CI: CI machines have
other packages installed, so the corpus is built once and its provenance committed, not rebuilt.

    python3 tools/train_fixtures/make_corpus.py --out .train/corpus.jsonl.xz \
        --manifest tools/train_fixtures/corpus_manifest.json

What goes in (every file from a package that the Debian archive lists apt has name, at the installed upstream
version (`apt-cache madison`; the Debian revision may differ); third-party packages such as google-cloud-cli or
nodesource's nodejs are left out, and so is anything dpkg does not own):
  man    English manual pages (/usr/share/man/man[1-9]*, not the translated /usr/share/man/LANG/ trees), rendered
         by groff -t -k -mandoc -Tutf8 (left-adjusted, no hyphenation, 78 columns, no overstrike), header line
         dropped.
  info   GNU info manuals (/usr/share/info/*.info*), node separators removed.
  doc    /usr/share/doc/**: plain text, Markdown, reStructuredText and HTML documents (tags stripped), gzip'ed or
         not; changelogs, copyright files, binaries, PDF/PostScript, source code and files over 2 MB are left out,
         and at most 1.5 MB are taken per package (files in path order).
  code   Python standard library modules (/usr/lib/python3.X/*.py, top level only, at most 4 MB): code prompts.
  chat   Conversations made from the man pages' NAME lines ("ls - list directory contents") and the first paragraph
         of their DESCRIPTION: a user asks what the command is, the assistant answers. They are stored as message
         lists; train.py renders them with the tokenizer's chat template.
Prose documents (man, info, doc) must look English: at least 6% of their words among a few common English words
and at least 90% of their letters ASCII.  Text is normalized lightly: groff's Unicode punctuation to ASCII, trailing
blanks dropped, runs of blank lines collapsed, NUL and other control characters removed.  Documents with the
same text (after normalization) are kept once, the first in path order.

Split: a document is held out when the first byte of sha256(its path) is below 13 (about 5%); a chat sample goes
with its man page.  Order: by kind (man, info, doc, code, chat), then path.  Output: xz-compressed JSON lines (a
header line, then {"kind", "split", "path", "text"} or {"kind": "chat", ..., "messages": [...]}) and a manifest
with every source file used or skipped as a duplicate: path, package, version, sha256, bytes, kind, split.
Deterministic: the same installed files give the same corpus bytes.
"""

import argparse
import concurrent.futures
import glob
import gzip
import hashlib
import html.parser
import json
import lzma
import os
import re
import subprocess
import sys

HELDOUT_BYTE = 13            # sha256(path)[0] < 13: held out (13/256 ~ 5%)
MAX_DOC_FILE = 2_000_000     # bytes of text per /usr/share/doc file
MAX_DOC_PACKAGE = 1_500_000  # bytes of text per package from /usr/share/doc
MAX_CODE = 4_000_000
MIN_CHARS = 200              # shorter documents carry little
ENGLISH_WORDS = frozenset("the of and to a in is that for it with as be on this are or by not an if from you "
                          "can which when will all file use used".split())

DOC_TEXT_SUFFIXES = (".txt", ".md", ".markdown", ".rst", ".html", ".htm", ".text")
DOC_TEXT_NAMES = re.compile(r"^(readme|news|faq|todo|authors|thanks|bugs|hacking|install|usage|notes|"
                            r"readme\.debian|news\.debian|contributing|tips|manual|overview|history)"
                            r"([._-].*)?$", re.I)
DOC_SKIP = re.compile(r"(^|/)(changelog[^/]*|changes[^/]*|copyright|copying[^/]*|license[^/]*|licence[^/]*)$", re.I)

PUNCT = str.maketrans({"\u2010": "-", "\u2011": "-", "\u2012": "-", "\u2013": "-", "\u2014": "--", "\u2212": "-",
                       "\u2018": "'", "\u2019": "'", "\u201c": '"', "\u201d": '"', "\u2022": "*", "\u00b7": "*",
                       "\u27e8": "<", "\u27e9": ">", "\u00a0": " ", "\u2002": " ", "\u2003": " ", "\u2009": " ",
                       "\u2026": "...", "\u00ad": ""})
CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def is_heldout(path):
    return hashlib.sha256(path.encode()).digest()[0] < HELDOUT_BYTE


def normalize(text):
    text = text.translate(PUNCT)
    text = CONTROL.sub("", text.replace("\r\n", "\n").replace("\r", "\n").replace("\t", "    "))
    lines = [ln.rstrip() for ln in text.split("\n")]
    text = "\n".join(lines)
    text = re.sub(r"\n{3,}", "\n\n", text)
    return text.strip("\n") + "\n"


def looks_english(text):
    words = re.findall(r"[A-Za-z]+", text[:200_000])
    if len(words) < 30:
        return False
    common = sum(1 for w in words if w.lower() in ENGLISH_WORDS)
    letters = [c for c in text[:200_000] if c.isalpha()]
    ascii_share = sum(1 for c in letters if c.isascii()) / max(1, len(letters))
    return common / len(words) >= 0.06 and ascii_share >= 0.9


def read_maybe_gz(path):
    with open(path, "rb") as f:
        data = f.read()
    if path.endswith(".gz"):
        data = gzip.decompress(data)
    return data


def decode(data):
    if b"\x00" in data[:8192]:
        return None  # binary
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return data.decode("latin-1")


# ------------------------------------------------------------------------------------------------ packages


def debian_packages():
    """{package: version} of the installed packages whose installed version the Debian archive lists name."""
    out = subprocess.run(["dpkg-query", "-W", "-f", "${Package}\t${Version}\n"], capture_output=True, text=True,
                         check=True).stdout
    installed = {}
    for line in out.splitlines():
        name, ver = line.split("\t")
        installed[name] = ver
    mad = subprocess.run(["apt-cache", "madison", *sorted(installed)], capture_output=True, text=True).stdout
    ok = {}
    for line in mad.splitlines():
        parts = [p.strip() for p in line.split("|")]
        if len(parts) >= 3 and "debian" in parts[2] and parts[0] in installed:
            if upstream(installed[parts[0]]) == upstream(parts[1]):
                ok[parts[0]] = installed[parts[0]]
    return ok, installed


def upstream(version):
    """The upstream part of a Debian version (epoch kept, Debian revision dropped): a package installed at an
    older Debian revision than the lists name (a security update not yet applied) is still Debian's."""
    return version.rsplit("-", 1)[0] if "-" in version else version


def file_owners():
    """{path: package} from dpkg's file lists (what `dpkg -S` reads)."""
    owners = {}
    for lst in sorted(glob.glob("/var/lib/dpkg/info/*.list")):
        pkg = os.path.basename(lst)[:-len(".list")].split(":")[0]
        with open(lst, encoding="utf-8", errors="replace") as f:
            for line in f:
                owners.setdefault(line.rstrip("\n"), pkg)
    return owners


# ------------------------------------------------------------------------------------------------ extractors


def render_man(path):
    """groff of one man page (cwd /usr/share/man so that .so includes resolve); None on failure."""
    try:
        src = read_maybe_gz(path)
    except OSError:
        return None
    if src.lstrip().startswith(b".so ") and src.count(b"\n") <= 2:
        return None  # an alias of another page
    prelude = b".am TH\n.ad l\n..\n"  # .TH resets adjustment: left-adjust after it (no justification spaces)
    try:
        r = subprocess.run(["groff", "-t", "-k", "-mandoc", "-Tutf8", "-rHY=0", "-rLL=78n", "-P-cbou"],
                           input=prelude + src, capture_output=True, timeout=20, cwd="/usr/share/man")
    except subprocess.TimeoutExpired:
        return None
    if r.returncode != 0:
        return None
    text = r.stdout.decode("utf-8", errors="replace")
    lines = text.split("\n")
    header = re.compile(r"^\S+\([^)]*\)\s.*\S+\([^)]*\)\s*$")
    if lines and header.match(lines[0]):
        lines = lines[1:]
    while lines and not lines[-1].strip():
        lines.pop()
    if lines and header.match(lines[-1].strip()) is None and re.search(r"\S+\([^)]*\)\s*$", lines[-1]):
        lines = lines[:-1]  # footer "GNU coreutils 9.1  September 2022  LS(1)"
    return "\n".join(lines)


class HtmlText(html.parser.HTMLParser):
    BLOCK = {"p", "div", "br", "li", "tr", "h1", "h2", "h3", "h4", "h5", "h6", "pre", "table", "ul", "ol", "dl",
             "dt", "dd", "section", "article", "blockquote", "hr", "title"}

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.out, self.skip, self.pre = [], 0, 0

    def handle_starttag(self, tag, attrs):
        if tag in ("script", "style", "head"):
            self.skip += 1
        if tag == "pre":
            self.pre += 1
        if tag in self.BLOCK:
            self.out.append("\n")
        if tag == "li":
            self.out.append("* ")

    def handle_endtag(self, tag):
        if tag in ("script", "style", "head"):
            self.skip = max(0, self.skip - 1)
        if tag == "pre":
            self.pre = max(0, self.pre - 1)
        if tag in self.BLOCK:
            self.out.append("\n")

    def handle_data(self, data):
        if self.skip:
            return
        self.out.append(data if self.pre else re.sub(r"\s+", " ", data))


def html_to_text(s):
    p = HtmlText()
    p.feed(s)
    p.close()
    text = "".join(p.out)
    return "\n".join(ln.strip() if not ln.startswith("    ") else ln for ln in text.split("\n"))


def info_to_text(s):
    out, skip_header = [], False
    for ln in s.split("\n"):
        if ln.startswith("\x1f"):
            skip_header = True
            continue
        if skip_header:
            skip_header = False
            if ln.startswith("File:") or ln.startswith("Tag Table:") or ln.startswith("Indirect:"):
                continue
        out.append(ln)
    text = "\n".join(out)
    return re.sub(r"^Tag Table:.*\Z", "", text, flags=re.S | re.M)


def man_name_line(text):
    """(name, description, first DESCRIPTION paragraph) of a rendered man page, or None."""
    m = re.search(r"^NAME\n((?:[ \t]+\S.*\n?)+)", text, re.M)
    if not m:
        return None
    line = " ".join(m.group(1).split())
    mm = re.match(r"^(\S+(?:, \S+)*) +(?:-|--|\\-) +(.+)$", line)
    if not mm or len(mm.group(2)) < 8:
        return None
    d = re.search(r"^DESCRIPTION\n((?:[ \t]+\S.*\n?)+)", text, re.M)
    para = " ".join(d.group(1).split()) if d else ""
    if len(para) > 500:
        cut = para[:500].rfind(". ")
        para = para[:cut + 1] if cut > 100 else ""
    return mm.group(1).split(",")[0], mm.group(2).rstrip("."), para


QUESTIONS = ["What does {n} do?", "What is {n}?", "Explain what the {n} command is for.",
             "Tell me briefly what {n} is used for.", "I keep seeing {n} in scripts. What is it?"]


def chat_sample(path, name, desc, para):
    h = hashlib.sha256(("chat:" + path).encode()).digest()
    q = QUESTIONS[h[0] % len(QUESTIONS)].format(n=name)
    a = f"{name}: {desc[0].lower() + desc[1:] if desc[:1].isupper() and desc[1:2].islower() else desc}."
    if para:
        a += " " + para
    return [{"role": "user", "content": q}, {"role": "assistant", "content": a}]


# ------------------------------------------------------------------------------------------------ collection


def man_files():
    out = []
    for sec in sorted(glob.glob("/usr/share/man/man[1-9]*")):
        for p in sorted(glob.glob(sec + "/*")):
            if os.path.isfile(p) and not os.path.islink(p):
                out.append(p)
    return out


def info_files():
    return [p for p in sorted(glob.glob("/usr/share/info/*.info*"))
            if os.path.isfile(p) and not os.path.islink(p) and re.search(r"\.info(-\d+)?(\.gz)?$", p)]


def doc_files():
    out = []
    for root, dirs, files in os.walk("/usr/share/doc"):
        dirs.sort()
        for f in sorted(files):
            p = os.path.join(root, f)
            if os.path.islink(p) or not os.path.isfile(p):
                continue
            rel = p[len("/usr/share/doc/"):]
            base = f[:-3] if f.endswith(".gz") else f
            if DOC_SKIP.search(base) or DOC_SKIP.search(rel):
                continue
            if base.lower().endswith(DOC_TEXT_SUFFIXES) or DOC_TEXT_NAMES.match(base):
                out.append(p)
    return out


def code_files():
    libs = sorted(glob.glob("/usr/lib/python3.[0-9]*"))
    if not libs:
        return []
    return [p for p in sorted(glob.glob(libs[-1] + "/*.py")) if os.path.isfile(p) and not os.path.islink(p)]


def doc_text(path):
    data = read_maybe_gz(path)
    if len(data) > MAX_DOC_FILE:
        return None
    s = decode(data)
    if s is None:
        return None
    base = path[:-3] if path.endswith(".gz") else path
    if base.lower().endswith((".html", ".htm")):
        s = html_to_text(s)
    return s


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=".train/corpus.jsonl.xz")
    ap.add_argument("--manifest", default="tools/train_fixtures/corpus_manifest.json")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--limit", type=int, default=0, help="at most N files per kind (a quick trial)")
    args = ap.parse_args()

    debian, installed = debian_packages()
    owners = file_owners()
    print(f"{len(installed)} packages installed, {len(debian)} of them in the Debian archive lists", flush=True)

    def owner(path):
        pkg = owners.get(path) or owners.get(os.path.realpath(path))
        return pkg, (debian.get(pkg) if pkg else None)

    kinds = [("man", man_files()), ("info", info_files()), ("doc", doc_files()), ("code", code_files())]
    docs, manifest, seen = [], [], {}
    skipped = {"not_debian": 0, "not_english": 0, "too_short": 0, "unreadable": 0, "package_cap": 0,
               "code_cap": 0}
    skipped_packages = set()
    chats = []
    for kind, files in kinds:
        files = [p for p in files]
        if args.limit:
            files = files[:args.limit]
        keep = []
        for p in files:
            pkg, ver = owner(p)
            if ver is None:
                skipped["not_debian"] += 1
                skipped_packages.add(pkg or "(no package)")
                continue
            keep.append((p, pkg, ver))
        print(f"{kind}: {len(keep)} files from Debian packages ({len(files) - len(keep)} not)", flush=True)
        if kind == "man":
            with concurrent.futures.ThreadPoolExecutor(args.jobs) as ex:
                texts = list(ex.map(lambda t: render_man(t[0]), keep))
        else:
            texts = []
            for p, _, _ in keep:
                try:
                    raw = read_maybe_gz(p)
                except OSError:
                    texts.append(None)
                    continue
                if kind == "info":
                    s = decode(raw)
                    texts.append(info_to_text(s) if s is not None else None)
                elif kind == "doc":
                    texts.append(doc_text(p))
                else:
                    texts.append(decode(raw))
        per_package, code_total = {}, 0
        for (p, pkg, ver), text in zip(keep, texts):
            if text is None:
                skipped["unreadable"] += 1
                continue
            text = normalize(text)
            if len(text) < MIN_CHARS:
                skipped["too_short"] += 1
                continue
            if kind != "code" and not looks_english(text):
                skipped["not_english"] += 1
                continue
            if kind == "doc":
                if per_package.get(pkg, 0) + len(text) > MAX_DOC_PACKAGE:
                    skipped["package_cap"] += 1
                    continue
            if kind == "code" and code_total + len(text) > MAX_CODE:
                skipped["code_cap"] += 1
                continue
            split = "heldout" if is_heldout(p) else "train"
            h = hashlib.sha256(text.encode()).hexdigest()
            entry = [p, pkg, ver, sha256_file(p), os.path.getsize(p), kind, split, len(text)]
            if h in seen:
                entry.append(seen[h])
                manifest.append(entry)
                continue
            seen[h] = p
            entry.append(None)
            manifest.append(entry)
            if kind == "doc":
                per_package[pkg] = per_package.get(pkg, 0) + len(text)
            if kind == "code":
                code_total += len(text)
            docs.append({"kind": kind, "split": split, "path": p, "text": text})
            if kind == "man":
                nl = man_name_line(text)
                if nl:
                    chats.append({"kind": "chat", "split": split, "path": p, "messages": chat_sample(p, *nl)})
    docs.extend(chats)

    totals = {}
    for d in docs:
        n = len(d["text"]) if "text" in d else sum(len(m["content"]) for m in d["messages"])
        key = f"{d['kind']}/{d['split']}"
        t = totals.setdefault(key, [0, 0])
        t[0] += 1
        t[1] += n
    header = {"format": "strata train corpus 1", "made_by": "tools/train_fixtures/make_corpus.py",
              "heldout": f"sha256(path)[0] < {HELDOUT_BYTE}",
              "totals": {k: {"documents": v[0], "chars": v[1]} for k, v in sorted(totals.items())}}
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    payload = (json.dumps(header, sort_keys=True) + "\n"
               + "".join(json.dumps(d, sort_keys=True, ensure_ascii=False) + "\n" for d in docs)).encode()
    with open(args.out, "wb") as f:
        f.write(lzma.compress(payload, preset=6))
    corpus_sha = sha256_file(args.out)

    with open("/etc/debian_version") as f:
        debian_version = f.read().strip()
    man = {
        "made_by": "tools/train_fixtures/make_corpus.py",
        "debian_version": debian_version,
        "corpus_file": os.path.basename(args.out),
        "corpus_sha256": corpus_sha,
        "corpus_bytes": os.path.getsize(args.out),
        "corpus_text_bytes": len(payload),
        "totals": header["totals"],
        "skipped": skipped,
        "skipped_packages_not_in_debian_lists": sorted(skipped_packages),
        "columns": ["path", "package", "version", "sha256", "bytes", "kind", "split", "text_chars",
                    "duplicate_of"],
        "files": manifest,
    }
    os.makedirs(os.path.dirname(os.path.abspath(args.manifest)), exist_ok=True)
    with open(args.manifest, "w") as f:
        f.write("{\n")
        keys = [k for k in man if k != "files"]
        for k in keys:
            f.write(f"  {json.dumps(k)}: {json.dumps(man[k], sort_keys=True)},\n")
        f.write('  "files": [\n')
        f.write(",\n".join("    " + json.dumps(e) for e in manifest))
        f.write("\n  ]\n}\n")
    print(json.dumps({k: man[k] for k in ("corpus_sha256", "corpus_bytes", "corpus_text_bytes", "totals",
                                          "skipped")}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
