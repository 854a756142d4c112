#!/bin/bash
#SBATCH -J train --time=60
#SBATCH --gres=gpu:a100:4 -N 1
#ASRPT model=llama-7b class=llm parallel=1x1x4 micro_batches=8 iterations=20000

srun python train.py --steps 20000
