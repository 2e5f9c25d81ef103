#!/usr/bin/env bash
# A base image for the Dockerfiles made on a machine that reaches no image registry, only Debian's and the
# Python package index: Debian 12 (debootstrap) with Debian's Python 3.11, laid out as the python:3.11 images
# are (python and pip on the PATH, pip free to install, the C headers that compiled kernels include), and this
# machine's CA bundle, so pip inside the image trusts what pip outside it trusts.
#   deploy/docker/local-base.sh [TAG]        (default carbon-base:bookworm; needs root, debootstrap, docker)
#   docker build --build-arg BASE_IMAGE=carbon-base:bookworm ...
# It is made once: an image of that tag already present is kept.
set -euo pipefail
tag=${1:-carbon-base:bookworm}
if docker image inspect "$tag" >/dev/null 2>&1; then
  echo "$tag: already made"
  exit 0
fi
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
root=$(mktemp -d /tmp/carbon-base.XXXXXX)
trap 'rm -rf "$root"' EXIT
debootstrap --variant=minbase --include=python3.11,python3.11-dev,python3-pip,python3-venv,ca-certificates \
  bookworm "$root" "$mirror" >"$root.log" 2>&1 || { tail -20 "$root.log"; exit 1; }
rm -f "$root.log"
cp /etc/ssl/certs/ca-certificates.crt "$root/etc/ssl/certs/ca-certificates.crt"
rm -f "$root"/usr/lib/python3.*/EXTERNALLY-MANAGED  # an image's own Python, as in the python images
ln -sf /usr/bin/python3 "$root/usr/local/bin/python"
ln -sf /usr/bin/pip3 "$root/usr/local/bin/pip"
rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*
tar -C "$root" -c . | docker import \
  --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
  --change 'ENV LANG=C.UTF-8' \
  --change 'CMD ["python3"]' - "$tag" >/dev/null
echo "$tag: made"
