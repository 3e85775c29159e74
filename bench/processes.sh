# Sourced by the bench scripts, after they set WORK (their own temporary folder): the processes a
# script starts are listed in $WORK/pids, whatever subshell started them, so that its cleanup
# (stop_listed) stops every one; and run_waited lets SIGTERM or Ctrl-C act at once.

touch "$WORK/pids"

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
