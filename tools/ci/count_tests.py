#!/usr/bin/env python3
"""Counts the test cases in Bazel's test.xml files (GoogleTest's and the
shell tests' JUnit XML) and prints "N passed, N failed, N skipped".

Usage: count_tests.py TESTLOGS_DIR BAZEL_EXIT_CODE
A target that failed without writing cases (a crash, a timeout) counts as one
failure. Exits 1 when anything failed or nothing ran (no case passed: all
skipped is a run that tested nothing).
"""
import os
import sys
import xml.etree.ElementTree as ET


def count(testlogs):
    passed = failed = skipped = 0
    failures = []
    for root, _dirs, files in os.walk(testlogs):
        if "test.xml" not in files:
            continue
        target = os.path.relpath(root, testlogs)
        try:
            tree = ET.parse(os.path.join(root, "test.xml"))
        except ET.ParseError:
            failed += 1
            failures.append(target + " (unreadable test.xml)")
            continue
        cases = list(tree.iter("testcase"))
        suite_failed = any(
            int(s.get("failures", "0")) + int(s.get("errors", "0")) > 0
            for s in tree.iter("testsuite"))
        if not cases:
            # Bazel writes a one-case XML for tests that produce none; a
            # failing target without cases is one failure.
            if suite_failed:
                failed += 1
                failures.append(target)
            else:
                passed += 1
            continue
        for case in cases:
            if case.find("failure") is not None or case.find("error") is not None:
                failed += 1
                failures.append(target + ": " + case.get("name", "?"))
            elif case.get("result") == "skipped" or case.find("skipped") is not None \
                    or case.get("status") == "notrun":
                skipped += 1
            else:
                passed += 1
    return passed, failed, skipped, failures


def main():
    testlogs = sys.argv[1] if len(sys.argv) > 1 else "bazel-testlogs"
    bazel_rc = int(sys.argv[2]) if len(sys.argv) > 2 else 0
    passed, failed, skipped, failures = count(testlogs) if os.path.isdir(testlogs) else (0, 0, 0, [])
    if bazel_rc != 0 and failed == 0:
        # Bazel failed (a build error, a timeout without XML): say so.
        failed = 1
        failures.append("bazel test exited with %d (see the log above)" % bazel_rc)
    for f in failures:
        print("FAILED: " + f)
    if passed == 0:
        print("FAILED: no test case passed (%d skipped): nothing was tested" % skipped)
    print("%d passed, %d failed, %d skipped" % (passed, failed, skipped))
    return 1 if failed or passed == 0 else 0


if __name__ == "__main__":
    sys.exit(main())
