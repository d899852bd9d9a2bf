"""Rules of topic backend."""
