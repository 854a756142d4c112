#!/bin/bash
#SBATCH --job-name=serve-llama
#SBATCH --gres=gpu:4
#ASRPT serve-model=llama-2-7b tp=auto
#ASRPT class=llm
#ASRPT serve-model=not-a-known-model
#ASRPT tp=eight

srun ./serve.sh
