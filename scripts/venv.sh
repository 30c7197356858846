#!/usr/bin/env bash
# Makes the project's Python environment .venv/, installs requirements.txt into it and then the
# project's own package llama_fp8 (pyproject.toml), so that the tools and test suites never need (or
# change) the system Python's packages. The package is installed editable (pip install -e): .venv
# imports it from this tree's llama_fp8/, so an edit there needs no reinstall (moving the tree does:
# make venv again). make venv and make test run this when .venv/requirements.stamp is missing or older
# than requirements.txt or pyproject.toml. The environment
# also sees the system's packages (--system-site-packages, and those of the environment python3 is
# in, if it is one: torch and transformers on a GPU machine),
# and pip's own settings apply: offline, PIP_NO_INDEX=1 PIP_FIND_LINKS=DIR installs wheels from DIR,
# which must hold those of requirements.txt and a setuptools (>= 70.1) wheel, the build backend pip
# builds llama_fp8 with (made elsewhere with pip download -r requirements.txt 'setuptools>=70.1' -d DIR).
# usage: bash scripts/venv.sh     (PYTHON: the interpreter to build it from, default python3)
set -u
cd "$(dirname "$0")/.."
python=${PYTHON:-python3}
if [ ! -x .venv/bin/python3 ]; then
    echo "== creating .venv/ with $python -m venv"
    if ! out=$("$python" -m venv --system-site-packages .venv 2>&1); then
        rm -rf .venv
        printf '%s\n' "$out"
        version=$("$python" -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null)
        echo "error: .venv: '$python -m venv' failed: its venv module or ensurepip is missing. On Debian or Ubuntu:"
        echo "    apt-get install python${version:-3}-venv"
        exit 1
    fi
    # --system-site-packages reaches the base interpreter's packages only: when python3 is itself a
    # virtual environment (as on some GPU images, torch's), a .pth file adds that environment's too
    parent=$("$python" -c 'import sys, sysconfig; sys.prefix != sys.base_prefix and print(sysconfig.get_paths()["purelib"])')
    if [ -n "$parent" ]; then
        child=$(.venv/bin/python3 -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
        echo "$parent" > "$child/parent_environment.pth"
    fi
fi
echo "== installing requirements.txt into .venv/"
if ! .venv/bin/python3 -m pip install -q --disable-pip-version-check -r requirements.txt; then
    echo "error: requirements.txt: pip could not install it into .venv/ (its message is above; offline, see scripts/venv.sh)"
    exit 1
fi
echo "== installing llama_fp8 (pyproject.toml) into .venv/, editable"
# --no-deps: requirements.txt, just installed, is its dependency list (pyproject.toml reads it)
if ! .venv/bin/python3 -m pip install -q --disable-pip-version-check --no-deps -e .; then
    echo "error: pyproject.toml: pip could not install llama_fp8 into .venv/ (its message is above; offline: venv.sh)"
    exit 1
fi
touch .venv/requirements.stamp
