cat > /tmp/x.sh <<'EOF'
torchrun pretrain_gpt.py --num-layers 999999 --hidden-size 1 --num-attention-heads 1 --vocab-size 1 --seq-length 1 --micro-batch-size 1
EOF
torchrun pretrain_gpt.py --num-layers 2 --hidden-size 64 --num-attention-heads 4 --vocab-size 128
