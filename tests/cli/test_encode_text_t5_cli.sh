#!/usr/bin/env bash
# `vinf encode-text` on the Wan family (T5 SentencePiece tokenizer + UMT5 encoder): the fixture's
# five prompts against transformers' ids, mask and last_hidden_state, the pipeline's prompt
# embeddings (prompt_clean, zero past each prompt's length) against WanPipeline's own, and exit
# status 2 for a tokenizer without spiece.model, a family mismatch and a bad --max-length.
# usage: test_encode_text_t5_cli.sh VINF TEST_TOOL WAN_TINY
set -u
vinf=$1 tool=$2 wan=$3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
. "$(dirname "$0")/expect.sh"

expect 0 "--max-length [1, 16384]" -- "$vinf" encode-text --help
expect 0 "--clean" -- "$vinf" encode-text --help
expect 0 "wrote the pipeline" -- "$vinf" make-model --preset tiny --layout pipeline --out "$work/pipe"

bad() {  # bad TEXT options...: status 2, the text in the message, nothing written
  local text=$1
  shift
  expect 2 "$text" -- "$vinf" encode-text "$@" --out "$work/refused.safetensors"
  if [ -e "$work/refused.safetensors" ]; then echo "FAIL: a refused run wrote a file"; fails=$((fails + 1)); rm -f "$work/refused.safetensors"; fi
}
bad "option '--max-length' must be in [1, 16384], got '0'" --model "$work/pipe" --prompt x --max-length 0
bad "option '--max-length' must be in [1, 16384], got '-3'" --model "$work/pipe" --prompt x --max-length=-3
bad "--max-length 30 differs from the CLIP tokenizer's 77 tokens" --model "$work/pipe" --prompt x --max-length 30


# The fixture's prompts, as prompts.json holds them (no prompt_clean).
p0="A beagle wearing diving goggles swimming in the ocean, coral reefs in the background."
p2="Ein Hund läuft über eine Wiese — 一只狗在草地上奔跑 🐕 at 4K, 60fps!"
p3=$'  lots   of\twhitespace\nand &amp; html entities  '
p4=$(printf 'repeat %.0s' {1..40})
expect 0 "5 prompt(s), 24 tokens x 32 on cpu" -- "$vinf" encode-text --text-encoder "$wan/text_encoder" --tokenizer "$wan/tokenizer" \
  --prompt "$p0" --prompt "" --prompt "$p2" --prompt "$p3" --prompt "$p4" --max-length 24 --out "$work/t5.safetensors"
expect 0 "ok input_ids max |diff| 0 " -- "$tool" compare "$work/t5.safetensors" "$wan/ref_text.safetensors" 0 input_ids
expect 0 "ok attention_mask max |diff| 0 " -- "$tool" compare "$work/t5.safetensors" "$wan/ref_text.safetensors" 0 attention_mask
expect 0 "ok last_hidden_state" -- "$tool" compare "$work/t5.safetensors" "$wan/ref_text.safetensors" 1e-4 last_hidden_state
# The truncated prompt is reported.
expect 0 "prompt 0 has 161 tokens with eos; --max-length is 24, so its last 137 tokens are dropped" -- \
  "$vinf" encode-text --model "$wan" --prompt "$p4" --max-length 24 --out "$work/long.safetensors"
# A pipeline root finds text_encoder/ and tokenizer/; the default length is 512.
expect 0 "attention_mask                                                           I64   [1,512]" -- bash -c \
  "'$vinf' encode-text --model '$wan' --prompt 'a kite' --out '$work/d.safetensors' && '$vinf' inspect '$work/d.safetensors'"

# --clean is the pipeline's prompt_clean: the same as the cleaned text given as is.
expect 0 "wrote" -- "$vinf" encode-text --model "$wan" --prompt "$p3" --max-length 24 --clean --out "$work/clean.safetensors"
expect 0 "wrote" -- "$vinf" encode-text --model "$wan" --prompt "lots of whitespace and & html entities" --max-length 24 \
  --out "$work/cleaned.safetensors"
expect 0 "max |diff| 0 " -- "$tool" compare "$work/clean.safetensors" "$work/cleaned.safetensors" 0 input_ids attention_mask last_hidden_state

# The embeddings WanPipeline.encode_prompt makes (prompt_clean, max_sequence_length 24, zero past
# each prompt's length), as generate takes them.
expect 0 "1 prompt(s) and the negative, 24 tokens x 32" -- "$vinf" encode-text --model "$wan" --max-length 24 --clean \
  --prompt "A beagle swims in the ocean with coral reefs." --negative "blurry, low quality" --out "$work/emb.safetensors"
expect 0 "ok negative_prompt_embeds" -- "$tool" compare "$work/emb.safetensors" "$wan/ref_pipeline.safetensors" 1e-4 \
  prompt_embeds negative_prompt_embeds

# Refused: a tokenizer without spiece.model, either family with the other's tokenizer.
mkdir -p "$work/empty-tok"
bad "tokenizer $work/empty-tok: no spiece.model" --text-encoder "$wan/text_encoder" --tokenizer "$work/empty-tok" --prompt x
bad "is a T5 encoder (UMT5), which takes a SentencePiece tokenizer (spiece.model), but the tokenizer $work/pipe/tokenizer is a CLIP one" \
  --text-encoder "$wan/text_encoder" --tokenizer "$work/pipe/tokenizer" --prompt x
bad "is a CLIP encoder, which takes a CLIP tokenizer (vocab.json, merges.txt), but the tokenizer $wan/tokenizer is a SentencePiece one" \
  --text-encoder "$work/pipe/text_encoder" --tokenizer "$wan/tokenizer" --prompt x
bad "option '--max-length' must be in [1, 16384], got '0'" --model "$wan" --prompt x --max-length 0

# On a GPU the same embeddings, from the same ops on CUDA (skipped where none is visible).
if "$vinf" --version 2>/dev/null | grep -q 'CUDA backend: yes' && [ "$(visible_gpus)" -gt 0 ]; then
  expect 0 "on cuda" -- "$vinf" encode-text --model "$wan" --max-length 24 --clean --device cuda \
    --prompt "A beagle swims in the ocean with coral reefs." --negative "blurry, low quality" --out "$work/emb-cuda.safetensors"
  expect 0 "ok negative_prompt_embeds" -- "$tool" compare "$work/emb-cuda.safetensors" "$wan/ref_pipeline.safetensors" 2e-4 \
    prompt_embeds negative_prompt_embeds
else
  echo "skipped: UMT5 on CUDA (no GPU visible, or built without CUDA)"
fi

echo "$fails failure(s)"
[ "$fails" -eq 0 ]
