#!/usr/bin/env bash
# The tests CI leaves out (`@pytest.mark.slow`): whole multi-process runs, the full product of
# image choices and MLE-bench layouts, the launch scripts end to end on a stand-in, kills at
# random moments, the plan's host figures. Run them before a release or after changing what
# they cover (the whole set was not timed; its two-process and launch-script tests take minutes
# each on 2 cores). `--dry-run`: the command only.
#
# Settings (environment variables; defaults in brackets):
#   K        a pytest -k expression selecting among them (e.g. "two_processes or mesh")   []
#   WORKERS  pytest-xdist workers (these tests start several processes each)              [1]
#   TESTS    test files or folders                                                   [tests]
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cpu_only
parse_dry_run "$@"
WORKERS="${WORKERS:-1}"
read -r -a tests <<< "${TESTS:-tests}"
cmd=("$PY" -m pytest -q -m slow "${tests[@]}")
[[ "$WORKERS" != 1 ]] && cmd+=(-n "$WORKERS")
[[ -n "${K:-}" ]] && cmd+=(-k "$K")
printf '+'; printf ' %q' "${cmd[@]}"; printf '\n'
[[ "$DRY_RUN" == 1 ]] || exec "${cmd[@]}"
