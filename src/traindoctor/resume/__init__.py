"""`traindoctor verify-resume`: prove that a training script resumes exactly.

Imports no torch at package level; the recorder runs inside the child processes it starts.
"""
