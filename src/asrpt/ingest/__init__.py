"""The daemon's side of the spools: reading, checking and storing the records that the
sbatch wrapper (:mod:`.wrapper_spool`) and the job_submit.lua plugin (:mod:`.plugin_spool`)
leave for asrptd. It may use the database; :mod:`asrpt.submit_wrapper`, which runs as the
submitting user on every sbatch, never does (an import-linter contract holds it)."""
