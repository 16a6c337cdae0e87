# Shell helpers shared by the scripts that start `sluice` processes (tests/go/run.sh,
# tests/librdkafka/run.sh, tests/bench/vs-kafka.sh, tests/bench/idle.sh). Source it; it defines
# functions only.

# A free 127.0.0.1 port below Linux's ephemeral range (32768-60999): a port the kernel picks
# (bind to 0) can go to an outgoing connection before the broker binds it.
free_port() {
  python3 -c '
import os, random, socket
for port in random.Random(os.getpid()).sample(range(20000, 32000), 12000):
    try:
        socket.socket().bind(("127.0.0.1", port)); print(port); break
    except OSError:
        pass
'
}

# Wait (up to 30 s) until something listens on 127.0.0.1:$1.
wait_port() {
  for _ in $(seq 1 300); do
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
    sleep 0.1
  done
  echo "nothing listening on 127.0.0.1:$1" >&2
  return 1
}

# Run a command without the caller's SLUICE_* variables (the broker takes every one as a
# setting and refuses unknown ones).
without_sluice_env() { env $(env | grep -o '^SLUICE_[A-Z_]*' | sed 's/^/-u /') "$@"; }
# The same for a process started in the background (`exec_without_sluice_env cmd ... &`): the
# background subshell becomes the command, so `$!` is its pid and a kill reaches it (with
# `without_sluice_env ... &` a kill stopped only the subshell and left the broker running).
# Never call it in the foreground: it replaces the calling shell.
exec_without_sluice_env() { exec env $(env | grep -o '^SLUICE_[A-Z_]*' | sed 's/^/-u /') "$@"; }

# A scratch directory in WORK and an empty list PIDS for the background processes the script
# starts; at exit every one of them is killed (SIGKILL) and the directory removed. Call it once,
# from the script itself (not in a subshell: the variables and the trap are the caller's).
scratch_with_cleanup() {
  WORK=$(mktemp -d)
  PIDS=()
  trap 'for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null || true; done; rm -rf "$WORK"' EXIT
}
