#!/usr/bin/env bash
# Issue 18's first-light run on a GPU host, in one call of under 10 minutes:
#
#   benchmarks/gpu_acceptance.sh OUTDIR [--quick]
#
# SKIP="attribute ..." leaves out the steps it names (their logs say so; "wheels": no install).
# EXAMPLES="mlp ..." runs and attributes those examples only (the other steps as ever);
# ATTRIBUTE_EXAMPLES="mlp ..." attributes those examples only; TARGETS_BUDGET=S gives each
# gpu_targets workload S seconds of timing (default 8); LIMIT_<step>=S changes a step's
# time limit (LIMIT_gpu_targets=240); TARGETS_ARGS="--only gemm_f16 ..." adds options to
# gpu_targets.py's command line (a call's chosen workloads and variants); DEADLINE=EPOCH_S cuts every step's limit to end by then
# (a call's own limit: the steps that fit finish and are archived, the last one is cut short).
# The tensor_cores, flash_attention and llama steps run gpu_targets.py watched: a workload still
# running after HANG_AFTER seconds (90, 120, 300) is recorded as hung and its process killed,
# and the workloads not yet recorded run in a new process, as after a failure that left the
# device unusable. PYTEST_GPU_FILES="tests/..." names the files the pytest_gpu step runs.
# BACKEND=cuda-host (or cuda-sim) runs the same steps without a GPU, to test the script
# itself: the examples and attributions on that backend (host times, not GPU times), the
# gpu tests skipping, and the device-only steps (counters, GPU peers, graph replay) left out.
# With ARCHIVE=FILE.tgz set, OUTDIR is re-packed into it after every step, so a call cut off
# at its time limit still brings back what the finished steps wrote.
#
# 1. installs the wheels in .whl, if any (../shared/tools/offline-wheels.sh .whl fetches them,
#    xdsl pinned as in pyproject.toml), and irkit itself (editable, no index, no deps);
# 2. records the host: nvidia-smi, python and package versions;
# 3. runs `pytest -m gpu` (tests/test_gpu.py, and the kernels of test_cuda_path.py that the
#    host paths prove: split-K, tensor cores, TF32, vector stores, gpu-coarsen);
# 4. runs `irkit-bench run --backend cuda --counters --json` on every example (ncu's counters
#    per kernel where Nsight Compute works, a one-line reason where it does not), and
#    transformer_block at gpu_targets' size without counters (its per-kernel times);
# 5. runs benchmarks/gpu_targets.py (records appended to OUTDIR/gpu_targets.jsonl); then its
#    tensor-core ladder (step "tensor_cores": f16/bf16 gemms 4096^3 and 8192^3 and TF32 against
#    cuBLAS, each of issue 69's steps in the same rounds as the default: register-staged
#    copies, 2 and 3 cp.async stages, wgmma, TMA, warp specialization, persistent, grouped,
#    and 128 x 256 tiles;
#    OUTDIR/tensor_cores.jsonl) and bf16 fused
#    attention against SDPA's flash backend (step "flash_attention"; head dim 64 and 128,
#    sequence 1k and 4k (and 8k at 128), causal and not, the tensor-core form and at 1k the
#    f32 SIMT one; OUTDIR/flash_attention.jsonl), and a Llama-3-8B
#    layer in bf16, prefill of 2048 tokens and decode at a 2048-position cache, against
#    torch.compile (step "llama"; OUTDIR/llama.jsonl). On a host backend the three steps
#    check the same variants there (no times);
# 6. runs `irkit-bench attribute --backend cuda` on examples/mlp.graph, then on every other
#    example (one record each, with the A/A noise floor); then gpu-fuse-attention against the
#    exported chain (batch matmuls tiled, softmax by rows) at S = 512 and 2048 (step "attention");
# 7. with FIDELITY_TRIALS=N set (a later call: it does not fit in the first one's 10
#    minutes), runs benchmarks/fidelity.py on the GPU: mlp, Shapley, N trials per planted
#    size (records in OUTDIR/fidelity.jsonl); FIDELITY_EXAMPLES and FIDELITY_STRATEGIES
#    name others (comma-separated, as fidelity.py takes them); FIDELITY_ARGS adds options
#    (FIDELITY_ARGS="--truth-timer device").
#
# The commit the tree came from: $IRKIT_SOURCE_SHA where the copy has no .git of its own.
#
# Every step has its own time limit, writes its log under OUTDIR, and a failing step does not
# stop the ones after it. The last lines say which steps failed; the exit status is the number
# of failed steps. OUTDIR/steps.tsv holds step, exit status and seconds.
set -u
out=${1:?usage: benchmarks/gpu_acceptance.sh OUTDIR [--quick]}
quick=${2:-}
mkdir -p "$out"
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root" || exit 99
export PYTHONUNBUFFERED=1
backend=${BACKEND:-cuda}
export backend
failed=()
printf 'step\tstatus\tseconds\n' >"$out/steps.tsv"

