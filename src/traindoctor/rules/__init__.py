"""Rules, one module per code, grouped by topic (the hundreds digit of the code)."""
