#!/bin/bash
#SBATCH -J "quoted name" --comment=x\\"y
#SBATCH -J "unterminated
#SBATCH -J ok extra-word
true
