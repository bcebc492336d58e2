# AMD EPYC Zen 5 (family 26 model 2), 2 threads; binary of b6526a8 (whose decoding is b3c9157's:
# Qwen2.5-1.5B's shipped channels-union at tau 0.93, 32 channels), 28 min, f32 activations;
# log.txt. Started from the records of docs/eval-ruler/shared-pages-qwen2.5-1.5b-32k/ (dense and
# channels at tau 0.93, one prompt each; binary of edefb12, Zen 5), copied here; the union added.
qada eval --model qwen2.5-1.5b --part evaluation --task passkey,niah-multikey --lengths 32000 \
    --samples 1 --methods dense,channels-union --taus 0.93 --groups all --channels 32 \
    --out-dir docs/eval-ruler/union-qwen2.5-1.5b-32k --resume
# The summary redrawn over both rules.
qada eval --model qwen2.5-1.5b --part evaluation --task passkey,niah-multikey --lengths 32000 \
    --samples 1 --methods dense,channels,channels-union --taus 0.93 --groups all --channels 32 \
    --out-dir docs/eval-ruler/union-qwen2.5-1.5b-32k --replot
