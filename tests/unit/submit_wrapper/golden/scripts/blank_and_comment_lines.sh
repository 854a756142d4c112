#!/bin/sh

   
# hello
   # indented comment
#SBATCH -J after-blanks
true
