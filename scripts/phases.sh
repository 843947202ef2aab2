# Phases and lanes for scripts/test.sh (sourced): each phase's wall time is
# recorded, lanes run phases in the background beside the main one, and a
# table of every phase is printed when the script ends, failed or not.
#   phase NAME CMD...      run CMD as phase NAME; a failure ends the script (or lane)
#   phase_start NAME / phase_end NAME   time inline steps
#   lane NAME FUNCTION     run FUNCTION in the background, its output in a log
#   wait_lane NAME         wait for that lane; if it failed, show its log and fail
#   finish_lanes           wait for every lane to end, show each failed one's log,
#                          and return 1 if any did (or if a kept-going phase failed)
#   phase_keep_going NAME CMD...   like phase, but a failure is only recorded:
#                          the lanes still finish and report (see finish_lanes)

phases_file=$(mktemp)
phases_logs=$(mktemp -d)
phases_t0=$(date +%s.%N)
phases_lane=main
phases_pids=()
phases_names=()

phases_now() { date +%s.%N; }

phases_record() { # name start end status
    printf '%s %s %s %s %s\n' "$1" "$phases_lane" "$2" "$3" "$4" >>"$phases_file"
}

phases_failed=()
# Runs and records a phase; a failure is recorded, said and returned.
phases_run() {
    local name=$1 start rc=0
    shift
    start=$(phases_now)
    echo "== $name" >&2
    "$@" || rc=$?
    if ((rc)); then
        phases_record "$name" "$start" "$(phases_now)" "FAILED($rc)"
        echo "phase $name failed (exit $rc): $*" >&2
        return "$rc"
    fi
    phases_record "$name" "$start" "$(phases_now)" ok
}

phase() {
    local rc=0
    phases_run "$@" || rc=$?
    ((rc == 0)) || exit "$rc"
}

phase_keep_going() {
    phases_run "$@" || phases_failed+=("$1")
}

declare -A phases_started=()
phase_start() { phases_started[$1]=$(phases_now); }
phase_end() { phases_record "$1" "${phases_started[$1]}" "$(phases_now)" ok; }

lane() {
    local name=$1 fn=$2
    # Its own process group, so that a failure elsewhere stops the whole lane.
    set -m
    (
        phases_lane=$name
        trap - EXIT
        "$fn"
    ) >"$phases_logs/$name.log" 2>&1 &
    phases_pids+=($!)
    set +m
    phases_names+=("$name")
}

lane_failed() {
    echo "lane $1 failed; its log (last 60 lines):" >&2
    tail -n 60 "$phases_logs/$1.log" >&2
}

lane_index() {
    local i
    for i in "${!phases_names[@]}"; do
        [ "${phases_names[$i]}" = "$1" ] && { echo "$i"; return 0; }
    done
    return 1
}

wait_lane() {
    local i rc=0
    i=$(lane_index "$1") || return 0
    wait "${phases_pids[$i]}" || rc=$?
    if ((rc)); then
        lane_failed "$1"
        unset "phases_pids[$i]"
        exit 1
    fi
    unset "phases_pids[$i]" "phases_names[$i]"
}

# The log of a lane that has ended, to show what it said (also when it passed).
lane_log() { cat "$phases_logs/$1.log"; }

finish_lanes() {
    local i rc failed=("${phases_failed[@]}")
    for i in "${!phases_pids[@]}"; do
        rc=0
        wait "${phases_pids[$i]}" || rc=$?
        if ((rc)); then
            lane_failed "${phases_names[$i]}"
            failed+=("lane ${phases_names[$i]}")
        fi
        unset "phases_pids[$i]" "phases_names[$i]"
    done
    if ((${#failed[@]})); then
        echo "failed: ${failed[*]}" >&2
        return 1
    fi
}

phases_table() {
    local status=$?
    # A lane still running when the script fails is stopped (its own cargo too).
    for p in "${phases_pids[@]}"; do kill -- "-$p" 2>/dev/null || true; done
    echo
    echo "phase timings (s; lanes run beside main):"
    sort -k3,3n "$phases_file" | awk -v t0="$phases_t0" -v end="$(phases_now)" '
        {printf "  %-16s %-9s start %7.1f  took %7.1f  %s\n", $1, $2, $3 - t0, $4 - $3, $5}
        END {printf "  %-16s %-9s %13s took %7.1f\n", "total", "", "", end - t0}'
    rm -rf "$phases_file" "$phases_logs"
    exit "$status"
}
trap phases_table EXIT
