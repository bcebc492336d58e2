# AMD EPYC Zen 5 (family 26 model 2), 2 threads; binary of b3c9157, 22 min (the f32 dense
# prefills of 16384 tokens are 5.5 min each).
# Started from the records of docs/eval-ruler/shared-pages-qwen2.5-1.5b-16k/ (dense and channels
# at taus 0.93 and 0.95, prompts 0 and 1; binaries of 26b882d and 4f55152, Zen 5), copied here;
# channels-union added at the calibration's tau 0.88 and at 0.9.
qada eval --model qwen2.5-1.5b --part evaluation --task passkey,niah-multikey --lengths 16384 \
    --samples 2 --methods dense,channels-union --taus 0.88,0.9 --groups all --channels 32 \
    --out-dir docs/eval-ruler/union-qwen2.5-1.5b-16k --resume
# Then (next session, same host kind, binary of b6526a8, whose decoding is b3c9157's; 23 min;
# log-2.txt): the union at the shipped tau 0.93.
qada eval --model qwen2.5-1.5b --part evaluation --task passkey,niah-multikey --lengths 16384 \
    --samples 2 --methods dense,channels-union --taus 0.93 --groups all --channels 32 \
    --out-dir docs/eval-ruler/union-qwen2.5-1.5b-16k --resume
# The summary redrawn over both rules.
qada eval --model qwen2.5-1.5b --part evaluation --task passkey,niah-multikey --lengths 16384 \
    --samples 2 --methods dense,channels,channels-union --taus 0.88,0.9,0.93,0.95 --groups all \
    --channels 32 --out-dir docs/eval-ruler/union-qwen2.5-1.5b-16k --replot