step() {  # step NAME LIMIT_S COMMAND...: run, log to OUTDIR/NAME.log, note its status
  local name=$1 limit=$2 start status override="LIMIT_$1"
  limit=${!override:-$limit}  # LIMIT_<step>=S overrides a step's limit
  if [ -n "${DEADLINE:-}" ] && [ $((DEADLINE - $(date +%s))) -lt "$limit" ]; then
    limit=$((DEADLINE - $(date +%s)))
  fi
  shift 2
  if [[ " ${SKIP:-} " == *" $name "* ]]; then
    echo "== $name: skipped (SKIP)" | tee "$out/$name.log"
    return
  fi
  if [ "$limit" -le 0 ]; then
    echo "== $name: not run, DEADLINE passed" | tee "$out/$name.log"
    failed+=("$name (DEADLINE)")
    printf '%s\t%s\t%s\n' "$name" "deadline" 0 >>"$out/steps.tsv"
    return
  fi
  start=$(date +%s)
  echo "== $name ($(date -u +%H:%M:%S), limit ${limit}s): $*"
  # through bash, so that a step may be one of the functions exported below
  timeout --kill-after=10 "$limit" bash -c '"$@"' "$name" "$@" >"$out/$name.log" 2>&1
  status=$?
  printf '%s\t%s\t%s\n' "$name" "$status" "$(($(date +%s) - start))" >>"$out/steps.tsv"
  tail -n 25 "$out/$name.log"
  if [ "$status" -ne 0 ]; then
    failed+=("$name (exit $status$([ "$status" -eq 124 ] && echo ', timed out'))")
  fi
  echo "== $name: exit $status after $(($(date +%s) - start)) s"
  if [ -n "${ARCHIVE:-}" ]; then
    tar czf "$ARCHIVE" -C "$(dirname "$out")" "$(basename "$out")"
  fi
}

