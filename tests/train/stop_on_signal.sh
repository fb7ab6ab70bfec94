# Sourced by the trainers' e2e scripts.
# stop_on_signal LOG COMMAND...: runs COMMAND (an mpirun) in the background with its output in
# LOG, sends SIGUSR1 to it once LOG shows "step 3 |" (mpirun forwards it to every rank), and
# fails unless the run then ends within 120 s with exit 0. STOP_SIGNAL=TERM sends SIGTERM
# instead, and STOP_EXIT names the exit status expected then.
stop_on_signal() {
  local log=$1 signal=${STOP_SIGNAL:-USR1} expected=${STOP_EXIT:-0} status=0
  shift
  "$@" > "$log" 2>&1 &
  local launcher=$!
  for _ in $(seq 600); do grep -qs "step 3 |" "$log" && break; sleep 0.2; done
  kill "-$signal" "$launcher"
  timeout 120 tail --pid="$launcher" -f /dev/null || { echo "the run did not stop"; kill -9 "$launcher"; return 1; }
  wait "$launcher" || status=$?
  [[ $status == "$expected" ]] || { cat "$log"; echo "SIG$signal: expected exit $expected, got $status"; return 1; }
}
