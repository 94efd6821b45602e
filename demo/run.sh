#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# One co-located RL cycle on vramd's host backend (`make demo` runs this).
#
# An inference engine and a trainer share one emulated device of 1 GiB. The
# engine holds 256 MiB of weights (policy host: kept across a pause) and a
# 512 MiB KV cache (policy discard). The trainer needs 700 MiB, which cannot
# fit next to them; it pauses the engine's pools, trains in the released
# memory, frees it and resumes the engine, which then checks every byte of
# its weights at the same addresses. `vramctl ls` shows the node after each
# step.
#
# Needs VRAMD_BIN, VRAMCTL_BIN and VRAM_BUILD (absolute paths; the Makefile
# sets them). Exits 0 only if every step did what it should, and leaves
# nothing running whatever happens.
set -euo pipefail

: "${VRAMD_BIN:?VRAMD_BIN is not set; run 'make demo'}"
: "${VRAMCTL_BIN:?VRAMCTL_BIN is not set; run 'make demo'}"
: "${VRAM_BUILD:?VRAM_BUILD is not set; run 'make demo'}"
ENGINE_BIN="$VRAM_BUILD/demo/engine"
TRAINER_BIN="$VRAM_BUILD/demo/trainer"
for bin in "$VRAMD_BIN" "$VRAMCTL_BIN" "$ENGINE_BIN" "$TRAINER_BIN"; do
	[ -x "$bin" ] || { echo "demo: $bin is missing; run 'make demo'" >&2; exit 1; }
done

CAPACITY=1G     # the emulated device
WEIGHTS_MIB=256
KV_MIB=512
TRAIN_MIB=700   # more than fits beside the engine's 768 MiB
STEP_TIMEOUT=60 # seconds any one step may take

dir=$(mktemp -d "${TMPDIR:-/tmp}/vramd-demo.XXXXXX")
sock="$dir/vramd.sock"
export VRAM_SOCKET="$sock" # for vramctl, engine and trainer alike
vramd_pid="" engine_pid="" trainer_pid=""
step_no=0 step_name="starting" passed=0

# A step writes into a closed fifo if its reader died: get EPIPE, not death.
trap '' PIPE

# Bold headers on a terminal only, so that logs stay plain text.
bold="" plain=""
if [ -t 1 ]; then bold=$'\033[1m' plain=$'\033[0m'; fi

say() { printf '%s\n' "$*"; }

step() {
	step_no=$((step_no + 1))
	step_name="$*"
	printf '\n%s== %d. %s ==%s\n' "$bold" "$step_no" "$*" "$plain"
}

fail() {
	printf '\ndemo: FAILED at step %d (%s): %s\n' "$step_no" "$step_name" "$*" >&2
	exit 1
}

# Runs vramctl, showing the command, its output indented.
ctl() {
	printf '  $ vramctl %s\n' "$*"
	"$VRAMCTL_BIN" "$@" | sed '/./s/^/    /' || fail "vramctl $* failed"
}

# Stops a process: SIGTERM, then SIGKILL after 5 s. Returns its status.
stop() {
	local pid=$1 i
	[ -n "$pid" ] || return 0
	kill -TERM "$pid" 2>/dev/null || true
	for i in $(seq 50); do
		kill -0 "$pid" 2>/dev/null || break
		sleep 0.1
	done
	kill -KILL "$pid" 2>/dev/null || true
	wait "$pid" 2>/dev/null
}

