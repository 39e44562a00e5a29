#!/usr/bin/env bash
# `vinf encode-text`: the fixture text encoder with the reference tokenizer against transformers'
# own last_hidden_state (skipped when ../shared is absent), the embeddings file it makes for
# generate, a long prompt (truncated with a warning), and exit status 2 with a message naming the
# file for every bad input.
# usage: test_encode_text_cli.sh VINF TEST_TOOL FIXTURE_TEXT_ENCODER SHARED_TOKENIZER
set -u
vinf=$1 tool=$2 encoder=$3 vocab=$4
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
. "$(dirname "$0")/expect.sh"

expect 0 "--text-encoder DIR" -- "$vinf" encode-text --help
expect 0 "encode-text" -- "$vinf" --help
beagle="A beagle wearing diving goggles swimming in the ocean while the camera is moving, coral reefs in the background."

if [ -f "$vocab/vocab.json" ]; then
  expect 0 "2 prompt(s), 77 tokens x 32" -- "$vinf" encode-text --text-encoder "$encoder" --tokenizer "$vocab" \
    --prompt "" --prompt "$beagle" --out "$work/a.safetensors"
  expect 0 "ok last_hidden_state" -- "$tool" compare "$work/a.safetensors" "$encoder/ref.safetensors" 1e-4 last_hidden_state
  expect 0 "input_ids                                                                I64   [2,77]" -- "$vinf" inspect "$work/a.safetensors"
  # The same prompts from a file, one per line: the same batch, so equal by construction.
  printf '\n%s\n' "$beagle" > "$work/prompts.txt"
  expect 0 "wrote" -- "$vinf" encode-text --text-encoder "$encoder" --tokenizer "$vocab" --prompt-file "$work/prompts.txt" \
    --out "$work/b.safetensors"
  expect 0 "max |diff| 0 " -- "$tool" compare "$work/b.safetensors" "$work/a.safetensors" 0 last_hidden_state
  # Over 77 tokens: bos, 75 tokens, eos, and a warning naming what was dropped.
  long="$(printf 'red %.0s' {1..75})blue green"
  expect 0 "prompt 0 has 79 tokens; the text encoder takes 77, so these are dropped: 'blue green'" -- \
    "$vinf" encode-text --text-encoder "$encoder" --tokenizer "$vocab" --prompt "$long" --out "$work/long.safetensors"
  # The reference vocabulary does not fit a text encoder with a smaller one.
  expect 0 "wrote the pipeline" -- "$vinf" make-model --preset tiny --layout pipeline --out "$work/pipe"
  expect 2 "has ids up to 49407 but the text encoder's vocabulary has 514: they are not from the same model" -- \
    "$vinf" encode-text --text-encoder "$work/pipe" --tokenizer "$vocab" --prompt x --out "$work/x.safetensors"
else
  echo "skipped the reference comparisons: $vocab is absent (the CLIP vocabulary is not part of the project)"
  expect 0 "wrote the pipeline" -- "$vinf" make-model --preset tiny --layout pipeline --out "$work/pipe"
fi

# vinf inspect checks each part of the pipeline against its config.
expect 0 "tokenizer $work/pipe/tokenizer (CLIP BPE): 514 ids, 0 merges, 77 tokens per prompt; bos 512, eos 513, pad 513" -- \
  "$vinf" inspect "$work/pipe"
expect 0 "text encoder $encoder (CLIPTextModel): 2 layers of 32, 4 heads, vocabulary 49408" -- "$vinf" inspect "$encoder"

# The file generate takes: prompt_embeds and negative_prompt_embeds beside the two required tensors.
expect 0 "negative_prompt_embeds                                                   F32   [1,77,32]" -- bash -c \
  "'$vinf' encode-text --model '$work/pipe' --prompt 'a kite' --negative '' --out '$work/emb.safetensors' && '$vinf' inspect '$work/emb.safetensors'"

# --config FILE: one `prompt = TEXT` line per prompt; the command line wins over the file.
cat > "$work/encode.ini" <<EOF
model = $work/pipe
prompt = a kite
negative =
out = $work/not-this.safetensors
EOF
expect 0 "wrote $work/emb-ini.safetensors" -- "$vinf" encode-text --config "$work/encode.ini" --out "$work/emb-ini.safetensors"
expect 0 "max |diff| 0 " -- "$tool" compare "$work/emb-ini.safetensors" "$work/emb.safetensors" 0 prompt_embeds negative_prompt_embeds
[ ! -e "$work/not-this.safetensors" ] || { echo "FAIL: the file's out was written"; fails=$((fails + 1)); }
expect 0 "--config FILE" -- "$vinf" encode-text --help
printf 'model = %s\nprompts = a kite\n' "$work/pipe" > "$work/typo.ini"
expect 2 "--config $work/typo.ini line 2: unknown key 'prompts' (vinf encode-text has no option --prompts" -- \
  "$vinf" encode-text --config "$work/typo.ini" --out "$work/refused.safetensors"
