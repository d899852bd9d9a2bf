"""TD000 parse-error: a file the checker cannot parse."""

from __future__ import annotations

from traindoctor.finding import Severity
from traindoctor.rules.base import Invalid, Rule, Valid


class ParseError(Rule):
    """Reported by the engine itself (``traindoctor.static.source.parse``), never by ``check``."""

    code = "TD000"
    name = "parse-error"
    severity = Severity.ERROR
    summary = "The file cannot be parsed; it was skipped and the other files were checked."

    what_it_does = """
    Reports a file that cannot be checked: a syntax error, text that is not valid in its declared
    encoding (UTF-8 by default), a binary file, or code nested too deeply for Python's parser.
    """
    why_bad = """
    A file the checker cannot read is a file nobody checked. The run does not stop: every other
    file is still checked, and the exit code says findings were reported.
    """
    example = """
    def train(:
        pass
    """
    use_instead = """
    def train():
        pass
    """
    references = ("https://docs.python.org/3/library/ast.html#ast.parse",)

    valid = (
        "x = 1\n",
        "# -*- coding: latin-1 -*-\nname = 'caf\u00e9'\n",
        Valid("print('hello')\n"),
    )
    invalid = (
        Invalid("def train(:  # TD000\n    pass\n"),
        Invalid("x = 1\ny = (  # TD000\n"),
        Invalid("import torch\nfor i in range(3)  # TD000\n    pass\n"),
    )
