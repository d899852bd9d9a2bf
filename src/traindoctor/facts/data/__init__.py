"""Data loading: which loaders train and how they are built (static), what the live loaders measured (runtime), one model of the input pipeline."""
