#!/usr/bin/env bash
# Bad input, class by class, as a hostile user tries it: every command refuses it with exit status 2
# and a message that says what is wrong, where, and what to do, before any work or output. The
# classes that cover every command or option are checked by walking each command's --help, so that
# an option added later is covered too: words outside options, path options (FILE must not be a
# directory, DIR must not be a file), numeric options (a value outside the range --help states).
# usage: test_bad_input_cli.sh VINF TEST_TOOL
set -u
vinf=$1 tool=$2
. "$(dirname "$0")/expect.sh"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work" || exit 1
mkdir adir
echo "x" > afile
commands=(generate plan decode encode-text forward prepare-data train train-step make-model evaluate inspect selfcheck)
small=(--model builtin:tiny --device cpu --video.frames 8 --video.height 32 --video.width 32 --sampler.steps 1
       --vi.local-frames 2 --vi.global-frames 4 --output.video=false)

# 1. An unquoted prompt is three words: the two strays are refused, with how to quote. More prompts
# than clips would drop some: refused with the number of clips, from the options and from a file.
expect 2 "unexpected word(s) 'red panda' outside any option" -- "$vinf" generate "${small[@]}" --prompt.text a red panda
expect 2 "2 prompts for 1 clip" -- "$vinf" generate "${small[@]}" --prompt.text a --prompt.text b --out p2
python3 - emb3.safetensors <<'PY'
import json, struct, sys
def tensor(shape):
    n = 1
    for s in shape: n *= s
    return shape, struct.pack("<%df" % n, *([0.25] * n))
parts = {"prompt_embeds": tensor([3, 77, 32]), "negative_prompt_embeds": tensor([1, 77, 32])}
header, data, at = {}, b"", 0
for name, (shape, raw) in parts.items():
    header[name] = {"dtype": "F32", "shape": shape, "data_offsets": [at, at + len(raw)]}
    data += raw; at += len(raw)
h = json.dumps(header).encode()
open(sys.argv[1], "wb").write(struct.pack("<Q", len(h)) + h + data)
PY
expect 2 "emb3.safetensors: 3 prompts for 1 clip" -- "$vinf" generate "${small[@]}" --prompt.embeddings emb3.safetensors --out p3
[ ! -e p2 ] && [ ! -e p3 ] && echo "ok: no output directory for the refused prompt lists" || { echo "FAIL: p2/p3 left"; fails=$((fails + 1)); }

# 2. A word outside any option, for every command (those with positional arguments: one too many).
for c in "${commands[@]}"; do
  case $c in
    evaluate | inspect) expect 2 "too many positional options" -- "$vinf" "$c" a b c ;;
    prepare-data) expect 2 "too many positional options" -- "$vinf" "$c" a b c d ;;
    *) expect 2 "unexpected word(s) 'stray' outside any option: vinf $c" -- "$vinf" "$c" stray ;;
  esac
done
expect 2 "unexpected word(s) 'extra'" -- "$vinf" generate "${small[@]}" --prompt.text a --sampler.steps 1 extra

# 3. Every path option of every command, from --help: a FILE that is a directory, a DIR that is a
# file. The check comes first, before any other option is looked at.
paths=0
for c in "${commands[@]}"; do
  while read -r opt kind; do
    case $kind in
      FILE) expect 2 "option '$opt': 'adir' is a directory" -- "$vinf" "$c" "$opt" adir ;;
      DIR) expect 2 "option '$opt': 'afile' is a file, not a directory" -- "$vinf" "$c" "$opt" afile ;;
      PATH) expect 2 "option '$opt': 'nowhere' does not exist" -- "$vinf" "$c" "$opt" nowhere ;;
    esac
    paths=$((paths + 1))
  done < <("$vinf" "$c" --help | sed -n 's/^ *\(--[a-z0-9.-]*\) \(FILE\|DIR\|PATH\)\b.*/\1 \2/p')
done
[ "$paths" -ge 40 ] && echo "ok: $paths path options checked" || { echo "FAIL: only $paths path options in the help"; fails=$((fails + 1)); }
expect 2 "option '--config': 'adir' is a directory, not a file" -- "$vinf" generate --config adir --help
expect 2 "option '--out': 'adir' is a directory, not a file to write" -- "$vinf" encode-text --prompt a --out adir --model adir

# 4. INI files: a value out of range names the file and line; a check made after reading names the
# line the option came from; a UTF-8 byte-order mark is accepted.
printf '[sampler]\nsteps = 0\n' > steps.ini
expect 2 "--config steps.ini line 2: option 'sampler.steps' must be in [1, 1000], got '0'" -- \
  "$vinf" generate --config steps.ini "${small[@]}" --prompt.text a
