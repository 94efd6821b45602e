#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Runs vramd's GPU tests and benchmarks on a GPU machine that cannot build
# them: one without libuv and protobuf-c, or without a package registry
# (the lab's H200, see docs/gpu.md). Build on a Debian machine, carry the
# build folder and .debs/ over, run there.
#
#   tools/gpu-prepare.sh            here: build everything the GPU run needs
#                                   and download the runtime .debs into .debs/
#   tools/gpu-prepare.sh gpu        there: GPU tests, then benchmarks; results
#                                   under $OUT (default build/gpu-results/)
#   tools/gpu-prepare.sh test       there: the GPU tests only
#   tools/gpu-prepare.sh bench      there: the benchmarks only
#   tools/gpu-prepare.sh exec CMD.. there: CMD with the unpacked libraries
#                                   on LD_LIBRARY_PATH
#   tools/gpu-prepare.sh compare [ARGS..]
#                                   there: vramd against upstream
#                                   torch_memory_saver (bench/compare.py
#                                   ARGS), building upstream from .tms-src/
#                                   first; results under $OUT/compare
#   tools/gpu-prepare.sh figures    there: issue 11's figures in one pass
#                                   (compare without sweeps, the 1 GiB
#                                   discard pair in five rounds, the
#                                   64-client ping with and without the
#                                   event thread beside the machine's
#                                   socket floor, bench/copy_probe.py)
#                                   into $OUT/figures.txt and figures.tgz;
#                                   FIGURES_RUN_MS=MS gives the compare
#                                   and the pair MS of device work before
#                                   each pause (--run-ms)
#   tools/gpu-prepare.sh fuzz [N|Ns] [JOBS] [TARGET..]
#                                   there: the prebuilt libFuzzer targets
#                                   ($VRAM_BUILD/fuzz, built here when clang
#                                   is present; daemon and client, or the
#                                   TARGETs) for N executions per target
#                                   (default 10000000) or N seconds, on JOBS
#                                   workers (default: the cores);
#                                   tests/fuzz/run.sh's totals, logs and
#                                   findings under $OUT/fuzz
#
# "There" never calls make (a rebuild would need the -dev packages): it
# unpacks .debs/*.deb with dpkg -x into .debs/root once (never into /) and
# runs the binaries in $VRAM_BUILD (default build) directly.
set -u

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root" || exit 1
build=${VRAM_BUILD:-build}
case $build in
/*) ;;
*) build=$root/$build ;;
esac
debs=$root/.debs
# What the binaries link that the GPU machine lacks (readelf -d build/vramd).
RUNTIME_PKGS=(libuv1 libprotobuf-c1 libmicrohttpd12)

die() {
	echo "gpu-prepare: $*" >&2
	exit 1
}

# ---- here -----------------------------------------------------------------

prepare() {
	command -v apt-get >/dev/null || die "apt-get missing: run this on the Debian build machine"
	make BUILD="$build" all || die "make all failed"
	# The GPU binaries, and the CUDA unit tests (their last case checks
	# the real driver). test-gpu and bench-gpu also run them, which here
	# only reports that there is no GPU.
	make BUILD="$build" test-gpu bench-gpu ||
		die "building the GPU tests and benchmarks failed"
	# Targets named as the Makefile names them: it makes an absolute
	# BUILD inside the tree relative, and an absolute target then
	# matches no rule on a fresh checkout.
	local target=${build#"$root"/}
	make BUILD="$build" "$target/tests/daemon_cuda_test" \
		"$target/tests/client_cuda_test" || die "building the CUDA unit tests failed"
	# The fuzz targets, for the fuzz mode there (clang links the
	# sanitizer and fuzzer runtimes and libstdc++ into them; they need
	# only the runtime libraries below).
	if command -v clang >/dev/null; then
		make BUILD="$build" "$target/fuzz/daemon_fuzz" "$target/fuzz/client_fuzz" ||
			die "building the fuzz targets failed"
	else
		echo "gpu-prepare: no clang here: no fuzz targets for the fuzz mode" >&2
	fi
	if ! nm "$build/vramd" | grep -q ' T backend_cuda_open'; then
		echo "gpu-prepare: WARNING: $build/vramd has no cuda backend linked in" >&2
		echo "  (a weak reference does not pull daemon/backend/cuda.o out of" >&2
		echo "  libvramd.a); vramd --backend cuda will fail with ENOENT." >&2
	fi
	# The commit the build is of, for the results there (whose copy of
	# the tree may have no .git, or a stale one); "+" when the tracked
	# files differ from it.
	local head
	if head=$(git -C "$root" rev-parse --short HEAD 2>/dev/null); then
		git -C "$root" diff --quiet HEAD 2>/dev/null || head=$head+
		echo "$head" > "$root/.head"
	fi
	mkdir -p "$debs" || exit 1
	(cd "$debs" && apt-get download "${RUNTIME_PKGS[@]}") ||
		die "apt-get download ${RUNTIME_PKGS[*]} failed (run apt-get update first?)"
	# Upstream torch_memory_saver's source, for the compare mode (built
	# there: it needs torch and nvcc). Optional: without it the comparison
	# skips upstream's cells.
	local tms_carry=
	if [ -f "$root/.tms-src/setup.py" ] || "$root/tools/tms-build.sh" export; then
		tms_carry=", .tms-src/"
	else
		echo "gpu-prepare: no torch_memory_saver source exported (see tools/tms-build.sh); compare will skip upstream" >&2
	fi
	echo
	echo "ready: carry ${build#"$root"/}/, .debs/$tms_carry and .head to the GPU machine and run there"
	echo "  tools/gpu-prepare.sh gpu"
	echo "  tools/gpu-prepare.sh compare     (vramd against torch_memory_saver)"
	echo "  tools/gpu-prepare.sh fuzz 10000000 16   (the fuzz targets, 16 workers)"
}

# ---- there ------------------------------------------------------------------

# Puts the runtime libraries on LD_LIBRARY_PATH, unpacking them first if
# this system lacks them.
runtime_env() {
	local libdir=$debs/root/usr/lib/x86_64-linux-gnu
	if ldconfig -p 2>/dev/null | grep -q 'libuv\.so\.1 ' &&
		ldconfig -p 2>/dev/null | grep -q 'libprotobuf-c\.so\.1 ' &&
		ldconfig -p 2>/dev/null | grep -q 'libmicrohttpd\.so\.12 '; then
		return 0
	fi
	if [ ! -d "$libdir" ]; then
		ls "$debs"/*.deb >/dev/null 2>&1 ||
			die "no libuv/protobuf-c here and no .debs/: run tools/gpu-prepare.sh on the build machine and carry .debs/"
		local deb
		for deb in "$debs"/*.deb; do
			dpkg -x "$deb" "$debs/root" || die "dpkg -x $deb failed"
		done
	fi
	export LD_LIBRARY_PATH=$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
}

check_build() {
	for f in vramd vramctl tests/runner bench/gpu_raw bench/gpu_vramd; do
		[ -x "$build/$f" ] || die "$build/$f missing: run tools/gpu-prepare.sh on the build machine"
	done
	ls "$build"/tests/gpu/* >/dev/null 2>&1 || die "no GPU tests in $build/tests/gpu"
	export VRAMD_BIN=$build/vramd VRAMCTL_BIN=$build/vramctl
	export VRAM_BUILD=$build
	"$VRAMD_BIN" --version >/dev/null 2>&1 ||
		die "$VRAMD_BIN does not run here: $("$VRAMD_BIN" --version 2>&1 | head -1)"
}

gpu_tests() {
	local dir=$1 rc
	mkdir -p "$dir"
	{
		nvidia-smi 2>&1 || echo "nvidia-smi failed"
		nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv 2>&1
	} >"$dir/nvidia-smi.txt"
	local units=()
	for t in daemon_cuda_test client_cuda_test; do
		[ -x "$build/tests/$t" ] && units+=("$build/tests/$t")
	done
	# The PyTorch cases (skip without torch), through the runner's adapter.
	for t in torch_test.py tms_test.py; do
		[ -x "$root/tests/gpu/$t" ] && units+=("$root/tests/gpu/$t")
	done
	echo "== GPU tests"
	TEST_TIMEOUT=${TEST_TIMEOUT:-180} VRAM_TEST_VERBOSE=1 \
		"$build/tests/runner" "$build"/tests/gpu/* "${units[@]}" >"$dir/test-gpu.log" 2>&1
	rc=$?
	# The log has every case's output; the lines of the verdicts go to the
	# terminal.
	grep -E '^(ok|FAIL|skip) |passed, .* failed' "$dir/test-gpu.log"
	echo "(full output: $dir/test-gpu.log)"
	return $rc
}

gpu_bench() {
	local dir=$1
	echo "== GPU benchmarks"
	OUT=$dir/bench "$root/bench/gpu.sh"
}

# vramd against upstream torch_memory_saver (bench/compare.py): builds
# upstream from .tms-src/ into .tms/ once, then runs the comparison.
# Exits with bench/compare.py's status (77: no GPU or no PyTorch).
gpu_compare() {
	local dir=$1
	shift
	echo "== vramd against torch_memory_saver"
	if ! "$root/tools/tms-build.sh" check >/dev/null 2>&1; then
		"$root/tools/tms-build.sh" build ||
			echo "gpu-prepare: upstream torch_memory_saver did not build; its cells are skipped" >&2
	fi
	OUT=$dir python3 "$root/bench/compare.py" "$@"
	local rc=$?
	# The children's logs (two files a backend and workload) and vramd's
	# log in one archive, so that a machine whose reply carries only so
	# many files brings them back (compare.json and the plots stay apart).
	if [ -d "$dir/logs" ]; then
		tar czf "$dir/logs.tgz" -C "$dir" logs $([ -f "$dir/vramd.log" ] && echo vramd.log) &&
			rm -rf "$dir/logs" "$dir/vramd.log"
	fi
	return $rc
}

# gpu_compare with libvram's debug log on, unless VRAM_LOG says otherwise.
gpu_compare_debug() {
	local VRAM_LOG=${VRAM_LOG:-debug}
	export VRAM_LOG
	gpu_compare "$@"
}

# Runs CMD.. with its output into FILE; fails unless it passed or skipped
# (77: no GPU or no PyTorch, as the GPU benchmarks and compare.py say).
figure() {
	local file=$1 r
	shift
	"$@" >"$file" 2>&1
	r=$?
	[ $r -eq 0 ] || [ $r -eq 77 ]
}

mode=${1:-prepare}
[ $# -gt 0 ] && shift
case $mode in
prepare)
	prepare
	;;
gpu | test | bench)
	out=${OUT:-$build/gpu-results}
	mkdir -p "$out" || exit 1
	runtime_env
	check_build
	rc=0
	if [ "$mode" != bench ]; then
		gpu_tests "$out" || rc=1
	fi
	if [ "$mode" != test ]; then
		gpu_bench "$out" || rc=1
	fi
	echo "results in $out"
	exit $rc
	;;
compare)
	out=${OUT:-$build/gpu-results}
	mkdir -p "$out/compare" || exit 1
	runtime_env
	# The comparison needs only vramd and libvram (bench/compare.py skips
	# vramd's cells without them).
	[ -x "$build/vramd" ] || die "$build/vramd missing: run tools/gpu-prepare.sh on the build machine"
	export VRAMD_BIN=$build/vramd VRAMCTL_BIN=$build/vramctl VRAM_BUILD=$build
	gpu_compare "$out/compare" "$@"
	rc=$?
	echo "results in $out/compare"
	exit $rc
	;;
figures)
	# Issue 11's "Done when" figures in one pass (about 8 minutes on the
	# H200): the side-by-side without sweeps, the 1 GiB discard pool
	# against its floor (five rounds, in turns: the floor moves between
	# runs), the 64-client ping (also through libvram's event thread, as
	# the Python package runs) beside bench/sock_probe's socket floor, and
	# the restore's copy shapes
	# (bench/copy_probe.py), packed into figures.tgz (the device's reply
	# carries only so many files), their tables in figures.txt.
	out=${OUT:-$build/gpu-results}
	d=$out/figures
	mkdir -p "$d" || exit 1
	runtime_env
	check_build
	rc=0
	# libvram's debug log (the restores' copies and gaps) for the
	# comparison only: the ping's 64 clients run as users run them.
	run_ms=${FIGURES_RUN_MS:-0}
	figure "$d/compare.log" gpu_compare_debug "$d/compare" --sweeps none \
		--workloads host,rl,discard-one,discard-many \
		--run-ms "$run_ms" || rc=1
	for k in 1 2 3 4 5; do
		figure "$d/raw1g-$k.txt" "$build/bench/gpu_raw" --sizes 1 \
			--policies discard --no-gap --cycles 10 \
			--run-ms "$run_ms" || rc=1
		figure "$d/vramd1g-$k.txt" env BENCH_DAEMON_LOG=1 \
			"$build/bench/gpu_vramd" --sizes 1 --policies discard \
			--cycles 10 --run-ms "$run_ms" || rc=1
	done
	figure "$d/ping.txt" env BENCH_ONLY=ping "$build/bench/rpc" || rc=1
	figure "$d/ping-thread.txt" env BENCH_ONLY=ping BENCH_THREAD=1 \
		"$build/bench/rpc" || rc=1
	figure "$d/sock.txt" "$build/bench/sock_probe" 64 4 5000 || rc=1
	# The shapes the restore and the pause are set against (every case
	# runs past the device's 10 minutes with the rest).
	figure "$d/copy_probe.txt" python3 "$root/bench/copy_probe.py" \
		--cases whole,chunks-overlap,lanes,save-whole,pause-end,pause-lag \
		--out "$d/copy_probe.json" || rc=1
	# The same with no gap after each release: the comparison resumes
	# right after its pause, while the driver clears what it gave back.
	figure "$d/copy_probe-gap0.txt" python3 "$root/bench/copy_probe.py" \
		--gap 0 --cases whole,chunks-overlap,peer-paced,save-whole \
		--out "$d/copy_probe-gap0.json" || rc=1
	{
		echo "head $(cat "$root/.head" 2>/dev/null || git -C "$root" rev-parse --short HEAD 2>/dev/null)"
		cat "$d/compare/compare.md" 2>/dev/null || tail -n 5 "$d/compare.log"
		echo "== 1 GiB discard, five rounds: floor, then vramd"
		for k in 1 2 3 4 5; do
			grep -h "p50" "$d/raw1g-$k.txt" "$d/vramd1g-$k.txt"
		done
		echo "== 64-client ping"
		cat "$d/ping.txt"
		echo "== the same through libvram's event thread (BENCH_THREAD=1)"
		cat "$d/ping-thread.txt"
		echo "== the machine's socket floor (bench/sock_probe 64 4)"
		cat "$d/sock.txt"
		echo "== the restore's copy shapes (bench/copy_probe.py)"
		cat "$d/copy_probe.txt"
		echo "== the same, no gap after each release (--gap 0)"
		cat "$d/copy_probe-gap0.txt"
	} >"$out/figures.txt"
	tar czf "$out/figures.tgz" -C "$out" figures && rm -rf "$d"
	echo "results in $out/figures.txt and $out/figures.tgz"
	exit $rc
	;;
fuzz)
	# tools/gpu-prepare.sh fuzz [N|Ns] [JOBS] [TARGET..]: as
	# `make fuzz N JOBS=k`, without make.
	out=${OUT:-$build/gpu-results}
	mkdir -p "$out/fuzz" || exit 1
	runtime_env
	n=${1:-10000000}
	fuzz_jobs=${2:-$(nproc)}
	shift $(($# < 2 ? $# : 2))
	fuzz_targets=("$@")
	[ ${#fuzz_targets[@]} -gt 0 ] || fuzz_targets=(daemon client)
	for t in "${fuzz_targets[@]}"; do
		[ -x "$build/fuzz/${t}_fuzz" ] ||
			die "$build/fuzz/${t}_fuzz missing: run tools/gpu-prepare.sh where clang is"
	done
	case $n in
	*s) limit=(-t "${n%s}") ;;
	*) limit=(-n "$n") ;;
	esac
	{
		echo "host: $(uname -n), $(nproc) cores; $(date -u +%FT%TZ)"
		ldd "$build/fuzz/daemon_fuzz" "$build/fuzz/client_fuzz"
	} >"$out/fuzz/env.txt" 2>&1
	"$root/tests/fuzz/run.sh" -b "$build" -o "$out/fuzz" -j "$fuzz_jobs" \
		"${limit[@]}" "${fuzz_targets[@]}" 2>&1 | tee "$out/fuzz/run.log"
	rc=${PIPESTATUS[0]}
	echo "results in $out/fuzz (summary.txt: one line per target)"
	exit "$rc"
	;;
exec)
	[ $# -gt 0 ] || die "exec needs a command"
	runtime_env
	exec "$@"
	;;
*)
	die "unknown mode $mode (prepare, gpu, test, bench, compare, figures, fuzz, exec)"
	;;
esac
