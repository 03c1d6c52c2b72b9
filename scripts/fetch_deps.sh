#!/usr/bin/env bash
# Downloads the Debian packages layerbench's CPU side needs into a folder (default
# deps/debs, ignored by git), for a machine without a package registry: carry the folder
# there and run scripts/build_offline.sh. Run on Debian 12 (any user; apt-get download
# needs no root), after `apt-get update` if the package lists are old.
# usage: scripts/fetch_deps.sh [DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-deps/debs}
packages=(libopenblas0-openmp libopenblas-openmp-dev libyaml-0-2 libyaml-dev libjansson4 libjansson-dev libbenchmark1debian libbenchmark-dev
          libgfortran5 libquadmath0)
mkdir -p "$dir"
cd "$dir"
rm -f ./*.deb
apt-get download "${packages[@]}" 2> >(grep -v "couldn't be accessed by user '_apt'" >&2)
echo "fetch_deps: $(ls ./*.deb | wc -l) packages, $(du -sh . | cut -f1), in $dir"
