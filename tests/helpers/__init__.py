"""Helpers the tests share (``tests/`` is on ``sys.path``: ``from helpers.rule_loops import ...``).

* ``snippets``: check a snippet of source through the real engine with chosen rules.
* ``project_tree``: write a tiny project tree and check one of its files.
* ``scripts``: training scripts, as text, checked by the tests of more than one file.
* ``rule_loops``, ``data_loops``: tiny real CPU training loops and the findings of a watched run.
"""
