#!/usr/bin/env bash
# The decoder kinds (embedding, rmsnorm, rope, attention) and the kinds a Llama layer
# shares with other models, against PyTorch written as Hugging Face's Llama code computes
# them (tests/llm_torch_check.py), where a python3 with torch is found (else skipped,
# saying so): tests/ref_dump writes our plain-C reference forward of a tiny two-layer
# decoder, the check recomputes every layer in torch from the same input and weights.
# Three phases: prefill (7 tokens, no cache), decode (one token after 5 cached, llama3
# rope scaling) and a chunk (4 tokens after 5 cached, sliding window 6, then 4: a cache
# held shorter than the 5 cached, linear scaling);
# then a two-layer Mixtral from its config.json (the mixture-of-experts block as
# MixtralSparseMoeBlock computes it, 128 tokens) and the moe kind's three routings; then
# tiny config.json files end to end against scripts/hf_decoder.py: Llama, Qwen2, Qwen3,
# Qwen2-MoE (a shared expert), Qwen3-MoE and OLMoE (routed by the router's top-k, renormalised
# or not), SmolLM3 (a layer without rope), OLMo 2,
# Phi-3 (its window shorter than the tokens; and Phi-4-mini's partial rope with longrope's
# long and short factors), Qwen3 with yarn rope scaling, GPT-NeoX (parallel and serial residual,
# partial and full rope), Gemma 1 to 3 (soft-capping, windows, local rope) and GPT-2
# (Conv1D, learned positions, scores scaled by layer) and gpt-oss (attention sinks, a window
# shorter than the tokens, yarn, a router with a bias, experts with biases and the clamped
# SwiGLU, its limit low enough to clamp) and DeepSeek-V2 (multi-head latent attention with
# yarn's mscale, shared experts, a dense first layer; a low-rank query, biases and
# group-limited routing; and the latent cache, 3 tokens after 5 cached) and DeepSeek-V3 (its
# sigmoid router with a correction bias, groups ranked by their best two); then every
# backward reference against torch.autograd (tests/grad_torch_check.py).
# usage: test_llm_torch.sh REF_DUMP SOURCE_DIR
set -u
DUMP=$1
SRC=$2
PY=
for p in python3 /usr/bin/python3; do
  if command -v "$p" >/dev/null && "$p" -c 'import torch, numpy' 2>/dev/null; then PY=$p; break; fi
done
if [ -z "$PY" ]; then
  echo "skip: no python3 with torch and numpy (Debian: python3-torch)"
  exit 77
fi
. "$SRC/tests/common.sh"
for phase in llama_tiny_prefill.yaml llama_tiny_decode.yaml llama_tiny_chunk.yaml hf/tiny-mixtral moe_routing.yaml \
    vision_torch.yaml swin_torch.yaml unet_torch.yaml; do
  d=$T/${phase//\//_}
  mkdir -p "$d"
  "$DUMP" "$SRC/tests/data/$phase" "$d" 1 2 >"$d.out" 2>&1 &&
    "$PY" "$SRC/tests/llm_torch_check.py" "$d" 1e-5 >>"$d.out" 2>&1 && ok ||
    bad "$phase against torch: $(tail -5 "$d.out")"
  echo "$phase: $(tail -1 "$d.out")"
done
# config.json decoders end to end: the plain-C reference forward of what bench builds from
# the file (7 tokens, batch 2) against scripts/hf_decoder.py's model of the same file run
# by torch on the same token ids and weights (tests/export_torch_check.py): what the
# family description builds is what the architecture computes, q/k norms included
for m in llama qwen2 qwen3 qwen3-yarn qwen2_moe qwen3_moe olmoe smollm3 olmo2 phi3 phi3-longrope gpt_neox gpt_neox-serial gemma gemma2 gemma3 gpt2 gpt_oss \
    deepseek_v2 deepseek_v2-lora deepseek_v3; do
  d=$T/hf_$m
  mkdir -p "$d"
  "$DUMP" "$SRC/tests/data/hf/tiny-$m" "$d" 1 2 7 router >"$d.out" 2>&1 &&
    "$PY" -W ignore "$SRC/tests/export_torch_check.py" "$d" "hf_decoder:tiny_${m//-/_}" 1e-5 >>"$d.out" 2>&1 && ok ||
    bad "tiny-$m end to end against torch: $(tail -5 "$d.out")"
  echo "tiny-$m: $(tail -1 "$d.out")"
done
# longrope's short factors: 3 tokens, within the tiny Phi-3's original 4 positions (7 take the long ones)
d=$T/hf_phi3-longrope-short
mkdir -p "$d"
"$DUMP" "$SRC/tests/data/hf/tiny-phi3-longrope" "$d" 1 2 3 >"$d.out" 2>&1 &&
  "$PY" -W ignore "$SRC/tests/export_torch_check.py" "$d" hf_decoder:tiny_phi3_longrope 1e-5 >>"$d.out" 2>&1 && ok ||
  bad "tiny-phi3-longrope at 3 tokens against torch: $(tail -5 "$d.out")"
echo "tiny-phi3-longrope (3 tokens): $(tail -1 "$d.out")"
# DeepSeek-V2's latent attention with a cache: 3 tokens after 5 cached, layer by layer (the
# mla layer from its cache of latents and rope parts, expanded in torch)
d=$T/hf_deepseek_v2-cache
mkdir -p "$d"
"$DUMP" "$SRC/tests/data/hf/tiny-deepseek_v2-lora" "$d" 1 2 3 uniform 5 >"$d.out" 2>&1 &&
  "$PY" "$SRC/tests/llm_torch_check.py" "$d" 1e-5 >>"$d.out" 2>&1 && ok ||
  bad "tiny-deepseek_v2-lora, 3 tokens after 5 cached, against torch: $(tail -5 "$d.out")"
echo "tiny-deepseek_v2-lora (3 after 5 cached): $(tail -1 "$d.out")"
# every backward reference against torch.autograd, layer by layer (tests/grad_torch_check.py):
# the image and element-wise kinds in their forms (batch norm in training mode), the token
# kinds (multihead_attention with and without biases), then the
# decoder kinds of the tiny Llama (prefill, and a chunk after a cache under a sliding window: the
# cache's gradients too); a kind without a backward reference yet is named
for cfg in grad_torch.yaml grad_tokens.yaml llama_tiny_prefill.yaml llama_tiny_chunk.yaml; do
  d=$T/grad_${cfg%.yaml}
  mkdir -p "$d"
  "$DUMP" --grads "$SRC/tests/data/$cfg" "$d" 1 2 >"$d.out" 2>&1 &&
    "$PY" "$SRC/tests/grad_torch_check.py" "$d" 1e-5 >>"$d.out" 2>&1 && ok ||
    bad "$cfg's gradients against torch.autograd: $(tail -5 "$d.out")"
  echo "$cfg gradients: $(tail -1 "$d.out")"
done
echo "test_llm_torch: $pass passed, $fail failed"
[ $fail = 0 ]
