#!/usr/bin/env bash
# Packs built programs for a GPU machine that cannot install packages:
#   scripts/gpu-bundle.sh OUTDIR FILE...
# Copies each FILE into OUTDIR/bin (shared libraries into OUTDIR/lib),
# every shared library they load (ldd) into OUTDIR/lib, and Open MPI's
# plugins into OUTDIR/lib/openmpi. Left out: glibc's own libraries and the
# CUDA libraries (driver, runtime, cuBLAS, NCCL, cuDNN), which must match the
# target's driver and are far too big to carry; OUTDIR/env.sh finds them
# there (/usr/local/cuda, or the nvidia-* Python wheels next to PyTorch).
# On the target:  source OUTDIR/env.sh && OUTDIR/bin/<program> ...
set -euo pipefail
[ $# -ge 2 ] || { echo "usage: $0 OUTDIR FILE..." >&2; exit 2; }
out=$1; shift
mkdir -p "$out/bin" "$out/lib"

skip='^(linux-vdso|ld-linux|libc\.so|libm\.so|libdl\.so|libpthread\.so|librt\.so|libcuda\.so|libcudart|libcublas|libnccl|libcudnn|libnvrtc|libnvJitLink)'
declare -A seen
# Copies the shared libraries `$1` loads (ldd) into lib/, each once.
copy_deps() {
  local name path
  while read -r name _ path _; do
    [[ "$name" =~ $skip ]] && continue
    [ -n "${path:-}" ] && [ -e "$path" ] || continue
    [ -n "${seen[$name]:-}" ] && continue
    seen[$name]=1
    cp -L "$path" "$out/lib/$name"
  done < <(ldd "$1" 2>/dev/null | grep '=>' || true)
}
for f in "$@"; do
  [ -e "$f" ] || { echo "$0: no such file: $f" >&2; exit 1; }
  case "$f" in
    *.so|*.so.*) cp -L "$f" "$out/lib/" ;;
    *) cp -L "$f" "$out/bin/" ;;
  esac
  copy_deps "$f"
done

# OpenBLAS is found through Debian's alternatives; Open MPI loads its
# transports as plugins at MPI_Init.
plugins=$(ompi_info --path pkglibdir 2>/dev/null | awk '{print $2}')
if [ -n "${seen[libmpi.so.40]:-}" ] && [ -d "$plugins" ]; then
  mkdir -p "$out/lib/openmpi"
  cp -L "$plugins"/*.so "$out/lib/openmpi/" 2>/dev/null || true
  # The plugins' own dependencies (hwloc, libevent, pmix, ...).
  for p in "$plugins"/*.so; do copy_deps "$p"; done
fi

cat > "$out/env.sh" <<'EOF'
# Sourced on the GPU machine: the bundle's libraries first, then the CUDA
# libraries of the machine itself.
loom_bundle=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cuda_dirs=""
for d in /usr/local/cuda/lib64 /usr/local/cuda/lib /usr/local/cuda/targets/x86_64-linux/lib; do
  [ -d "$d" ] && cuda_dirs="$cuda_dirs:$d"
done
for py in python3 python; do
  site=$($py -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])' 2>/dev/null) || continue
  for d in "$site"/nvidia/*/lib "$site"/nvidia/cu*/lib "$site"/torch/lib; do
    [ -d "$d" ] && cuda_dirs="$cuda_dirs:$d"
  done
  break
done
export LD_LIBRARY_PATH="$loom_bundle/lib$cuda_dirs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export OMPI_MCA_mca_base_component_path="$loom_bundle/lib/openmpi"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export PATH="$loom_bundle/bin:$PATH"
EOF
du -sh "$out"
