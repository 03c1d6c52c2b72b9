#!/usr/bin/env bash
# scripts/torch_export.py, where a python3 with torch and torchvision is found (else the
# test is skipped, saying so): ResNet-18 exported from torchvision lists exactly as the
# shipped configs/resnet18.yaml (every name, kind, shape, parameter and FLOP count);
# the transformers (ViT-B/16, the BERT-base encoder) too; one model of each family that
# needs something of its own (MNASNet, ShuffleNet, RegNet, ConvNeXt, Swin, MaxViT, a
# UNet's blocks, a DiT block, ...) exports with torch's parameter total, passes bench
# check, and computes what torch's own forward computes (tests/export_torch_check.py on
# the reference forward tests/ref_dump writes, at batch 2); a module without a kind is
# refused with the list of what is missing and no file written; decoder LLMs export as
# bench imports their config.json.
# usage: test_export.sh BENCH SOURCE_DIR [most|few]   (few, the sanitizer build: the
# exported models' bench check on the cpu backend alone, without the chained forward,
# which under ASan would take the test past its timeout)
set -u
BENCH=$1
SRC=$2
HEAVY=(--backend all)
[ "${3:-most}" = few ] && HEAVY=(--backend cpu --no-forward)
PY=
for p in python3 /usr/bin/python3; do
  if command -v "$p" >/dev/null && "$p" -c 'import torch, torchvision' 2>/dev/null; then PY=$p; break; fi
done
if [ -z "$PY" ]; then
  echo "skip: no python3 with torch and torchvision (Debian: python3-torch python3-torchvision)"
  exit 77
fi
. "$SRC/tests/common.sh"

"$PY" "$SRC/scripts/torch_export.py" resnet18 -o "$T/r18.yaml" 2>"$T/r18.err" && ok || bad "export resnet18: $(cat "$T/r18.err")"
"$BENCH" list "$T/r18.yaml" --csv "$T/exported.csv" >/dev/null && "$BENCH" list "$SRC/configs/resnet18.yaml" --csv "$T/shipped.csv" >/dev/null &&
  diff "$T/exported.csv" "$T/shipped.csv" >"$T/diff" && ok || bad "exported resnet18 differs from configs/resnet18.yaml: $(head -5 "$T/diff")"

# the transformers: as shipped (bert_base from scripts/transformer_models.py)
same_as_shipped() { # name, then the exporter's arguments
  local name=$1; shift
  (cd "$SRC" && "$PY" scripts/torch_export.py "$@" -o "$T/$name.yaml") 2>"$T/$name.err" ||
    { bad "export $name: $(tail -3 "$T/$name.err")"; return; }
  "$BENCH" list "$T/$name.yaml" --csv "$T/$name.exported.csv" >/dev/null &&
    "$BENCH" list "$SRC/configs/$name.yaml" --csv "$T/$name.shipped.csv" >/dev/null &&
    diff "$T/$name.exported.csv" "$T/$name.shipped.csv" >"$T/diff" && ok ||
    bad "exported $name differs from configs/$name.yaml: $(head -5 "$T/diff")"
}
same_as_shipped vit_b_16 vit_b_16
same_as_shipped bert_base transformer_models:bert_base --input 128,768 --name bert_base

