"""Rules of topic distributed."""
