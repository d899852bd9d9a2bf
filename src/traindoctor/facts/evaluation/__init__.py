"""Evaluation hygiene: grad mode, eval mode and evaluation loops, read from the file."""
