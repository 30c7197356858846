"""The Python suites' one check counter: check(ok, what) prints "ok   what" or "FAIL what" and counts
it; summary() prints the "N passed, N failed" line scripts/run_tests.sh reads and returns the exit
status (1 if anything failed). Imported by every dev/test/test_*.py (run from dev/test/, so this
folder is on the path)."""

passed = failed = 0


def check(ok, what):
    global passed, failed
    print(("ok   " if ok else "FAIL ") + what)
    if ok:
        passed += 1
    else:
        failed += 1
    return ok


def summary():
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0
