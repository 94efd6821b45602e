#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Runs the prebuilt libFuzzer targets (tests/fuzz/*_fuzz.c) long, on k
# workers, and prints one line of totals per target:
#
#   fuzz daemon: 10000000 execs, 16 workers, 61234/s, 0 crashes, 163 s, corpus 812
#
# execs is the sum of what the workers ran, /s that over the wall-clock
# time of the target's run (all workers together), crashes the number of
# inputs the workers saved as crash-, leak-, timeout- or oom- files (each
# stops its worker) plus workers that died without one. Needs no make and
# no clang: `make fuzz` and `tools/gpu-prepare.sh fuzz` call it.
#
#   tests/fuzz/run.sh [-b BUILD] [-o DIR] [-c CDIR] [-j JOBS] [-n EXECS | -t SECS] [TARGET..]
#
# BUILD holds fuzz/daemon_fuzz and fuzz/client_fuzz (default build). The
# corpus of each target is CDIR/corpus-TARGET (CDIR: BUILD/fuzz), seeded from
# tests/fuzz/corpus/TARGET and kept between runs; the workers' logs and
# what they find go to DIR/TARGET (default BUILD/fuzz/run), the totals
# also to DIR/summary.txt (a line per target, the latest run's).
# -n: executions per target in all (default 10000000), split evenly over
# the workers (libFuzzer's -jobs=k -workers=k, each job -runs=EXECS/k).
# -t: seconds per target instead.
# Exits 1 if anything was found or a worker did not finish.
set -u

root=$(cd "$(dirname "$0")/../.." && pwd)
build=$root/build
out=
cdir=
jobs=1
execs=10000000
secs=

usage() {
	echo "usage: $0 [-b BUILD] [-o DIR] [-c CDIR] [-j JOBS] [-n EXECS | -t SECS] [daemon] [client]" >&2
	exit 2
}

while getopts b:o:c:j:n:t:h opt; do
	case $opt in
	b) build=$OPTARG ;;
	o) out=$OPTARG ;;
	c) cdir=$OPTARG ;;
	j) jobs=$OPTARG ;;
	n) execs=$OPTARG secs= ;;
	t) secs=$OPTARG ;;
	*) usage ;;
	esac
done
shift $((OPTIND - 1))
case $build in /*) ;; *) build=$PWD/$build ;; esac
out=${out:-$build/fuzz/run}
case $out in /*) ;; *) out=$PWD/$out ;; esac
cdir=${cdir:-$build/fuzz}
case $cdir in /*) ;; *) cdir=$PWD/$cdir ;; esac
[[ $jobs =~ ^[1-9][0-9]*$ ]] || usage
[[ $execs =~ ^[1-9][0-9]*$ ]] || usage
[ -z "$secs" ] || [[ $secs =~ ^[1-9][0-9]*$ ]] || usage
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(daemon client)

mkdir -p "$out" || exit 1
touch "$out/summary.txt" || exit 1
# A report's stack reads better symbolized; without llvm-symbolizer (the
# GPU machine) the addresses stay, and `llvm-symbolizer -e BIN` turns
# them into lines where clang is.
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1}

# run_target NAME: one target's run; prints and records its totals line.
run_target() {
	local t=$1 bin=$build/fuzz/$1_fuzz dir=$out/$1
	local corpus=$cdir/corpus-$1 limit per what
	[ -x "$bin" ] || {
		echo "fuzz $t: no $bin (make fuzz builds it; it needs clang)" >&2
		return 1
	}
	mkdir -p "$corpus" || return 1
	cp -n "$root/tests/fuzz/corpus/$t"/* "$corpus/" 2>/dev/null
	rm -rf "$dir" && mkdir -p "$dir" || return 1
	if [ -n "$secs" ]; then
		limit=-max_total_time=$secs what="$secs s"
	else
		per=$(((execs + jobs - 1) / jobs))
		limit=-runs=$per what="$execs execs"
	fi
	echo "fuzz $t: $jobs workers, $what; logs in $dir" >&2
	local start end
	start=$(date +%s.%N)
	# -jobs writes worker J's output to fuzz-J.log in the current
	# directory. A hang of 60 s on one input is a finding too.
	(cd "$dir" && "$bin" -jobs="$jobs" -workers="$jobs" "$limit" \
		-max_len=4096 -timeout=60 -print_final_stats=1 \
		-artifact_prefix="$dir/" "$corpus" >"$dir/jobs.log" 2>&1)
	end=$(date +%s.%N)
	local n=0 done=0 stopped=0 nostart=0 found log k
	for log in "$dir"/fuzz-*.log; do
		[ -f "$log" ] || continue
		k=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
		if [ -z "$k" ]; then
			# No final stats: the last progress line's count.
			k=$(grep -o '^#[0-9]*' "$log" | tail -1 | tr -d '#')
		fi
		n=$((n + ${k:-0}))
		if grep -q '^Done [0-9]* runs' "$log"; then
			done=$((done + 1))
		elif grep -q 'INITED\|ERROR\|^SUMMARY' "$log"; then
			stopped=$((stopped + 1))
		else
			nostart=$((nostart + 1))
			echo "fuzz $t: a worker did not start ($log):" >&2
			head -5 "$log" >&2
		fi
	done
	found=$(find "$dir" -maxdepth 1 \( -name 'crash-*' -o -name 'leak-*' \
		-o -name 'timeout-*' -o -name 'oom-*' \) | wc -l)
	# A worker that stopped early found something, whether or not it
	# could save the input.
	[ "$stopped" -gt "$found" ] && found=$stopped
	local wall rate
	wall=$(awk -v s="$start" -v e="$end" 'BEGIN { printf "%d", e - s + 0.5 }')
	rate=$(awk -v n="$n" -v s="$start" -v e="$end" 'BEGIN { printf "%d", (e > s) ? n / (e - s) : 0 }')
	local line="fuzz $t: $n execs, $jobs workers, $rate/s, $found crashes, $wall s, corpus $(find "$corpus" -type f | wc -l)"
	echo "$line"
	# One line per target: this run's replaces an earlier one's.
	{ grep -v "^fuzz $t:" "$out/summary.txt"; echo "$line"; } >"$out/summary.tmp"
	mv "$out/summary.tmp" "$out/summary.txt"
	if [ "$found" -gt 0 ] || [ "$nostart" -gt 0 ] || [ "$done" -ne "$jobs" ]; then
		for f in "$dir"/crash-* "$dir"/leak-* "$dir"/timeout-* "$dir"/oom-*; do
			[ -f "$f" ] && echo "  found: $f" >&2
		done
		grep -l 'ERROR\|deadly\|fuzz:' "$dir"/fuzz-*.log 2>/dev/null |
			head -3 | while read -r log; do
			echo "  == $log" >&2
			grep -B2 -A25 -m1 'ERROR\|deadly\|^fuzz:\|^client fuzz:' "$log" | head -40 >&2
		done
		return 1
	fi
	return 0
}

rc=0
for t in "${targets[@]}"; do
	case $t in
	daemon | client) run_target "$t" || rc=1 ;;
	*)
		echo "fuzz: no target $t (daemon, client)" >&2
		rc=1
		;;
	esac
done
exit $rc
