"""syncd: keeps cursor-paginated sources in sync with an indexer."""
