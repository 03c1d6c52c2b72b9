#!/usr/bin/env bash
# Builds layerbench on a machine without a package registry (an air-gapped GPU node):
# unpacks the Debian packages that scripts/fetch_deps.sh downloaded into a prefix
# (nothing is installed system-wide), finds CUDA, cuBLAS and cuDNN (a toolkit under
# CUDAToolkit_ROOT or /usr/local/cuda; cuDNN and cuBLAS from $CUDNN_ROOT / $CUBLAS_ROOT,
# or from the nvidia-cudnn / nvidia-cublas wheels of the python3 on the PATH), and builds
# into build/ with the cuda backend required. Needs cmake, a C/C++ compiler and, for the
# cuda backend, nvcc; dpkg-deb or ar+tar to unpack.
# usage: scripts/build_offline.sh [DEBS_DIR] [-- extra cmake arguments]
set -euo pipefail
cd "$(dirname "$0")/.."
debs=deps/debs
if [ $# -gt 0 ] && [ "$1" != "--" ]; then debs=$1; shift; fi
[ "${1:-}" = "--" ] && shift
prefix=$PWD/deps/prefix
ls "$debs"/*.deb >/dev/null 2>&1 || { echo "build_offline: no .deb files in $debs (run scripts/fetch_deps.sh)" >&2; exit 2; }
rm -rf "$prefix"
mkdir -p "$prefix"
for deb in "$debs"/*.deb; do
  if command -v dpkg-deb >/dev/null; then
    dpkg-deb -x "$deb" "$prefix"
  else
    member=$(ar t "$deb" | grep '^data\.tar')
    case "$member" in
      *.xz) z=-J ;; *.zst) z=--zstd ;; *.gz) z=-z ;; *) z= ;;
    esac
    ar p "$deb" "$member" | tar -x $z -C "$prefix" -f -
  fi
done

# cuDNN and cuBLAS from Python wheels, where no root was given
wheel_dir() {
  command -v python3 >/dev/null || return 0
  python3 - "$1" <<'PY' 2>/dev/null || true
import importlib, sys
try:
    m = importlib.import_module("nvidia." + sys.argv[1])
    print(list(m.__path__)[0])
except Exception:
    pass
PY
}
cuda_args=(-DLAYERBENCH_REQUIRE_CUDA=ON)
cudnn=${CUDNN_ROOT:-$(wheel_dir cudnn)}
cublas=${CUBLAS_ROOT:-}
[ -n "$cudnn" ] && cuda_args+=("-DCUDNN_ROOT=$cudnn")
if [ -z "$cublas" ] && ! ls "${CUDAToolkit_ROOT:-/usr/local/cuda}"/lib*/libcublas.so* >/dev/null 2>&1; then
  cublas=$(wheel_dir cublas)
fi
[ -n "$cublas" ] && cuda_args+=("-DCUBLAS_ROOT=$cublas")
[ -n "${CUDAToolkit_ROOT:-}" ] && cuda_args+=("-DCUDAToolkit_ROOT=$CUDAToolkit_ROOT")
echo "build_offline: dependencies in $prefix; cuDNN ${cudnn:-from the toolkit}; cuBLAS ${cublas:-from the toolkit}"
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DLAYERBENCH_DEPS_PREFIX="$prefix" "${cuda_args[@]}" "$@"
cmake --build build -j"$(nproc)"
