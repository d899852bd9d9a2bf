"""Checkpoints: what each save holds and what resume restores (static), the live saves (runtime), and checkpoint vs export."""