if [[ " ${SKIP:-} " != *" wheels "* ]] && compgen -G ".whl/*.whl" >/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/irkit-site .whl/*.whl || failed+=("wheels")
  export PYTHONPATH=/tmp/irkit-site:$root${PYTHONPATH:+:$PYTHONPATH}
else
  export PYTHONPATH=$root${PYTHONPATH:+:$PYTHONPATH}
fi
# irkit-bench on the PATH: installed (editable) where it is missing; where that cannot be
# done, the module runs instead
if ! command -v irkit-bench >/dev/null &&
  ! { python3 -m pip install -q --no-index --no-deps --no-build-isolation -e . >"$out/install.log" 2>&1 &&
    command -v irkit-bench >/dev/null; }; then
  mkdir -p /tmp/irkit-bin
  printf '#!/bin/sh\nexec python3 -m irkit.cli.bench "$@"\n' >/tmp/irkit-bin/irkit-bench
  chmod +x /tmp/irkit-bin/irkit-bench
  export PATH=/tmp/irkit-bin:$PATH
fi

host() {
  nvidia-smi
  nvidia-smi --query-gpu=name,pci.bus_id,driver_version,clocks.sm,clocks.max.sm,clocks.mem,temperature.gpu,power.draw,pstate --format=csv
  python3 --version
  git -C "$root" rev-parse HEAD 2>/dev/null || echo "git: not a checkout"
  python3 -m pip list 2>/dev/null | grep -iE '^(torch|triton|numpy|xdsl|lark|llvmlite|cuda|nvidia-cuda|onnx|networkx|rich) '
  python3 -c 'import irkit, sys; from irkit.runtime import BACKENDS; print("irkit", irkit.__file__); print(BACKENDS["cuda"]().available())'
  command -v ncu nvcc || true
}
export -f host
step host 30 host

dims_for() {  # the --dim options an example runs with: its own on a GPU, test sizes on a host
  [ "$backend" = cuda ] && return
  case $1 in
    conv_block) echo --dim N=1 --dim H=12 ;;
    elementwise_chain) echo --dim N=64 --dim D=96 ;;
    gemm) echo --dim M=64 --dim N=48 --dim K=80 ;;
    layernorm) echo --dim T=16 --dim H=96 ;;
    llama_block) echo --dim S=12 --dim D=64 --dim H=4 --dim HK=2 --dim HD=16 --dim F=96 ;;
    llama_decode) echo --dim L=20 --dim D=64 --dim H=4 --dim HK=2 --dim HD=16 --dim F=96 ;;
    mlp) echo --dim B=4 --dim D=64 --dim F=256 ;;
    softmax) echo --dim R=32 --dim C=100 ;;
    transformer_block) echo --dim B=1 --dim S=16 --dim D=32 --dim F=64 ;;
  esac
}
export -f dims_for

strategy_for() {  # on a host (testing the script): prefix, a variant per pass, not Shapley's
  [ "$backend" = cuda ] || echo --strategy prefix
}
export -f strategy_for

budget=0.5
attribute_budget=5
targets=(--budget "${TARGETS_BUDGET:-8}")
if [ "$quick" = "--quick" ]; then
  budget=0.3
  attribute_budget=2
  targets=(--quick --budget 1)
fi

read -r -a pytest_files <<<"${PYTEST_GPU_FILES:-tests/test_gpu.py tests/test_cuda_path.py tests/test_async_copy.py tests/test_wgmma.py tests/test_tma.py tests/test_clusters.py tests/test_fp8_mma.py}"
step pytest_gpu 210 python3 -m pytest -o addopts= -p no:benchmark -m gpu -p no:cacheprovider -q -rs \
  "${pytest_files[@]}" --junitxml="$out/pytest_gpu.xml"

run_examples() {
  local status=0 f name
  for f in examples/*.graph; do
    name=$(basename "$f" .graph)
    [ -n "${EXAMPLES:-}" ] && [[ " $EXAMPLES " != *" $name "* ]] && continue
    echo "--- $name"
    if [ "$backend" = cuda ]; then
      irkit-bench run "$f" --backend cuda --counters --budget "$budget" --json "$out/run_$name.json" ||
        status=1
    else
      # shellcheck disable=SC2046
      irkit-bench run "$f" --backend "$backend" $(dims_for "$name") --budget "$budget" \
        --json "$out/run_$name.json" || status=1
    fi
  done
  if [ "$backend" = cuda ]; then  # per-kernel times at gpu_targets' size, where it trails
    echo "--- transformer_block at B=8 S=512 D=512 F=2048"
    irkit-bench run examples/transformer_block.graph --backend cuda --dim B=8 --dim S=512 \
      --dim D=512 --dim F=2048 --budget "$budget" --json "$out/run_transformer_block_large.json" ||
      status=1
  fi
  return $status
}
export -f run_examples
export out budget
step run_examples 150 run_examples

read -r -a targets_args <<<"${TARGETS_ARGS:-}"
if [ "$backend" = cuda ]; then
  step gpu_targets 210 python3 benchmarks/gpu_targets.py "${targets[@]}" "${targets_args[@]}" \
    --out "$out/gpu_targets.jsonl"
else
  SKIP="${SKIP:-} gpu_targets" step gpu_targets 1 true  # GPU peers: on a GPU only
fi

targets_watched() {  # targets_watched OUTFILE HANG_S NAME...: gpu_targets.py on the named
  # workloads; one still running after HANG_S seconds (a kernel that never finishes cannot be
  # stopped inside its process) is recorded as hung, its process killed, and the workloads
  # not yet recorded run in a new process
  local outfile=$1 hang=$2 status=0 w pid started current left only recorded
  shift 2
  local progress="$outfile.progress"
  while :; do
    left=() only=()
    for w in "$@"; do
      grep -q "\"workload\": \"$w\"" "$outfile" 2>/dev/null || left+=("$w")
    done
    [ ${#left[@]} -eq 0 ] && return $status
    for w in "${left[@]}"; do only+=(--only "$w"); done
    rm -f "$progress"
    recorded=$(cat "$outfile" 2>/dev/null | grep -c .)
    # a process group of its own (where setsid is): killing it takes its children too
    # (torch.compile's workers)
    $(command -v setsid) python3 benchmarks/gpu_targets.py "${targets[@]}" "${only[@]}" \
      --progress "$progress" --out "$outfile" &
    pid=$! current="" started=$(date +%s)
    while kill -0 "$pid" 2>/dev/null; do
      sleep 1
      w=$(cat "$progress" 2>/dev/null)
      if [ "$w" != "$current" ]; then current=$w started=$(date +%s); fi
      if [ -n "$current" ] && [ $(($(date +%s) - started)) -gt "$hang" ]; then
        kill -9 -- "-$pid" 2>/dev/null || kill -9 "$pid" 2>/dev/null
        echo "$current FAILED: hung: no result after $hang s; its process killed, the rest run anew"
        printf '{"kind": "irkit.benchmark", "benchmark": "gpu_targets", "workload": "%s", "error": "hung: no result after %s s (process killed)"}\n' \
          "$current" "$hang" >>"$outfile"
        status=1
        break
      fi
    done
    wait "$pid" || status=1
    # it ended before any workload started, or recorded none: another try would do the same
    # (the progress file read again: a run may end between two looks at it)
    [ -s "$progress" ] || return 1
    [ "$(cat "$outfile" 2>/dev/null | grep -c .)" -gt "$recorded" ] || return 1
  done
}
export -f targets_watched

tensor_cores() {  # issue 69's steps against cuBLAS (a GPU), or each checked on a host backend
  local status=0 w t step options n m
  if [ "$backend" = cuda ]; then
    local names=(gemm_tf32) only=()
    for t in f16 bf16; do
      names+=("gemm_$t" "gemm_${t}_8192" "gemm_${t}_8192_wgmma" "gemm_${t}_8192_grouped"
        "gemm_${t}_8192_wide" "gemm_${t}_8192_clustered")
      for step in staged stages2 stages3 wgmma tma specialized persistent grouped wide clustered; do
        names+=("gemm_${t}_$step")
      done
    done
    names+=(gemm_fp8 gemm_fp8_wgmma gemm_fp8_8192 gemm_fp8_8192_wgmma)  # against _scaled_mm
    # 37 workloads: 5 s each of interleaved rounds (thousands of samples of a 4096^3 gemm)
    targets+=(--budget "${TENSOR_CORES_BUDGET:-5}")
    targets_watched "$out/tensor_cores.jsonl" "${HANG_AFTER:-90}" "${names[@]}"
    return $?
  fi
  local tma="wgmma=true tma=true"
  for t in f16 bf16; do
    for step in default "async-copy=false" stages=2 stages=3 wgmma=true "$tma" \
        "$tma warp-specialize=true" "$tma warp-specialize=true persistent=true" \
        "$tma warp-specialize=true persistent=true group-m=8" \
        "$tma warp-specialize=true persistent=true group-m=8 block-n=256" \
        "$tma warp-specialize=true persistent=true group-m=8 block-n=256 cluster-m=2"; do
      options=${step/default/}
      n=72  # 256-wide tiles want C wider than one (a narrower C keeps the 128-wide ones)
      [[ $options == *block-n=256* ]] && n=300
      m=100  # clusters want two tile rows or more (one keeps no cluster)
      [[ $options == *cluster-m=* ]] && m=300
      echo "--- gemm $t, gpu-tile-matmul{$options}"
      irkit-bench run examples/gemm.graph --backend "$backend" --dtype "$t" --dim M=$m \
        --dim N=$n --dim K=96 --budget 0.2 \
        -p "fuse-kernels,lower-graph-to-loops,gpu-tile-matmul{$options},map-to-gpu" \
        --json "$out/tensor_cores_${t}_${step//[= -]/_}.json" || status=1
    done
  done
  local fp8="$out/gemm_fp8.graph"  # 8-bit floats: mma.sync m16n8k32, and wgmma m64nNk32
  python3 -c 'import sys; sys.path.insert(0, "benchmarks"); from gpu_targets import GEMM_FP8; print(GEMM_FP8)' >"$fp8"
  for options in "" "wgmma=true"; do
    echo "--- gemm fp8, gpu-tile-matmul{$options}"
    irkit-bench run "$fp8" --backend "$backend" --dim M=100 --dim N=72 --dim K=96 \
      --budget 0.2 -p "fuse-kernels,lower-graph-to-loops,gpu-tile-matmul{$options},map-to-gpu" \
      --json "$out/tensor_cores_fp8_${options//[= -]/_}.json" || status=1
  done
  return $status
}
export -f tensor_cores
export targets_string="${targets[*]}"
step tensor_cores 240 bash -c 'targets=($targets_string); tensor_cores'

flash_attention() {  # bf16 fused attention against SDPA's flash backend, or checked on a host
  local status=0 s d causal names=()
  if [ "$backend" = cuda ]; then
    for s in 1024 4096; do
      for d in 64 128; do
        names+=("attention_bf16_${s}_d${d}" "attention_bf16_${s}_d${d}_causal")
      done
    done
    names+=(attention_bf16_8192_d128 attention_bf16_8192_d128_causal)
    for d in 64 128; do  # the f32 SIMT form, what the tensor cores are worth
      names+=("attention_bf16_1024_d${d}_simt" "attention_bf16_1024_d${d}_causal_simt")
    done
    targets_watched "$out/flash_attention.jsonl" "${HANG_AFTER:-120}" "${names[@]}"
    return $?
  fi
  for causal in false true; do
    printf 'model attention\ninput q : bf16[1, 4, 40, 64]\ninput k : bf16[1, 4, 40, 64]\ninput v : bf16[1, 4, 40, 64]\noutput y = attention(q, k, v, causal=%s)\n' \
      "$causal" >"$out/flash_attention_$causal.graph"
    irkit-bench run "$out/flash_attention_$causal.graph" --backend "$backend" --budget 0.2 \
      --json "$out/flash_attention_$causal.json" || status=1
  done
  return $status
}
export -f flash_attention
step flash_attention 240 bash -c 'targets=($targets_string); flash_attention'

llama() {  # a Llama-3-8B layer in bf16, prefill and decode, against torch.compile (a GPU),
  # or the two examples in bf16 checked on a host backend at their test sizes
  local status=0 example
  if [ "$backend" = cuda ]; then
    # torch.compile's two modes compile a whole layer: a long first record
    targets_watched "$out/llama.jsonl" "${HANG_AFTER:-300}" llama_prefill_bf16 llama_decode_bf16 \
      llama_prefill_bf16_hopper
    return $?
  fi
  for example in llama_block llama_decode; do
    # shellcheck disable=SC2046  # dims_for's options are words
    irkit-bench run "examples/$example.graph" --backend "$backend" --dtype bf16 --budget 0.2 \
      $(dims_for "$example") --json "$out/llama_$example.json" || status=1
  done
  return $status
}
export -f llama
step llama 240 bash -c 'targets=($targets_string); llama'

attribute_all() {
  local status=0 f name
  for f in examples/mlp.graph examples/*.graph; do
    name=$(basename "$f" .graph)
    [ -e "$out/attribute_$name.json" ] && continue
    [ -n "${ATTRIBUTE_EXAMPLES:-}" ] && [[ " $ATTRIBUTE_EXAMPLES " != *" $name "* ]] && continue
    [ -n "${EXAMPLES:-}" ] && [[ " $EXAMPLES " != *" $name "* ]] && continue
    echo "--- $name"
    # shellcheck disable=SC2046
    irkit-bench attribute "$f" --backend "$backend" $(dims_for "$name") $(strategy_for) \
      --budget "$attribute_budget" --json "$out/attribute_$name.json" || status=1
  done
  [ -n "${ATTRIBUTE_EXAMPLES:-}" ] && return $status  # the named examples only
  if [ "$backend" = cuda ]; then  # microsecond kernels without the launch cost
    echo "--- softmax, --timer graph"
    irkit-bench attribute examples/softmax.graph --backend cuda --timer graph \
      --budget "$attribute_budget" --json "$out/attribute_softmax_graph.json" || status=1
  fi
  # small, and by prefix: the shared passes leave the CPU's matmuls untiled
  echo "--- mlp, cpu and $backend side by side"
  irkit-bench attribute examples/mlp.graph --backend "cpu,$backend" --strategy prefix \
    --dim B=8 --dim D=128 --dim F=512 \
    --budget "$attribute_budget" --no-kernel-times --json "$out/attribute_mlp_cross.json" || status=1
  return $status
}
export -f attribute_all
export attribute_budget
step attribute 200 attribute_all

attention_gpu() {  # gpu-fuse-attention against the exported chain (its matmuls tiled), per S
  local status=0 s sizes="512 2048" hd=64
  [ "$backend" = cuda ] || { sizes="40"; hd=16; }
  for s in $sizes; do
    echo "--- attention [1, 8, $s, $hd] as exporters write it (matmul, scale, softmax, matmul)"
    printf 'model att\ninput q : f32[1, 8, %s, %s]\ninput k : f32[1, 8, %s, %s]\ninput v : f32[1, 8, %s, %s]\noutput y = batch_matmul(softmax(batch_matmul(q, transpose(k, perm=[0, 1, 3, 2])) * 0.125, axis=-1), v)\n' \
      "$s" "$hd" "$s" "$hd" "$s" "$hd" >"$out/attention_$s.graph"
    irkit-bench attribute "$out/attention_$s.graph" --backend "$backend" --no-kernel-times \
      -p "canonicalize,cse,gpu-fuse-attention,fuse-kernels,lower-graph-to-loops,reshape-views,gpu-tile-matmul,map-to-gpu" \
      --budget "$attribute_budget" --json "$out/attribute_attention_$s.json" || status=1
  done
  return $status
}
export -f attention_gpu
step attention 120 attention_gpu

if [ -n "${FIDELITY_TRIALS:-}" ]; then
  fidelity_dims=()
  [ "$backend" = cuda ] || fidelity_dims=(--quick)
  read -r -a fidelity_args <<<"${FIDELITY_ARGS:-}"
  step fidelity 540 python3 benchmarks/fidelity.py --backend "$backend" \
    --examples "${FIDELITY_EXAMPLES:-mlp}" --strategies "${FIDELITY_STRATEGIES:-shapley}" \
    --trials "$FIDELITY_TRIALS" --budget 4 "${fidelity_dims[@]}" "${fidelity_args[@]}" \
    --out "$out/fidelity.jsonl"
fi

echo
echo "== summary: $(($(wc -l <"$out/steps.tsv") - 1)) steps"
cat "$out/steps.tsv"
if [ ${#failed[@]} -gt 0 ]; then
  echo "FAILED: ${failed[*]}"
else
  echo "all steps passed"
fi
exit ${#failed[@]}
