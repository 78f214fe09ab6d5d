#!/usr/bin/env bash
# The whole GPU check in one device call, about 7 minutes (each part's budget below; its timeout,
# a backstop 15 s past the budget, makes the worst case 7.5 minutes against the call's 10),
# results under $OUT, each file written as its step goes. Here first: bash tools/gpu_check_wheels.sh
# (wheels of what the GPU image lacks, .whl/); then one call:
# run(command="bash tools/gpu_check.sh", carry=[".whl"], timeout_s=600).
# The parts run in the order of what matters:
#   versions.txt    card, driver, torch, Triton; each step's start and budget; the setup's pip
#   layer.txt       tools/benchmark_attention.py --parts layer, L = 128, 512, 1024, bfloat16 then
#                   float16 (autocast, TF32 on): a "row: ..." line the moment each method is measured
#                   at each path and length (a method that fails says so there and loses nothing
#                   else), each dtype's tables when it ends, with SDPA's backends and each Triton
#                   kernel's compile time; peak memory. Its budget: --budget, half to each dtype;
#                   what it had no time for it says ("skipped: ...")
#   model.txt       the same, --parts model (3+3 layers, d = 256)
#   train.txt       the same, --parts train (short onmt_train of each method, fp16): each method's
#                   row when its run ends, the methods it had no time for said
#   ranks.txt       two ranks on the one GPU (tools/two_ranks_one_gpu.py) against one rank with
#                   accum_count 2 (the same tokens per update): SHAPE + concat_pairs within
#                   documents, and Shaw (its kernel after the first-use check)
#   parity.txt      tests/model/test_fused_kernel.py compiled on the GPU (bfloat16 included), 8 at a
#                   time beside the rank runs (most of its time is compiling the kernels' variants),
#                   each test's verdict as it ends
#
# GPU_CHECK_DRY_RUN=1: every step on the CPU with tiny sizes (Triton's interpreter for the
# kernel's parts, a subset of the parity tests, one rank on the CPU; the two-rank runs start
# and stop where they need CUDA), no wheels installed: tests/model/test_gpu_check.py runs it so in CI.
# The install step alone, dry-run: tools/gpu_check_install.sh (docs/benchmarks.md).
set -u
OUT=${OUT:-gpu_check_out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 OMP_NUM_THREADS=4
dry=${GPU_CHECK_DRY_RUN:-0}
started=$(date +%s)
step() { echo "== $1 at +$(( $(date +%s) - started )) s" | tee -a "$OUT/versions.txt"; }

if [ "$dry" = 1 ]; then
    export OMP_NUM_THREADS=1
    parity_run=(env TRITON_INTERPRET=1 python3 -m pytest -q -p no:cacheprovider -p no:xdist
                tests/model/test_fused_kernel.py -k "runs_only_where_asked or float64 and alibi-encoder-dtype0")
    interpreted=(env TRITON_INTERPRET=1)
    layer_sizes=(--lengths 20 --tokens 40 --d-model 32 --heads 2 --repeats 1 --music-far 8)
    model_sizes=(--lengths 8 --tokens 16 --model-dim 32 --model-layers 1 --model-heads 2 --vocab 50 --repeats 1)
    train_sizes=(--train-steps 2 --train-report 1 --train-pairs 40 --train-batch 256 --model-dim 32
                 --model-layers 1 --model-heads 2 --train-methods "our shaw")
    one_rank=()
    rank_steps=2 rank_report=1 rank_dtype=fp32 rank_limits=(300 300 300)
    # a dry run checks that every step runs, not how long it takes: a loaded CPU gets its time
    # (budgets, seconds: layer, model, train, the ranks beside parity; then each timeout's margin)
    budgets=(600 600 600 600) margin=60
else
    step "setup"
    bash tools/gpu_check_install.sh >>"$OUT/versions.txt" 2>&1 || echo "setup failed: see above" >>"$OUT/versions.txt"
    parity_run=(env ONMT_POSENC_KERNEL_TEST_DEVICE=cuda python3 -m pytest -v -rfE -p no:cacheprovider -n 8
                tests/model/test_fused_kernel.py)
    interpreted=()
    layer_sizes=(--lengths 128 512 1024 --repeats 5)
    model_sizes=(--lengths 128 512 1024 --repeats 5)
    train_sizes=(--train-steps 16 --train-report 4)
    one_rank=(-world_size 1 -gpu_ranks 0)
    # one rank, two ranks (each method), stock: 2 x (20 + 28) + 14 = the last part's 110 s
    rank_steps=20 rank_report=5 rank_dtype=fp16 rank_limits=(20 28 14)
    budgets=(130 85 70 110) margin=15
fi
{ date -u; command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total \
      --format=csv,noheader
  python3 -c 'import torch, triton; print("torch", torch.__version__, "triton", triton.__version__)'
  git log -1 --format='commit %H %s' 2>/dev/null; } >>"$OUT/versions.txt" 2>&1

# the benchmarks one at a time (nothing else on the GPU), each within its budget (--budget)
step "layer (budget ${budgets[0]} s)"
timeout $(( budgets[0] + margin )) "${interpreted[@]}" python3 tools/benchmark_attention.py --parts layer \
    --budget "${budgets[0]}" "${layer_sizes[@]}" >"$OUT/layer.txt" 2>&1
step "model (budget ${budgets[1]} s)"
timeout $(( budgets[1] + margin )) "${interpreted[@]}" python3 tools/benchmark_attention.py --parts model \
    --budget "${budgets[1]}" "${model_sizes[@]}" >"$OUT/model.txt" 2>&1
step "train (budget ${budgets[2]} s)"
timeout $(( budgets[2] + margin )) python3 tools/benchmark_attention.py --parts train --budget "${budgets[2]}" \
    "${train_sizes[@]}" >"$OUT/train.txt" 2>&1

step "ranks and parity (${budgets[3]} s)"
timeout "${budgets[3]}" "${parity_run[@]}" >"$OUT/parity.txt" 2>&1 &
parity=$!

# KFTT's excerpt (tests/data/kftt): English -> Japanese characters, one document id a line
data=$(mktemp -d)
cp tests/data/kftt/kyoto-train.en "$data/train.en"
cp tests/data/kftt/kyoto-train.docid "$data/train.docid"
python3 -c 'import sys; [print(" ".join(line.strip().replace(" ", ""))) for line in sys.stdin]' \
    <tests/data/kftt/kyoto-train.ja >"$data/train.ja"
common="{src_vocab: $data/vocab.en, tgt_vocab: $data/vocab.ja, save_data: $data/samples, overwrite: true,
  encoder_type: transformer, decoder_type: transformer, layers: 2, heads: 4, hidden_size: 256,
  word_vec_size: 256, transformer_ff: 1024, dropout: [0.1], attention_dropout: [0.1],
  batch_type: tokens, batch_size: 2048, bucket_size: 2048, num_workers: 0, optim: adam,
  learning_rate: 0.001, train_steps: $rank_steps, report_every: $rank_report, valid_steps: 1000000,
  save_checkpoint_steps: 1000000, seed: 1, model_dtype: $rank_dtype}"
