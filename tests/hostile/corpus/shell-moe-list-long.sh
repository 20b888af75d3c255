torchrun pretrain_gpt.py --num-layers 4 --moe-layer-freq '[1]*99999+[0]'
