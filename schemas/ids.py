"""Stable ids and entity-name keys: the same input gives the same ids on every run.

The entity-resolution rule is `norm_key`, written once here (README "Entity resolution"). Ids
hash their parts through an injective encoding (`encode_parts`), so two different part lists
never share an id's input.
"""

from __future__ import annotations

import functools
import hashlib
import re
import unicodedata
from types import SimpleNamespace
from typing import Any

# ---------------------------------------------------------------------- typographic variants

# Other typographic spellings of one ASCII symbol (NFKC leaves them apart).
_SYMBOL_VARIANTS = str.maketrans(
    {
        "\u2044": "/",  # fraction slash (NFKC writes ½ as 1⁄2)
        "\u2215": "/",  # division slash
        "\u29f8": "/",  # big solidus
        "\u2236": ":",  # ratio
        "\u2264": "<=",
        "\u2a7d": "<=",
        "\u2265": ">=",
        "\u2a7e": ">=",
        "\u2260": "!=",
    }
)
# Scripts whose look-alike letters fold into a word's dominant script (Unicode confusables).
_FOLD_SCRIPTS = ("LATIN", "CYRILLIC", "GREEK")


@functools.cache
def _unicode() -> Any:
    """The patterns non-ASCII names need, built on first use with `regex` (Unicode's own
    property tables): an ASCII name, and every hook that never meets another, never loads it.

    - invisible: Default_Ignorable_Code_Point (zero-width space, ZWJ, ZWNJ, word joiner, BOM,
      soft hyphen, bidi marks and controls, variation selectors, ...);
    - dash: Unicode's Dash property (hyphen U+2010, non-breaking hyphen, figure, en and em
      dashes, the minus sign U+2212, ...), each read as "-", whose meaning (a sign, a hyphen)
      is then judged like any "-";
    - separators: ignorable between words: whitespace, ASCII punctuation without meaning of
      its own, quotation marks and brackets of any script. Never separators: letters, digits,
      and the symbols that carry meaning (< > = ~ ^ + # @ & * % $ ...).
    """
    import regex

    return SimpleNamespace(
        invisible=regex.compile(r"\p{Default_Ignorable_Code_Point}+"),
        dash=regex.compile(r"\p{Dash}"),
        scripts={s: regex.compile(rf"\p{{Script={s.title()}}}") for s in _FOLD_SCRIPTS},
        letters=regex.compile(r"\p{L}[\p{L}\p{M}]*"),
        separators=regex.compile(
            r"[\s\-_.,;:/\\'\"`()\[\]{}|!?\p{Quotation_Mark}\p{Ps}\p{Pe}\u3001\u3002\u30fb\u00b7]+"
        ),
        spaces=regex.compile(r"\s+"),
    )


# ------------------------------------------------------------------------------ separators

# The same for ASCII text (most names), with the standard library's faster engine.
# (Whitespace as Unicode's White_Space has it in ASCII, as `regex` reads \s; Python's \s would
# also take \x1c-\x1f.)
_ASCII_SEPARATORS = re.compile(r"[ \t\n\r\f\v\-_.,;:/\\'\"`()\[\]{}|!?]+")
# An ASCII name without these has no separator that could carry meaning: all of them go.
_ASCII_SPACES = re.compile(r"[ \t\n\r\f\v]+")
_ASCII_CONTEXT = re.compile(r"[-.:!]|\d[ \t\n\r\f\v_,;/\\'\"`()\[\]{}|?]+\d")
# Characters that mark the start of a word and so carry meaning there: a sign ("-1"), a flag
# ("--force"), a leading dot (".NET", ".env", ".5"), colons ("::1", ":memory:").
_WORD_PREFIX = "-.:"


# Id parts are joined by _UNIT (as ids were before issue 16). A part holding _UNIT or _ESCAPE
# made that join ambiguous (("a\x1fb", "c") and ("a", "b\x1fc") collided); such parts are
# escaped instead, so the encoding is injective and every id whose parts hold neither
# character is what it always was (no stored id changes: README "Stable ids").
_UNIT = "\x1f"
_ESCAPE = "\x1e"


