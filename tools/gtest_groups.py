#!/usr/bin/env python3
"""Runs a ctest selection of the gtest suite one test suite per process.

ctest runs every test in a process of its own, which is what the plain build
wants (each test alone, a flaky one rerun by name). Under the sanitizers a
start of the test binary costs seconds (gtest registers every test, the
sanitizers' allocator and the binary's relocations are slow), more than most
tests take: so here the tests ctest would run are grouped by suite, each
suite runs in one process (as gtest runs suites anyway), with the
environment and folder ctest would give it, a few processes at a time.

    tools/gtest_groups.py BUILD [ctest selection args: -R RE, -E RE ...] [-- more ...]

Selections separated by `--` are joined (CMake's regular expressions take at
most nine groups, so a long one is written as several).

Prints one line per suite as it ends; a suite that fails (a failed test, a
sanitizer report, a crash, a timeout) has its failed tests' output and the
end of its output printed at the end (all of it in
BUILD/Testing/Temporary/gtest_groups/SUITE.log), and the exit status is then 1.
A selection that matches no test is an error.
"""
import json
import os
import re
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor, as_completed

TIMEOUT_S = 1800  # a whole suite; ctest's own default per test is 1500


def selected_tests(build, args):
    out = subprocess.run(["ctest", "--test-dir", build, "--show-only=json-v1", *args],
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out)["tests"]


def group_key_and_filter(test):
    """(binary, environment, folder, suite) and the gtest filter of a test
    discovered from a gtest binary; None for any other test."""
    cmd = test.get("command", [])
    flt = next((a[len("--gtest_filter="):] for a in cmd if a.startswith("--gtest_filter=")), None)
    if not cmd or flt is None:
        return None
    props = {p["name"]: p["value"] for p in test.get("properties", [])}
    env = tuple(props.get("ENVIRONMENT", []))
    cwd = props.get("WORKING_DIRECTORY", "")
    return (cmd[0], env, cwd, flt.split(".", 1)[0]), flt


def run_group(key, filters, alone):
    binary, env_list, cwd, suite = key
    env = dict(os.environ)
    for kv in env_list:
        k, _, v = kv.partition("=")
        env[k] = v
    cmd = alone if alone else [binary, "--gtest_filter=" + ":".join(filters), "--gtest_also_run_disabled_tests"]
    start = time.monotonic()
    try:
        p = subprocess.run(cmd, cwd=cwd or None, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           text=True, errors="replace", timeout=TIMEOUT_S)
        ok, output = p.returncode == 0, p.stdout
        why = "" if ok else f"exit status {p.returncode}"
    except subprocess.TimeoutExpired as e:
        out = e.stdout  # bytes, whatever text= said
        ok, output = False, out.decode(errors="replace") if isinstance(out, bytes) else (out or "")
        why = f"timed out after {TIMEOUT_S} s"
    return suite, len(filters), time.monotonic() - start, ok, why, output


def main():
    if len(sys.argv) < 2:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    build, selections, tests, seen = sys.argv[1], [[]], [], set()
    for a in sys.argv[2:]:
        if a == "--":
            selections.append([])
        else:
            selections[-1].append(a)
    for args in selections:
        chosen = selected_tests(build, args)
        if not chosen:
            print(f"gtest_groups: no test matches {' '.join(args)}", file=sys.stderr)
            return 2
        for t in chosen:
            if t["name"] not in seen:
                seen.add(t["name"])
                tests.append(t)
    groups, order, singles = {}, [], []
    for t in tests:
        kf = group_key_and_filter(t)
        if kf is None:
            singles.append(t)
            continue
        key, flt = kf
        if key not in groups:
            groups[key] = []
            order.append(key)
        groups[key].append(flt)
    jobs = [(k, groups[k], None) for k in order]
    jobs += [((t["command"][0], (), "", t["name"]), [t["name"]], t["command"]) for t in singles]
    # The largest suites first, so the last to finish is a short one.
    jobs.sort(key=lambda j: -len(j[1]))
    total = sum(len(j[1]) for j in jobs)
    print(f"gtest_groups: {total} tests in {len(jobs)} processes", flush=True)
    failed = []
    started = time.monotonic()
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        for done in as_completed([pool.submit(run_group, *j) for j in jobs]):
            suite, n, secs, ok, why, output = done.result()
            print(f"  {'ok    ' if ok else 'FAILED'} {suite} ({n} tests, {secs:.1f} s){'' if ok else ': ' + why}",
                  flush=True)
            if not ok:
                failed.append((suite, why, output))
    print(f"gtest_groups: {total} tests, {len(failed)} suites failed, {time.monotonic() - started:.0f} s", flush=True)
    logs = os.path.join(build, "Testing", "Temporary", "gtest_groups")
    os.makedirs(logs, exist_ok=True)
    for suite, why, output in failed:
        log = os.path.join(logs, re.sub(r"[^A-Za-z0-9_.-]", "_", suite) + ".log")
        with open(log, "w") as f:
            f.write(output)
        print(f"=== {suite} ({why}; all its output: {log}) ===")
        print(failed_sections(output))
        lines = output.splitlines()
        print(f"--- the last {min(len(lines), 60)} lines ---")
        print("\n".join(lines[-60:]))
    return 1 if failed else 0


def failed_sections(output):
    """What each failed test printed, from its [ RUN ] line to its [ FAILED ] line."""
    sections, current = [], []
    for line in output.splitlines():
        if line.startswith("[ RUN      ]"):
            current = [line]
        elif current:
            current.append(line)
            if line.startswith("[       OK ]") or line.startswith("[  SKIPPED ]"):
                current = []
            elif line.startswith("[  FAILED  ]"):
                sections.append("\n".join(current))
                current = []
    if current:  # a crash inside a test: what it printed up to it
        sections.append("\n".join(current))
    return "\n".join(sections) if sections else "(no test of it failed: the process itself did)"


if __name__ == "__main__":
    sys.exit(main())