[ ! -e "$work/refused.safetensors" ] || { echo "FAIL: a refused run wrote a file"; fails=$((fails + 1)); }

# A text encoder config with a value of the wrong type names the file, the key and the type.
mkdir -p "$work/enc-str" && cp "$work/pipe/text_encoder/model.safetensors" "$work/enc-str/"
sed 's/"hidden_size": \([0-9]*\)/"hidden_size": "\1"/' "$work/pipe/text_encoder/config.json" > "$work/enc-str/config.json"
expect 2 "$work/enc-str/config.json: config key 'hidden_size' must be an integer, got \"" -- \
  "$vinf" encode-text --text-encoder "$work/enc-str" --tokenizer "$work/pipe/tokenizer" --prompt x --out "$work/refused.safetensors"
mkdir -p "$work/enc-list" && cp "$work/pipe/text_encoder/model.safetensors" "$work/enc-list/"
sed 's/"num_hidden_layers": \([0-9]*\)/"num_hidden_layers": [\1, \1]/' "$work/pipe/text_encoder/config.json" > "$work/enc-list/config.json"
expect 2 "$work/enc-list/config.json: config key 'num_hidden_layers' must be an integer, got [" -- \
  "$vinf" encode-text --text-encoder "$work/enc-list" --tokenizer "$work/pipe/tokenizer" --prompt x --out "$work/refused.safetensors"
[ ! -e "$work/refused.safetensors" ] || { echo "FAIL: a refused run wrote a file"; fails=$((fails + 1)); }

# Bad inputs: status 2, the message names the file, nothing written.
bad() {  # bad TEXT options...
  local text=$1
  shift
  expect 2 "$text" -- "$vinf" encode-text "$@" --out "$work/refused.safetensors"
  if [ -e "$work/refused.safetensors" ]; then echo "FAIL: a refused run wrote a file"; fails=$((fails + 1)); rm -f "$work/refused.safetensors"; fi
}
bad "no prompt" --model "$work/pipe"
bad "give --text-encoder DIR and --tokenizer DIR" --prompt x
bad "option '--tokenizer': '$work/none' does not exist" --text-encoder "$work/pipe/text_encoder" --tokenizer "$work/none" --prompt x
long_name=$work/$(printf 'd%.0s' {1..300})  # longer than a file name may be: the lookup fails, not only misses
bad "option '--tokenizer': '$long_name' does not exist" --text-encoder "$work/pipe/text_encoder" --tokenizer "$long_name" --prompt x
bad "option '--text-encoder': '$long_name' does not exist" --text-encoder "$long_name" --tokenizer "$work/pipe/tokenizer" --prompt x
mkdir -p "$work/tok" && cp "$work/pipe/tokenizer/merges.txt" "$work/tok/"
bad "tokenizer $work/tok: no vocab.json" --text-encoder "$work/pipe/text_encoder" --tokenizer "$work/tok" --prompt x
cp "$work/pipe/tokenizer/vocab.json" "$work/tok/"
printf '#version: 0.2\na b c\n' > "$work/tok/merges.txt"
bad "$work/tok/merges.txt line 2: expected two symbols" --text-encoder "$work/pipe/text_encoder" --tokenizer "$work/tok" --prompt x
printf '{"a": ' > "$work/tok/vocab.json"
bad "$work/tok/vocab.json is not valid JSON" --text-encoder "$work/pipe/text_encoder" --tokenizer "$work/tok" --prompt x
mkdir -p "$work/enc" && cp "$work/pipe/text_encoder/config.json" "$work/enc/"
bad "text encoder directory $work/enc has no model.safetensors" --text-encoder "$work/enc" --tokenizer "$work/pipe/tokenizer" --prompt x
bad "option '--prompt-file': '$work/none.txt' does not exist" --model "$work/pipe" --prompt-file "$work/none.txt"
printf 'a kite\ncaf\xe9 au lait\n' > "$work/latin1.txt"
bad "--prompt-file $work/latin1.txt line 2 is not valid UTF-8 (byte 3 of the line)" --model "$work/pipe" --prompt-file "$work/latin1.txt"
bad "--prompt number 1 is not valid UTF-8 (byte 1)" --model "$work/pipe" --prompt $'a\x80'
expect 2 "option '--out': '' is empty: give a path" -- "$vinf" encode-text --model "$work/pipe" --prompt x --out ''

echo "$fails failure(s)"
[ "$fails" -eq 0 ]
