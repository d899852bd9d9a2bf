"""Models: which layers a model has, read from its definition."""
