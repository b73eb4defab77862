#!/usr/bin/env bash
# Gate an evaluation run against the committed baseline with `lewisrag gate` (tiers 1-3).
#
#   scripts/ci_gate.sh --bughunt                    # evaluate the BugHunt sample now and gate it (CI dogfood)
#   scripts/ci_gate.sh --tiny                       # run `lewisrag reproduce --preset tiny` and gate it against
#                                                   # tests/data/gate_baseline_tiny (CI dogfood)
#   scripts/ci_gate.sh RUN_DIR [gate flags]         # gate an existing run, e.g. with --json
#   scripts/ci_gate.sh --update-baseline RUN_DIR    # accept RUN_DIR as the new baseline (review, then commit)
#   scripts/ci_gate.sh --help                       # this text
#
# The baseline is tests/data/gate_baseline/ (results.json of `lewisrag eval bughunt`); --tiny's is
# tests/data/gate_baseline_tiny/. A baseline's gate.toml, when present, overrides the packaged
# thresholds (a --config among the gate flags overrides it). GATE_BASELINE overrides the baseline
# directory (--tiny's too: its gate.toml then comes from that directory, when it has one), LEWISRAG
# the command. --update-baseline replaces only a baseline: the folder must exist (an empty one for a
# first baseline), hold no lewisrag run (a .lewisrag marker), and the run must be of the kind the
# baseline's results.json was (bughunt, reproduce, ...), so that a wrong GATE_BASELINE or RUN_DIR
# destroys nothing.
#
# Exit codes: the gate's, 0 pass, 1 a check failed, 2 bad input (missing run, judge changed, ...);
# and 3 for --bughunt and --tiny when the run to be gated failed (`eval bughunt` or `reproduce`
# exited non-zero): no verdict. Their output goes to a log; on that failure its last 40 lines are
# printed on stderr with the command's own exit code, and the log is kept (its path is printed).
# When the gate refuses their fresh run (exit 2: another judge or splitter than the baseline's, ...),
# the run is kept and the --update-baseline command that makes it the baseline is printed.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
baseline="${GATE_BASELINE:-$root/tests/data/gate_baseline}"
lewisrag="${LEWISRAG:-$root/.venv/bin/lewisrag}"
config=()
[[ -f "$baseline/gate.toml" ]] && config=(--config "$baseline/gate.toml")

# has_config ARGS...: whether the gate flags name their own --config (then the baseline's is not added)
has_config() {
  local a
  for a in "$@"; do
    [[ "$a" == "--config" || "$a" == --config=* ]] && return 0
  done
  return 1
}

# kind_of RESULTS_JSON: the "lewisrag.kind" a results.json was written as; empty when it names none (written
# by hand or by another tool: lewisrag reads it as an eval run) or cannot be read
kind_of() {
  "${PYTHON:-python3}" -c 'import json, sys
try:
    print(json.load(open(sys.argv[1], encoding="utf-8-sig"))["lewisrag"]["kind"])
except Exception:
    pass' "$1"
}

