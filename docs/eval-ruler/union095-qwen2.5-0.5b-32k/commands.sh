# AMD EPYC Zen 5 (family 26 model 2), 2 threads; binary of 43c23f8 (the shipped channels-union
# at tau 0.95), 17 min. Three tasks on the evaluation half at 32000 tokens, one prompt each.
qada eval --model qwen2.5-0.5b --part evaluation --task passkey,niah-multikey,fidelity \
    --lengths 32000 --samples 1 --methods dense,dense-int8,channels-union --taus 0.95 \
    --groups all --channels 16 --out-dir docs/eval-ruler/union095-qwen2.5-0.5b-32k
# Then (next session, same host kind, binary of b3c9157, 17 min; log-2.txt): three more tasks,
# one prompt each. cwe: dense finds none of the ten words at this length, so nothing is compared.
qada eval --model qwen2.5-0.5b --part evaluation --task niah-multivalue,niah-multiquery,cwe \
    --lengths 32000 --samples 1 --methods dense,dense-int8,channels-union --taus 0.95 \
    --groups all --channels 16 --out-dir docs/eval-ruler/union095-qwen2.5-0.5b-32k --resume
# Then (a third session, same host kind, binary of b6526a8, whose decoding is b3c9157's; 20 min,
# 8 of them beside a release build; log-3.txt): the last three tasks, one prompt each.
# vt: dense traces 0.40 of the chain at this length, so nothing is compared.
qada eval --model qwen2.5-0.5b --part evaluation --task niah-single,vt,fwe \
    --lengths 32000 --samples 1 --methods dense,dense-int8,channels-union --taus 0.95 \
    --groups all --channels 16 --out-dir docs/eval-ruler/union095-qwen2.5-0.5b-32k --resume
# The summary redrawn over all nine tasks and fidelity.
qada eval --model qwen2.5-0.5b --part evaluation --task all --lengths 32000 \
    --samples 1 --methods dense,dense-int8,channels-union --taus 0.95 --groups all --channels 16 \
    --out-dir docs/eval-ruler/union095-qwen2.5-0.5b-32k --replot
