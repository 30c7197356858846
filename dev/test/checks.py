"""The Python suites' one check counter: check(ok, what) prints "ok   what" or "FAIL what" and counts
it; summary() prints the "N passed, N failed" line dev/test/run_tests.sh reads and returns the exit
status (1 if anything failed). Imported by every dev/test/test_*.py (run from dev/test/, so this
folder is on the path) first: a Python without the llama_fp8 package (make venv installs it into .venv/)
stops here, saying what to run. load_tool(path) gives a suite the module of a tool it checks from within.
"""
import importlib.util
import os
import sys

if importlib.util.find_spec("llama_fp8") is None:  # pyproject.toml; make venv installs it into .venv/
    sys.exit(f"error: {sys.executable} has no llama_fp8 package: run make venv, then use .venv/bin/python3")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
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


def load_tool(path):
    """The module of the tool at `path` (from the repository root, e.g. "scripts/compare_logs.py"),
    loaded from its file: a tool is a program, not on the path; what the tools share is in the
    llama_fp8 package."""
    spec = importlib.util.spec_from_file_location(os.path.splitext(os.path.basename(path))[0], os.path.join(ROOT, path))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
