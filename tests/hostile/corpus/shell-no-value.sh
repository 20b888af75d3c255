torchrun pretrain_gpt.py --num-layers
