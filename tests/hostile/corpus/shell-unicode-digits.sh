torchrun pretrain_gpt.py --num-layers ٣٢ --hidden-size ３２ --num-attention-heads 4 --vocab-size 128 --nproc-per-node ٨
