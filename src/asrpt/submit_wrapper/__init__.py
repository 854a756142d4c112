"""The sbatch wrapper ``asrpt-sbatch`` (main, directives, config, spool). It runs as the
submitting user and never touches the database: the daemon's side of its spool is
:mod:`asrpt.ingest`. Importing this package must stay free: the wrapper starts on every
submission."""
