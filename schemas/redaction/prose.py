from __future__ import annotations

import re
from collections.abc import Iterable

from schemas.redaction._base import (
    _at,
    _bounded,
    _Detector,
    _run_end,
    _word_starts,
)
from schemas.redaction.assignments import (
    _IDENTIFIED_BY_GATE,
    _PROSE_GATE,
    _VALUE_SCAN,
)
from schemas.redaction.keywords import (
    _CJK_KEYWORDS,
)
from schemas.redaction.values import (
    _PROSE_TRAILING,
    _is_value,
    _prose_password,
)

# no library plugin finds a password stated in a sentence. Unquoted, the value must look like
# a password (below), so "the password is required" and "passwords are hashed" stay.
_SP = "[ \t\u00a0]"  # French sets a no-break space before its colon and inside « »
_INTL_QUOTED = rf"""(?P<q>["'`])(?P<qv>[^\n]*?)(?P=q)
    |«{_SP}*(?P<gv>(?:[^«»\n]*[^«»\n \t\u00a0])?){_SP}*»|“(?P<cv>[^“”\n]*)”
    |„(?P<dv>[^„“”\n]*)[“”]|「(?P<jv>[^「」\n]*)」|『(?P<kv>[^『』\n]*)』"""
_INTL_QUOTE_GROUPS = ("qv", "gv", "cv", "dv", "jv", "kv")
_PROSE_KEY = r"(?<![\w.-])(?P<key>pass(?:word|wd|phrase|code)s?|pwd|pw)"
# The copulas of languages that say the English word ("la password è ...", "das Password ist
# ...", "heslo/password je ...", "salasana/password on ...", "mật khẩu/password là ...").
_FOREIGN_COPULA = (
    r"è|era|sarà|é|ist|war|est|es|je|bylo|on|oli|là|είναι|ήταν|هي|هو|है|था|adalah|ialah|är"
    r"|er|jest|это|ir|yra|este|е|היא|הוא|คือ"
)
_PROSE = re.compile(
    rf"""
    {_PROSE_KEY}
    (?:[ \t]+(?:for|of|on|to|in|at|from)[ \t]+(?:(?:the|my|our|your|this|that)[ \t]+)?
       (?:[\w.@/:-]+[ \t]+){{0,2}}[\w.@/:-]+)?      # "for the staging db"
    [ \t]+(?:is|was|are|were|became|remains|(?:will|would|should)[ \t]+be|to
             |{_FOREIGN_COPULA})[ \t]*:?
    (?:[ \t]+(?:now|still|just|actually|currently|simply|literally|always|again
               |set[ \t]+to|changed[ \t]+to))*
    [ \t]+(?:{_INTL_QUOTED}|(?P<v>[^\s"'`“”«»„]+))
    """,
    re.IGNORECASE | re.VERBOSE,
)
# "password Hunter2RT", no verb: only a value that looks strongly like a password; quoted
# right after the word, as SQL writes it (`WITH PASSWORD 'x'`, `IDENTIFIED BY 'x'`), any.
_PROSE_BARE = re.compile(
    rf"""(?:{_PROSE_KEY}|(?<![\w.-])identified[ \t]+by)[ \t]+
    (?:(?P<q>['"])(?P<qv>(?:\\.|''|[^\n\\'"])*)(?P=q)|(?P<v>[^\s"'`]+))""",
    re.IGNORECASE | re.VERBOSE,
)


def _prose_span(
    m: re.Match[str], strong: bool = False, end: int | None = None
) -> tuple[int, int] | None:
    """`end`: where the value ends, if not where its group does (`_intl_prose_span`)."""
    for group in _INTL_QUOTE_GROUPS:
        if group in m.re.groupindex and (value := m.group(group)) is not None:
            return m.span(group) if _is_value(value, "password", quoted=True) else None
    start = m.start("v")
    text = m.string
    if end is None:
        end = m.end("v")
    elif end - start > _VALUE_SCAN:  # long: judged on its head, cut whole
        return None if text.startswith(_NO_PASSWORD_HEADS, start) else (start, end)
    while end > start and text[end - 1] in _PROSE_TRAILING:
        end -= 1
    while start < end and text[start] in "([<":
        start += 1
    return (start, end) if _prose_password(text[start:end], strong) else None


