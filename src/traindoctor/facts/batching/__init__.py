"""Batch size, accumulation and learning rate: what the file says (static) and what the run did (runtime)."""
