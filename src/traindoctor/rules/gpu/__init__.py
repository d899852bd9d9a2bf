"""Rules of topic gpu."""
