"""``traindoctor server`` as a command: its flags, and a plain message without the lsp extra."""

from __future__ import annotations

import subprocess
import sys

from lsp_env import server_env

from traindoctor.cli import main
from traindoctor.server.cli import INSTALL_HINT


def test_without_the_lsp_extra_it_says_how_to_install_it():
    # pygls made unimportable, as in an environment without the extra.
    code = "import sys; sys.modules['pygls'] = None; from traindoctor.cli import main; sys.exit(main(['server']))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=server_env(), timeout=60)
    assert done.returncode == 2
    assert done.stderr == INSTALL_HINT + "\n" and done.stdout == ""
    assert "pip install 'traindoctor[lsp]'" in INSTALL_HINT


def test_the_checker_never_imports_the_lsp_library():
    code = (
        "import sys; from traindoctor.cli import main; main(['check', '--no-cache', '-q', '-']);"
        "print(sorted(m for m in sys.modules if m.startswith(('pygls', 'lsprotocol', 'traindoctor.server'))))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], input="x = 1\n", capture_output=True, text=True, env=server_env(), timeout=60
    )
    assert done.stdout.strip().splitlines()[-1] == "[]"


def test_a_negative_debounce_is_refused(capsys):
    assert main(["server", "--debounce-ms", "-1"]) == 2
    assert "--debounce-ms must be >= 0" in capsys.readouterr().err
