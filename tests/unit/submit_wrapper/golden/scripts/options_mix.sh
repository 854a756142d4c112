#!/bin/bash
#SBATCH --array=0-9%2 --parsable -H
#SBATCH --wrap=ignored --exclusive --nice=5
#ASRPT model=m iterations=7.5e3
srun work $SLURM_ARRAY_TASK_ID
