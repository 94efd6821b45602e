#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# Builds vramd's container images (etc/container/Containerfile) from the
# project's .debs, and tries them: vramd in one container serving a socket
# in a host folder, vramctl in the client image reaching it through that
# folder. `make container` runs it; docs/kubernetes.md explains.
#
#   build-image.sh [-d DEBS_DIR] [-t TOOL] [-b BASE] [-T TAG] [-n]
#
#   -d  folder with vramd_*.deb, libvram0_*.deb, python3-vram_*.deb
#       (default: .., where dpkg-buildpackage -b puts them)
#   -t  podman (default), buildah or docker
#   -b  base image (default debian:bookworm-slim). When the tool does not
#       have it and cannot pull it (no registry reachable), and mmdebstrap
#       is installed, it is built from Debian's archive: mmdebstrap
#       --variant=minbase bookworm, imported under that name.
#   -T  tag of the images: TAG and TAG-client (default vramd:VERSION)
#   -n  build only, do not try the images
set -eu

debs=..
tool=podman
base=debian:bookworm-slim
tag=
try=1
while getopts d:t:b:T:n opt; do
	case $opt in
	d) debs=$OPTARG ;;
	t) tool=$OPTARG ;;
	b) base=$OPTARG ;;
	T) tag=$OPTARG ;;
	n) try=0 ;;
	*) exit 2 ;;
	esac
done

here=$(cd "$(dirname "$0")" && pwd)
say() { printf 'build-image: %s\n' "$*" >&2; }
die() { say "$*"; exit 1; }

command -v "$tool" >/dev/null 2>&1 || die "$tool is not installed (Debian: podman or buildah)"

one() { # the newest file matching a pattern, or nothing
	ls -t $1 2>/dev/null | head -n 1
}
vramd_deb=$(one "$debs/vramd_*.deb")
lib_deb=$(one "$debs/libvram0_*.deb")
py_deb=$(one "$debs/python3-vram_*.deb")
[ -n "$vramd_deb" ] && [ -n "$lib_deb" ] && [ -n "$py_deb" ] ||
	die "no vramd_*.deb, libvram0_*.deb and python3-vram_*.deb in $debs (run dpkg-buildpackage -us -uc -b first, or give -d)"
version=$(dpkg-deb -f "$vramd_deb" Version)
[ -n "$tag" ] || tag=vramd:$(printf %s "$version" | tr '~+' '--')

# $VRAM_CONTAINER_OPTS: global options of the tool, for where its defaults
# do not work (in a container: "--storage-driver vfs --runtime runc").
# RUN steps use chroot isolation, which needs no nested namespaces.
[ -z "${VRAM_CONTAINER_OPTS:-}" ] || tool="$tool $VRAM_CONTAINER_OPTS"
build_opts=
run_opts=
case $tool in
podman* | buildah*)
	# Docker's image format: the OCI one has no HEALTHCHECK, and podman
	# would drop it.
	build_opts="--format docker --isolation ${VRAM_CONTAINER_ISOLATION:-chroot}"
	# The containers' fd limit is the caller's, and 4096 processes: podman
	# would raise them, which a caller without CAP_SYS_RESOURCE cannot.
	run_opts="--ulimit nofile=$(ulimit -Hn):$(ulimit -Hn) --ulimit nproc=4096:4096"
	;;
esac

base_ok() { $tool image inspect "$1" >/dev/null 2>&1; }
if ! base_ok "$base" && ! base_ok "localhost/$base"; then
	if ! $tool pull "$base" >/dev/null 2>&1; then
		command -v mmdebstrap >/dev/null 2>&1 ||
			die "cannot pull $base and mmdebstrap is not installed to build it"
		say "cannot pull $base: building it from Debian's archive with mmdebstrap"
		tmp=$(mktemp -d)
		trap 'rm -rf "$tmp"' EXIT
		mmdebstrap --quiet --variant=minbase --format=tar bookworm "$tmp/rootfs.tar"
		$tool import "$tmp/rootfs.tar" "$base" >/dev/null
		rm -f "$tmp/rootfs.tar"
	fi
fi
base_ok "$base" || base="localhost/$base"
build_opts="$build_opts --pull=never"

ctx=$(mktemp -d)
trap 'rm -rf "$ctx" ${tmp:-}' EXIT
cp "$here/Containerfile" "$vramd_deb" "$lib_deb" "$py_deb" "$ctx/"
say "building $tag and $tag-client from $(basename "$vramd_deb") on $base"
# shellcheck disable=SC2086 # the options are words
$tool build $build_opts --build-arg "BASE=$base" --target vramd -t "$tag" -f "$ctx/Containerfile" "$ctx"
# shellcheck disable=SC2086
$tool build $build_opts --build-arg "BASE=$base" --target client -t "$tag-client" -f "$ctx/Containerfile" "$ctx"

[ "$try" = 1 ] || exit 0

# Try them: vramd on the host backend (no GPU needed) with its socket in a
# host folder, and the client image's vramctl through that folder mounted
# read-only, as a client container would.
run=$(mktemp -d)
chmod 0755 "$run"
name=vramd-try-$$
cleanup() {
	$tool rm -f "$name" >/dev/null 2>&1 || true
	rm -rf "$ctx" "$run" ${tmp:-}
}
trap cleanup EXIT
# shellcheck disable=SC2086
$tool run -d --name "$name" $run_opts --read-only --cap-drop=all \
	--security-opt=no-new-privileges -v "$run:/run/vramd" "$tag" \
	vramd --config /etc/vramd/vramd.conf --backend host --host-capacity 64M
i=0
until [ -S "$run/vramd.sock" ]; do
	i=$((i + 1))
	[ $i -lt 100 ] || { $tool logs "$name" >&2; die "vramd did not make its socket"; }
	sleep 0.1
done
case $tool in
podman*) $tool healthcheck run "$name" || die "the image's HEALTHCHECK fails" ;;
esac
# shellcheck disable=SC2086
$tool run --rm $run_opts --read-only --cap-drop=all -v "$run:/run/vramd:ro" "$tag-client" \
	vramctl status
# shellcheck disable=SC2086
$tool run --rm $run_opts --read-only --cap-drop=all -v "$run:/run/vramd:ro" "$tag-client" \
	python3 -c 'import vram; c = vram.connect(name="image-try"); p = c.create_pool("try", tag="kv_cache"); p.alloc(1 << 20); print("pool", p.size, "bytes through", vram.__name__)'
$tool stop -t 10 "$name" >/dev/null
code=$($tool inspect -f '{{.State.ExitCode}}' "$name")
[ "$code" = 0 ] || { $tool logs "$name" >&2; die "vramd exited with $code"; }
say "ok: $tag serves, $tag-client connects through the mounted socket"
