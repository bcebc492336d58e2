# Intel Xeon (family 6, model 207), 2 threads; binary of ab08e9a's tree (records name da40149).
# RULER's nine tasks on the evaluation half at 8192 tokens, the shipped channels-union at tau 0.94
# (29 min), then cwe again with channels and channels-union at taus 0.94-0.97 (7 min).
qada eval --model qwen2.5-0.5b --part evaluation --task all --lengths 8192 --samples 2 \
    --methods dense,dense-int8,channels-union --taus 0.94 --groups all --channels 16 \
    --out-dir docs/eval-ruler/union-qwen2.5-0.5b-8k
qada eval --model qwen2.5-0.5b --part evaluation --task cwe --lengths 8192 --samples 2 \
    --methods dense,dense-int8,channels-union,channels --taus 0.94,0.95,0.96,0.97 --groups all \
    --channels 16 --resume --out-dir docs/eval-ruler/union-qwen2.5-0.5b-8k
# AMD EPYC Zen 5 (family 26 model 2), 2 threads; binary of f613391. The same tasks but vt and
# cwe at tau 0.95 (cwe above), on the records of the two runs before (--resume; 11 min).
qada eval --model qwen2.5-0.5b --part evaluation \
    --task passkey,niah-single,niah-multikey,niah-multivalue,niah-multiquery,fwe,fidelity \
    --lengths 8192 --samples 2 --methods dense,dense-int8,channels-union --taus 0.94,0.95 \
    --groups all --channels 16 --resume --out-dir docs/eval-ruler/union-qwen2.5-0.5b-8k
