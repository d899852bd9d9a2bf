"""The check command: the static engine that drives the rules over files, the cache, workers, notebooks and fixes."""
