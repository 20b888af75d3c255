torchrun pretrain_gpt.py --num-layers 4 --moe-layer-freq '([1]*100000)*100000'
