#!/usr/bin/env bash
# Makes (or reuses) a Python environment under target/ (git-ignored) with the given packages
# from the package registry, and prints its python. Where `python3 -m venv` fails for lack of
# ensurepip, installs Debian's python3-venv first.
#
#   python=$(bash scripts/venv.sh DIR "IMPORTS" PACKAGE...)
#
# IMPORTS: the modules (comma-separated, as `import` takes them) whose import proves the
# environment complete.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=$1
imports=$2
shift 2
if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c "import $imports" 2>/dev/null; then
  if ! python3 -m venv "$venv" >/dev/null 2>&1; then
    if command -v apt-get >/dev/null; then
      (apt-get update -qq && apt-get install -y -qq python3-venv) >&2
    fi
    python3 -m venv "$venv" >&2
  fi
  "$venv/bin/pip" install -q --disable-pip-version-check "$@" >&2
fi
echo "$venv/bin/python"
