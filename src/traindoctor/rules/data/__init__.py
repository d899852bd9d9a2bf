"""Rules of topic data."""
