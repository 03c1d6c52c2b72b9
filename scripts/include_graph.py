#!/usr/bin/env python3
"""The include graph of the tree, by floor: checks that layers/ (the ground floor and the
backend folders) includes nothing from bench/, that a backend folder includes no other
backend's headers except through the contract (onednn may use the cpu backend's table,
never its kernels' header), and that no headers include each other in a circle.
bench/'s folders (one job each) include only from the folders below them (BENCH_USES).
Then the call graph inside each folder of layers/, and across bench/'s, where it can be
seen: .c files whose functions call each other's in a circle (a calls b's function, b
calls a's, through any number of files) fail; a call through a function pointer (a
kernel table, a callback) is not seen.
Prints the graph as "file -> header" lines with --print. Exit 1 on a violation."""
import os, re, sys

root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
dirs = ['layers', 'layers/cpu', 'layers/onednn', 'layers/cuda', 'bench/util', 'bench/cfg', 'bench/measure',
        'bench/report', 'bench/cluster', 'bench/run', 'bench/cli']
# bench/'s folders, each with those it may include from (CMakeLists.txt's bench_folder):
# the jobs' floors, util at the bottom, the command line on top
BENCH_USES = {'util': set(), 'cfg': {'util'}, 'measure': {'util', 'cfg'}, 'report': {'util', 'cfg', 'measure'},
              'cluster': {'util'}, 'run': {'util', 'cfg', 'measure', 'report'},
              'cli': {'util', 'cfg', 'measure', 'report', 'cluster', 'run'}}
files = {}
for d in dirs:
    for f in sorted(os.listdir(os.path.join(root, d))):
        if f.endswith(('.c', '.h', '.cc', '.cu')):
            files[os.path.join(d, f)] = open(os.path.join(root, d, f), errors='replace').read()
by_name = {}
for p in files:
    by_name.setdefault(os.path.basename(p), []).append(p)

def resolve(src, name):
    """The header a quoted include names, searched as the build does: the including
    file's folder first, then layers/ (every floor sees it), then bench/'s folders."""
    for d in [os.path.dirname(src), 'layers'] + [d for d in dirs if d.startswith('bench/')]:
        p = os.path.join(d, name)
        if p in files:
            return p
    return None

edges = {}
bad = []
for src, text in files.items():
    for name in re.findall(r'^\s*#\s*include\s+"([^"]+)"', text, re.M):
        dst = resolve(src, name)
        if dst is None:
            continue  # generated (version.h) or a library's
        edges.setdefault(src, []).append(dst)
        if src.startswith('layers') and dst.startswith('bench/'):
            bad.append(f'{src} includes {dst}: layers/ is the ground floor and includes nothing from bench/')
        sdir, ddir = os.path.dirname(src), os.path.dirname(dst)
        if sdir.startswith('bench/') and ddir.startswith('bench/') and sdir != ddir and \
                ddir[6:] not in BENCH_USES[sdir[6:]]:
            bad.append(f'{src} includes {dst}: {sdir}/ uses only ' +
                       (', '.join(sorted(BENCH_USES[sdir[6:]])) or 'layers/') + ' (CMakeLists.txt, bench_folder)')
        if src.startswith('layers/') and ddir.startswith('layers/') and sdir != ddir:
            bad.append(f'{src} includes {dst}: a backend sees the contract (layers/) and its own folder only')

# circles among headers
state = {}
def visit(n, stack):
    state[n] = 1
    for m in edges.get(n, []):
        if not m.endswith('.h'):
            continue
        if state.get(m) == 1:
            bad.append('include circle: ' + ' -> '.join(stack[stack.index(m):] + [m]))
        elif not state.get(m):
            visit(m, stack + [m])
    state[n] = 2
for n in sorted(files):
    if n.endswith('.h') and not state.get(n):
        visit(n, [n])

# circles of calls between the source files of one folder
def code_of(text):
    """text without comments, strings and character literals (their lines kept)."""
    text = re.sub(r'/\*.*?\*/', lambda m: '\n' * m.group(0).count('\n'), text, flags=re.S)
    text = re.sub(r'//[^\n]*', '', text)
    text = re.sub(r'"(\\.|[^"\\\n])*"', '""', text)
    return re.sub(r"'(\\.|[^'\\\n])*'", "''", text)

NOT_FUNCTIONS = {'if', 'for', 'while', 'switch', 'return', 'sizeof', '__attribute__'}
# each folder of layers/ alone (the backends reach each other through tables), and bench/'s
# folders together: a circle through several of them is one too
groups = [[d] for d in dirs if not d.startswith('bench/')] + [[d for d in dirs if d.startswith('bench/')]]
for group in groups:
    d = group[0] if len(group) == 1 else 'bench'
    code = {p: code_of(t) for p, t in files.items()
            if os.path.dirname(p) in group and p.endswith(('.c', '.cc', '.cu'))}
    defined = {}  # a function with external linkage -> the file that defines it
    for p, t in code.items():
        for m in re.finditer(r'^(?!static\b)(?:[A-Za-z_][\w \*]*?[\s\*])?(\w+)\s*\([^;{]*?\)\s*\{', t, re.M):
            if m.group(1) not in NOT_FUNCTIONS:
                defined.setdefault(m.group(1), p)
    calls = {p: {} for p in code}  # file -> {file it calls: a function of it}
    for p, t in code.items():
        for name in sorted(set(re.findall(r'\b(\w+)\s*\(', t))):
            q = defined.get(name)
            if q and q != p:
                calls[p].setdefault(q, name)
    seen, path = {}, []
    def walk(p):
        seen[p] = 1
        path.append(p)
        for q in sorted(calls[p]):
            if seen.get(q) == 1:
                ring = path[path.index(q):] + [q]
                bad.append('call circle in ' + d + '/: ' + ' -> '.join(
                    f'{os.path.relpath(a, d)} ({calls[a][b]})' for a, b in zip(ring, ring[1:])) + ' -> ' +
                    os.path.relpath(q, d))
            elif not seen.get(q):
                walk(q)
        path.pop()
        seen[p] = 2
    for p in sorted(code):
        if not seen.get(p):
            walk(p)

if '--print' in sys.argv:
    for src in sorted(edges):
        for dst in edges[src]:
            print(f'{src} -> {dst}')
for b in bad:
    print(b, file=sys.stderr)
print(f'include graph: {len(files)} files, {sum(len(v) for v in edges.values())} includes, '
      f'{len(bad)} violation{"s" if len(bad) != 1 else ""}')
sys.exit(1 if bad else 0)
