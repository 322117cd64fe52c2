# Sourced by startup-at-ready.sh and stop-time.sh: wait_ready ADMIN PID LOG PAUSE polls
# http://ADMIN/ready every PAUSE seconds until it answers 200; if weir (PID) exits first
# or an hour passes, prints LOG's last lines, stops weir and exits 1.
wait_ready() {
  local admin=$1 pid=$2 log=$3 pause=$4
  local deadline=$((SECONDS + 3600))
  until curl -sf -o /dev/null "http://$admin/ready"; do
    if ! kill -0 "$pid" 2>/dev/null || [ $SECONDS -gt $deadline ]; then
      echo "weir did not become ready; last log lines:" >&2
      tail -20 "$log" >&2
      kill "$pid" 2>/dev/null || true
      exit 1
    fi
    sleep "$pause"
  done
}
