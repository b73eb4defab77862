#!/usr/bin/env bash
# Gate an evaluation run against the committed baseline with `lewisrag gate` (tiers 1-3).
#
#   scripts/ci_gate.sh --bughunt                    # evaluate the BugHunt sample now and gate it (CI dogfood)
#   scripts/ci_gate.sh --tiny                       # run `lewisrag reproduce --preset tiny` and gate it against
#                                                   # tests/data/gate_baseline_tiny (CI dogfood)
#   scripts/ci_gate.sh RUN_DIR [gate flags]         # gate an existing run, e.g. with --json
#   scripts/ci_gate.sh --update-baseline RUN_DIR    # accept RUN_DIR as the new baseline (review, then commit)
#
# The baseline is tests/data/gate_baseline/ (results.json of `lewisrag eval bughunt`); --tiny's is
# tests/data/gate_baseline_tiny/. A baseline's gate.toml, when present, overrides the packaged
# thresholds. GATE_BASELINE overrides the baseline directory (--tiny's too: its gate.toml then comes
# from that directory, when it has one), LEWISRAG the command.
#
# Exit codes: the gate's, 0 pass, 1 a check failed, 2 bad input (missing run, judge changed, ...);
# and 3 for --bughunt and --tiny when the run to be gated failed (`eval bughunt` or `reproduce`
# exited non-zero): no verdict. Their output goes to a log; on that failure its last 40 lines are
# printed on stderr with the command's own exit code, and the log is kept (its path is printed).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
baseline="${GATE_BASELINE:-$root/tests/data/gate_baseline}"
lewisrag="${LEWISRAG:-$root/.venv/bin/lewisrag}"
config=()
[[ -f "$baseline/gate.toml" ]] && config=(--config "$baseline/gate.toml")

# run_logged LOG CMD...: CMD's output into LOG; when it fails, the tail of LOG on stderr, LOG kept
# beside the temporary run (which the EXIT trap removes), and exit 3
run_logged() {
  local log="$1" rc=0
  shift
  "$@" > "$log" 2>&1 || rc=$?
  if [[ $rc -ne 0 ]]; then
    local kept
    kept="$(mktemp "${TMPDIR:-/tmp}/ci_gate.XXXXXX.log")"
    cp "$log" "$kept"
    echo "error: $* exited $rc; the last 40 lines of its output (all of it: $kept):" >&2
    tail -n 40 "$log" >&2
    exit 3
  fi
}

case "${1:-}" in
  --update-baseline)
    run="${2:?usage: scripts/ci_gate.sh --update-baseline RUN_DIR}"
    [[ -f "$run/results.json" ]] || { echo "error: $run/results.json: file not found" >&2; exit 2; }
    # the run must be one the gate reads: gated against itself it gets a verdict (0 or 1: a sample of
    # broken answers fails its rules), or exit 2 with a line naming what is wrong
    rc=0
    "$lewisrag" gate --baseline "$run" --candidate "$run" "${config[@]}" > /dev/null || rc=$?
    [[ $rc -le 1 ]] || exit "$rc"
    mkdir -p "$baseline"
    # copied beside the baseline, then renamed onto it: a kill mid-copy leaves the old baseline whole
    tmp="$(mktemp "$baseline/.results.json.XXXXXX")"
    trap 'rm -f "$tmp"' EXIT
    cp "$run/results.json" "$tmp"
    chmod 644 "$tmp"
    mv -f "$tmp" "$baseline/results.json"
    echo "baseline updated from $run: review and commit $baseline/results.json"
    ;;
  --bughunt)
    shift
    run="$(mktemp -d)"
    trap 'rm -rf "$run" "$run.log"' EXIT
    run_logged "$run.log" "$lewisrag" eval bughunt --out "$run"
    "$lewisrag" gate --baseline "$baseline" --candidate "$run" "${config[@]}" "$@"
    ;;
  --tiny)
    shift
    tiny="${GATE_BASELINE:-$root/tests/data/gate_baseline_tiny}"
    tiny_config=()
    [[ -f "$tiny/gate.toml" ]] && tiny_config=(--config "$tiny/gate.toml")
    run="$(mktemp -d)"
    trap 'rm -rf "$run"' EXIT
    run_logged "$run/reproduce.log" "$lewisrag" reproduce --preset tiny --out "$run/run"
    "$lewisrag" gate --baseline "$tiny" --candidate "$run/run" "${tiny_config[@]}" "$@"
    ;;
  "")
    echo "usage: scripts/ci_gate.sh --bughunt | --tiny | RUN_DIR [gate flags] | --update-baseline RUN_DIR" >&2
    exit 2
    ;;
  *)
    run="$1"
    shift
    exec "$lewisrag" gate --baseline "$baseline" --candidate "$run" "${config[@]}" "$@"
    ;;
esac
