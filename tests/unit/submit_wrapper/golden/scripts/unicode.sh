#!/bin/sh
#SBATCH -J ünïcödé
#ASRPT model=modèle
#ASRPT class=résumé
echo "ünïcödé"
