"""The sbatch wrapper ``asrpt-sbatch`` (main, directives, config, spool) and the daemon's
side of its spool (ingest). Importing this package must stay free: the wrapper starts on
every submission."""
