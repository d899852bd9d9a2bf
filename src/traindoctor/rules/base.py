"""The rule base class: one class per finding code carries its metadata, docs and examples.

A rule module (``rules/<topic>/tdNNN_<name>.py``) defines one :class:`Rule` subclass. The class
holds everything about the mistake in one place:

* metadata: ``code``, ``name``, ``severity``, ``summary``, ``gpu_only``, ``static``/``runtime``;
* documentation in ruff's fixed template (``what_it_does``, ``why_bad``, ``example``,
  ``use_instead``, ``fix_safety``, ``options``, ``references``) from which ``docs/rules/TDnnn.md``
  and ``traindoctor rule TDnnn`` are generated;
* static examples (``valid`` / ``invalid``) that double as tests (as Fixit does): every line of an
  invalid example that ends with a ``# TDnnn`` marker comment must get exactly that finding;
* the static check itself, :meth:`Rule.check`, which reads a :class:`FileContext`.

A runtime half, where the catalog asks for one, is a :class:`traindoctor.runtime.events.Monitor`
subclass in the same module whose ``rule`` attribute points at this class.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, ClassVar

from traindoctor.finding import Finding, Severity

if TYPE_CHECKING:  # pragma: no cover
    from traindoctor.static.context import FileContext


def dedent(text: str) -> str:
    """``textwrap.dedent`` without regular expressions (same result).

    ``textwrap.dedent`` compiles a regular expression per margin; the rule examples are many
    (hundreds of snippets, dedented when a test or the docs first read them).
    """
    lines = text.split("\n")
    margin: str | None = None
    for line in lines:
        body = line.lstrip(" \t")
        if not body:
            continue  # blank or whitespace-only lines do not count
        indent = line[: len(line) - len(body)]
        if margin is None or indent.startswith(margin):
            margin = indent if margin is None else margin
        elif margin.startswith(indent):
            margin = indent
        else:
            n = 0
            while n < len(margin) and n < len(indent) and margin[n] == indent[n]:
                n += 1
            margin = margin[:n]
    cut = len(margin or "")
    return "\n".join("" if not line.lstrip(" \t") else line[cut:] for line in lines)


def code_block(text: str) -> str:
    """Dedent an example and strip the leading newline of a triple-quoted string."""
    return dedent(text).lstrip("\n")


class Valid:
    """Code on which the rule must stay silent.

    The example is dedented when first read, not when the rule module is imported:
    ``traindoctor run`` imports every rule module at start-up and never reads the examples.
    """

    __slots__ = ("_code", "_raw", "settings")

    def __init__(self, code: str, settings: Mapping[str, Any] | None = None) -> None:
        self._raw = code
        self._code: str | None = None
        self.settings: Mapping[str, Any] = {} if settings is None else settings

    @property
    def code(self) -> str:
        if self._code is None:
            self._code = code_block(self._raw)
        return self._code

    def __repr__(self) -> str:
        return f"Valid(code={self.code!r}, settings={self.settings!r})"


class Invalid:
    """Code on which the rule must fire on exactly the lines marked ``# TDnnn``.

    ``fixed`` is the expected source after ``--fix`` (safe fixes only); ``unsafe_fixed`` after
    ``--fix --unsafe-fixes``. ``None`` means "not checked" for ``unsafe_fixed`` and "no safe fix
    is offered" for ``fixed`` (the test then asserts the file is unchanged by ``--fix``). Like
    :class:`Valid`, the texts are dedented when first read.
    """

    __slots__ = ("_done", "_raw", "settings")

    def __init__(
        self,
        code: str,
        fixed: str | None = None,
        unsafe_fixed: str | None = None,
        settings: Mapping[str, Any] | None = None,
    ) -> None:
        self._raw = (code, fixed, unsafe_fixed)
        self._done: tuple[str, str | None, str | None] | None = None
        self.settings: Mapping[str, Any] = {} if settings is None else settings

    def _texts(self) -> tuple[str, str | None, str | None]:
        if self._done is None:
            code, fixed, unsafe = self._raw
            self._done = (
                code_block(code),
                None if fixed is None else code_block(fixed),
                None if unsafe is None else code_block(unsafe),
            )
        return self._done

    @property
    def code(self) -> str:
        return self._texts()[0]

    @property
    def fixed(self) -> str | None:
        return self._texts()[1]

    @property
    def unsafe_fixed(self) -> str | None:
        return self._texts()[2]

    def __repr__(self) -> str:
        return f"Invalid(code={self.code!r}, fixed={self.fixed!r}, unsafe_fixed={self.unsafe_fixed!r})"


class Rule:
    """Base class of every rule. Subclasses set the class attributes and override ``check``."""

    code: ClassVar[str] = ""
    name: ClassVar[str] = ""
    severity: ClassVar[Severity] = Severity.WARNING
    summary: ClassVar[str] = ""
    gpu_only: ClassVar[bool] = False
    static: ClassVar[bool] = True
    runtime: ClassVar[bool] = False
    #: Opinionated rules may be off unless selected explicitly.
    default_enabled: ClassVar[bool] = True
    #: "never", "sometimes" or "always": whether the static check offers a fix.
    fixable: ClassVar[str] = "never"
    #: Substrings of which at least one must occur in a file's source for ``check`` to be able
    #: to fire there (e.g. ``("DataLoader",)``). The engine skips the rule on other files without
    #: building anything; empty means "always run". Must be sound: an alias still spells the
    #: imported name somewhere in the file.
    triggers: ClassVar[tuple[str, ...]] = ()
    #: The rule may also fire on evidence that lives in another project module (a loader built
    #: in ``utils.py``, deprecated AMP in ``engine.py``): it runs on files whose trigger words are
    #: missing when the file imports a project module.
    project_aware: ClassVar[bool] = False

    what_it_does: ClassVar[str] = ""
    why_bad: ClassVar[str] = ""
    example: ClassVar[str] = ""
    use_instead: ClassVar[str] = ""
    fix_safety: ClassVar[str] = ""
    options: ClassVar[str] = ""
    references: ClassVar[tuple[str, ...]] = ()

    valid: ClassVar[tuple[Valid | str, ...]] = ()
    invalid: ClassVar[tuple[Invalid, ...]] = ()

    def check(self, ctx: FileContext) -> Iterable[Finding]:
        """Yield the static findings of this rule in one file. Default: none."""
        return ()

    @classmethod
    def valid_examples(cls) -> list[Valid]:
        return [v if isinstance(v, Valid) else Valid(v) for v in cls.valid]

    @classmethod
    def origins(cls) -> list[str]:
        out = []
        if cls.static:
            out.append("static")
        if cls.runtime:
            out.append("runtime")
        return out

    def __repr__(self) -> str:
        return f"<{self.code} {self.name}>"
