# Sourced by the bench scripts. Their processes are listed in $WORK/pids (WORK: the script's own
# temporary folder), whatever subshell started them, so that its cleanup (stop_listed) stops every
# one; run_waited lets SIGTERM or Ctrl-C act at once. A script that sets WORK itself does so before
# sourcing this; make_work sets it for the others. run_peer runs a round's reference peer and
# compare_to_peer prints a run's line against it; parse_values reads `--name value` arguments and
# need_count checks a flag's number, before anything starts.

[[ -n "${WORK:-}" ]] && touch "$WORK/pids"

# make_work NAME: WORK, a fresh temporary folder (mktemp -t NAME.XXXXXX). On exit the listed
# processes are stopped and the folder is removed; SIGINT and SIGTERM exit 130 through that.
make_work() {
  WORK="$(mktemp -d -t "$1.XXXXXX")"
  touch "$WORK/pids"
  trap 'set +e; stop_listed; rm -rf "$WORK"' EXIT
  trap 'exit 130' INT TERM
}

# need_count NAME VALUE MIN [WHY]: exits 2, naming --NAME, unless VALUE is a whole number of at
# least MIN (WHY, when given, says what the minimum is for).
need_count() {
  local why="${4:+ ($4)}"
  if ! [[ "$2" =~ ^[0-9]{1,18}$ ]] || ((10#$2 < $3)); then
    echo "--$1 must be a whole number >= $3$why" >&2
    exit 2
  fi
}

# parse_values USAGE SPEC... -- ARG...: reads a script's arguments ARG by the SPECs. SPEC NAME
# takes `--NAME VALUE` into the shell variable NAME; NAME=VAR into VAR instead; a trailing ! makes
# it a switch, `--NAME` alone setting the variable to true. Anything else (an unknown argument, a
# value missing) is named, with USAGE (whose first word names the script), and exits 2. The
# function's own locals start with _pv_ so that no variable set is shadowed by one.
parse_values() {
  local _pv_usage="$1" _pv_spec _pv_name
  local -A _pv_vars=() _pv_switches=()
  shift
  while [[ "$1" != -- ]]; do
    _pv_spec="${1%!}"
    _pv_vars["${_pv_spec%%=*}"]="${_pv_spec#*=}"
    [[ "$1" == *! ]] && _pv_switches["${_pv_spec%%=*}"]=1
    shift
  done
  shift
  while (($#)); do
    _pv_name="${1#--}"
    if [[ "$1" != --?* || -z "${_pv_vars[$_pv_name]+set}" ]]; then
      printf '%s: unknown argument %s\nusage: %s\n' "${_pv_usage%% *}" "'$1'" "$_pv_usage" >&2
      exit 2
    fi
    if [[ -n "${_pv_switches[$_pv_name]+set}" ]]; then
      printf -v "${_pv_vars[$_pv_name]}" '%s' true
      shift
    elif (($# < 2)); then
      printf '%s: %s needs a value\nusage: %s\n' "${_pv_usage%% *}" "$1" "$_pv_usage" >&2
      exit 2
    else
      printf -v "${_pv_vars[$_pv_name]}" '%s' "$2"
      shift 2
    fi
  done
}

# Whether a process is still running (a zombie, awaiting its parent, is not).
alive() { [[ -r "/proc/$1/stat" && "$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null)" != Z ]]; }

# Stops every listed process: SIGTERM, then SIGKILL to one still running 5 s later.
stop_listed() {
  local pid
  while read -r pid; do kill -TERM "$pid" 2>/dev/null; done <"$WORK/pids"
  while read -r pid; do
    for _ in $(seq 50); do alive "$pid" || break; sleep 0.1; done
    alive "$pid" && kill -KILL "$pid" 2>/dev/null
  done <"$WORK/pids"
  return 0
}

# Runs a command in the background and waits for it, listed in $WORK/pids meanwhile; its exit
# status. Bash runs a trap only between foreground commands, but a signal interrupts `wait`: so
# SIGTERM or Ctrl-C ends the script at once, and its cleanup stops the command.
run_waited() {
  "$@" &
  local pid=$!
  echo "$pid" >>"$WORK/pids"
  local status=0
  wait "$pid" || status=$?
  sed -i "/^$pid\$/d" "$WORK/pids"
  return "$status"
}

# run_peer ROUND CMD...: runs the reference peer CMD as run_waited does, keeps its JSON line in
# $WORK/peer (for compare_to_peer) and prints that line with "round": ROUND added; CMD's status.
run_peer() {
  local round="$1" line
  shift
  run_waited "$@" >"$WORK/peer" || return
  line="$(cat "$WORK/peer")"
  echo "${line%\}}, \"round\": $round}"
}

# compare_to_peer BENCH RATE_KEY QUALITY_KEY ROUND WORKERS BATCH SUMMARY PEER: the JSON line of one
# run of the project (WORKERS workers and as many shards, batch BATCH each): its RATE_KEY and
# QUALITY_KEY from SUMMARY (its summary.json), and ratio_vs_pytorch, its rate over the RATE_KEY of
# PEER (the file holding the peer's JSON line of the same round).
compare_to_peer() {
  python3 - "$@" <<'PY'
import json
import sys

bench, rate_key, quality_key, round_, workers, batch, summary, peer = sys.argv[1:]
with open(summary) as f:
    s = json.load(f)
with open(peer) as f:
    p = json.load(f)
print(json.dumps({"bench": bench, "round": int(round_), "workers": int(workers),
                  "shards": int(workers), "batch_size": int(batch), rate_key: s[rate_key],
                  quality_key: s[quality_key], "ratio_vs_pytorch": s[rate_key] / p[rate_key]}))
PY
}
