#!/usr/bin/env python3
#SBATCH --gpus=8
#ASRPT model=resnet50 class=resnet50 dp=8
# a python comment
import torch

print("train")  