cat >"$data/shape.yaml" <<YAML
data: {kftt: {path_src: $data/train.en, path_tgt: $data/train.ja, path_docids: $data/train.docid,
              transforms: [concat_pairs]}}
concat_n: 10
concat_sep: "<sep>"
position_encoding: true
shape_max_shift: 10
save_model: $data/shape
YAML
cat >"$data/shaw.yaml" <<YAML
data: {kftt: {path_src: $data/train.en, path_tgt: $data/train.ja}}
position_encoding: false
max_relative_positions: 16
save_model: $data/shaw
YAML
{
  for method in shape shaw; do
    python3 - "$data/$method.yaml" "$common" <<'PY'
import sys, yaml
path, common = sys.argv[1], yaml.safe_load(sys.argv[2])
config = {**common, **yaml.safe_load(open(path))}
yaml.safe_dump(config, open(path, "w"))
PY
    onmt_build_vocab -config "$data/$method.yaml" -n_sample -1 2>&1 | grep -iE "error|Counters"
    echo "### $method, one rank, accum_count 2"
    timeout "${rank_limits[0]}" onmt_train -config "$data/$method.yaml" "${one_rank[@]}" -accum_count 2 2>&1 \
        | grep -E "Step|Error|error|onmt-posenc|SDPA"
    echo "### $method, two ranks on the one GPU (world_size 2, gpu_ranks 0 1, gloo)"
    timeout "${rank_limits[1]}" python3 tools/two_ranks_one_gpu.py -config "$data/$method.yaml" 2>&1 \
        | grep -E "Step|Error|error|rank|process|onmt-posenc|SDPA"
  done
  echo "### stock onmt_train, gpu_ranks 0 0 on one GPU"
  timeout "${rank_limits[2]}" onmt_train -config "$data/shaw.yaml" -world_size 2 -gpu_ranks 0 0 -gpu_backend gloo 2>&1 | tail -3
} >"$OUT/ranks.txt" 2>&1
wait "$parity"
rm -rf "$data"
step done
