"""asrpt: prediction-assisted SRPT scheduling for Slurm clusters of mixed accelerators."""

__version__ = "0.1.0"
