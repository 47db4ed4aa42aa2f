# Shared preamble of the launch scripts: `source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"`.
# Moves to the repository root (ROOT), picks the project's Python (PY: .venv's when it
# exists), puts the checkout on PYTHONPATH, and defines the helpers below.
set -euo pipefail
_here="${BASH_SOURCE[0]%/*}"; [[ "$_here" == "${BASH_SOURCE[0]}" ]] && _here=.
ROOT="$(cd "$_here/.." && pwd)"
cd "$ROOT"
PY=python3
if [[ -x .venv/bin/python ]]; then PY=.venv/bin/python; fi
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"

# CPU-only scripts call this: JAX on the CPU unless the caller chose otherwise.
cpu_only() { export JAX_PLATFORMS="${JAX_PLATFORMS:-cpu}"; }

# Runs `true` under bubblewrap with the namespaces the sandbox uses; says whether it works.
check_bwrap() {
  if ! command -v bwrap >/dev/null 2>&1; then
    echo "[setup] bubblewrap is NOT installed: generated code will not run (install it with" \
         "apt-get install bubblewrap, or opt in to no isolation with --sandbox=unsafe)." >&2
    return 1
  fi
  local why
  if why=$(bwrap --ro-bind / / --dev /dev --proc /proc --unshare-pid --unshare-net \
             --unshare-ipc --unshare-uts --die-with-parent --new-session true 2>&1); then
    echo "[setup] bubblewrap works: a sandboxed \`true\` ran (no network, own PID namespace)."
  else
    echo "[setup] bubblewrap is installed but cannot create its sandbox here: ${why:-no output}." \
         "User namespaces may be denied (sysctl kernel.unprivileged_userns_clone=1, or run as" \
         "root); until then generated code will not run." >&2
    return 1
  fi
}

# parse_dry_run "$@": sets DRY_RUN=1 for --dry-run (or keeps $DRY_RUN); anything else is an
# error (the scripts take their settings from environment variables).
parse_dry_run() {
  DRY_RUN="${DRY_RUN:-0}"
  for arg in "$@"; do
    case "$arg" in
      --dry-run) DRY_RUN=1 ;;
      *) echo "error: unknown argument '$arg'; the only one is --dry-run (settings are" \
              "environment variables, see the top of $0)." >&2; exit 2 ;;
    esac
  done
}