printf '[video]\nheight = 33\n' > height.ini
expect 2 "(--video.height is set by --config height.ini line 2)" -- "$vinf" generate --config height.ini --model builtin:tiny --prompt.text a
printf '\xEF\xBB\xBF[video]\nheight = 64\n' > bom.ini
expect 0 "24 frames of 512x64" -- "$vinf" plan --config bom.ini --model builtin:tiny --ranks 1
# A binary file given as --config (fixed bytes: which message comes depends on whether its first
# line holds an '='): quoted short and escaped, no raw control byte in the message.
{ printf '\177ELF\002\001\001\003'; head -c 1992 /dev/zero; } > binary.ini
{ printf '\177ELF\002\001>\001=\260'; head -c 1990 /dev/zero; } > binary-eq.ini
for f in binary.ini binary-eq.ini; do
  out=$("$vinf" generate --config $f 2>&1)
  if [[ "$out" == *"'"'\x7fELF\x02\x01'* && ${#out} -lt 500 && "$out" != *[$'\x01'-$'\x08']* ]]; then
    echo "ok: a binary --config ($f) is quoted short and escaped"
  else echo "FAIL: binary --config $f: ${out:0:300}"; fails=$((fails + 1)); fi
done

# 5. Every numeric option of every command, from --help: a value below its range (above, where the
# range starts at the type's lowest) is refused with the range.
numbers=0
for c in "${commands[@]}"; do
  while read -r zero opt lo hi; do
    case $zero,$lo in
      zero,*) bad=$(awk -v l="$lo" 'BEGIN { printf "%.17g", l / 2 }') ;;  # between 0 and the range
      *,-*) bad=$(awk -v h="$hi" 'BEGIN { printf "%.17g", h * 10 + 1 }') ;;
      *) bad=$(awk -v l="$lo" 'BEGIN { printf "%.17g", l - 1 }') ;;
    esac
    expect 2 "option '$opt'" -- "$vinf" "$c" "$opt=$bad"
    numbers=$((numbers + 1))
  done < <("$vinf" "$c" --help | sed -n -e 's/^ *\(--[a-z0-9.-]*\) 0 or in [[(]\([-0-9.e]*\), \([-0-9.e]*\)[])].*/zero \1 \2 \3/p' \
                                       -e 's/^ *\(--[a-z0-9.-]*\) [[(]\([-0-9.e]*\), \([-0-9.e]*\)[])].*/range \1 \2 \3/p')
done
[ "$numbers" -ge 80 ] && echo "ok: $numbers numeric options checked" || { echo "FAIL: only $numbers numeric options in the help"; fails=$((fails + 1)); }
expect 2 "option '--device-memory' must be in (0, 1048576], got '-1'" -- "$vinf" plan --model builtin:tiny --device-memory -1
expect 2 "option '--seed' takes a number without a sign" -- "$vinf" make-model --preset tiny --seed -1 --out m
expect 2 "option '--model.lora-scale' must be in [-100, 100], got '1e39'" -- "$vinf" generate "${small[@]}" --model.lora-scale 1e39
expect 2 "option '--comm-timeout' must be 0 or in [1, 604800], got '1e-9'" -- "$vinf" generate "${small[@]}" --comm-timeout 1e-9
expect 2 "option '--sampler.guidance' must be in [0, 100], got 'nan'" -- "$vinf" generate "${small[@]}" --sampler.guidance nan

# 6. --name is a name, not a path.
for name in ../../escaped a/b .. ""; do
  expect 2 "is not a plain name" -- "$vinf" generate "${small[@]}" --prompt.text a --name "$name"
done
[ ! -e ../../escaped ] && [ ! -e ../escaped ] && echo "ok: nothing written outside" || { echo "FAIL: escaped"; fails=$((fails + 1)); }

# 7. Options that another overrides: a conflict is refused, a setting that does not apply is said.
expect 2 "--prompt.text and --prompt.embeddings both give the prompts" -- \
  "$vinf" generate "${small[@]}" --prompt.text cat --prompt.embeddings emb3.safetensors
expect 2 "--sampler.eta is DDIM's noise scale, but this run's scheduler has none" -- \
  "$vinf" generate "${small[@]}" --prompt.text a --sampler.eta 0.5
expect 0 "--long.window is ignored: it applies to --long.mode windows" -- \
  "$vinf" generate "${small[@]}" --prompt.text a --long.window 4 --out o7
expect 0 "--prompt.negative is ignored: --sampler.guidance <= 1" -- \
  "$vinf" generate "${small[@]}" --prompt.text a --prompt.negative blur --sampler.guidance 1 --out o7b

