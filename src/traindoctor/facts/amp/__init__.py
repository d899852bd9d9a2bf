"""Mixed precision: autocast regions, scalers and clipping, read from the file."""
