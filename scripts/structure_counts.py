#!/usr/bin/env python3
"""Count code structure, so a refactor's note can give before/after numbers counted the same way.

Reports, for the repository at --root (default: the one holding this script):
  1. lines of core/train (every .h/.cpp under it, recursively) and its largest file;
  2. functions longer than 80 lines in core/train, core/app and bench/harness
     (signature's first line to closing brace, inclusive; lambdas count as part of their function);
  3. files under core/, stages/ and bench/ that name RunConfig as a word (and how often);
  4. the include graph of core/train: units (path without extension, relative to core/),
     arrows, include circles (strongly connected components of more than one unit) and floors
     (longest-path depth in the condensation; floor 0 = includes no other train unit).

Functions are found by a small scanner, not a compiler: comments, string, char and raw-string
literals are blanked first, preprocessor lines are skipped, and braces are matched on what remains.
A '{' at namespace or class level opens a function body when the text before it (since the last
';', '{', '}' or access label) has a parameter list and is not a variable initialiser.
"""
import argparse
import json
import os
import re
import sys

SOURCE_EXT = (".h", ".hpp", ".cpp", ".cc", ".cu", ".cuh", ".inl")
LONG = 80  # a function is "long" above this many lines
FUNC_DIRS = ("core/train", "core/app", "bench/harness")


def source_files(root, rel, exts=(".h", ".cpp")):
    """Sorted paths (relative to root) of files under root/rel ending in exts."""
    out = []
    for dirpath, _, names in os.walk(os.path.join(root, rel)):
        out += [os.path.relpath(os.path.join(dirpath, n), root) for n in names if n.endswith(exts)]
    return sorted(out)


def read(root, rel):
    with open(os.path.join(root, rel), encoding="utf-8", errors="replace") as f:
        return f.read()


def blank(text):
    """Text with comments and string/char literal contents turned to spaces (newlines kept)."""
    out, i, n = [], 0, len(text)
    keep = lambda s: "".join(c if c == "\n" else " " for c in s)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
        elif c == '"' and re.search(r"(?:\b|^)(?:u8|u|U|L)?R$", text[max(0, i - 3):i]):
            m = re.compile(r'"([^()\\ ]{0,16})\(').match(text, i)  # raw string R"delim( ... )delim"
            end = text.find(")" + m.group(1) + '"', m.end()) if m else -1
            j = n if end < 0 else end + len(m.group(1)) + 2
        elif c in "\"'":
            if c == "'" and i and (text[i - 1].isalnum() or text[i - 1] == "_"):
                k = i  # digit separator (100'000) when the token before it starts with a digit
                while k and (text[k - 1].isalnum() or text[k - 1] in "_.'"):
                    k -= 1
                if text[k].isdigit():
                    out.append(c)
                    i += 1
                    continue
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            j = min(j + 1, n)
            out.append(c + keep(text[i + 1:j - 1]) + c)
            i = j
            continue
        else:
            out.append(c)
            i += 1
            continue
        out.append(keep(text[i:j]))
        i = j
    # Preprocessor lines (and their backslash continuations) become blank too.
    lines, cont = "".join(out).split("\n"), False
    for k, line in enumerate(lines):
        if cont or line.lstrip().startswith("#"):
            cont = line.rstrip().endswith("\\")
            lines[k] = ""
    return "\n".join(lines)


def head_kind(head):
    """'namespace', 'class', 'function' or 'other' for the text that precedes a block's '{'."""
    h = " ".join(head.split())
    if re.match(r"(inline\s+)?namespace\b|extern\s*\"", h):
        return "namespace"
    h = re.sub(r"^template\s*<.*?>\s*(?=[a-zA-Z_\[])", "", h)  # leading template <...>
    if re.match(r"(\[\[.*?\]\]\s*)?(class|struct|union)\b", h) and "(" not in h.split(":")[0]:
        return "class"
    h = re.sub(r"\boperator\b\s*[^\s(]*", "operator", h)  # operator==( etc. are not initialisers
    if "(" in h and "=" not in h[:h.index("(")] and not re.match(r"enum\b", h):
        return "function"
    return "other"


def functions(text):
    """(first line, name, length in lines) of every function defined in the source text."""
    s = blank(text)
    line_at = lambda k: s.count("\n", 0, k) + 1  # 1-based line of an offset

    def close(k):  # offset of the '}' matching the '{' at k
        depth = 0
        for j in range(k, len(s)):
            depth += {"{": 1, "}": -1}.get(s[j], 0)
            if depth == 0:
                return j
        return len(s) - 1

    found = []

    def scan(a, b):  # a region at namespace or class level: s[a:b]
        head_start, paren, k = a, 0, a
        while k < b:
            c = s[k]
            if c in "()":
                paren += 1 if c == "(" else -1
            elif c in ";}" or (c == ":" and re.search(r"\b(public|private|protected)\s*$", s[head_start:k])):
                head_start = k + 1  # a statement, a stray '}' or an access label ends the head
            elif c == "{":
                end = close(k)
                head = s[head_start:k]
                # Braces inside a parameter list, or glued to a name (member{init}, Type{}), stay in the head.
                if paren > 0 or (k > a and not s[k - 1].isspace() and s[k - 1] not in ")="):
                    k = end + 1
                    continue
                kind = head_kind(head)
                if kind in ("namespace", "class"):
                    scan(k + 1, end)
                elif kind == "function":
                    first = head_start + len(head) - len(head.lstrip())
                    m = re.search(r"((?:[\w~]+::)*operator\b\s*(?:\(\)|[^\s(]+)|[~\w:]+)\s*\(", head)
                    found.append((line_at(first), m.group(1) if m else "?", line_at(end) - line_at(first) + 1))
                head_start, paren, k = end + 1, 0, end + 1
                continue
            k += 1

    scan(0, len(s))
    return found


