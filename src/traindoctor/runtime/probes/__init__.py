"""Probes: thin adapters on torch that record events for monitors."""
