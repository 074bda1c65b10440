# Sourced by the GPU scripts that start evaluations: on exit, end every process the script started, also those
# in sessions of their own (the harness runs each evaluation in a new session, so that a candidate cannot signal
# its parent, and `timeout` does not reach it); children are killed before their parents. TEE (the pid of the
# script's `tee` of its own output, where it has one) is spared so that the last lines reach the log.
descendants() {
  local child
  for child in $(pgrep -P "$1"); do
    descendants "$child"
    echo "$child"
  done
}
stop_all() {
  local pid
  for pid in $(descendants $$); do
    [ "$pid" = "${TEE:-}" ] || kill -KILL "$pid" 2>/dev/null
  done
}
trap stop_all EXIT
trap 'exit 143' INT TERM
