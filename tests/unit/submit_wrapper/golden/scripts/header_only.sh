#!/bin/sh
#SBATCH -J only-header
#ASRPT iterations=1e6 tp=2