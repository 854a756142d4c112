#!/bin/sh
#SBATCH -J a1
#SBATCH--job-name=a2
  #SBATCH -J ignored-indented
#SBATCH -J a4 # comment
#SBATCH --comment="a b  c" -t 5
true