def include_graph(root):
    """Units of core/train and the arrows between them (includes are written from core/)."""
    files = source_files(root, "core/train")
    unit = lambda rel: os.path.splitext(os.path.relpath(rel, "core"))[0]  # core/train/x.h -> train/x
    units, arrows = {unit(f) for f in files}, set()
    for f in files:
        for inc in re.findall(r'^\s*#\s*include\s*"(train/[^"]+)"', read(root, f), re.M):
            if unit("core/" + inc) != unit(f) and unit("core/" + inc) in units:
                arrows.add((unit(f), unit("core/" + inc)))
    return sorted(units), sorted(arrows)


def floors(units, arrows):
    """Floor of each unit (longest path down, in components) and the include circles.

    The graph is small, so components come from plain reachability: v and w share one
    when each reaches the other."""
    succ = {u: {b for a, b in arrows if a == u} for u in units}
    reach = {}
    for u in units:  # everything u includes, directly or not
        seen, todo = set(), list(succ[u])
        while todo:
            w = todo.pop()
            if w not in seen:
                seen.add(w)
                todo += succ[w]
        reach[u] = seen
    comp = {u: tuple(sorted({u} | {w for w in reach[u] if u in reach[w]})) for u in units}
    memo = {}

    def depth(c):  # 0 when the component includes no unit outside itself
        if c not in memo:
            below = {comp[w] for u in c for w in succ[u]} - {c}
            memo[c] = 1 + max((depth(d) for d in below), default=-1)
        return memo[c]

    circles = sorted({c for c in comp.values() if len(c) > 1})
    return {u: depth(comp[u]) for u in units}, [list(c) for c in circles]


def measure(root):
    r = {}
    train = source_files(root, "core/train")
    sizes = {f: len(read(root, f).splitlines()) for f in train}
    big = max(sizes, key=sizes.get) if sizes else None
    r["train_lines"] = sum(sizes.values())
    r["train_files"] = len(sizes)
    r["train_largest"] = {"path": big, "lines": sizes.get(big, 0)}
    r["long_functions"] = {}
    for d in FUNC_DIRS:
        r["long_functions"][d] = [{"file": f, "line": ln, "name": name, "lines": n}
                                  for f in source_files(root, d)
                                  for ln, name, n in functions(read(root, f)) if n > LONG]
    word = re.compile(r"\bRunConfig\b")
    r["run_config_files"] = {f: len(word.findall(read(root, f))) for d in ("core", "stages", "bench")
                             for f in source_files(root, d, SOURCE_EXT) if word.search(read(root, f))}
    units, arrows = include_graph(root)
    floor, circles = floors(units, arrows)
    r["include_graph"] = {"units": len(units), "arrows": len(arrows), "circles": circles,
                          "floors": 1 + max(floor.values(), default=-1),
                          "floor_of": dict(sorted(floor.items(), key=lambda kv: (kv[1], kv[0])))}
    return r


def report(r):
    g = r["include_graph"]
    print(f"core/train: {r['train_lines']} lines in {r['train_files']} files; "
          f"largest {r['train_largest']['path']} ({r['train_largest']['lines']} lines)")
    print(f"\nFunctions over {LONG} lines:")
    for d, fs in r["long_functions"].items():
        print(f"  {d}: {len(fs)}")
        for f in fs:
            print(f"    {f['file']}:{f['line']} {f['name']} {f['lines']}")
    print(f"\nFiles naming RunConfig ({len(r['run_config_files'])}):")
    for f, n in r["run_config_files"].items():
        print(f"  {f} ({n})")
    print(f"\ncore/train include graph: {g['units']} units, {g['arrows']} arrows, "
          f"{len(g['circles'])} circles, {g['floors']} floors")
    for c in g["circles"]:
        print(f"  circle: {' <-> '.join(c)}")
    for fl in range(g["floors"]):
        print(f"  floor {fl}: {' '.join(u for u, v in g['floor_of'].items() if v == fl)}")


def main():
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--root", default=here, help="repository root (default: %(default)s)")
    ap.add_argument("--json", action="store_true", help="print the numbers as JSON")
    args = ap.parse_args()
    r = measure(args.root)
    if args.json:
        json.dump(r, sys.stdout, indent=2)
        print()
    else:
        report(r)


if __name__ == "__main__":
    main()
