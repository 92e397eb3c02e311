"""Run records on disk, ``<workdir>/.agentcell/runs/<run-id>/``, and read back.

_store     a run's folder: summary, results, transcripts; finding and loading runs
_disk      a full disk is a state agentcell reports, not a crash
_key       the user's record key, kept outside every workdir, read by the parent only
_missing   what a run folder without ``summary.json`` still says
"""
