"""The run command: runs a user's script under the runtime doctor and merges multi-rank reports."""