# RegNet's module names hold '-' (block1-0), Inception v3 pools functionally
# (F.avg_pool2d, F.max_pool2d): both export, list torch's parameter count, and RegNet
# passes bench check on both CPU backends
for m in regnet_y_400mf inception_v3; do
  want=$("$PY" -c "import torchvision.models as t; import sys
kw = dict(aux_logits=False, init_weights=False) if '$m' == 'inception_v3' else {}
print(sum(p.numel() for p in getattr(t, '$m')(weights=None, **kw).parameters()))")
  "$PY" "$SRC/scripts/torch_export.py" $m --input 3,299,299 -o "$T/$m.yaml" 2>"$T/$m.err" &&
    "$BENCH" list "$T/$m.yaml" | grep -q "^Totals: $want params" && ok ||
    bad "$m: exported and listed as $want params? $(tail -2 "$T/$m.err") $("$BENCH" list "$T/$m.yaml" 2>&1 | tail -2)"
done
# the functional pools with torchvision's arguments (F.avg_pool2d(x, kernel_size=3,
# stride=1, padding=1) in the Mixed blocks, F.max_pool2d(x, kernel_size=3, stride=2))
grep -q "name: block1-0" "$T/regnet_y_400mf.yaml" &&
  grep -q "kind: avgpool2d, name: avg_pool2d, input: /Mixed_5b.cat, kernel_size: 3, stride: 1, padding: 1}" "$T/inception_v3.yaml" &&
  grep -q "kind: maxpool2d, name: max_pool2d, input: /Mixed_5d.cat, kernel_size: 3, stride: 2}" "$T/inception_v3.yaml" && ok ||
  bad "regnet's names or inception's functional pools"
"$BENCH" check "$T/regnet_y_400mf.yaml" "${HEAVY[@]}" 2>&1 | grep -q " 0 failed" && ok || bad "bench check regnet_y_400mf"

# A model exported (torch_export.py's arguments before --) into $T/FILE.yaml: the lines
# after -- in it (fixed strings), torch's parameter total WANT listed, and bench check
# passing. usage: exported FILE WANT ARGS... -- LINES...
exported() {
  local file=$1 want=$2 args=() line
  shift 2
  while [ $# -gt 0 ] && [ "$1" != -- ]; do args+=("$1"); shift; done
  shift
  "$PY" "$SRC/scripts/torch_export.py" "${args[@]}" -o "$T/$file.yaml" 2>"$T/$file.err" ||
    { bad "$file: the export failed: $(tail -2 "$T/$file.err")"; return; }
  for line in "$@"; do
    grep -qF -- "$line" "$T/$file.yaml" || { bad "$file: no '$line' in the export"; return; }
  done
  "$BENCH" list "$T/$file.yaml" | grep -q "^Totals: $want params" ||
    { bad "$file: not $want params: $("$BENCH" list "$T/$file.yaml" 2>&1 | tail -2)"; return; }
  "$BENCH" check "$T/$file.yaml" "${HEAVY[@]}" 2>&1 | grep -q " 0 failed" && ok || bad "$file: bench check failed"
  # end to end: the plain-C reference forward of the export, at batch 2 (a moe layer routed
  # by its router's logits, as the model routes), against torch's own forward of the model
  # on the same input and weights
  mkdir -p "$T/$file.dump"
  "$REF_DUMP" "$T/$file.yaml" "$T/$file.dump" 1 2 0 router >"$T/$file.e2e" 2>&1 &&
    "$PY" -W ignore "$SRC/tests/export_torch_check.py" "$T/$file.dump" "${args[0]}" >>"$T/$file.e2e" 2>&1 && ok ||
    bad "$file: the export does not compute what torch does: $(tail -2 "$T/$file.e2e")"
}
REF_DUMP=$(dirname "$BENCH")/ref_dump
torch_params() { "$PY" -W ignore -c "import torchvision.models as t; print(sum(p.numel() for p in t.$1(weights=None).parameters()))"; }

# MNASNet's global pool is x.mean([2, 3]): the mean kind
exported mnasnet0_5 "$(torch_params mnasnet0_5)" mnasnet0_5 -- "{kind: mean, name: mean, dim: [2, 3]}"

# ShuffleNet v2: its channel_shuffle (view, transpose(1, 2), view back) and x.chunk(2,
# dim=1) become channel_shuffle and slice layers
exported shufflenet "$(torch_params shufflenet_v2_x0_5)" shufflenet_v2_x0_5 -- \
  "{kind: channel_shuffle, name: channel_shuffle, groups: 2}" "{kind: slice, name: 1, input: /stage2.0.channel_shuffle, start: 24}"

# x[:, a:b], torch.split with sizes and x.chunk along the last dim: slice layers with
# Python's ranges (42 parameters: the 1x1 convolution)
PYTHONPATH="$SRC/tests/data" exported slices 42 export_ops:slices --input 6,5,8 -- \
  "{kind: slice, name: getitem, start: 1, end: 4}" "{kind: slice, name: 1, input: /conv, start: 2}" \
  "{kind: slice, name: 0, input: /conv, dim: 3, end: 4}" "{kind: slice, name: getitem_2, input: /split.0, dim: 3, start: 2, end: 6}"

# torch.roll, and Swin V1 and V2 from torchvision's own classes, small: window_attention
# (ShiftedWindowAttention and V2, shifted or not, on maps padded to whole windows) and
# patch_merge (PatchMerging's _patch_merging_pad, an odd width padded)
module_params() { PYTHONPATH="$SRC/tests/data" "$PY" -W ignore -c "import export_ops; print(sum(p.numel() for p in export_ops.$1().parameters()))"; }
PYTHONPATH="$SRC/tests/data" exported roll "$(module_params roll)" export_ops:roll --input 3,8,6 -- \
  "{kind: roll, name: roll, shifts: [1, -2], dims: [2, 3]}"
PYTHONPATH="$SRC/tests/data" exported tiny_swin "$(module_params tiny_swin)" export_ops:tiny_swin --input 3,40,36 -- \
  "{kind: window_attention, name: attn, num_heads: 2, window_size: 4}" \
  "{kind: window_attention, name: attn, num_heads: 4, window_size: 4, shift_size: 2}" "{kind: patch_merge, name: patch_merge}"
PYTHONPATH="$SRC/tests/data" exported tiny_swin_v2 "$(module_params tiny_swin_v2)" export_ops:tiny_swin_v2 \
  --input 3,40,36 -- "{kind: window_attention, name: attn, num_heads: 2, window_size: 4, shift_size: 2, cosine: true}"

# a forward of two inputs: with one --input, one line that says what to give, no
# traceback, nothing written; with a shape for each, the second is a model_input layer
# (a UNet's timestep embedding: emb[:, :, None, None] a reshape view, added broadcast)
PYTHONPATH="$SRC/tests/data" "$PY" "$SRC/scripts/torch_export.py" export_ops:two_inputs --input 3,8,8 \
  -o "$T/two.yaml" 2>"$T/two.err"
rc=$?
[ $rc != 0 ] && [ ! -e "$T/two.yaml" ] && [ "$(wc -l <"$T/two.err")" = 1 ] &&
  grep -q "forward takes 2 input(s) (x, temb) and 1 --input shape(s) were given: give one per input" "$T/two.err" && ok ||
  bad "two inputs: exit $rc, $(cat "$T/two.err")"
PYTHONPATH="$SRC/tests/data" exported two_inputs "$(module_params two_inputs)" export_ops:two_inputs --input 3,8,8 \
  --input 5 -- "{kind: model_input, name: temb, shape: [5]}" "{kind: reshape, name: getitem, shape: [3, 1, 1]}" \
  "{kind: add, name: add, inputs: [/conv, /getitem]}"

# nn.GroupNorm (a UNet ResBlock's): the groupnorm kind with torch's eps
PYTHONPATH="$SRC/tests/data" exported resblock 74112 unet_block:resblock --input 64,16,16 -- \
  "{kind: groupnorm, name: norm1, num_groups: 32}" "{kind: groupnorm, name: norm2, num_groups: 32, eps: 1e-06}"

# Stable Diffusion's UNet blocks (scripts/unet_blocks.py) at test sizes, one --input per
# argument: a ResBlock (the timestep embedding a model_input, its projection viewed
# [N, C, 1, 1] and added), a down block (spatial transformers: self- and cross-attention
# from to_q/to_k/to_v/to_out as attention layers, GEGLU as slices) and an up block (skips
# concatenated); torch's totals, bench check
unet_params() { PYTHONPATH="$SRC/scripts" "$PY" -W ignore -c "import unet_blocks; print(sum(p.numel() for p in unet_blocks.$1().parameters()))"; }
PYTHONPATH="$SRC/scripts" exported small_resblock "$(unet_params small_resblock)" unet_blocks:small_resblock \
  --input 16,8,8 --input 32 -- "{kind: model_input, name: emb, shape: [32]}" \
  "{kind: reshape, name: getitem, shape: [16, 1, 1]}" "{kind: add, name: add, inputs: [/in_layers.2, /getitem]}"
PYTHONPATH="$SRC/scripts" exported small_down_block "$(unet_params small_down_block)" unet_blocks:small_down_block \
  --input 16,8,8 --input 32 --input 5,12 -- "{kind: model_input, name: context, input: input, shape: [5, 12]}" \
  "{kind: attention, name: attn, inputs: [/attentions.0.transformer_blocks.0.attn2.to_q, /attentions.0.transformer_blocks.0.attn2.to_k, /attentions.0.transformer_blocks.0.attn2.to_v], num_heads: 2, head_dim: 8, causal: false}"
PYTHONPATH="$SRC/scripts" exported small_up_block "$(unet_params small_up_block)" unet_blocks:small_up_block \
  --input 24,4,4 --input 32 --input 5,12 --input 16,4,4 --input 16,4,4 --input 8,4,4 -- \
  "{kind: concat, name: cat, inputs: [input, /skip0]}"

# a DiT block: adaptive layer norm as the ops DiT's modulate runs (1 + scale a
# scale_shift, unsqueeze a reshape, broadcasting mul and add), timm's packed attention
# (qkv, its thirds as slices, attention, proj); and arithmetic with numbers
PYTHONPATH="$SRC/tests/data" exported dit_block "$(module_params dit_block)" export_ops:dit_block --input 16,32 \
  --input 32 -- "{kind: scale_shift, name: add, shift: 1.0}" "{kind: slice, name: k, input: /attn.qkv, dim: 2, start: 32, end: 64}" \
  "{kind: attention, name: attn, inputs: [/attn.q, /attn.k, /attn.v], num_heads: 4, head_dim: 8, causal: false}"
PYTHONPATH="$SRC/tests/data" exported scalars "$(module_params scalars)" export_ops:scalars --input 3,4,4 -- \
  "{kind: scale_shift, name: sub, scale: -1.0, shift: 1.0}" "{kind: scale_shift, name: mul, scale: 0.5}" \
  "{kind: scale_shift, name: div, input: /conv, scale: 0.125}" "{kind: scale_shift, name: sub_1, shift: -2.0}"

# ConvNeXt: torchvision's Permute modules, LayerNorm2d's own forward (permute,
# F.layer_norm on the last dim, permute back) and the layer scale (a [C, 1, 1] parameter
# times the block)
exported convnext_tiny "$(torch_params convnext_tiny)" convnext_tiny -- "{kind: permute, name: 1, dims: [0, 2, 3, 1]}" \
  "{kind: layernorm, name: layer_norm, eps: 1e-06}" "{kind: layer_scale, name: layer_scale}"

# torchvision's segmentation models by name (their output is the dict's "out"): torch's
# parameter count for all three, bench check for LR-ASPP
for m in lraspp_mobilenet_v3_large deeplabv3_mobilenet_v3_large fcn_resnet50; do
  want=$("$PY" -c "import torchvision.models.segmentation as s
print(sum(p.numel() for p in s.$m(weights=None, weights_backbone=None, aux_loss=False).parameters()))")
  "$PY" "$SRC/scripts/torch_export.py" $m -o "$T/$m.yaml" 2>"$T/$m.err" &&
    "$BENCH" list "$T/$m.yaml" | grep -q "^Totals: $want params" && ok ||
    bad "$m: exported and listed as $want params? $(tail -2 "$T/$m.err") $("$BENCH" list "$T/$m.yaml" 2>&1 | tail -2)"
done
"$BENCH" check "$T/lraspp_mobilenet_v3_large.yaml" "${HEAVY[@]}" 2>&1 | grep -q " 0 failed" && ok ||
  bad "bench check lraspp_mobilenet_v3_large"

# MaxViT from torchvision's own classes, small: window_partition, the grid's transpose,
# window_attention on windows given (scale 1/sqrt(C)) and window_merge
PYTHONPATH="$SRC/tests/data" exported tiny_maxvit "$(module_params tiny_maxvit)" export_ops:tiny_maxvit \
  --input 3,64,64 -- "{kind: window_partition, name: partition_op, window_size: 4}" \
  "{kind: window_attention, name: 1, num_heads: 2, window_size: 4, partitioned: true, scale: 0.25}" \
  "{kind: transpose, name: partition_swap, dim0: 1, dim1: 2}" "{kind: window_merge, name: departition_op, window_size: 4, partitions: 4}"

# a module layerbench has no kind for (nn.PixelShuffle): refused with the list, nothing
# written, and the problem said once (not again for the layers after it)
PYTHONPATH="$SRC/tests/data" "$PY" "$SRC/scripts/torch_export.py" export_ops:unsupported --input 3,8,8 \
  -o "$T/un.yaml" 2>"$T/un.err"
rc=$?
[ $rc = 1 ] && [ ! -e "$T/un.yaml" ] && grep -q "layerbench cannot express 1 part(s) of export_ops:unsupported" "$T/un.err" &&
  grep -q "^  shuffle: module PixelShuffle" "$T/un.err" && [ "$(wc -l <"$T/un.err")" = 2 ] && ok ||
  bad "unsupported module: exit $rc, $(head -5 "$T/un.err")"

# decoder LLMs: a Llama (GQA, head_dim 24 of a 64-wide model) and a Qwen2 (q/k/v biases,
# tied embeddings) written as transformers writes them (scripts/hf_decoder.py) export row
# for row as bench imports their config.json for the same prefill; and the export passes
# bench check
same_as_config() { # config folder, callable, tokens, batch
  local cfg=$1 fn=$2 tok=$3 batch=$4
  (cd "$SRC" && "$PY" scripts/torch_export.py "hf_decoder:$fn" --input-ids "$tok" --batch "$batch" -o "$T/$fn.yaml") \
    2>"$T/$fn.err" || { bad "export $fn: $(tail -3 "$T/$fn.err")"; return; }
  grep -q "# token ids" "$T/$fn.yaml" &&
    "$BENCH" list "$T/$fn.yaml" --csv "$T/$fn.exported.csv" >/dev/null &&
    "$BENCH" list "$SRC/tests/data/hf/$cfg" --phase prefill --tokens "$tok" --batch "$batch" --csv "$T/$fn.hf.csv" >/dev/null &&
    [ "$(wc -l <"$T/$fn.hf.csv")" -gt 30 ] &&
    diff <(cut -d, -f2- "$T/$fn.exported.csv") <(cut -d, -f2- "$T/$fn.hf.csv") >"$T/diff" && ok ||
    bad "exported $fn differs from the import of tests/data/hf/$cfg: $(head -5 "$T/diff")"
}
same_as_config tiny-llama tiny_llama 5 1
same_as_config tiny-qwen2 tiny_qwen2 7 2
# Qwen3-MoE as transformers writes it (its sparse block a loop over the experts, torch.where
# and index_add_; a dense layer in mlp_only_layers): the router and a moe layer fitted to
# the block's output, row for row as its config.json imports, and end to end against torch
same_as_config tiny-qwen3_moe tiny_qwen3_moe 5 1
mkdir -p "$T/q3moe.dump" && "$REF_DUMP" "$T/tiny_qwen3_moe.yaml" "$T/q3moe.dump" 1 2 0 router >/dev/null 2>&1 &&
  (cd "$SRC" && "$PY" -W ignore tests/export_torch_check.py "$T/q3moe.dump" hf_decoder:tiny_qwen3_moe) >"$T/q3moe.e2e" 2>&1 &&
  ok || bad "tiny_qwen3_moe end to end: $(tail -2 "$T/q3moe.e2e")"
# GPT-2 (Hugging Face's Conv1D, learned positions wpe(arange(T)), attention found by its
# softmax, its heads, causal mask and per-layer scale fitted to its output) exports row for
# row as bench imports its config.json
same_as_config tiny-gpt2 tiny_gpt2 5 2
# q and k norms inside the attention module: Qwen3's per head (between two reshapes) exports
# row for row as its config.json imports; OLMo 2's over the whole projections computes what
# torch computes end to end
same_as_config tiny-qwen3 tiny_qwen3 5 2
(cd "$SRC" && "$PY" scripts/torch_export.py hf_decoder:tiny_olmo2 --input-ids 5 -o "$T/olmo2.yaml") 2>"$T/olmo2.err" &&
  mkdir -p "$T/olmo2.dump" && "$REF_DUMP" "$T/olmo2.yaml" "$T/olmo2.dump" 1 2 >/dev/null 2>&1 &&
  "$PY" -W ignore "$SRC/tests/export_torch_check.py" "$T/olmo2.dump" hf_decoder:tiny_olmo2 >"$T/olmo2.e2e" 2>&1 && ok ||
  bad "tiny_olmo2's q/k norms: $(tail -2 "$T/olmo2.err" "$T/olmo2.e2e" 2>/dev/null)"
# nanoGPT's model.py (fused c_attn split by n_embd, n_head, the masked softmax, attn and
# resid dropouts, tied embeddings): exported by what it computes, torch's total, bench
# check, and torch's forward end to end; without the mask, causal: false; with its scores
# soft-capped (a cap of 30 that small scores never reach), refused, nothing written
PYTHONPATH="$SRC/tests/data" exported nanogpt "$(module_params nanogpt)" export_ops:nanogpt --input-ids 6 -- \
  "{kind: pos_embedding, name: wpe, num_positions: 16}" \
  "{kind: attention, name: attn, inputs: [/transformer.h.1.attn.q, /transformer.h.1.attn.k, /transformer.h.1.attn.v], num_heads: 4, head_dim: 8, scale: 0.3535533905932738}"
PYTHONPATH="$SRC/tests/data" exported nanogpt_encoder "$(module_params nanogpt_encoder)" export_ops:nanogpt_encoder --input-ids 6 -- \
  "num_heads: 2, head_dim: 16, scale: 0.25, causal: false}"
(cd "$SRC" && PYTHONPATH=tests/data "$PY" scripts/torch_export.py export_ops:nanogpt_softcap --input-ids 6 -o "$T/softcap_nano.yaml") \
  2>"$T/softcap_nano.err"
rc=$?
[ $rc = 1 ] && [ ! -e "$T/softcap_nano.yaml" ] && grep -q "transformer.h.0.attn: attention module NanoAttention computes something other" "$T/softcap_nano.err" &&
  ok || bad "nanogpt_softcap: exit $rc, $(tail -2 "$T/softcap_nano.err")"
# a Llama written with its own names (its RMSNorm's weight w, its heads h and hd): the norm
# found by its output, the attention's heads, GQA, rope and scale fitted to its output
PYTHONPATH="$SRC/tests/data" exported own_llama "$(module_params own_llama)" export_ops:own_llama --input-ids 6 -- \
  "{kind: rmsnorm, name: norm1, eps: 1e-05}" "{kind: rope, name: rotary_k, input: /attn.k_proj, num_heads: 2, head_dim: 8, rope_theta: 500.0}" \
  "num_heads: 4, head_dim: 8, scale: 0.3535533905932738, num_key_value_heads: 2}"
# Meta's reference model.py for Llama (wq..wo, n_heads and n_kv_heads, repeat_kv, freqs_cis
# from torch.polar turning pairs by view_as_complex, the mask added to the scores): rope
# with interleaved pairs fitted to its output, its theta read from freqs_cis; every layer of
# the export against torch too (the rope kind's interleaved pairs as view_as_complex)
PYTHONPATH="$SRC/tests/data" exported meta_llama "$(module_params meta_llama)" export_ops:meta_llama --input-ids 6 -- \
  "{kind: rope, name: rotary_q, input: /layers.0.attention.wq, num_heads: 6, head_dim: 8, rope_theta: 500000.0, interleaved: true}" \
  "num_heads: 6, head_dim: 8, scale: 0.3535533905932738, num_key_value_heads: 2}"
"$PY" -W ignore "$SRC/tests/llm_torch_check.py" "$T/meta_llama.dump" >"$T/meta_llama.layers" 2>&1 && ok ||
  bad "meta_llama's layers against torch: $(tail -2 "$T/meta_llama.layers")"
# nn.MultiheadAttention with nn.Transformer's causal mask: its in_proj, thirds, a causal
# attention and out_proj, computing what torch computes
PYTHONPATH="$SRC/tests/data" exported causal_mha "$(module_params causal_mha)" export_ops:causal_mha --input 7,24 -- \
  "{kind: linear, name: in_proj, out_features: 72}" "{kind: attention, name: attn, inputs: [/attn.q, /attn.k, /attn.v], num_heads: 3, head_dim: 8}"
# nn.TransformerDecoderLayer (batch first): its causal self-attention as above, and its
# cross-attention to the encoder's memory (a second input) as in_proj's query rows on the
# tokens, its key and value rows on the memory, an attention without a mask and out_proj
PYTHONPATH="$SRC/tests/data" exported cross_decoder "$(module_params cross_decoder)" export_ops:cross_decoder \
  --input 7,24 --input 5,24 -- "{kind: linear, name: in_proj_kv, input: /memory, out_features: 48}" \
  "{kind: attention, name: attn, inputs: [/layer.multihead_attn.in_proj_q, /layer.multihead_attn.k, /layer.multihead_attn.v], num_heads: 4, head_dim: 6, causal: false}"
# Mixtral's sparse MoE block as a loop over its experts (softmax, topk, one_hot, where,
# index_add_ into zeros): its router a linear, its experts a moe layer whose top_k and
# normalisation are fitted to the module's output (the top 3 of 7 at the softmax's
# probabilities: normalize false); with a shared expert beside them, refused by name
PYTHONPATH="$SRC/tests/data" exported mixtral_moe "$(module_params mixtral_moe)" export_ops:mixtral_moe --input-ids 6 -- \
  "{kind: linear, name: gate, out_features: 5, bias: false}" \
  "{kind: moe, name: experts, inputs: [/norm, /block_sparse_moe.gate], num_experts: 5, top_k: 2, ffn_dim: 24}"
PYTHONPATH="$SRC/tests/data" exported moe_top3_softmax "$(module_params moe_top3_softmax)" export_ops:moe_top3_softmax \
  --input-ids 6 -- "num_experts: 7, top_k: 3, ffn_dim: 24, normalize: false}"
(cd "$SRC" && PYTHONPATH=tests/data "$PY" scripts/torch_export.py export_ops:moe_shared --input-ids 6 -o "$T/moe_shared.yaml") \
  2>"$T/moe_shared.err"
rc=$?
[ $rc = 1 ] && [ ! -e "$T/moe_shared.yaml" ] && grep -q "^  block_sparse_moe: module MixtralMoE (a router and 5 experts): holds shared_expert" "$T/moe_shared.err" &&
  ok || bad "moe_shared: exit $rc, $(cat "$T/moe_shared.err")"
# a router's topk without experts to follow: refused by name
(cd "$SRC" && PYTHONPATH=tests/data "$PY" scripts/torch_export.py export_ops:router_topk --input 5,16 -o "$T/topk.yaml") \
  2>"$T/topk.err"
rc=$?
[ $rc = 1 ] && [ ! -e "$T/topk.yaml" ] && grep -q "^  (the model): operation topk (no layer kind computes it" "$T/topk.err" &&
  [ "$(wc -l <"$T/topk.err")" = 2 ] && ok || bad "router_topk: exit $rc, $(cat "$T/topk.err")"
grep -q "tied_weights: true" "$T/tiny_qwen2.yaml" && ! grep -q "tied_weights" "$T/tiny_llama.yaml" && ok ||
  bad "lm_head's tied_weights as the models tie them"
"$BENCH" check "$T/tiny_llama.yaml" 2>&1 | grep -q "36 passed, 0 failed" && ok || bad "bench check of the exported llama"
# attention that computes more than rope + attention (Gemma 2's soft-cap, even at a cap
# of 50 that random weights' scores never reach; another query scale) is refused, with
# nothing written; the same module computing Llama's attention exports
for v in softcap50 softcap1 query_scale; do
  (cd "$SRC" && PYTHONPATH=tests "$PY" scripts/torch_export.py "attention_variants:$v" --input-ids 5 -o "$T/$v.yaml") \
    2>"$T/$v.err"
  rc=$?
  [ $rc = 1 ] && [ ! -e "$T/$v.yaml" ] && grep -q "computes something other than the rope and attention layers" "$T/$v.err" &&
    ok || bad "attention_variants:$v: exit $rc, $(tail -2 "$T/$v.err")"
done
(cd "$SRC" && PYTHONPATH=tests "$PY" scripts/torch_export.py attention_variants:plain --input-ids 5 -o "$T/plain.yaml") \
  2>"$T/plain.err" && cmp -s <(grep -v "^#" "$T/plain.yaml" | sed 's/^name: .*//') <(grep -v "^#" "$T/tiny_llama.yaml" | sed 's/^name: .*//') &&
  ok || bad "attention_variants:plain: $(tail -2 "$T/plain.err")"
# a model of token ids run without --input-ids, and --input-ids on a model without an
# embedding: one line each, no traceback
(cd "$SRC" && "$PY" scripts/torch_export.py hf_decoder:tiny_llama -o "$T/noids.yaml") 2>"$T/noids.err"
rc=$?
[ $rc = 1 ] && [ ! -e "$T/noids.yaml" ] && [ "$(wc -l <"$T/noids.err")" = 1 ] && grep -q "give --input-ids T" "$T/noids.err" &&
  ! grep -q Traceback "$T/noids.err" && ok || bad "token ids without --input-ids: exit $rc, $(head -3 "$T/noids.err")"
"$PY" "$SRC/scripts/torch_export.py" resnet18 --input-ids 4 2>"$T/ids.err" >/dev/null
rc=$?
[ $rc = 1 ] && [ "$(wc -l <"$T/ids.err")" = 1 ] && grep -q "no nn.Embedding" "$T/ids.err" && ok ||
  bad "--input-ids on resnet18: exit $rc, $(head -3 "$T/ids.err")"

# scripts/torch_compare.py on the CPU: every timed layer of smoke again in PyTorch, beside
# the rows of each backend run here (one column set per backend), and the forward
backends=cpu
"$BENCH" check "$SRC/configs/smoke.yaml" --backend onednn >/dev/null 2>&1 && backends=cpu,onednn
"$BENCH" list "$SRC/configs/smoke.yaml" --csv "$T/sl.csv" >/dev/null &&
  "$BENCH" sweep "$SRC/configs/smoke.yaml" --batch 2,3 --backend "${backends/cpu,onednn/all}" "${QUICK[@]}" \
    --csv "$T/sr.csv" >/dev/null 2>&1 &&
  "$PY" "$SRC/scripts/torch_compare.py" --layers "$T/sl.csv" --bench "$T/sr.csv" --backend "$backends" --mode any \
    --device cpu --threads 1 --out "$T/sc.csv" 2>"$T/sc.err" &&
  "$PY" - "$T/sc.csv" "$backends" <<'PY' && ok || bad "torch_compare on the CPU ($backends): $(tail -3 "$T/sc.err")"
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
prefixes = ["layerbench"] if "," not in sys.argv[2] else sys.argv[2].split(",")
assert len(rows) == 17 and rows[-1]["kind"] == "model", len(rows)  # 16 timed layers (flatten, dropout: views)
for r in rows:
    assert r["batch"] == "2" and float(r["torch_us"]) > 0, r  # the list's batch, not the sweep's last
    assert r["torch_engine"] == "", r  # cuDNN's engines: on a GPU only
    for p in prefixes:
        assert float(r[p + "_us"]) > 0 and r[p + "_mode"], (p, r)
        # what ran, from the run's kernels column: the layers', not the forward's
        assert bool(r[p + "_kernels"]) == (r["kind"] != "model"), (p, r)
PY
# scripts/torch_profile_compare.py: smoke's convolutions and linear layers matched to
# torch.profiler's aten::conv2d and aten::linear calls by shape, every one of them (exit 0),
# each group with torch's figure and our in-model and alone ones for each backend
"$PY" "$SRC/scripts/torch_profile_compare.py" --layers "$T/sl.csv" --bench "$T/sr.csv" --threads 1 --iters 3 \
  --backend "$backends" --out "$T/sp.md" --csv "$T/sp.csv" 2>"$T/sp.err" &&
  "$PY" - "$T/sp.csv" "$T/sl.csv" "$backends" <<'PY' && ok || bad "torch_profile_compare: $(tail -n 3 "$T/sp.err" "$T/sp.md")"
import csv, sys
rows, layers = list(csv.DictReader(open(sys.argv[1]))), list(csv.DictReader(open(sys.argv[2])))
want = sum(1 for r in layers if r["kind"] in ("conv2d", "linear", "multihead_attention"))
assert want >= 3 and sum(int(r["our layers"]) for r in rows) == want, (want, rows)
for r in rows:
    assert float(r["torch us per call"]) > 0 and float(r["torch calls per forward"]) == int(r["our layers"]), r
    for b in sys.argv[3].split(","):
        inm, alone = float(r[f"{b} in-model us"]), float(r[f"{b} alone us"])
        # the ratio is of the unrounded figures, printed to 3 decimals as they are: within that rounding
        ratio = inm / float(r["torch us per call"])
        assert inm > 0 and alone > 0 and abs(float(r[f"{b} in-model / torch"]) - ratio) <= 0.0006 + 0.02 * ratio, r
PY

# --dtype bf16: PyTorch in bf16 beside layerbench's bf16 rows (not its fp32 ones)
"$BENCH" run "$SRC/configs/smoke.yaml" --dtype fp32,bf16 "${QUICK[@]}" --csv "$T/sb.csv" >/dev/null 2>&1 &&
  "$PY" "$SRC/scripts/torch_compare.py" --layers "$T/sl.csv" --bench "$T/sb.csv" --backend cpu --mode any \
    --device cpu --threads 1 --dtype bf16 --out "$T/sbc.csv" 2>"$T/sbc.err" &&
  "$PY" - "$T/sbc.csv" "$T/sb.csv" <<'PY' && ok || bad "torch_compare --dtype bf16: $(tail -3 "$T/sbc.err")"
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
ours = {(r["layer_index"], r["mode"]): r for r in csv.DictReader(open(sys.argv[2])) if r["dtype"] == "bf16"}
assert len(rows) == 17, len(rows)
for r in rows[:-1]:
    assert r["dtype"] == "bf16" and float(r["torch_us"]) > 0, r
    # the same median, as torch_compare rounds it (3 decimals)
    assert abs(float(ours[(r["layer_index"], r["layerbench_mode"])]["median_us"]) - float(r["layerbench_us"])) <= 6e-4, r
assert "bf16" in rows[0]["layerbench_impl"].lower(), rows[0]  # the stem on the bf16 GEMM or its fp32 copies
PY

# torch_profile_compare --pass train --dtype bf16: torch's bf16 training step (the modules
# cast to bfloat16) beside our bf16 step, each convolution's backward in torch's
# profile matched to our two halves inside the step, by shape
printf 'name: tb\ninput: [3, 16, 16]\nbatch: 2\nlayers:\n  - {kind: conv2d, name: c1, out_channels: 8, kernel_size: 3, padding: 1}\n  - {kind: batchnorm2d, name: bn}\n  - {kind: relu, name: r}\n  - {kind: conv2d, name: c2, out_channels: 4, kernel_size: 1, bias: false}\n  - {kind: adaptive_avgpool2d, name: gap, output_size: [1, 1]}\n  - {kind: flatten, name: f}\n  - {kind: linear, name: fc, out_features: 10}\n' >"$T/tb.yaml"
"$BENCH" list "$T/tb.yaml" --csv "$T/tbl.csv" >/dev/null 2>&1 &&
  "$BENCH" run "$T/tb.yaml" --pass train --dtype fp32,bf16 "${QUICK[@]}" --csv "$T/tbr.csv" >/dev/null 2>&1 &&
  "$PY" "$SRC/scripts/torch_profile_compare.py" --layers "$T/tbl.csv" --bench "$T/tbr.csv" --threads 1 --iters 2 \
    --pass train --dtype bf16 --backend cpu --csv "$T/tbp.csv" --out "$T/tbp.md" 2>"$T/tbp.err" &&
  "$PY" - "$T/tbp.csv" "$T/tbr.csv" <<'PY' && ok || bad "torch_profile_compare --pass train --dtype bf16: $(tail -3 "$T/tbp.err")"
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
ours = [r for r in csv.DictReader(open(sys.argv[2])) if r["mode"] == "inmodel" and r["kind"] == "conv2d" and
        r["part"].startswith("backward")]
halves = {}
for r in ours:
    halves.setdefault(r["dtype"], {}).setdefault(r["layer_index"], 0.0)
    halves[r["dtype"]][r["layer_index"]] += float(r["median_us"])
assert len(rows) == 2 and len(halves["bf16"]) == 2, (rows, halves)
for r in rows:  # our figure is the bf16 halves' sum, not the fp32 one
    assert float(r["torch us per call"]) > 0 and r["our layers"] == "1", r
    assert any(abs(float(r["cpu in-model us"]) - v) <= 6e-4 + 1e-3 * v for v in halves["bf16"].values()), (r, halves)
PY
grep -q "training step" "$T/tbp.md" && ok || bad "torch_profile_compare --pass train: no step row: $(tail -3 "$T/tbp.md")"

echo "test_export: $pass passed, $fail failed"
[ $fail = 0 ]
