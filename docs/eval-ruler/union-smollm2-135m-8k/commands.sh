# AMD EPYC Zen 5 (family 26 model 2), 2 threads; binary of b3c9157.
# Started from the records of docs/eval-ruler/shared-pages-smollm2-135m-8k/ (dense, dense-int8 and
# the shipped channels at tau 0.98 on prompts 0 and 1; binary of 00dc893, Xeon 167), copied here.
# 1. RULER's nine tasks, two more prompts (4 in all), the union at the calibration's tau 0.93
#    and at 0.95 (9 min). With 4 prompts dense reaches 0.5 on passkey and niah-multikey only,
#    so the other tasks ran dense alone on the new prompts.
qada eval --model smollm2-135m --part evaluation --task all --lengths 7680 --samples 4 \
    --methods dense,dense-int8,channels-union --taus 0.93,0.95 --groups all --channels 16 \
    --out-dir docs/eval-ruler/union-smollm2-135m-8k --resume
# 2. The two tasks dense passes, at taus 0.97 and 0.98 for both rules (3 min; channels at 0.98
#    on prompts 2 and 3 is new, on 0 and 1 it is 00dc893's record).
qada eval --model smollm2-135m --part evaluation --task passkey,niah-multikey --lengths 7680 \
    --samples 4 --methods dense,dense-int8,channels,channels-union --taus 0.97,0.98 --groups all \
    --channels 16 --out-dir docs/eval-ruler/union-smollm2-135m-8k --resume
# 3. The summary redrawn over every method.
qada eval --model smollm2-135m --part evaluation --task all --lengths 7680 --samples 4 \
    --methods dense,dense-int8,channels,channels-union --taus 0.93,0.95,0.97,0.98 --groups all \
    --channels 16 --out-dir docs/eval-ruler/union-smollm2-135m-8k --replot
# 4. Checked aside, in another folder (3.5 min beside a calibration; its records are
#    check-channels098-b3c9157.jsonl here): b3c9157's channels at 0.98 on prompts 0 and 1 of
#    passkey and niah-multikey gives 00dc893's answers and bytes (0.377, 0.367, 0.382, 0.387),
#    so the shipped rule's records of prompts 0 and 1 stand for this code.
qada eval --model smollm2-135m --part evaluation --task niah-multikey,passkey --lengths 7680 \
    --samples 2 --methods dense,channels --taus 0.98 --groups all --channels 16 --out-dir check
