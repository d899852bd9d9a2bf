"""Optimizers: the live audit of param groups against the model's modules."""