cleanup() {
	local status=$?
	set +e
	trap - EXIT INT TERM
	# Closing the control fifos lets a waiting engine or trainer finish.
	[ -n "${engine_in:-}" ] && exec {engine_in}>&-
	[ -n "${trainer_in:-}" ] && exec {trainer_in}>&-
	stop "$trainer_pid"
	stop "$engine_pid"
	stop "$vramd_pid"
	if [ "$passed" != 1 ] && [ -s "$dir/vramd.log" ]; then
		echo "--- last lines of vramd's log ---" >&2
		tail -n 30 "$dir/vramd.log" >&2
	fi
	rm -rf "$dir"
	exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# Waits for the next line on fd $1, which must be $2; $3 names the sender.
expect_line() {
	local fd=$1 want=$2 who=$3 line
	if ! read -r -t "$STEP_TIMEOUT" -u "$fd" line; then
		fail "$who stopped before '$want' (or took over ${STEP_TIMEOUT}s)"
	fi
	[ "$line" = "$want" ] || fail "$who said '$line', expected '$want'"
}

# Waits up to STEP_TIMEOUT seconds for process $1 ($2 names it) to exit;
# leaves its exit status in $status.
await() {
	local pid=$1 who=$2 i
	for ((i = 0; i < STEP_TIMEOUT * 10; i++)); do
		kill -0 "$pid" 2>/dev/null || break
		sleep 0.1
	done
	if kill -0 "$pid" 2>/dev/null; then
		fail "$who did not exit within ${STEP_TIMEOUT}s"
	fi
	status=0
	wait "$pid" || status=$?
}

# Lets a program waiting on its stdin fifo (fd $1) go on.
go_on() {
	printf 'go\n' >&"$1" || fail "$2 went away"
}

# ---------------------------------------------------------------------------
step "Start vramd: host backend, one emulated device of $CAPACITY"
"$VRAMD_BIN" --socket "$sock" --backend host --host-capacity "$CAPACITY" \
	--host-devices 1 >"$dir/vramd.log" 2>&1 &
vramd_pid=$!
# Ready when it answers, not merely when the socket file exists.
ready=0
for _ in $(seq 100); do
	if [ -S "$sock" ] && "$VRAMCTL_BIN" status >/dev/null 2>&1; then
		ready=1
		break
	fi
	kill -0 "$vramd_pid" 2>/dev/null || fail "vramd exited at start"
	sleep 0.1
done
[ "$ready" = 1 ] || fail "vramd did not answer on $sock within 10 s"
say "vramd runs as pid $vramd_pid on $sock"
ctl status

# ---------------------------------------------------------------------------
step "Engine loads: ${WEIGHTS_MIB}M of weights (policy host), ${KV_MIB}M of KV cache (policy discard)"
mkfifo "$dir/engine.in" "$dir/engine.out"
"$ENGINE_BIN" --weights-mib "$WEIGHTS_MIB" --kv-mib "$KV_MIB" --notify-fd 3 \
	<"$dir/engine.in" 3>"$dir/engine.out" &
engine_pid=$!
# Same order as the child opens them, or both sides would block.
exec {engine_in}>"$dir/engine.in"
exec {engine_out}<"$dir/engine.out"
expect_line "$engine_out" loaded engine
ctl ls

# ---------------------------------------------------------------------------
step "Trainer: ${TRAIN_MIB}M cannot fit beside the engine"
mkfifo "$dir/trainer.in" "$dir/trainer.out"
"$TRAINER_BIN" --engine-pid "$engine_pid" --mib "$TRAIN_MIB" --notify-fd 3 \
	<"$dir/trainer.in" 3>"$dir/trainer.out" &
trainer_pid=$!
exec {trainer_in}>"$dir/trainer.in"
exec {trainer_out}<"$dir/trainer.out"
expect_line "$trainer_out" probed trainer
ctl ls

# ---------------------------------------------------------------------------
step "Trainer pauses the engine's pools (owner pid $engine_pid)"
go_on "$trainer_in" trainer
expect_line "$trainer_out" paused trainer
ctl ls
ctl ls --json

# ---------------------------------------------------------------------------
step "Trainer allocates ${TRAIN_MIB}M in the released memory and writes it"
go_on "$trainer_in" trainer
expect_line "$trainer_out" trained trainer
ctl ls

# ---------------------------------------------------------------------------
step "Trainer frees its memory"
go_on "$trainer_in" trainer
expect_line "$trainer_out" freed trainer
ctl ls

# ---------------------------------------------------------------------------
step "Trainer resumes the engine's pools"
go_on "$trainer_in" trainer
expect_line "$trainer_out" resumed trainer
ctl ls
go_on "$trainer_in" trainer
await "$trainer_pid" trainer
trainer_pid=""
[ "$status" = 0 ] || fail "trainer exited with status $status"

# ---------------------------------------------------------------------------
step "Engine verifies its weights byte for byte"
go_on "$engine_in" engine
await "$engine_pid" engine
engine_pid=""
[ "$status" = 0 ] || fail "engine exited with status $status"
say "engine exited: its pools are gone and the device is whole again"
ctl ls
ctl status
# Checked, not just shown: vramd holds no device memory any more.
used=$("$VRAMCTL_BIN" --json status |
	python3 -c 'import json, sys; print(json.load(sys.stdin)["used_bytes"])') ||
	fail "vramctl --json status failed"
[ "$used" = 0 ] || fail "vramd still holds $used bytes after the engine exited"

# ---------------------------------------------------------------------------
step "Stop vramd"
kill -TERM "$vramd_pid"
await "$vramd_pid" vramd
vramd_pid=""
[ "$status" = 0 ] || fail "vramd exited with status $status on SIGTERM"
say "vramd stopped cleanly"

passed=1
printf '\n%sdemo: PASSED%s: the trainer used %sM that only the engine'"'"'s pause\ncould free, and the engine got its weights back intact at the same addresses.\n' \
	"$bold" "$plain" "$TRAIN_MIB"