# What the head of a long value (`_prose_span`) proves it no password: a path, an address, a
# command substitution or CI expression.
_NO_PASSWORD_HEADS = ("/", "~", ".", "http:", "https:", "$(", "${{")


def _prose_bare_span(m: re.Match[str]) -> tuple[int, int] | None:
    return _prose_span(m, strong=True)


# The same in other languages (no library plugin either): "das Passwort ist Hunter2RT",
# "le mot de passe est « x y »", "mi contraseña es ...", "a senha é ...", "het wachtwoord is
# ...", "lösenordet är ...", "passordet er ...", "adgangskoden er ...", "hasło to ...",
# "пароль от базы — ...", "пароль це ...", "şifre: ...", "数据库密码是...", "パスワードは...",
# "비밀번호는 ...". A word for password, a copula of its language (or a colon or a dash), the
# value; quoted also in the typographic quotes of those languages. The value must look like a
# password as above, so "das Passwort ist erforderlich", "le mot de passe est requis" and
# "пароль обязателен" stay; without a copula ("Passwort Hunter2RT") it must look strongly like
# one. `clave` (Spanish for key as much as for password) and `parola` (Italian for word) need
# that even when quoted, and never stand without a copula.
# The words, by language; German, Dutch and the Scandinavian languages also as the end of a
# compound ("Datenbankpasswort", "Root-Passwort", "adminwachtwoord", "databaslösenordet").
_COMPOUND_WORDS = (
    "passwort", "kennwort", "wachtwoord(?:en)?", "lösenord(?:et)?", "passord(?:et)?",
    "adgangskoden?", "kodeord(?:et)?",
)  # fmt: skip
_SIMPLE_WORDS = (
    rf"mot{_SP}+de{_SP}+passe", "contrase[ñn]as?", "claves?", "senhas?", "palavra-passe",
    "hasł(?:o|a|em)", "парол(?:ь|я|ем)", "şifre(?:si|m|miz|n|niz)?",
    "parola(?:sı|m|mız|n|nız)?", "mdp", "hesl(?:o|a|em)", "salasana(?:ni|si|mme|nne|n)?",
    rf"mật{_SP}+khẩu", rf"κωδικ(?:ός|ού|ό)(?:{_SP}+πρόσβασης)?", "συνθηματικό",
    rf"كلمة{_SP}+(?:المرور|السر|مرور)", "पासवर्ड", "कूटशब्द", rf"kata{_SP}+(?:sandi|laluan)",
    "jelsz(?:ó|ava|avam|avad)", "parolă", "parola[sm]?", "lozink(?:a|e|u|om)", "geslo",
    "лозинк(?:а|е|у)", "парол(?:ата|а)", "parool", "parole", "slaptažod(?:is|žio|į)",
    "[הובלמש]?סיסמ(?:ה|א|ת|ות)", rf"رمز{_SP}+(?:عبور|ورود)", "گذرواژه", "nenosiri", "contrasenya",
    "contrasinal", "pasahitz(?:a)?", "lykilorð(?:ið)?", "pasfhocal",
)  # fmt: skip
_INTL_WORDS = rf"(?:[^\W\d_]+-?)??(?:{'|'.join(_COMPOUND_WORDS)})|{'|'.join(_SIMPLE_WORDS)}"
_CJK_WORDS = "|".join(_CJK_KEYWORDS)
# "for the staging db": a preposition, then up to four words.
_INTL_FOR = (
    r"für|von|vom|zum|zur|des|der|de|du|pour|del|da|do|para|voor|van|för|till|for|til"
    r"|dla|od|от|для|к|від|до"
)
_INTL_COPULA = (
    r"ist|war|lautet|lautete|wäre|bleibt"  # de
    r"|est|était|sera|reste"  # fr
    r"|es|era|será|sigue|é|fica|continua"  # es, pt
    r"|is|was|wordt|blijft"  # nl
    r"|är|var|blir|er|bliver"  # sv, no, da
    r"|to|jest|brzmi|był[oa]?"  # pl
    r"|это|был[оа]?|будет|це|був|було|буде|є"  # ru, uk
    r"|je|bylo|byl[oa]?|bude|zní"  # cs, sk, hr, sr, sl
    r"|on|oli|olisi"  # fi, et
    r"|là|είναι|ήταν|هي|هو|كانت|है|था|थी|adalah|ialah"  # vi, el, ar, hi, id, ms
    r"|az|volt|lesz|este|era|e|glasi|е|беше|ir|bija|yra|buvo|היא|הוא|است|ni|er|var"  # more
)
_INTL_ADVERB = (
    r"jetzt|nun|noch|immer|einfach|maintenant|toujours|encore|siendo|ahora|todavía|aún|agora"
    r"|ainda|sendo|nu|nog|fortfarande|fortsatt|stadig|teraz|nadal|wciąż|теперь|сейчас|всё"
    r"|ещё|тепер|зараз|досі"
)
# Quoted values: ASCII quotes, « », “ ”, „ “ (or ”), 「 」, 『 』. A value in quotes that
# open and close apart holds no opening quote of its kind: a scan from each opening quote
# then stops at the next one (which the next "Passwort: «" opens), not at the one closing
# quote after them all (read again from each). Blanks inside « » are trimmed greedily
# (a lazy value tried the blanks after it at each of its characters).

