"""asrpt's Slurm adapter.

* :mod:`asrpt.slurm.commands`: pure argv builders (squeue/sinfo/scontrol/sacct);
* :mod:`asrpt.slurm.parsing`: pure parsers for both Slurm 22.05 and 24.11 output, raising
  :class:`~asrpt.exceptions.SlurmOutputMalformed` with the raw text for anything else;
* :mod:`asrpt.slurm.records`: the normalised records the parsers return;
* :mod:`asrpt.slurm.runner`: the one place that runs a command (timeout, SLURM_CONF, three
  outcomes: ok / unreachable / malformed, 24.11's EAGAIN retried);
* :mod:`asrpt.slurm.cli_backend`: :class:`~asrpt.slurm.cli_backend.SlurmCliBackend`, the
  scheduling loop's ClusterBackend on a real Slurm.

Nothing is imported here, so that light users (the sbatch wrapper) can use the parsers
without loading the scheduling core.
"""
