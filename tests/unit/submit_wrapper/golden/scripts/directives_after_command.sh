#!/bin/sh
echo hi
#SBATCH -J too-late
#ASRPT model=too-late
