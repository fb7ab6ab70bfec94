#!/usr/bin/env python3
"""Checks docs/steps.md against the code: every row's name is in its file, and the rows that
name one file appear in it in the map's order (each searched for after the previous such
row's line, within one table).

    step_map.py SOURCE_DIR
"""
import re
import sys
from pathlib import Path

ROW = re.compile(r"^\|\s*\d+\s*\|\s*`([^`]+)`\s*\|\s*`([^`]+)`\s*\|")


def check(root: Path) -> list:
    problems, tables = [], 0
    after = {}  # file -> the line of the last row of this table that named it
    for line in (root / "docs/steps.md").read_text().splitlines():
        if line.startswith("## "):
            after, tables = {}, tables + 1
            continue
        row = ROW.match(line)
        if not row:
            continue
        file, name = row.groups()
        path = root / file
        if not path.is_file():
            problems.append(f"{file}: no such file (row '{name}')")
            continue
        pattern = re.compile(r"(?<![A-Za-z0-9_])" + re.escape(name) + r"(?![A-Za-z0-9_])")
        lines = path.read_text().splitlines()
        start = after.get(file, 0)
        found = next((i for i in range(start, len(lines)) if pattern.search(lines[i])), None)
        if found is None:
            anywhere = any(pattern.search(text) for text in lines)
            problems.append(f"{file}: '{name}' " + (f"is not after line {start} (the map's order)" if anywhere
                                                    else "is not in the file"))
            continue
        after[file] = found
    if tables < 3:
        problems.append(f"docs/steps.md: {tables} tables, expected 3 (moe_train, a drafter, the session)")
    return problems


if __name__ == "__main__":
    problems = check(Path(sys.argv[1]))
    for problem in problems:
        print(problem)
    print("docs/steps.md " + ("does not match the code" if problems else "matches the code"))
    sys.exit(1 if problems else 0)
