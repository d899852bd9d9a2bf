"""``traindoctor server``: the checker in the editor, as a Language Server Protocol server.

Needs the ``lsp`` extra (``pip install 'traindoctor[lsp]'``: pygls and lsprotocol); nothing
else in traindoctor imports this package, so the checker itself keeps no dependency.
"""