def encode_parts(parts: tuple[str, ...]) -> str:
    """An injective encoding of one or more strings: the parts joined by \x1f when none holds
    \x1f or \x1e; otherwise each part with \x1e and \x1f escaped by a \x1e, then joined. An
    escaped encoding always holds a \x1e and a plain one never does, so the two kinds never
    meet, and each is decoded by `decode_parts`."""
    joined = _UNIT.join(parts)
    if _ESCAPE not in joined and joined.count(_UNIT) == len(parts) - 1:
        return joined
    return _UNIT.join(
        p.replace(_ESCAPE, _ESCAPE * 2).replace(_UNIT, _ESCAPE + _UNIT) for p in parts
    )


def decode_parts(text: str) -> tuple[str, ...]:
    """The inverse of `encode_parts` (for its tests and for reading an id's input back)."""
    parts: list[str] = []
    current: list[str] = []
    chars = iter(text)
    for ch in chars:
        if ch == _ESCAPE:
            current.append(next(chars, ""))
        elif ch == _UNIT:
            parts.append("".join(current))
            current = []
        else:
            current.append(ch)
    parts.append("".join(current))
    return tuple(parts)


def _digest(*parts: str, size: int = 16) -> str:
    return hashlib.sha256(encode_parts(parts).encode("utf-8")).hexdigest()[:size]


def legacy_digest(*parts: str, size: int = 16) -> str:
    """The digest before the injective encoding (parts joined by \x1f as they are): differs
    from `_digest` only for parts holding \x1f or \x1e (`legacy_turn_key`)."""
    return hashlib.sha256(_UNIT.join(parts).encode("utf-8")).hexdigest()[:size]


def canonical_text(name: str) -> str:
    """`name` with every invisible and typographic variant folded (the first half of
    `norm_key`): invisible characters removed, NFKC compatibility forms (fullwidth, ligatures),
    dashes as "-", a few symbol variants (fraction slash, ≤ ≥ ≠), case folded, and letters of
    another script inside a word written in the word's own script (Cyrillic "а" in a Latin
    word is "a")."""
    if name.isascii():
        return name.lower()
    rx = _unicode()
    text = unicodedata.normalize("NFKC", rx.invisible.sub("", name))
    text = rx.dash.sub("-", text).translate(_SYMBOL_VARIANTS)
    text = unicodedata.normalize("NFKC", text.casefold())
    text = rx.invisible.sub("", text)  # casefold and NFKC never add one; kept for idempotence
    return text if text.isascii() else rx.letters.sub(_fold_word, text)


def _script(ch: str) -> str | None:
    for name, pattern in _unicode().scripts.items():
        if pattern.match(ch):
            return name
    return None


def _fold_word(match: Any) -> str:
    """A word mixing Latin, Cyrillic and Greek letters, written in the script most of its
    letters use (Latin on a tie): each other letter that Unicode lists as confusable with a
    letter of that script becomes it. A word in one script is left alone (a Russian word is
    not a misspelt English one)."""
    word = match.group()
    scripts = [_script(ch) for ch in word]
    counts = {s: scripts.count(s) for s in _FOLD_SCRIPTS if s in scripts}
    if len(counts) < 2:
        return word
    dominant = max(_FOLD_SCRIPTS, key=lambda s: (counts.get(s, 0), s == "LATIN"))
    table = _lookalikes(dominant)
    return "".join(
        table.get(ch, ch) if s is not None and s != dominant else ch
        for ch, s in zip(word, scripts, strict=True)
    )


@functools.cache
def _lookalikes(script: str) -> dict[str, str]:
    """Lower-case letters of the other fold scripts -> the first lower-case letter of `script`
    that Unicode's confusables list (confusables.txt, as the confusable_homoglyphs package
    ships it) gives for it. Loaded on first use: most names are ASCII and never need it."""
    from confusable_homoglyphs.confusables import confusables_data

    prefix = f"{script} SMALL LETTER "
    out: dict[str, str] = {}
    for ch, glyphs in confusables_data.items():
        if len(ch) != 1 or ch != ch.casefold() or _script(ch) in (None, script):
            continue
        for glyph in glyphs:
            if len(glyph["c"]) == 1 and glyph["n"].startswith(prefix):
                out[ch] = glyph["c"]
                break
    return out


def _kept(run: str, before2: str, before: str, after: str) -> str:
    """What of a run of separators between `before` and `after` carries meaning (see
    `norm_key`)."""
    if before.isdecimal() and after.isdecimal():
        return _one_space(run)
    if not after:
        return ""
    if run == "-" and before == "e" and before2.isdecimal() and after.isdecimal():
        return "-"  # an exponent's sign: 1e-5
    if run.endswith("!") and after == "=":
        return "!"  # the operator !=
    if run.strip(":") == "" and (before.isdecimal() or after.isdecimal()):
        return run  # ::1, 8080:80, localhost:8080
    tail = run[len(run.rstrip(_WORD_PREFIX)) :]
    if tail and after.isalnum():
        if not before:
            return tail
        if not before.isalnum():
            return tail  # after a symbol: x=-1, <-1
        if len(tail) < len(run):
            return " " + tail  # a new word starts here; the space keeps it one
    return ""


