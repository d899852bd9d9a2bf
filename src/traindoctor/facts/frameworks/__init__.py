"""Training frameworks (Lightning, Hugging Face, accelerate) read without importing them."""