# An unquoted value ends at a space, a quote, CJK punctuation or a CJK character
# ("密码是Hunter2RT，请勿外传", "パスワードはHunter2RTです"), and at a JSON escape (`\n`, `\"`,
# `\u00fc`; an escaped backslash is part of it): such text is read decoded too (`_views`), and
# "Passwort f\u00fcr" is no password.
_INTL_VALUE_STEP = (
    r"(?:[^\s\\\"'`«»“”„「」『』\u3000-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af"
    r"\uff00-\uffef]|\\\\|\\(?![nrtu\"/\\]))"
)
# The regex stops where the value starts (`Passwort:Passwort:...` holds a key in each value,
# each running to the same end): its run is read once (`_run_end`), and a value longer than
# `_VALUE_SCAN` characters is judged on its head (`_prose_span`).
_INTL_VALUE = rf"(?P<v>(?={_INTL_VALUE_STEP}))"
_INTL_VALUE_RUN = re.compile(_INTL_VALUE_STEP + "*")
_PROSE_INTL = re.compile(
    rf"""
    (?<![\w.])(?P<key>{_INTL_WORDS})(?![\w-])
    (?:(?:(?:{_SP}+(?:{_INTL_FOR}){_SP}+|{_SP}+d['’])
          (?:[\w.@/:'’-]+{_SP}+){{0,3}}?[\w.@/:'’-]+
        |(?:{_SP}+[\w.@/:'’-]+){{1,2}}(?={_SP}+(?:{_INTL_COPULA}){_SP}))?
       (?P<cop>{_SP}*[:：]|{_SP}+(?:{_INTL_COPULA})(?={_SP}|[:：])(?:{_SP}*[:：](?={_SP}))?
              |{_SP}+[—–-](?={_SP}))
       (?:{_SP}+(?:{_INTL_ADVERB})(?={_SP}))*{_SP}*
     |(?:{_SP}+(?:{_INTL_FOR}){_SP}+(?:[\w.@/:'’-]+{_SP}+){{0,2}}?[\w.@/:'’-]+)?{_SP}+)
    (?:{_INTL_QUOTED}|{_INTL_VALUE})
    """,
    re.IGNORECASE | re.VERBOSE,
)
# Chinese, Japanese and Korean write no space between the word, its copula or particle and
# the value; the word may end a compound ("数据库密码").
_PROSE_CJK = re.compile(
    rf"""
    (?P<key>{_CJK_WORDS})
    (?:(?P<cop>{_SP}*(?:就是|是|为|為|は|が|는|은|이|가|คือ)(?:{_SP}*[:：])?|{_SP}*[:：=])
     |(?={_SP}*[!-~]))
    {_SP}*(?:{_INTL_QUOTED}|{_INTL_VALUE})
    """,
    re.VERBOSE,
)
_WEAK_PROSE_KEY = re.compile(r"claves?|parola", re.IGNORECASE)


