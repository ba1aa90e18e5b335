"""Reads `cuobjdump -sass` output on stdin and reports local-memory accesses
(STL/LDL: register spills) inside and outside loops. A loop is the address
range from the target of a backward branch to the branch. Prints one line
per kernel; exits 1 if any spill sits inside a loop. test_flash_sass.py
imports instructions() and loop_ranges()."""
import re
import sys


def instructions(lines):
    """(address, text) of each SASS instruction in `lines`."""
    insts = []
    for line in lines:
        m = re.match(r"\s*/\*([0-9a-f]{4,})\*/\s+(.*?);", line)
        if m:
            insts.append((int(m.group(1), 16), m.group(2)))
    return insts


def loop_ranges(insts):
    """(first, last) address of each loop: a backward branch and its target."""
    loops = []
    for addr, text in insts:
        b = re.search(r"\bBRA\s+(?:`\(\.L_x_\d+\)|0x([0-9a-f]+))", text)
        if b and b.group(1) and int(b.group(1), 16) < addr:
            loops.append((int(b.group(1), 16), addr))
    return loops


def report(name, lines):
    """Prints the kernel's line (and each spill inside a loop); True if any."""
    insts = instructions(lines)
    loops = loop_ranges(insts)
    spills = [(a, t) for a, t in insts if re.match(r"(@!?U?P\w+\s+)?(STL|LDL)\b", t)]
    inside = [(a, t) for a, t in spills if any(lo <= a <= hi for lo, hi in loops)]
    print(f"{name}: {len(loops)} loops, {len(spills)} local-memory accesses, "
          f"{len(inside)} inside loops")
    for a, t in inside:
        print(f"  inside a loop at 0x{a:x}: {t}")
    return bool(inside)


def main():
    kernel, body = None, []
    failed = False
    for line in sys.stdin:
        m = re.search(r"Function : (\S+)", line)
        if m:
            if kernel:
                failed |= report(kernel, body)
            kernel, body = m.group(1), []
        elif kernel:
            body.append(line)
    if kernel:
        failed |= report(kernel, body)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
