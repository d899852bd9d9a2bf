"""Rules of topic amp."""
