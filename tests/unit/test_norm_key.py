"""Issue 16 item 3 (review H1, L2): the entity key keeps what carries meaning and folds what
does not, property-tested both ways.

- Meaning-carrying edits never merge: an operator (< > <= >= ~ ^ = != # + @ ...) added,
  removed or swapped, a sign before a number, an exponent's sign, a leading dot or colon.
- Invisible and typographic edits always merge: zero-width characters, soft hyphens, bidi
  marks, dash variants, fullwidth forms, ligatures, curly quotes, look-alike letters of
  another script inside a word.
- The key is idempotent.

The look-alike letters below are typed from Unicode's confusables.txt (the data
`confusable_homoglyphs` ships), not derived from the code under test.
"""

from __future__ import annotations

import unicodedata

import pytest
from hypothesis import assume, example, given, settings
from hypothesis import strategies as st

from schemas.ids import canonical_text, decode_parts, encode_parts, legacy_digest, norm_key

# ------------------------------------------------------------------- the review's pairs (H1)

APART = [
    ("python <3.12", "python >3.12"),
    ("python <3.12", "python 3.12"),
    ("python <=3.12", "python <3.12"),
    ("python >=3.12", "python >3.12"),
    ("python ~=3.12", "python =3.12"),
    ("^1.2.0", "1.2.0"),
    ("~1.2.0", "1.2.0"),
    ("x != 1", "x = 1"),
    ("retries -1", "retries 1"),
    ("-1", "1"),
    ("-0.5", "0.5"),
    ("1e-5", "1e5"),
    ("1E-5", "1e5"),
    ("::1", "1"),
    ("fe80::1", "fe801"),
    ("8080:80", "808080"),
    ("localhost:8080", "localhost 8080"),
    (".NET", "NET"),
    (".NET", "net"),
    (".env", "env"),
    (".5", "5"),
    ("--force", "force"),
    ("C#", "C"),
    ("C++", "C"),
    ("C++", "C#"),
    ("pkg@1", "pkg1"),
    ("a&b", "ab"),
    ("50%", "50"),
]
TOGETHER = [
    ("payments\u200bapi", "payments-api"),  # zero-width space
    ("payments\u200capi", "payments api"),  # ZWNJ
    ("payments\u200dapi", "payments api"),  # ZWJ
    ("payments\u2060api", "payments api"),  # word joiner
    ("\ufeffpayments-api", "payments-api"),  # BOM
    ("pay\u00adments", "payments"),  # soft hyphen
    ("payments\u200f-api", "payments-api"),  # RLM
    ("\u200epayments-api", "payments-api"),  # LRM
    ("payments\u2013api", "payments-api"),  # en dash
    ("payments\u2014api", "payments-api"),  # em dash
    ("payments\u2010api", "payments-api"),  # hyphen
    ("payments\u2011api", "payments-api"),  # non-breaking hyphen
    ("retries \u22121", "retries -1"),  # minus sign
    ("1e\u22125", "1e-5"),
    ("ＰｏｓｔｇｒｅＳＱＬ", "PostgreSQL"),  # fullwidth
    ("\ufb01le-server", "file-server"),  # ligature fi
    ("\u201cquoted\u201d name", '"quoted" name'),  # curly quotes
    ("Maria\u2019s notes", "Maria's notes"),
    ("p\u0430yments", "payments"),  # Cyrillic a
    ("pa\u0443ments", "payments"),  # Cyrillic u (looks like y)
    ("r\u0435dis", "redis"),  # Cyrillic ie
    ("\u03bfpenai", "openai"),  # Greek omicron
    ("python \u22643.12", "python <=3.12"),
    ("python \u22653.12", "python >=3.12"),
    ("x \u2260 1", "x != 1"),
    ("\u00bd", "1/2"),
    ("python < 3.12", "python <3.12"),
    ("x != 1", "x!=1"),
    ("node.js", "Node JS"),
    ("Node 18", "node-18"),
    ("10.0.0.1", "10.0.0.1."),
    ("payments-api", "Payments API"),
]


@pytest.mark.parametrize(("a", "b"), APART)
def test_meaning_keeps_names_apart(a: str, b: str) -> None:
    assert norm_key(a) != norm_key(b)


@pytest.mark.parametrize(("a", "b"), TOGETHER)
def test_invisible_and_typographic_variants_are_one_key(a: str, b: str) -> None:
    assert norm_key(a) == norm_key(b)


def test_a_word_in_one_script_is_left_alone() -> None:
    """A Russian word is not a misspelt Latin one, even where every letter has a look-alike."""
    assert norm_key("\u0441\u043e\u0440") != norm_key("cop")  # сор
    assert norm_key("Москва") == "москва"
    assert norm_key("Мoсква") == norm_key("Москва")  # a Latin o inside a Cyrillic word


# ------------------------------------------------------------------------------- generators