def _one_space(run: str) -> str:
    if run.isascii():
        return _ASCII_SPACES.sub(" ", run)
    return _unicode().spaces.sub(" ", run)


def norm_key(name: str) -> str:
    """The entity key: names with one key are one entity (README "Entity resolution").

    Invisible and typographic variants share a key (`canonical_text`): zero-width characters,
    soft hyphens, bidi marks, dash variants, NFKC compatibility forms, curly quotes, case, and
    Latin/Cyrillic/Greek look-alikes inside one word. So do spellings that differ only in
    separators between words: whitespace, ``- _ . , ; : / \\ ' " ` ( ) [ ] { } | ! ?``,
    quotation marks and brackets (``node.js`` / ``Node JS``, ``payments-api`` /
    ``Payments API``).

    What carries meaning is kept, so names that differ in it never share a key:

    - symbols other than those separators, e.g. ``< > = ~ ^ + # @ & * %`` (``python <3.12`` /
      ``python >3.12``, ``C++`` / ``C#`` / ``C``, ``pkg@1`` / ``pkg1``);
    - digits, and the separators between two digits as written, spaces collapsed (``Node
      1.8`` / ``Node 18``, ``10.0.0.1`` / ``100.0.1``, ``8080:80``);
    - a ``-``, ``.`` or ``:`` that starts a word (``-1`` / ``1``, ``.NET`` / ``NET``,
      ``.env`` / ``env``, ``::1`` / ``1``, ``--force``), an exponent's sign (``1e-5`` /
      ``1e5``), colons next to a digit, and the ``!`` of ``!=``.

    Idempotent (``norm_key(norm_key(x)) == norm_key(x)``); a name that is nothing but
    separators keys as itself, spaces collapsed. Property-tested both ways in
    tests/unit/test_entity_resolution.py.
    """
    text = canonical_text(name)
    ascii_text = text.isascii()
    if ascii_text and not _ASCII_CONTEXT.search(text):
        return _ASCII_SEPARATORS.sub("", text) or " ".join(text.split())
    parts: list[str] = []
    pos = 0
    separators = _ASCII_SEPARATORS if ascii_text else _unicode().separators
    for run in separators.finditer(text):
        start, end = run.span()
        parts.append(text[pos:start])
        pos = end
        before2 = text[start - 2] if start >= 2 else ""
        before = text[start - 1] if start else ""
        after = text[end] if end < len(text) else ""
        parts.append(_kept(run.group(), before2, before, after))
    parts.append(text[pos:])
    key = "".join(parts)
    if not key.isascii():  # a mark that followed a dropped separator joins the letter before
        key = unicodedata.normalize("NFKC", key)
    return key or " ".join(text.split())


def entity_id(tenant_id: str, ns: str, key: str) -> str:
    return "e_" + _digest(tenant_id, ns, key)


def fact_id(tenant_id: str, ns: str, subject_id: str, predicate: str, object_id: str) -> str:
    return "f_" + _digest(tenant_id, ns, subject_id, predicate, object_id)


def reopened_fact_id(tenant_id: str, ns: str, fact_id: str, request_id: str) -> str:
    """The id of a fact restated after the retraction `request_id` closed `fact_id` (the same
    subject, predicate and object, a new period of validity: `memflow.retractions`)."""
    return "f_" + _digest(tenant_id, ns, fact_id, "reopened after", request_id)


def turn_key(tenant_id: str, ns: str, session_id: str, turn_id: str) -> str:
    return "t_" + _digest(tenant_id, ns, session_id, turn_id)


def legacy_turn_key(tenant_id: str, ns: str, session_id: str, turn_id: str) -> str:
    """The key a turn got before the injective encoding; equal to `turn_key` unless an id
    holds \x1f or \x1e (`memflow.rekey.rekey_turn_keys` moves stored keys over)."""
    return "t_" + legacy_digest(tenant_id, ns, session_id, turn_id)


def stable_id(prefix: str, *parts: str) -> str:
    return prefix + _digest(*parts)


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()
