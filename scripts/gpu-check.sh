#!/usr/bin/env bash
# Packs the cuda backend's kernel checks for a GPU machine that cannot
# install packages (build here first: scripts/build.sh):
#   scripts/gpu-check.sh [OUTDIR]       (default gpu-bundle-check, git-ignored)
# then, on the GPU machine:
#   OUTDIR/check.sh
# which runs test/Unit/RuntimeCuda's comparison of every cuda kernel with the
# cpu backend twice: with attention as shipped (LOOMRT_CUDA_ATTENTION=auto:
# cuDNN after a first-call comparison per shape, reported on stderr when it
# falls back) and with LOOMRT_CUDA_ATTENTION=cudnn (every call cuDNN covers on
# cuDNN, unchecked). Exit status: 0 when both pass, 77 when there is no GPU.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-$root/gpu-bundle-check}
build=$root/build
for f in test/Unit/RuntimeCuda/loomrt-cuda-tests lib/libloomrt_cpu.so lib/libloomrt_cuda.so; do
  [ -e "$build/$f" ] || { echo "$0: $build/$f missing (build with the cuda backend first)" >&2; exit 1; }
done
rm -rf "$out"
"$root/scripts/gpu-bundle.sh" "$out" "$build/test/Unit/RuntimeCuda/loomrt-cuda-tests" \
  "$build/lib/libloomrt_cpu.so" "$build/lib/libloomrt_cuda.so" > /dev/null
# The kernel checks never start MPI: its transports and their large
# dependencies stay behind (the device machine takes 64 MiB).
rm -rf "$out/lib/openmpi"
cat > "$out/check.sh" <<'SH'
#!/usr/bin/env bash
here=$(cd "$(dirname "$0")" && pwd)
source "$here/env.sh"
status=0
for attn in auto cudnn; do
  echo "== runtime-cuda.kernels, LOOMRT_CUDA_ATTENTION=$attn"
  OMP_NUM_THREADS=4 LOOMRT_CUDA_ATTENTION=$attn "$here/bin/loomrt-cuda-tests" \
    kernels "$here/lib/libloomrt_cpu.so" "$here/lib/libloomrt_cuda.so"
  rc=$?
  # 77: no GPU here (the test says why).
  case $rc in 0) ;; 77) [ $status = 1 ] || status=77 ;; *) status=1 ;; esac
done
exit $status
SH
chmod +x "$out/check.sh"
du -sh "$out"
