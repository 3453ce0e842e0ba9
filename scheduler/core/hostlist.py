"""Slurm-style host lists: nvl72-01-h01..h16 → nvl72-01-h[01-16]."""

import re
from itertools import groupby

_NAME = re.compile(r"^(.*?)(\d+)$")


def compress(names) -> str:
    """Group names by their prefix and fold runs of numbers: ["a-h01", "a-h02", "a-h04"] → "a-h[01-02,04]"."""
    parsed = []
    plain = []
    for name in sorted(set(names)):
        match = _NAME.match(name)
        if match:
            parsed.append((match.group(1), match.group(2)))
        else:
            plain.append(name)
    parts = list(plain)
    for prefix, group in groupby(sorted(parsed, key=lambda p: (p[0], len(p[1]), int(p[1]))), key=lambda p: p[0]):
        numbers = [digits for _, digits in group]
        if len(numbers) == 1:
            parts.append(prefix + numbers[0])
            continue
        ranges, start = [], 0
        for index in range(1, len(numbers) + 1):
            if index == len(numbers) or int(numbers[index]) != int(numbers[index - 1]) + 1:
                ranges.append(numbers[start] if start == index - 1 else f"{numbers[start]}-{numbers[index - 1]}")
                start = index
        parts.append(f"{prefix}[{','.join(ranges)}]")
    return ",".join(sorted(parts))