LETTERS = "abcdeopsxyij"
ALNUM = LETTERS + "ABCEOPXY0123456789"
WORD_SEPARATORS = [" ", "-", "_", ".", "/", " - ", ", ", "  "]
OPERATORS = ["<", ">", "<=", ">=", "~", "^", "=", "!=", "~=", "#", "+", "@", "&", "*", "%"]
INVISIBLE = [
    "\u200b",  # zero width space
    "\u200c",  # ZWNJ
    "\u200d",  # ZWJ
    "\u2060",  # word joiner
    "\ufeff",  # BOM / ZWNBSP
    "\u00ad",  # soft hyphen
    "\u200e",  # LRM
    "\u200f",  # RLM
    "\u061c",  # Arabic letter mark
    "\u202a",  # LRE
    "\u202b",  # RLE
    "\u202c",  # PDF
    "\u202d",  # LRO
    "\u202e",  # RLO
    "\u2066",  # LRI
    "\u2067",  # RLI
    "\u2068",  # FSI
    "\u2069",  # PDI
    "\u034f",  # combining grapheme joiner
    "\ufe0f",  # variation selector 16
]
DASHES = ["\u2010", "\u2011", "\u2012", "\u2013", "\u2014", "\u2212", "\ufe63", "\uff0d"]
# Latin letter -> its Cyrillic look-alike (confusables.txt: 0430 ; 0061, 0441 ; 0063, ...).
CYRILLIC = {
    "a": "\u0430",
    "c": "\u0441",
    "e": "\u0435",
    "o": "\u043e",
    "p": "\u0440",
    "x": "\u0445",
    "y": "\u0443",
    "i": "\u0456",
    "s": "\u0455",
    "j": "\u0458",
}

words = st.text(alphabet=ALNUM, min_size=1, max_size=6)


@st.composite
def names(draw: st.DrawFn, separators: list[str] = WORD_SEPARATORS) -> str:
    parts = draw(st.lists(words, min_size=1, max_size=4))
    out = parts[0]
    for part in parts[1:]:
        out += draw(st.sampled_from(separators)) + part
    return out


def word_starts(name: str) -> list[int]:
    """Positions where an alphanumeric word starts after the name's start or a space."""
    return [
        i
        for i, ch in enumerate(name)
        if ch.isalnum() and (i == 0 or name[i - 1] == " ") and (i < 2 or name[i - 2] != " ")
    ]


# ---------------------------------------------------------- meaning-carrying edits: apart


@given(name=names(), op=st.sampled_from(OPERATORS), data=st.data())
def test_adding_an_operator_never_merges(name: str, op: str, data: st.DataObject) -> None:
    at = data.draw(st.integers(0, len(name)))
    assert norm_key(name[:at] + op + name[at:]) != norm_key(name)


@given(name=names(), ops=st.lists(st.sampled_from("<>~^=#+@"), min_size=2, max_size=2, unique=True))
def test_swapping_an_operator_never_merges(name: str, ops: list[str]) -> None:
    a, b = ops
    at = len(name) // 2
    assert norm_key(name[:at] + a + name[at:]) != norm_key(name[:at] + b + name[at:])


@given(
    name=names(separators=[" ", "  ", " _ ", " / "]),
    mark=st.sampled_from(["-", ".", ":", "::", "--"]),
    data=st.data(),
)
@example(name="retries 1", mark="-", data=None)
def test_a_sign_dot_or_colon_starting_a_word_never_merges(
    name: str, mark: str, data: st.DataObject | None
) -> None:
    starts = word_starts(name)
    at = data.draw(st.sampled_from(starts)) if data is not None else starts[-1]
    assert norm_key(name[:at] + mark + name[at:]) != norm_key(name)


@given(
    mantissa=st.from_regex(r"[0-9]{1,3}(\.[0-9]{1,2})?", fullmatch=True),
    e=st.sampled_from("eE"),
    exponent=st.from_regex(r"[0-9]{1,2}", fullmatch=True),
    prefix=st.sampled_from(["", "lr ", "learning rate "]),
)
def test_an_exponent_sign_never_merges(mantissa: str, e: str, exponent: str, prefix: str) -> None:
    plain = f"{prefix}{mantissa}{e}{exponent}"
    minus = f"{prefix}{mantissa}{e}-{exponent}"
    assert norm_key(minus) != norm_key(plain)
    assert norm_key(f"{prefix}{mantissa}{e}+{exponent}") != norm_key(plain)
    assert norm_key(minus) != norm_key(f"{prefix}{mantissa}{e}+{exponent}")


# ------------------------------------------------------- typographic edits: always together


