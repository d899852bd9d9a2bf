"""Rules of topic checker."""