# 8. NaN or infinity in a given tensor is refused when the file is read, naming the file, the tensor
# and the element, before any output exists.
python3 - emb1.safetensors nan-emb.safetensors init.safetensors nan-init.safetensors <<'PY'
import json, struct, sys
def write(path, parts):
    header, data, at = {}, b"", 0
    for name, (shape, values) in parts.items():
        raw = struct.pack("<%df" % len(values), *values)
        header[name] = {"dtype": "F32", "shape": shape, "data_offsets": [at, at + len(raw)]}
        data += raw; at += len(raw)
    h = json.dumps(header).encode()
    open(path, "wb").write(struct.pack("<Q", len(h)) + h + data)
emb = [0.25] * (77 * 32)
write(sys.argv[1], {"prompt_embeds": ([1, 77, 32], emb), "negative_prompt_embeds": ([1, 77, 32], emb)})
bad = list(emb); bad[5] = float("nan")
write(sys.argv[2], {"prompt_embeds": ([1, 77, 32], bad), "negative_prompt_embeds": ([1, 77, 32], emb)})
init = [0.5] * (4 * 8 * 4 * 4)
write(sys.argv[3], {"latents_init": ([1, 4, 8, 4, 4], init)})
init[9] = float("inf")
write(sys.argv[4], {"latents_init": ([1, 4, 8, 4, 4], init)})
PY
expect 0 "outputs in" -- "$vinf" generate "${small[@]}" --prompt.embeddings emb1.safetensors --out e1
expect 2 "nan-emb.safetensors: tensor 'prompt_embeds' holds a NaN or infinity (element 5 of" -- \
  "$vinf" generate "${small[@]}" --prompt.embeddings nan-emb.safetensors --out e2
expect 0 "outputs in" -- "$vinf" generate "${small[@]}" --prompt.text a --latents-init init.safetensors --out i1
expect 2 "nan-init.safetensors: tensor 'latents_init' holds a NaN or infinity (element 9 of" -- \
  "$vinf" generate "${small[@]}" --prompt.text a --latents-init nan-init.safetensors --out i2
fixtures=$(cd "$(dirname "$0")/../fixtures" && pwd)
python3 - "$fixtures/tiny-unet3d/inputs.safetensors" nan-inputs.safetensors <<'PY'
import json, struct, sys
raw = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
header = json.loads(raw[8:8 + n])
data = bytearray(raw[8 + n:])
at = header["sample"]["data_offsets"][0] + 4 * 3
data[at:at + 4] = struct.pack("<f", float("nan"))
open(sys.argv[2], "wb").write(raw[:8 + n] + bytes(data))
PY
expect 2 "nan-inputs.safetensors: tensor 'sample' holds a NaN or infinity (element 3 of" -- \
  "$vinf" forward --model "$fixtures/tiny-unet3d" --inputs nan-inputs.safetensors --out f.safetensors --vi.mode off --device cpu
[ ! -e f.safetensors ] && [ ! -e e2 ] && [ ! -e i2 ] && echo "ok: no output for the refused tensors" || { echo "FAIL: e2/i2 left"; ls -R e2 i2; fails=$((fails + 1)); }

# Latents read from an HDF5 file are checked too (evaluate's input, decode --checkpoint, training
# data), and inspect finds the NaN.
"$tool" latents-h5 nan.h5 8 1 - nan > /dev/null 2>&1
expect 2 "nan.h5: dataset /latents holds a NaN or infinity (element 10" -- "$vinf" evaluate nan.h5 --out evn
expect 2 "/latents: holds a NaN or infinity (element 10)" -- "$vinf" inspect nan.h5
[ ! -e evn ] && echo "ok: no --out folder for the refused latents" || { echo "FAIL: evn left"; fails=$((fails + 1)); }

# 9. A Wan pipeline whose vae/ is a UNet pipeline's AutoencoderKL is refused before the first step.
cp -r "$fixtures/wan-tiny" wanbad && rm -rf wanbad/vae
"$vinf" make-model --preset tiny --layout pipeline --out vcpipe > /dev/null 2>&1 && cp -r vcpipe/vae wanbad/vae
out=$("$vinf" generate --model wanbad --prompt.text a --video.frames 5 --video.height 32 --video.width 32 \
      --sampler.steps 2 --out w9 2>&1)
rc=$?
[[ $rc -eq 2 && "$out" == *'_class_name "AutoencoderKL" is not AutoencoderKLWan'* && "$out" != *"step 1/"* && ! -e w9 ]] \
  && echo "ok: a Wan pipeline with a UNet pipeline's VAE is refused before the first step" \
  || { echo "FAIL: Wan with the wrong VAE (exit $rc): ${out: -400}"; fails=$((fails + 1)); }

