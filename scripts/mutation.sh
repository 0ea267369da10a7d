#!/usr/bin/env bash
# Mutation testing of analytic/formulas/ (the catalogue): see scripts/mutation.py.
# Writes mutation-report.md with the score and every surviving mutant.
set -euo pipefail
cd "$(dirname "$0")/.."
python scripts/mutation.py "$@"
