"""grep and glob underneath: linear-time patterns, ignore files, ripgrep's fast path."""
