#!/usr/bin/env python3
"""Names and sums the host samples of benchmarks/host_sampler.h (profile_step ... FILE).

    python3 benchmarks/host_profile.py SAMPLES_FILE BUILD_BIN_DIR [--top N] [--callers TEXT]

Frames in modules found (by file name) in BUILD_BIN_DIR, the unstripped build that was
carried stripped, are named with addr2line; frames of other modules (the CUDA driver,
cuBLASLt, libc) keep dladdr's nearest exported symbol, or "?". Prints, as percentages of all
samples, the time by module and by function on top of the stack (self) and on the stack at
all (inclusive); with --callers, the callers of the functions whose name contains TEXT
(the first frame outside that function's module that is not itself a match).
"""
import collections
import os
import subprocess
import sys


def main():
    args = sys.argv[1:]
    top, callers = 40, None
    for flag in ("--top", "--callers"):
        if flag in args:
            i = args.index(flag)
            if flag == "--top":
                top = int(args[i + 1])
            else:
                callers = args[i + 1]
            del args[i:i + 2]
    if len(args) != 2:
        sys.exit(__doc__)
    path, bindir = args
    total, modules, symbols, stacks = 0, {}, {}, []
    with open(path) as f:
        for line in f:
            if line.startswith("# samples"):
                total = int(line.split()[2])
            elif line.startswith("# module"):
                _, _, i, p = line.split(maxsplit=3)
                modules[i] = os.path.basename(p.strip())
            elif line.startswith("# symbol"):
                _, _, frame, sym = line.split(maxsplit=3)
                symbols[frame] = sym.strip()
            elif line.strip():
                c, st = line.split(maxsplit=1)
                stacks.append((int(c), st.strip().split(";")))
    offsets = collections.defaultdict(set)
    for _, frames in stacks:
        for fr in frames:
            m, off = fr.split("+")
            offsets[m].add(off)
    names = {}
    for m, offs in offsets.items():
        mod = modules.get(m, "?")
        local = os.path.join(bindir, mod)
        offs = sorted(offs)
        if os.path.exists(local):
            out = subprocess.run(["addr2line", "-f", "-C", "-e", local] + ["0x" + o for o in offs],
                                 capture_output=True, text=True).stdout.splitlines()
            for i, o in enumerate(offs):
                names[f"{m}+{o}"] = f"{mod}: {out[2 * i] if 2 * i < len(out) else '?'}"
        for o in offs:
            names.setdefault(f"{m}+{o}", f"{mod}: {symbols.get(f'{m}+{o}', '?')}")
    named = [(c, [names[fr] for fr in frames]) for c, frames in stacks]
    mods, self_c, incl_c, call_c = collections.Counter(), collections.Counter(), collections.Counter(), collections.Counter()
    for c, fns in named:
        if not fns:
            continue
        mods[fns[0].split(":")[0]] += c
        self_c[fns[0]] += c
        for fn in set(fns):
            incl_c[fn] += c
        if callers:
            for i, fn in enumerate(fns):
                if callers in fn:
                    caller = next((g for g in fns[i + 1:] if callers not in g and g.split(":")[0] != fn.split(":")[0]),
                                  "(none)")
                    call_c[caller] += c
                    break
    pct = lambda v: f"{100.0 * v / total:6.1f}%"
    print(f"{total} samples\n\n## self, by module\n")
    for k, v in mods.most_common():
        print(pct(v), k)
    print("\n## self, by function\n")
    for k, v in self_c.most_common(top):
        print(pct(v), k[:160])
    print("\n## inclusive, by function\n")
    for k, v in incl_c.most_common(top):
        print(pct(v), k[:160])
    if callers:
        print(f"\n## callers of '{callers}' (nearest frame in another module)\n")
        for k, v in call_c.most_common(top):
            print(pct(v), k[:160])


if __name__ == "__main__":
    main()
