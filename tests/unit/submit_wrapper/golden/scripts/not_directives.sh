#!/bin/sh
#sbatch -J lower
#SBATCHX -J x
#ASRPTX model=y
true
