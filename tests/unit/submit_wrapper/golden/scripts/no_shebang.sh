echo no shebang
#SBATCH -J x
