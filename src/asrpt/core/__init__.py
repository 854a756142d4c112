"""asrpt."""
