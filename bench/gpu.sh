#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# GPU benchmarks (make bench-gpu): the raw VMM floor (bench/gpu_raw), the
# same pools through vramd (bench/gpu_vramd), a few variants, the control
# path (bench/rpc), then bench/plot.py's table, summary.json and PNG.
#
# Results go to $OUT when set, else BUILD/bench-results/gpu-DATE/: the text of
# every run, gpu.csv (every figure), summary.json, latency.png, env.txt.
# Without a GPU it says so and exits 0.
#
# Settings (environment):
#   BENCH_GPU_SIZES     pool sizes in GiB (default 1,4,16,64,128; those that
#                       do not fit the device are skipped)
#   BENCH_GPU_HOST_MAX  largest host-policy pool in GiB (default 16: the
#                       backup, a pinned buffer of the same size and the
#                       raw run's copy need 3x that in host memory)
#   BENCH_GPU_CYCLES    pause/resume cycles per pool (default 3)
#   VRAM_BUILD          the build directory (default build)
set -u

root=$(cd "$(dirname "$0")/.." && pwd)
build=${VRAM_BUILD:-$root/build}
export VRAMD_BIN=${VRAMD_BIN:-$build/vramd}
out=${OUT:-$build/bench-results/gpu-$(date +%Y%m%d-%H%M%S)}
sizes=${BENCH_GPU_SIZES:-1,4,16,64,128}
host_max=${BENCH_GPU_HOST_MAX:-16}
cycles=${BENCH_GPU_CYCLES:-3}
csv=$out/gpu.csv

mkdir -p "$out" || exit 1
rm -f "$csv"

# Runs one benchmark, its output on the terminal and in $out/NAME.txt.
# Returns its status; 77 means no GPU.
run() {
	local name=$1
	shift
	echo "== $name: ${*#"$build"/}" | tee -a "$out/$name.txt"
	"$@" 2>&1 | tee -a "$out/$name.txt"
	return "${PIPESTATUS[0]}"
}

{
	date -u
	uname -a
	nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used \
		--format=csv 2>&1 || true
	grep -E 'MemTotal|MemAvailable' /proc/meminfo
	echo "sizes=$sizes host_max=$host_max cycles=$cycles"
} >"$out/env.txt"

for b in gpu_raw gpu_vramd; do
	if [ ! -x "$build/bench/$b" ]; then
		echo "$build/bench/$b is missing: run make bench-gpu (or make $build/bench/$b)" >&2
		exit 1
	fi
done

run raw "$build/bench/gpu_raw" --sizes "$sizes" --host-max "$host_max" \
	--cycles "$cycles" --copy-sweep --chunk-sweep 64 --csv "$csv"
rc=$?
if [ "$rc" = 77 ]; then
	echo "no GPU here: GPU benchmarks skipped"
	exit 0
fi
failed=0
[ "$rc" = 0 ] || failed=1

# The raw floor of libvram's geometric growth (vram_alloc layouts).
run raw-geometric "$build/bench/gpu_raw" --sizes 16 --layout geometric \
	--host-max "$host_max" --cycles "$cycles" --csv "$csv" || failed=1

run vramd "$build/bench/gpu_vramd" --sizes "$sizes" --host-max "$host_max" \
	--cycles "$cycles" --allocs --csv "$csv" || failed=1

# Variants on a 64 GiB discard pool: the daemon closing chunks from one
# thread (its default is several), and chunks of 1 GiB and 16 GiB instead
# of the default one chunk per grow.
VRAM_CUDA_RELEASE_THREADS=1 run vramd-rt1 "$build/bench/gpu_vramd" --sizes 64 \
	--policies discard --cycles "$cycles" --label chunked-rt1 --csv "$csv" || failed=1
run vramd-chunk16g "$build/bench/gpu_vramd" --sizes 64 --policies discard \
	--cycles "$cycles" --chunk-max 16G --label chunk=16384M --csv "$csv" || failed=1
run vramd-chunk1g "$build/bench/gpu_vramd" --sizes 64 --policies discard \
	--cycles "$cycles" --chunk-max 1G --label chunk=1024M --csv "$csv" || failed=1

# The control path (its own vramd on the host backend: no device involved).
if [ -x "$build/bench/rpc" ]; then
	run rpc "$build/bench/rpc" || failed=1
fi

echo "== summary" | tee "$out/summary.txt"
if command -v python3 >/dev/null; then
	python3 "$root/bench/plot.py" "$csv" "$out" 2>&1 | tee -a "$out/summary.txt"
else
	echo "python3 is missing: no summary table or plot; the figures are in $csv" |
		tee -a "$out/summary.txt"
fi
echo "results in $out"
exit "$failed"