def _intl_prose_span(m: re.Match[str]) -> tuple[int, int] | None:
    bare = m.group("cop") is None  # "Passwort Hunter2RT": no copula, no colon
    weak = _WEAK_PROSE_KEY.fullmatch(m.group("key")) is not None
    if bare and weak:
        return None
    for group in _INTL_QUOTE_GROUPS:
        if (value := m.group(group)) is not None:
            if not _is_value(value, "password", quoted=True):
                return None
            if (bare or weak) and not _prose_password(value, strong=True):
                return None
            return m.span(group)
    end = _run_end(_INTL_VALUE_RUN, m.string, m.start("v"))
    if m.string.startswith("\\u", end):
        return None  # a word with an escaped letter: its decoded form is judged
    return _prose_span(m, strong=bare or weak, end=end)


# Each word, followed by what every match shows after it (a space, or a colon).
_MOT_DE_PASSE_GATE = "mot" + _bounded(_SP, "de" + _bounded(_SP, "passe", least=1), least=1)


def _gate_of(word: str) -> str:
    """What every match of a word shows: the word (a phrase's first word) and a blank or a
    colon after it."""
    if word.startswith("mot"):
        return rf"{_MOT_DE_PASSE_GATE}[ \t\u00a0:：]"
    word = re.sub(r"^\[[^\]]*\]\?", "", word)  # an optional prefix (Hebrew's article ה)
    optional = f"(?:{_SP}+"
    if optional in word:  # "κωδικός( πρόσβασης)": the word, then a blank, a colon or the rest
        return word.split(optional)[0] + "[ \t\u00a0:：]"
    if f"{_SP}+" in word:  # "mật khẩu", "kata sandi": the first word and its blank
        return word.split(f"{_SP}+")[0] + "[ \t\u00a0]"
    return rf"{word}[ \t\u00a0:：]"


_INTL_GATE = tuple(_gate_of(w) for w in (*_COMPOUND_WORDS, *_SIMPLE_WORDS))
_CJK_GATE = tuple(_CJK_WORDS.split("|"))
_INTL_STEMS = ("passwort", "kennwort", "wachtwoord", "lösenord", "passord", "adgangskode",
               "kodeord", "mot", "contrase", "clave", "senha", "palavra", "hasł", "парол",
               "şifre", "parola", "mdp", "hesl", "salasan", "mật", "κωδικ", "συνθηματικ",
               "كلمة", "पासवर्ड", "कूटशब्द", "kata", "jelsz", "parolă", "lozink", "geslo",
               "лозинк", "parool", "parole", "slaptažod", "סיסמ", "رمز", "گذرواژه",
               "nenosiri", "contrasenya", "contrasinal", "pasahitz", "lykilorð",
               "pasfhocal")  # fmt: skip


def _intl_starts(text: str, lowered: str) -> Iterable[int]:
    """The start of the word holding each stem (a compound's first letter)."""
    return _word_starts(text, lowered, _INTL_STEMS, _in_compound)


def _in_compound(c: str) -> bool:
    return c.isalpha() or c == "-"


# --- AWS secret access keys without a quote ---------------------------------------------------


DETECTORS: tuple[_Detector, ...] = (
    _Detector(
        "password",
        _PROSE,
        _PROSE_GATE,
        priority=4,
        refine=_prose_span,
        starts=_at("pass", "pw", before=r"(?<![\w.-])"),
    ),
    _Detector(
        "password",
        _PROSE_BARE,
        (*_PROSE_GATE, _IDENTIFIED_BY_GATE),
        priority=4,
        refine=_prose_bare_span,
        starts=_at("pass", "pw", "identified", before=r"(?<![\w.-])"),
    ),
    _Detector(
        "password",
        _PROSE_INTL,
        _INTL_GATE,
        priority=4,
        refine=_intl_prose_span,
        starts=_intl_starts,
    ),
    _Detector(
        "password",
        _PROSE_CJK,
        _CJK_GATE,
        priority=4,
        refine=_intl_prose_span,
        starts=_at(*_CJK_GATE),
    ),
)
