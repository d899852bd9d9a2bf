"""The runtime doctor: watches a live training run. Imports torch lazily."""
