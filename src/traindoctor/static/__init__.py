"""The static checker: reads source, never imports torch."""
