# AMD EPYC Zen 5 (family 26 model 2), 2 threads; binary of b3c9157. Three runs, 28 min in all
# (the f32 dense prefills of 8192 tokens are 2.5-2.9 min each).
# 1. cwe, as on Qwen2.5-0.5B, where the union at tau 0.94 lost words: dense finds 0.05 here, so
#    nothing is compared (5 min).
qada eval --model qwen2.5-1.5b --part evaluation --task cwe --lengths 8192 --samples 2 \
    --methods dense,dense-int8,channels,channels-union --taus 0.88,0.9,0.93 --groups all \
    --channels 32 --out-dir docs/eval-ruler/union-qwen2.5-1.5b-8k
# 2. Three more of RULER's tasks, both rules at the calibration's tau 0.88 and the shipped 0.93
#    (18 min): niah-multiquery's second prompt loses one of four keys at 0.88 with either rule.
qada eval --model qwen2.5-1.5b --part evaluation --task niah-multivalue,niah-multiquery,fwe \
    --lengths 8192 --samples 2 --methods dense,channels,channels-union --taus 0.88,0.93 \
    --groups all --channels 32 --out-dir docs/eval-ruler/union-qwen2.5-1.5b-8k --resume
# 3. niah-multiquery at the union's tau 0.9 (6 min): it loses the same key.
qada eval --model qwen2.5-1.5b --part evaluation --task niah-multiquery --lengths 8192 \
    --samples 2 --methods dense,channels-union --taus 0.9 --groups all --channels 32 \
    --out-dir docs/eval-ruler/union-qwen2.5-1.5b-8k --resume
# 4. The summary redrawn over every method (the runs wrote it to the folder's first name,
#    union-qwen2.5-1.5b-8k-cwe, renamed before this).
qada eval --model qwen2.5-1.5b --part evaluation --task cwe,niah-multivalue,niah-multiquery,fwe \
    --lengths 8192 --samples 2 --methods dense,dense-int8,channels,channels-union \
    --taus 0.88,0.9,0.93 --groups all --channels 32 \
    --out-dir docs/eval-ruler/union-qwen2.5-1.5b-8k --replot