# gate_fresh RUN UPDATE_BASELINE GATE_ARGS...: `lewisrag gate` on a fresh RUN, its exit code passed on. On
# exit 2 (bad input: a baseline of another judge or splitter, ...) the EXIT trap is dropped so that RUN
# stays, and the command that makes it the baseline (GATE_BASELINE=UPDATE_BASELINE) is printed
gate_fresh() {
  local fresh="$1" target="$2" rc=0
  shift 2
  "$lewisrag" gate "$@" || rc=$?
  if [[ $rc -eq 2 ]]; then
    trap - EXIT
    local prefix=""
    [[ "$target" == "$root/tests/data/gate_baseline" ]] || prefix="GATE_BASELINE=$(printf %q "$target") "
    echo "the run gated is kept: $fresh. Where the baseline is the side to re-run (another judge or splitter)," \
      "review the run and make it the baseline: ${prefix}scripts/ci_gate.sh --update-baseline $(printf %q "$fresh")" >&2
  fi
  return "$rc"
}

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
    [[ $# -eq 2 ]] || { echo "usage: scripts/ci_gate.sh --update-baseline RUN_DIR (one run, nothing after it)" >&2; exit 2; }
    run="$2"
    [[ -f "$run/results.json" ]] || { echo "error: $run/results.json: file not found" >&2; exit 2; }
    # the destination must be a baseline: an existing folder (empty for a first one), no run of lewisrag's own
    if [[ -e "$baseline" && ! -d "$baseline" ]]; then
      echo "error: $baseline: not a folder (GATE_BASELINE?): a baseline is a folder holding results.json" >&2
      exit 2
    fi
    if [[ ! -d "$baseline" ]]; then
      echo "error: $baseline: no such baseline folder (GATE_BASELINE?); for a first baseline make the folder, then run this again" >&2
      exit 2
    fi
    if [[ -e "$baseline/.lewisrag" ]]; then
      echo "error: $baseline: a lewisrag output folder (it holds a .lewisrag marker), not a baseline: its results.json is kept" >&2
      exit 2
    fi
    if [[ ! -f "$baseline/results.json" && -n "$(ls -A "$baseline")" ]]; then
      echo "error: $baseline: holds files but no results.json: not a baseline folder (GATE_BASELINE?); nothing written" >&2
      exit 2
    fi
    # the run must be one the gate reads: gated against itself it gets a verdict (0 or 1: a sample of
    # broken answers fails its rules), or exit 2 with a line naming what is wrong (before its kind is
    # read: a malformed file was refused as "field 'lewisrag.kind': ''")
    rc=0
    "$lewisrag" gate --baseline "$run" --candidate "$run" "${config[@]}" > /dev/null || rc=$?
    [[ $rc -le 1 ]] || exit "$rc"
    if [[ -f "$baseline/results.json" ]]; then  # a run that names no kind is taken as the user gave it
      old_kind="$(kind_of "$baseline/results.json")"
      new_kind="$(kind_of "$run/results.json")"
      if [[ -n "$old_kind" && -n "$new_kind" && "$new_kind" != "$old_kind" ]]; then
        echo "error: $run/results.json: field 'lewisrag.kind': '$new_kind', but the baseline $baseline holds a '$old_kind' run; give a $old_kind run, or another GATE_BASELINE" >&2
        exit 2
      fi
    fi
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
    has_config "$@" && config=()
    rm -f "$run.log"  # the run finished: its log goes now, whether the run is kept or not
    gate_fresh "$run" "$baseline" --baseline "$baseline" --candidate "$run" "${config[@]}" "$@"
    ;;
  --tiny)
    shift
    tiny="${GATE_BASELINE:-$root/tests/data/gate_baseline_tiny}"
    tiny_config=()
    [[ -f "$tiny/gate.toml" ]] && ! has_config "$@" && tiny_config=(--config "$tiny/gate.toml")
    run="$(mktemp -d)"
    trap 'rm -rf "$run"' EXIT
    run_logged "$run/reproduce.log" "$lewisrag" reproduce --preset tiny --out "$run/run"
    gate_fresh "$run/run" "$tiny" --baseline "$tiny" --candidate "$run/run" "${tiny_config[@]}" "$@"
    ;;
  -h|--help)
    sed -n '2,/^[^#]/{/^#/s/^# \{0,1\}//p}' "$0"
    ;;
  "")
    echo "usage: scripts/ci_gate.sh --bughunt | --tiny | RUN_DIR [gate flags] | --update-baseline RUN_DIR | --help" >&2
    exit 2
    ;;
  *)
    run="$1"
    shift
    has_config "$@" && config=()
    exec "$lewisrag" gate --baseline "$baseline" --candidate "$run" "${config[@]}" "$@"
    ;;
esac
