#!/usr/bin/env bash
# Gate an evaluation run against the committed baseline with `lewisrag gate` (tiers 1-3).
#
#   scripts/ci_gate.sh --bughunt                    # evaluate the BugHunt sample now and gate it (CI dogfood)
#   scripts/ci_gate.sh --tiny                       # run `lewisrag reproduce --preset tiny` and gate it against
#                                                   # tests/data/gate_baseline_tiny (CI dogfood)
#   scripts/ci_gate.sh RUN_DIR [gate flags]         # gate an existing run, e.g. with --json
#   scripts/ci_gate.sh --update-baseline RUN_DIR    # accept RUN_DIR as the new baseline (review, then commit)
#
# The baseline is tests/data/gate_baseline/ (results.json of `lewisrag eval bughunt`); its gate.toml,
# when present, overrides the packaged thresholds. Exit codes are the gate's: 0 pass, 1 a check
# failed, 2 bad input (missing run, judge changed, ...). GATE_BASELINE overrides the baseline
# directory, LEWISRAG the command.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
baseline="${GATE_BASELINE:-$root/tests/data/gate_baseline}"
lewisrag="${LEWISRAG:-$root/.venv/bin/lewisrag}"
config=()
[[ -f "$baseline/gate.toml" ]] && config=(--config "$baseline/gate.toml")

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
    trap 'rm -rf "$run"' EXIT
    "$lewisrag" eval bughunt --out "$run" > /dev/null
    "$lewisrag" gate --baseline "$baseline" --candidate "$run" "${config[@]}" "$@"
    ;;
  --tiny)
    shift
    run="$(mktemp -d)"
    trap 'rm -rf "$run"' EXIT
    "$lewisrag" reproduce --preset tiny --out "$run/run" > /dev/null 2>&1
    "$lewisrag" gate --baseline "$root/tests/data/gate_baseline_tiny" --candidate "$run/run" \
      --config "$root/tests/data/gate_baseline_tiny/gate.toml" "$@"
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
