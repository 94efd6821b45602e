#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Upstream torch_memory_saver (github:fzyzcjy/torch_memory_saver) for
# bench/compare.py, built from source: the GPU machine has torch, nvcc and
# setuptools but no package registry.
#
#   tools/tms-build.sh export [GIT_DIR [REV]]
#       here: writes the source into .tms-src/ (a git archive of REV,
#       default HEAD, of a clone or bare mirror: GIT_DIR, else $TMS_GIT,
#       else /work/.mirror/fzyzcjy+torch_memory_saver/repo). Carry
#       .tms-src/ to the GPU machine (it is ignored by git: name it in the
#       device's carry list; it is under 1 MiB).
#   tools/tms-build.sh build
#       there: builds .tms-src/ into .tms/ with
#       TMS_CUDA_MAJOR=N pip install --no-build-isolation --no-deps --target
#       (N from torch.version.cuda unless TMS_CUDA_MAJOR is set); nothing is
#       downloaded. bench/compare.py finds it there (or in $TMS_DIR).
#   tools/tms-build.sh check
#       prints the built folder and its version; fails if not built.
#
# Environment: TMS_SRC (default .tms-src), TMS_DIR (default .tms), PYTHON
# (default python3).
set -u

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root" || exit 1
src=${TMS_SRC:-$root/.tms-src}
dst=${TMS_DIR:-$root/.tms}
py=${PYTHON:-python3}

die() {
	echo "tms-build: $*" >&2
	exit 1
}

built() {
	[ -f "$dst/torch_memory_saver/__init__.py" ] &&
		ls "$dst"/torch_memory_saver_hook_mode_preload*.so \
			"$dst"/torch_memory_saver/torch_memory_saver_hook_mode_preload*.so \
			2>/dev/null | grep -q .
}

export_src() {
	local git=${1:-${TMS_GIT:-/work/.mirror/fzyzcjy+torch_memory_saver/repo}}
	local rev=${2:-HEAD} desc
	[ -d "$git" ] || die "no torch_memory_saver repository at $git (fetch github:fzyzcjy/torch_memory_saver, or pass its path)"
	[ -d "$git/.git" ] && git=$git/.git # a clone with a work tree
	desc=$(git --git-dir="$git" rev-parse --short "$rev") || die "$git has no revision $rev"
	rm -rf "$src" && mkdir -p "$src" || exit 1
	# Only what the CUDA build and the package need (upstream's tree also
	# holds agent skills and CI scripts).
	git --git-dir="$git" archive "$rev" setup.py MANIFEST.in LICENSE README.md csrc torch_memory_saver |
		tar -x -C "$src" || die "git archive of $git $rev failed"
	version=$(sed -n "s/^ *version='\([^']*\)'.*/\1/p" "$src/setup.py" | head -1)
	echo "${version:-unknown} ($desc)" >"$src/TMS_VERSION"
	echo "exported torch_memory_saver $(cat "$src/TMS_VERSION") into ${src#"$root"/}/ ($(du -sh "$src" | cut -f1))"
}

build() {
	local major tmp log
	[ -f "$src/setup.py" ] || die "no source in $src: run tools/tms-build.sh export on the build machine and carry ${src#"$root"/}/"
	command -v nvcc >/dev/null || [ -x "${CUDA_HOME:-/usr/local/cuda}/bin/nvcc" ] ||
		die "no nvcc here: upstream's CUDA build needs it"
	major=${TMS_CUDA_MAJOR:-$("$py" -c 'import torch; print((torch.version.cuda or "").split(".")[0])' 2>/dev/null)}
	[ -n "$major" ] || die "cannot tell the CUDA major version (no CUDA torch?); set TMS_CUDA_MAJOR"
	# pip builds in the source tree: build a copy, keep .tms-src clean.
	tmp=$(mktemp -d) || exit 1
	cp -r "$src" "$tmp/src" || exit 1
	rm -rf "$dst.new"
	log=$tmp/build.log
	echo "building torch_memory_saver $(cat "$src/TMS_VERSION" 2>/dev/null) for CUDA $major into ${dst#"$root"/}/"
	if ! TMS_CUDA_MAJOR=$major "$py" -m pip install --no-build-isolation --no-deps \
		--no-index --target "$dst.new" "$tmp/src" >"$log" 2>&1; then
		tail -40 "$log" >&2
		rm -rf "$tmp" "$dst.new"
		die "pip install failed (the log's end is above)"
	fi
	cp "$src/TMS_VERSION" "$dst.new/" 2>/dev/null
	rm -rf "$dst" && mv "$dst.new" "$dst" || exit 1
	rm -rf "$tmp"
	built || die "the build finished but $dst has no preload library"
	PYTHONPATH=$dst "$py" -c 'import torch_memory_saver' ||
		die "PYTHONPATH=$dst python3 -c 'import torch_memory_saver' fails"
	echo "built: PYTHONPATH=${dst} (bench/compare.py finds it there)"
}

mode=${1:-}
[ $# -gt 0 ] && shift
case $mode in
export) export_src "$@" ;;
build) build ;;
check)
	built || die "not built in $dst (tools/tms-build.sh build)"
	echo "$dst: torch_memory_saver $(cat "$dst/TMS_VERSION" 2>/dev/null || echo '(version unknown)')"
	;;
*) die "usage: tools/tms-build.sh export [GIT_DIR [REV]] | build | check" ;;
esac
