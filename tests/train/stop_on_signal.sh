# Sourced by the trainers' e2e scripts.
# stop_on_signal LOG COMMAND...: runs COMMAND (an mpirun) in the background with its output in
# LOG, sends SIGUSR1 to it once LOG shows "step 3 |" (mpirun forwards it to every rank), and
# fails unless the run then ends within 120 s with exit 0.
stop_on_signal() {
  local log=$1
  shift
  "$@" > "$log" 2>&1 &
  local launcher=$!
  for _ in $(seq 600); do grep -qs "step 3 |" "$log" && break; sleep 0.2; done
  kill -USR1 "$launcher"
  timeout 120 tail --pid="$launcher" -f /dev/null || { echo "the run did not stop"; kill -9 "$launcher"; return 1; }
  wait "$launcher" || { cat "$log"; echo "expected exit 0"; return 1; }
}
