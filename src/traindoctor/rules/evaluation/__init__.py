"""Rules of topic evaluation."""
