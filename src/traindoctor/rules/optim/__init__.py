"""Rules of topic optim."""
