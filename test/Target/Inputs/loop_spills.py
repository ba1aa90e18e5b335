"""Reads `cuobjdump -sass` output on stdin and reports local-memory accesses
(STL/LDL: register spills) inside and outside loops. A loop is the address
range from the target of a backward branch to the branch. Prints one line
per kernel; exits 1 if any spill sits inside a loop."""
import re
import sys

kernel, body = None, []
failed = False


def report(name, lines):
    global failed
    insts = []
    for line in lines:
        m = re.match(r"\s*/\*([0-9a-f]{4,})\*/\s+(.*?);", line)
        if m:
            insts.append((int(m.group(1), 16), m.group(2)))
    loops = []
    for addr, text in insts:
        b = re.search(r"\bBRA\s+(?:`\(\.L_x_\d+\)|0x([0-9a-f]+))", text)
        if b and b.group(1) and int(b.group(1), 16) < addr:
            loops.append((int(b.group(1), 16), addr))
    spills = [(a, t) for a, t in insts if re.match(r"(@!?U?P\w+\s+)?(STL|LDL)\b", t)]
    inside = [(a, t) for a, t in spills if any(lo <= a <= hi for lo, hi in loops)]
    print(f"{name}: {len(loops)} loops, {len(spills)} local-memory accesses, "
          f"{len(inside)} inside loops")
    for a, t in inside:
        print(f"  inside a loop at 0x{a:x}: {t}")
    failed |= bool(inside)


for line in sys.stdin:
    m = re.search(r"Function : (\S+)", line)
    if m:
        if kernel:
            report(kernel, body)
        kernel, body = m.group(1), []
    elif kernel:
        body.append(line)
if kernel:
    report(kernel, body)
sys.exit(1 if failed else 0)
