#!/bin/sh
#SBATCH -J het -p gpu --gres=gpu:2
#SBATCH hetjob
#SBATCH -p npu
#ASRPT class=mixed
srun true : true