@st.composite
def typographic_variant(draw: st.DrawFn) -> tuple[str, str]:
    """A name with operators, signs and digits, and a spelling of it that renders the same
    (or differs only in case, width or dash shape)."""
    name = draw(names(separators=[*WORD_SEPARATORS, " <", " >=", " -", "=-", " ."]))
    out: list[str] = []
    for word_or_sep in _letter_runs(name):
        if word_or_sep.isalpha() and len(word_or_sep) >= 2:
            out.append(_cyrillic_minority(draw, word_or_sep))
        else:
            out.append(word_or_sep)
    chars: list[str] = []
    for ch in "".join(out):
        form = draw(st.sampled_from(["same", "case", "wide", "dash", "invisible"]))
        if ch == "-" and form == "dash":
            ch = draw(st.sampled_from(DASHES))
        elif form == "wide" and "!" <= ch <= "~":
            ch = chr(ord(ch) + 0xFEE0)
        elif form == "case" and ch.isascii():
            ch = ch.swapcase()
        elif form == "invisible":
            ch = draw(st.sampled_from(INVISIBLE)) + ch + draw(st.sampled_from(INVISIBLE))
        chars.append(ch)
    variant = "".join(chars).replace("fi", "\ufb01").replace('"', "\u201d")
    return name, variant


def _letter_runs(name: str) -> list[str]:
    runs: list[str] = []
    for ch in name:
        if runs and runs[-1].isalpha() == ch.isalpha() and ch.isascii():
            runs[-1] += ch
        else:
            runs.append(ch)
    return runs


def _cyrillic_minority(draw: st.DrawFn, word: str) -> str:
    """Up to half of a Latin word's letters swapped for Cyrillic look-alikes."""
    spots = [i for i, ch in enumerate(word) if ch.lower() in CYRILLIC]
    chosen = (
        draw(st.lists(st.sampled_from(spots), unique=True, max_size=len(word) // 2))
        if spots
        else []
    )
    letters = list(word)
    for i in chosen:
        swap = CYRILLIC[letters[i].lower()]
        letters[i] = swap.upper() if letters[i].isupper() else swap
    return "".join(letters)


@settings(max_examples=300)
@given(case=typographic_variant())
def test_typographic_variants_always_merge(case: tuple[str, str]) -> None:
    name, variant = case
    assert norm_key(variant) == norm_key(name), (name, variant)


@given(name=names(), data=st.data())
def test_invisible_characters_anywhere_never_matter(name: str, data: st.DataObject) -> None:
    marks = data.draw(st.lists(st.tuples(st.integers(0, len(name)), st.sampled_from(INVISIBLE))))
    spoofed = name
    for at, mark in sorted(marks, reverse=True):
        spoofed = spoofed[:at] + mark + spoofed[at:]
    assert norm_key(spoofed) == norm_key(name)


# ------------------------------------------------------------------------------ idempotence


@settings(max_examples=500)
@given(name=st.text(max_size=24) | names() | typographic_variant().map(lambda c: c[1]))
@example(name="a -.b")
@example(name="ﬃ")
@example(name="\u1e9e")
def test_the_key_is_idempotent(name: str) -> None:
    key = norm_key(name)
    assert norm_key(key) == key
    assert canonical_text(key) == key or not key.strip()


@given(name=st.text(max_size=24))
def test_the_key_holds_no_invisible_or_unnormalised_character(name: str) -> None:
    key = norm_key(name)
    assert not any(ch in key for ch in INVISIBLE)
    assert unicodedata.normalize("NFKC", key) == key


# ----------------------------------------------------------------- the id encoding (L3)

id_parts = st.lists(st.text(alphabet="ab\x1e\x1f\\", max_size=5), min_size=1, max_size=5)


@given(parts=id_parts)
def test_the_id_encoding_is_injective(parts: list[str]) -> None:
    assert decode_parts(encode_parts(tuple(parts))) == tuple(parts)


@given(a=id_parts, b=id_parts)
def test_different_parts_never_share_an_encoding(a: list[str], b: list[str]) -> None:
    assume(a != b)
    assert encode_parts(tuple(a)) != encode_parts(tuple(b))


@given(
    parts=st.lists(st.text(max_size=8).filter(lambda p: not set(p) & {"\x1e", "\x1f"}), min_size=1)
)
def test_ids_without_separator_characters_keep_their_old_digest(parts: list[str]) -> None:
    """Why no stored id changes: every id whose parts hold neither character hashes as before."""
    from schemas.ids import _digest

    assert _digest(*parts) == legacy_digest(*parts)


def test_the_review_collision_is_gone() -> None:
    from schemas.ids import turn_key

    assert turn_key("acme", "r", "a\x1fb", "c") != turn_key("acme", "r", "a", "b\x1fc")


def test_ascii_names_and_the_landing_writer_never_load_the_unicode_engine() -> None:
    """`regex` (about 50 ms to import) loads on the first non-ASCII name only: the hooks'
    import path (memflow.landing) and ASCII names go without it, and the first non-ASCII name
    in a fresh process keys as it does here."""
    import subprocess
    import sys

    code = (
        "import sys, memflow.landing;"
        "from schemas.ids import norm_key;"
        "a = norm_key('Python <3.12'); before = 'regex' in sys.modules;"
        "b = norm_key('p\\u0430yments\\u2011api');"
        "print(before, 'regex' in sys.modules, a, b, sep='|')"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, encoding="utf-8"
    )
    assert done.stdout.rstrip("\n").split("|") == [
        "False", "True", norm_key("python <3.12"), norm_key("payments-api"),
    ]  # fmt: skip
