# AMD EPYC Zen 5 (family 26 model 2), 2 threads; binary of 43c23f8 (the shipped channels-union
# at tau 0.95), 17 min. Three tasks on the evaluation half at 32000 tokens, one prompt each.
qada eval --model qwen2.5-0.5b --part evaluation --task passkey,niah-multikey,fidelity \
    --lengths 32000 --samples 1 --methods dense,dense-int8,channels-union --taus 0.95 \
    --groups all --channels 16 --out-dir docs/eval-ruler/union095-qwen2.5-0.5b-32k
