# AMD EPYC Zen 5 (family 26 model 2), 2 threads; binary of 43c23f8 (the shipped channels-union
# at tau 0.95), 38 min. RULER's nine tasks on the evaluation half at 16384 tokens, 2 prompts each.
qada eval --model qwen2.5-0.5b --part evaluation --task all --lengths 16384 --samples 2 \
    --methods dense,dense-int8,channels-union --taus 0.95 --groups all --channels 16 \
    --out-dir docs/eval-ruler/union095-qwen2.5-0.5b-16k
