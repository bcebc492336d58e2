# AMD EPYC Zen 5 (family 26 model 2), 2 threads. Binary built from 7b670f9's tree before its
# commit (the records name 513d8d1, the commit below it; 7b670f9 adds eval's --page and
# nothing that changes a record). The page size of every page selection, on the prompts of
# ../union095-qwen2.5-0.5b-16k (the same seeds: its dense records are these to the last digit),
# where the shipped union ran at pages of 32. page16: 18 min 51 s (peak RSS 1,581,372 KiB;
# beside test and bench builds for 10 of them); page64: after it, 12 min 30 s; page128 later,
# 28 min 4 s beside `bash .ci/run`.
for P in 16 64 128; do
  qada eval --model qwen2.5-0.5b --part evaluation --task fidelity,passkey,niah-multikey \
      --lengths 16384 --samples 2 --methods dense,dense-int8,channels-union,pages-oracle \
      --taus 0.95 --groups all --channels 16 --page $P \
      --out-dir docs/eval-ruler/page-sweep-qwen2.5-0.5b-16k/page$P
done
