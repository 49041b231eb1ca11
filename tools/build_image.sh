#!/usr/bin/env bash
# Build the rl-insight image (Containerfile) with podman from nothing but Debian's and PyPI's packages:
#   1. debian:bookworm-slim, when the engine has none and no registry serves it, made here with debootstrap (minbase)
#      and imported under that name; the root file system is kept in a cache by its content, so a second build on the
#      machine imports it again instead of bootstrapping;
#   2. the project's wheels (with its postgres and grpc extras) built on this host into build/wheels/: the image
#      installs from them alone (no index inside the build: what an air-gapped build needs too);
#   3. the image, tagged localhost/rl-insight:<version> (and :latest).
#
#   tools/build_image.sh                    # build
#   tools/build_image.sh --save FILE.tar    # build, then write the image to FILE.tar and FILE.tar.sha256
#   tools/build_image.sh --base-only        # only make (or import from the cache) debian:bookworm-slim
#
# Environment: ENGINE (podman; docker works where one runs), IMAGE (the tag), RL_INSIGHT_IMAGE_CACHE (the base's
# cache, default ~/.cache/rl-insight-image), DEBIAN_MIRROR (default http://deb.debian.org/debian). docs/container.md.
set -euo pipefail
cd "$(dirname "$0")/.."

ENGINE=${ENGINE:-podman}
if [ "$ENGINE" = podman ] && [ -z "${CONTAINERS_CONF:-}" ]; then
  export CONTAINERS_CONF="$PWD/tools/containers.conf"  # runc + cgroupfs: see the file
fi
VERSION=$(sed -n 's/^__version__ = "\(.*\)"$/\1/p' rl_insight/_version.py)
IMAGE=${IMAGE:-localhost/rl-insight:$VERSION}
BASE=docker.io/library/debian:bookworm-slim
CACHE=${RL_INSIGHT_IMAGE_CACHE:-$HOME/.cache/rl-insight-image}
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
SAVE=""
BASE_ONLY=""
if [ "${1:-}" = "--save" ]; then
  SAVE=${2:?"--save needs a file name"}
elif [ "${1:-}" = "--base-only" ]; then
  BASE_ONLY=1
elif [ -n "${1:-}" ]; then
  echo "usage: tools/build_image.sh [--save FILE.tar | --base-only]" >&2
  exit 2
fi

as_root() { if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi; }
say() { echo "[build_image] $*" >&2; }

make_base() {
  mkdir -p "$CACHE"
  local cached
  cached=$(ls -t "$CACHE"/bookworm-minbase-*.tar 2>/dev/null | head -1 || true)
  if [ -n "$cached" ] && [ "$(sha256sum "$cached" | cut -c1-16)" = "$(basename "$cached" .tar | sed 's/.*-//')" ]; then
    say "base: $BASE from the cache ($cached)"
  else
    command -v debootstrap >/dev/null || { say "debootstrap is missing: apt-get install debootstrap"; exit 3; }
    local root
    root=$(mktemp -d)
    say "base: $BASE not present; debootstrap --variant=minbase bookworm ($MIRROR)"
    as_root debootstrap --variant=minbase bookworm "$root" "$MIRROR" >/dev/null
    # what the official slim image leaves out; the image's own apt sources (updates and security too)
    as_root rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/* "$root"/usr/share/doc/* \
      "$root"/usr/share/man/* "$root"/usr/share/info/* "$root"/var/log/*.log "$root"/tmp/*
    printf 'deb %s bookworm main\ndeb %s bookworm-updates main\ndeb http://deb.debian.org/debian-security bookworm-security main\n' \
      "$MIRROR" "$MIRROR" | as_root tee "$root/etc/apt/sources.list" >/dev/null
    local tarball="$CACHE/bookworm-minbase.partial"
    # reproducible order and owners: the same bootstrap gives the same tar, and the tar's hash names it
    as_root tar --sort=name --numeric-owner -C "$root" -cf "$tarball" .
    as_root rm -rf "$root"
    as_root chown "$(id -u):$(id -g)" "$tarball"
    cached="$CACHE/bookworm-minbase-$(sha256sum "$tarball" | cut -c1-16).tar"
    mv "$tarball" "$cached"
    find "$CACHE" -name 'bookworm-minbase-*.tar' ! -path "$cached" -delete
  fi
  "$ENGINE" import --change 'CMD ["bash"]' "$cached" "$BASE" >/dev/null
}

if ! "$ENGINE" image exists "$BASE" 2>/dev/null; then
  make_base
fi
if [ -n "$BASE_ONLY" ]; then
  say "base: $BASE present"
  exit 0
fi

say "wheels: the project and its dependencies into build/wheels/"
rm -rf build/wheels
python3 -m pip wheel --quiet --disable-pip-version-check ".[postgres,grpc]" -w build/wheels
# the wheels' digest is a build argument their install step names: a layer cache never keeps the wheels of before
WHEELS=$(cd build/wheels && sha256sum ./*.whl | sort | sha256sum | cut -c1-16)
say "image: $IMAGE (wheels $WHEELS)"
"$ENGINE" build --format docker --pull=never -f Containerfile --build-arg "VERSION=$VERSION" \
  --build-arg "WHEELS=$WHEELS" -t "$IMAGE" -t localhost/rl-insight:latest . >&2
size=$("$ENGINE" image inspect "$IMAGE" --format '{{.Size}}')
say "built $IMAGE ($((size / 1048576)) MiB)"

if [ -n "$SAVE" ]; then
  rm -f "$SAVE"
  "$ENGINE" save --format docker-archive -o "$SAVE" "$IMAGE"
  (cd "$(dirname "$SAVE")" && sha256sum "$(basename "$SAVE")" > "$(basename "$SAVE").sha256")
  say "saved $SAVE ($(( $(stat -c %s "$SAVE") / 1048576 )) MiB) and $SAVE.sha256; on the cluster: sha256sum -c" \
      "$(basename "$SAVE").sha256 && podman load -i $(basename "$SAVE")"
fi
echo "$IMAGE"
