"""Rules of topic checkpoint."""
