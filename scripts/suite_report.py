#!/usr/bin/env python3
"""The suite's table: each part of scripts/test.sh with its wall time, the tests it ran, how
many failed and were retried, and the slowest tests by libtest's own timing.

Usage: scripts/suite_report.py SUITE_DIR BUDGET_MINUTES

SUITE_DIR holds parts.tsv (part, seconds, exit status, the part's log or nothing: one line
a part, in the order they ran; scripts/test.sh and scripts/suite-part.sh write it), and the
tests' own lines (test binary, test, text; profiler/tests/common/mod.rs writes them):
retries.tsv, one line a retry with its reason, and waits.tsv, the seconds a test waited for
another test of its binary to give the machine up, which libtest's time for it includes.
Prints the table, and a loud line when the parts add up to more than the budget: the suite
does not fail on its time, but its creep is seen long before CI's limit.
"""

import collections
import re
import sys
from pathlib import Path

# libtest's pretty line for a finished test, with --report-time's <seconds>.
TEST_LINE = re.compile(r"^test (\S+) \.\.\. (ok|FAILED|ignored)(?: <([0-9.]+)s>)?")
SLOWEST = 10


def minutes(seconds):
    whole = round(seconds)
    return f"{whole // 60}m {whole % 60:02d}s" if whole >= 60 else f"{seconds:.1f}s"


def tests_in(log, waits):
    """(test, outcome, seconds or None) for each test the log's binary finished, its seconds
    without those it waited for the machine."""
    if not log or not Path(log).is_file():
        return []
    found = []
    for line in Path(log).read_text(errors="replace").splitlines():
        match = TEST_LINE.match(line)
        if match:
            seconds = float(match[3]) - waits.get(match[1], 0.0) if match[3] else None
            found.append((match[1], match[2], seconds))
    return found


def main():
    suite, budget_minutes = Path(sys.argv[1]), float(sys.argv[2])
    parts = []
    for line in (suite / "parts.tsv").read_text().splitlines():
        name, seconds, status, *log = line.split("\t")
        parts.append((name, float(seconds), int(status), log[0] if log else ""))
    retries = notes(suite / "retries.tsv")
    waits = notes(suite / "waits.tsv")

    total = sum(seconds for _, seconds, _, _ in parts)
    rows, slow, quiet = [], [], []
    for name, seconds, status, log in parts:
        binary = name.split(" ")[-1]  # the tests name their binary without its package
        waited = collections.Counter()
        for test, wait in waits.get(binary, []):
            waited[test] += float(wait)
        tests = tests_in(log, waited)
        if log and not tests and status == 0:
            quiet.append(seconds)
            continue
        failed = sum(1 for _, outcome, _ in tests if outcome == "FAILED")
        timed = [(t, s) for t, _, s in tests if s is not None]
        slow.extend((s, name, t) for t, s in timed)
        slowest = max(timed, key=lambda ts: ts[1], default=None)
        rows.append((
            name + ("" if status == 0 else "  FAILED"),
            minutes(seconds),
            f"{100 * seconds / total:.0f}%" if total else "",
            str(len(tests)) if log else "",
            str(failed) if log else "",
            str(len(retries.get(binary, []))) if log else "",
            f"{slowest[0]} {slowest[1]:.1f}s" if slowest else "",
        ))
    if quiet:
        rows.append((f"{len(quiet)} binaries without tests", minutes(sum(quiet)),
                     f"{100 * sum(quiet) / total:.0f}%", "0", "", "", ""))
    header = ("part", "wall", "share", "tests", "failed", "retries", "slowest test")
    widths = [max(len(row[i]) for row in rows + [header]) for i in range(len(header))]
    line = lambda row: "  ".join(
        cell.ljust(width) if i in (0, 6) else cell.rjust(width)
        for i, (cell, width) in enumerate(zip(row, widths))
    ).rstrip()
    all_tests = sum(int(row[3] or 0) for row in rows)
    all_failed = sum(int(row[4] or 0) for row in rows)
    all_retries = sum(int(row[5] or 0) for row in rows)
    print(f"\nThe suite's parts, in the order they ran (budget {budget_minutes:g} min):")
    print("  " + line(header))
    for row in rows:
        print("  " + line(row))
    print("  " + line(("total", minutes(total), "100%", str(all_tests), str(all_failed),
                       str(all_retries), "")))
    print(f"\nThe {SLOWEST} slowest tests, by libtest's own timing less any wait for the machine:")
    for seconds, name, test in sorted(slow, reverse=True)[:SLOWEST]:
        print(f"  {seconds:7.1f}s  {name}: {test}")
    if retries:
        print("\nRetries, each with the reason the test gave:")
        for binary, noted in sorted(retries.items()):
            for test, why in noted:
                print(f"  {binary}: {test}: {why}")
    if total > 60 * budget_minutes:
        bar = "!" * 78
        print(f"\n{bar}\nOVER BUDGET: the suite took {minutes(total)}, over its "
              f"{budget_minutes:g}-minute budget (docs/building.md, \"The suite's budget\").\n"
              f"CI stops at 90 minutes; the table above says where the time went.\n{bar}")
    else:
        print(f"\nWithin the {budget_minutes:g}-minute budget: {minutes(total)}.")


def notes(path):
    """The tests' lines in `path`, as [(test, text)] by test binary."""
    by_binary = collections.defaultdict(list)
    if path.is_file():
        for line in path.read_text().splitlines():
            binary, test, text = (line.split("\t", 2) + ["", ""])[:3]
            by_binary[binary].append((test, text))
    return by_binary


if __name__ == "__main__":
    main()
