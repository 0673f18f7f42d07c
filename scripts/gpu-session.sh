#!/usr/bin/env bash
# Packs everything one short GPU session should run, into one folder that
# fits the device machine's 64 MiB carry limit (build here first):
#   scripts/gpu-session.sh [OUTDIR]     (default gpu-bundle, git-ignored)
# then, on the GPU machine:
#   OUTDIR/device.sh                    (writes its log and files to $OUT)
# which runs, each under a timeout so one hang cannot eat the session:
#  1. the cuda-vs-cpu kernel checks (scripts/gpu-check.sh's check.sh);
#  2. gpt-tiny 4x64 trained 30 steps on the cpu backend (f32) and on the
#     cuda backend (f32 and bf16), losses and grad norms side by side;
#  3. the benchmark against PyTorch (bench/Gpu/run.sh, 10 steps), with its
#     profiled runs.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-$root/gpu-bundle}
bin=$root/build/bin
"$root/bench/Gpu/prepare.sh" "$out" > /dev/null
check=$(mktemp -d)
"$root/scripts/gpu-check.sh" "$check/c" > /dev/null
cp -n "$check/c/lib/"*.so* "$out/lib/"
cp "$check/c/bin/"* "$out/bin/"
sed 's|^here=.*|here=$(cd "$(dirname "$0")" \&\& pwd)|' "$check/c/check.sh" > "$out/check.sh"
chmod +x "$out/check.sh"
rm -rf "$check"
# Open MPI transports a one-GPU run never loads, and what only they need.
rm -f "$out"/lib/libmca_common_{ucx,ofi,verbs}* "$out"/lib/lib{ucp,ucs,uct,ucm,fabric,psm2,efa,rdmacm,ibverbs,nl-route,oshmem}*
rm -f "$out"/lib/openmpi/mca_{atomic,memheap,scoll,sshmem,spml}_*
mkdir -p "$out/e2e"
tmp=$(mktemp -d)
for dtype in f32 bf16; do
  "$bin/loom-import" "$root/examples/gpt-tiny.json" --dtype $dtype --micro-batch-size 4 \
    --seq-length 64 -o "$tmp/$dtype.mlir"
done
"$bin/loom-compile" "$tmp/f32.mlir" --train -o "$out/e2e/cpu32" --quiet
"$bin/loom-compile" "$tmp/f32.mlir" --train --backend cuda -o "$out/e2e/cuda32" --quiet
"$bin/loom-compile" "$tmp/bf16.mlir" --train --backend cuda -o "$out/e2e/cuda16" --quiet
rm -rf "$tmp"
cat > "$out/device.sh" <<'SH'
#!/usr/bin/env bash
here=$(cd "$(dirname "$0")" && pwd)
out=${OUT:-/tmp/out}; mkdir -p "$out"
exec > >(tee "$out/log") 2>&1
source "$here/env.sh"
nvidia-smi -L; python3 -c 'import torch; print(torch.__version__, torch.cuda.get_device_name())'
echo "== kernel checks"; start=$SECONDS
timeout 150 "$here/check.sh" 2>&1 | tail -40; echo "check rc=${PIPESTATUS[0]} in $((SECONDS-start)) s"
echo "== gpt-tiny 4x64, 30 steps: cpu f32 | cuda f32 | cuda bf16 (loss, grad norm)"
for v in cpu32 cuda32 cuda16; do
  d=$here/e2e/$v
  timeout 60 "$d/rank-00000" --manifest "$d/manifest.json" --train --steps 30 --lr 3e-3 --clip-grad 1.0 \
    --weight-decay 0.1 --metrics-jsonl "$out/$v.jsonl" > "$out/$v.log" 2>&1 || { echo "$v failed"; tail -5 "$out/$v.log"; }
done
python3 - "$out" <<'PY'
import json, sys
o = sys.argv[1]
def rows(v):
    try: return [json.loads(l) for l in open("%s/%s.jsonl" % (o, v))]
    except Exception as e: print(v, "no metrics:", e); return []
c, g, h = rows("cpu32"), rows("cuda32"), rows("cuda16")
for i in range(0, len(c), 5):
    print(i + 1, *[r[i]["loss"] if i < len(r) else None for r in (c, g, h)],
          *[r[i].get("grad_norm") if i < len(r) else None for r in (c, g, h)])
for name, r in (("cuda f32", g), ("cuda bf16", h)):
    if c and r:
        print("max relative loss difference, %s vs cpu f32: %.2e" % (name, max(
            abs(a["loss"] - b["loss"]) / abs(a["loss"]) for a, b in zip(c, r))))
PY
echo "== bench"; start=$SECONDS
timeout 420 "$here/bench/run.sh" 10
echo "bench in $((SECONDS-start)) s"
for m in gpt2-124m tinyllama-1.1b; do
  for f in "$here/bench/$m"/log-* "$here/bench/$m"/profile.jsonl "$here/bench/$m"/torch-*.err; do
    [ -f "$f" ] && cp "$f" "$out/$m-$(basename "$f")"
  done
done
SH
chmod +x "$out/device.sh"
du -sb "$out" | awk '{printf "%s: %.1f MiB (the device machine carries 64 MiB)\n", $2, $1 / 1048576}'