# 10. inspect checks what it describes: NaN values and a checksum that fails are damage (exit 2).
expect 2 "nan-init.safetensors: tensor 'latents_init' holds a NaN or infinity" -- "$vinf" inspect nan-init.safetensors
expect 0 "check: every stored number is finite" -- "$vinf" inspect init.safetensors
expect 0 "check: every dataset reads back with its checksum" -- "$vinf" inspect e1/latents.h5
cp e1/latents.h5 flipped.h5
size=$(stat -c %s flipped.h5)
printf '\xff\xff\xff\xff' | dd of=flipped.h5 bs=1 seek=$((size - 64)) conv=notrunc status=none
expect 2 "flipped.h5 is damaged" -- "$vinf" inspect flipped.h5

# 11. --resume auto over a finished run with other settings is refused with the differences; the
# same settings find nothing to do.
expect 0 "holds a finished run (run.json): nothing to do" -- \
  "$vinf" generate "${small[@]}" --prompt.text a --latents-init init.safetensors --out i1 --resume auto
expect 2 "holds a finished run with other settings (prompt.text" -- \
  "$vinf" generate "${small[@]}" --prompt.text b --latents-init init.safetensors --out i1 --resume auto
expect 2 "sampler.seed 123 there, 5 here" -- \
  "$vinf" generate "${small[@]}" --prompt.text a --latents-init init.safetensors --sampler.seed 5 --out i1 --resume auto

# In a job list, a finished job whose line changed is reported as failed with the differences,
# not paired with the old output.
printf '{"out": "kite", "seed": 1, "prompt": "a kite"}\n' > list.jsonl
expect 0 "" -- "$vinf" generate "${small[@]}" --jobs list.jsonl --out jl
printf '{"out": "kite", "seed": 9, "prompt": "a kite"}\n' > list.jsonl
expect 2 "" -- "$vinf" generate "${small[@]}" --jobs list.jsonl --out jl
expect 0 '"status": "failed"' -- cat jl/jobs.json
expect 0 "holds a finished run with other settings (sampler.seed 1 there, 9 here)" -- cat jl/jobs.json

# 12. --overwrite removes every output of the previous run, also those this run does not write.
mkdir -p ow/frames && touch ow/video.mp4 ow/contact.png ow/frames/frame-000000.png ow/evaluate.json
expect 0 "--overwrite: removed the previous run's outputs in ow: video.mp4, contact.png, evaluate.json, frames" -- \
  "$vinf" generate "${small[@]}" --prompt.text a --out ow --overwrite
[ ! -e ow/video.mp4 ] && [ ! -e ow/contact.png ] && [ ! -e ow/frames ] && [ -f ow/latents.h5 ] \
  && echo "ok: nothing of the previous run beside the new latents" || { echo "FAIL: overwrite left"; ls ow; fails=$((fails + 1)); }

# A stop signal after the last step does not cut the outputs short, and the run says it came.
expect 0 "received SIGUSR1 after the last step: the outputs were finished" -- \
  env VINF_FAULT_STEP="rank=0,step=1,signal=USR1" "$vinf" generate "${small[@]}" --prompt.text a --out sig

# 13. prepare-data refuses an existing output file without --overwrite, and a directory, before work.
expect 2 "vinf prepare-data: --out afile exists; give --overwrite" -- "$vinf" prepare-data adir afile --model adir --out afile
expect 2 "option '--out': 'adir' is a directory, not a file to write" -- "$vinf" prepare-data adir afile --model adir --out adir

# A refused evaluate leaves no empty --out folder behind (nor do decode's and train's refusals,
# which come before their folders are made).
echo "not a video" > junk.mp4
expect 2 "junk.mp4 is not a video ffmpeg can read" -- "$vinf" evaluate junk.mp4 --out ev/deep
[ ! -e ev ] && echo "ok: no --out folder left by a refused evaluate" || { echo "FAIL: ev left"; fails=$((fails + 1)); }

# Smaller: make-model's presets, an empty --out, a long prompt's warning.
expect 2 "the presets are tiny, small, vc2, wan-tiny, wan-1.3b and wan-14b, and the image-to-video" -- "$vinf" make-model --preset huge --out m
out=$("$vinf" make-model --preset tiny --out '' 2>&1)
[[ $? -eq 2 && "$out" == *"is empty"* && "$out" != *wrote* ]] && echo "ok: make-model --out ''" || { echo "FAIL: make-model --out '': $out"; fails=$((fails + 1)); }
long=$(head -c 20000 /dev/zero | tr '\0' 'a')
out=$("$vinf" generate "${small[@]}" --prompt.text "$long b" --out lp 2>&1)
[[ "$out" == *"bytes in all)"* && ${#out} -lt 3000 ]] && echo "ok: the long-prompt warning quotes an excerpt" \
  || { echo "FAIL: long-prompt warning (${#out} bytes)"; fails=$((fails + 1)); }

[ "$fails" -eq 0 ] || { echo "$fails bad-input check(s) failed"; exit 1; }
