"""What a server says about a tool, vetted before anything believes it (plain Python, no ORM).

- **Names** follow the MCP spec's tool-name rules (2025-11-25, "Tool names"): 1 to 128 characters, ASCII
  letters, digits, ``_``, ``-`` and ``.``. A name outside them (a Cyrillic look-alike letter, a space, a
  control character, 129 characters) is refused with the reason; a name listed twice by one server is
  refused too (which of the two would a call reach?).
- **Text** a server sends (descriptions, schema and annotation strings, results, error messages, its
  name and version) loses its terminal and layout controls before any page, Slack message or model sees
  it (:func:`clean_text`): ANSI escape sequences, BEL and every other C0/C1 control but tab and newline,
  and every invisible character that makes text read other than it is (bidi overrides, zero-width and
  other format characters, the tag letters, variation selectors, fillers: :func:`_invisible_codes`).
- **Write words**: a name or a description that says the tool writes (``purge_cache``, ``purgeCache``,
  ``deleteAll``, "Permanently deletes ...", and destructive verbs of other languages: "Löscht ...",
  "Supprime ...", "Удаляет ...", "删除 ...", "يحذف ..."), read as a person reads it (accents, enclosed
  letters and letters spelled one by one folded), while the hints say read makes the tool a write,
  flagged (:func:`write_words`); so does ``readOnlyHint: true`` next to ``destructiveHint: true``.
- **Look-alikes**: :func:`skeleton` maps a name to what it looks like (case, separators and the ASCII
  confusables of Unicode's confusables.txt folded: ``0``/``o``, ``1``/``l``/``I``, ``rn``/``m``,
  ``vv``/``w``, ``cl``/``d``); two tools of different servers with one skeleton are flagged on the MCP
  page. Names are ASCII by the rule above, so an ASCII fold is the whole of the problem here: a
  non-ASCII look-alike is refused before it is compared.
"""

from __future__ import annotations

import re
import unicodedata
from typing import Any

NAME_RULE = re.compile(r"^[A-Za-z0-9_.-]{1,128}\Z")

# Terminal escapes first (CSI, OSC, DCS/SOS/PM/APC strings, two-character escapes), then single controls.
_ANSI = re.compile(
    r"\x1b\[[0-?]*[ -/]*[@-~]"  # CSI ... final byte
    r"|\x1b[\]PX^_][^\x07\x1b]*(?:\x07|\x1b\\)?"  # OSC / DCS / SOS / PM / APC, to BEL or ST
    r"|\x1b[@-Z\\-_]"  # a two-character escape
    r"|\x9b[0-?]*[ -/]*[@-~]"  # the 8-bit CSI
)
_CONTROLS = re.compile(
    "[\x00-\x08\x0b-\x1f\x7f-\x9f"  # C0 but tab and newline, DEL, C1
    "\u200b-\u200f\u202a-\u202e\u2060-\u2064\u2066-\u2069\ufeff]"  # zero-width, bidi marks and overrides
)


def _invisible_codes() -> frozenset[int]:
    """Characters that show nothing yet change how text reads to a program or a model: every format
    character (Unicode category Cf: zero-width, bidi, soft hyphen, the invisible tag letters U+E0020 to
    U+E007F that can spell a hidden instruction), the variation selectors, the combining grapheme joiner,
    and the blank fillers (Hangul, Khmer, Mongolian)."""
    bmp = [c for c in range(0x10000) if unicodedata.category(chr(c)) == "Cf"]
    others = [0x034F, 0x115F, 0x1160, 0x17B4, 0x17B5, 0x3164, 0xFFA0, 0x110BD, 0x110CD, 0xE0001]
    for start, end in ((0x180B, 0x1810), (0xFE00, 0xFE10), (0x13430, 0x13440), (0x1BCA0, 0x1BCA4)):
        others += range(start, end)
    for start, end in ((0x1D173, 0x1D17B), (0xE0020, 0xE0080), (0xE0100, 0xE01F0)):
        others += range(start, end)
    return frozenset(bmp + others)


_INVISIBLE_CODES = _invisible_codes()
_DROP_INVISIBLE = dict.fromkeys(_INVISIBLE_CODES)


def clean_text(text: str) -> str:
    """``text`` without terminal escapes, BEL and other controls (tab and newline kept; CR and the Unicode
    line and paragraph separators as newline: a line break shows as one everywhere),
    and without invisible characters (:func:`_invisible_codes`)."""
    text = text.replace("\r\n", "\n").replace("\r", "\n").replace("\u2028", "\n").replace("\u2029", "\n")
    return _CONTROLS.sub("", _ANSI.sub("", text)).translate(_DROP_INVISIBLE)


def clean_json(value: Any, depth: int = 0) -> Any:
    """Every string (keys too) of a JSON value through :func:`clean_text`."""
    if depth > 64:
        return None
    if isinstance(value, str):
        return clean_text(value)
    if isinstance(value, list):
        return [clean_json(v, depth + 1) for v in value]
    if isinstance(value, dict):
        return {clean_text(str(k)): clean_json(v, depth + 1) for k, v in value.items()}
    return value


_INVISIBLE = frozenset(chr(c) for c in _INVISIBLE_CODES)


def _hidden(char: str) -> bool:
    code = ord(char)
    return (code < 0x20 and char not in "\t\n\r") or 0x7F <= code <= 0x9F or char in _INVISIBLE


def control_path(value: Any, path: str = "arguments", depth: int = 0) -> str:
    """Where in a JSON value a string (or key) holds a terminal control, BEL, or a zero-width or
    bidirectional character ('' when none): arguments a person approves must read as they run."""
    if depth > 64:
        return path
    if isinstance(value, str):
        return path if any(_hidden(c) for c in value) else ""
    items = enumerate(value) if isinstance(value, list) else value.items() if isinstance(value, dict) else ()
    for key, item in items:
        where = f"{path}[{key!r}]" if isinstance(key, str) else f"{path}[{key}]"
        if isinstance(key, str) and any(_hidden(c) for c in key):
            return where
        if found := control_path(item, where, depth + 1):
            return found
    return ""


def shown_name(name: str) -> str:
    """A refused name as it may be shown: escaped (``\\u0430``), cut to 128 characters."""
    return name.encode("ascii", "backslashreplace").decode("ascii")[:120] or "(empty)"


def name_problem(name: Any) -> str:
    """Why a tool name breaks the spec's rules ('' when it does not)."""
    if not isinstance(name, str) or not name:
        return "an empty tool name"
    if len(name) > 128:
        return f"a tool name of {len(name)} characters (the MCP spec allows 1 to 128)"
    bad = sorted({c for c in name if not re.match(r"[A-Za-z0-9_.-]", c)})
    if bad:
        shown = ", ".join(f"U+{ord(c):04X}" for c in bad[:5])
        return f"characters outside the MCP spec's tool-name rules (ASCII letters, digits, _ - .): {shown}"
    return ""


# --- write words --------------------------------------------------------------------------------

# Verbs that say a tool changes something. In a name every one counts; in a description, the strong
# ones (the destructive and the running kind), because a read tool's description says "returns the
# restart count" or "the last time it was set" more often than a name does.
STRONG_VERBS = frozenset(
    """delete remove rm purge drop truncate destroy erase wipe kill terminate shutdown reboot restart
    scale patch apply exec execute deploy undeploy rollback overwrite flush evict drain cordon uncordon
    taint uninstall revoke reset format shred unlink rmdir stop disable suspend abort cancel send invoke
    trigger transfer revert rename approve""".split()
)
# Phrasal verbs: a form of the first word followed by the particle says the verb ("Rolls back the
# release", "shuts down the host", "tears down the stack").
_PHRASAL = {"roll": ("back", "rollback"), "shut": ("down", "shutdown"), "tear": ("down", "destroy"),
            "wipe": ("out", "wipe"), "take": ("down", "shutdown"), "power": ("off", "shutdown"),
            "kill": ("off", "kill"), "scale": ("down", "scale"), "bring": ("down", "shutdown")}  # fmt: skip
# What a bare verb form ("restart", "drop") is followed by where it is a verb, not a noun ("the restart
# count"): an article or an object a write acts on ("DROP TABLE users", "kill the process").
_OBJECT_WORDS = frozenset(
    """the a an all every any this that these those its their table tables database databases index schema
    collection bucket namespace pod pods node nodes service services deployment process processes user
    users file files branch release""".split()
)
NAME_VERBS = STRONG_VERBS | frozenset(
    """write create update set put post insert upsert modify edit move rename mv send publish push commit
    merge revert install upgrade downgrade enable disable grant approve invoke trigger start stop launch
    spawn run migrate rotate chmod chown replace clear cancel abort suspend resume pause unpause
    restore import upload mutate save store add append assign attach detach mount unmount lock unlock
    archive label annotate resize expire""".split()
)
# Destructive verbs whose -s form is also a plural noun ("lists transfers of an account", "pod restarts"):
# that form counts where a verb's object could follow, not before a preposition or at a sentence's end.
_NOUN_TOO = frozenset(
    "restart scale patch drop kill stop reset trigger rename format flush drain taint cancel abort transfer "
    "reboot shutdown rollback wipe".split()
)
_AFTER_NOUN = frozenset(
    "of for in on by from with at per since between across within about over under and or is are was were "
    "that which count counts history".split()
) | {""}
# What a run or an execution may be of and still be a read: "Execute a SELECT query", "run_query".
READ_OBJECTS = frozenset("read readonly query queries select search lookup promql".split())


def tokens(text: str) -> list[str]:
    """Words of a name or a sentence: ``purge_cache``, ``purgeCache``, ``Purge-Cache``, ``HTTPDelete``."""
    spaced = re.sub(r"([a-z0-9])([A-Z])", r"\1 \2", text)
    spaced = re.sub(r"([A-Z]+)([A-Z][a-z])", r"\1 \2", spaced)
    return [t.lower() for t in re.split(r"[^A-Za-z]+", spaced) if t]


def _forms(verb: str) -> set[str]:
    forms = {verb, verb + "s", verb + "es", verb + "ing"}
    if verb.endswith("e"):
        forms.add(verb[:-1] + "ing")
    if verb.endswith("y"):
        forms.add(verb[:-1] + "ies")
    if re.search(r"[^aeiou][aeiou][bdgmnpt]$", verb):
        forms.add(verb + verb[-1] + "ing")  # run -> running, stop -> stopping
    return forms


_STRONG_FORMS = {form: verb for verb in STRONG_VERBS for form in _forms(verb)}
_PHRASAL_FORMS = {form: base for base in _PHRASAL for form in _forms(base) | {base + "ed", base + "ped"}}


# Letters that look like ASCII ones (Cyrillic, Greek, and the like), folded for vetting only: a
# description that writes "dеletes" with a Cyrillic е still says delete. Names never need it: a name with
# such a letter is refused by the spec's rules first.
_LOOKS_ASCII = str.maketrans(
    "аеорсухіјѕԁɡοαειϲκνρτυχⅰ",
    "aeopcyxijsdgoaeickvptuxi",
)
_LEET = (str.maketrans("013457@$", "oleastas"), str.maketrans("013457@$", "oieastas"))


# Letters NFKC leaves alone: squared, negative circled and negative squared Latin capitals (🅳🅴🅻),
# and the regional indicator letters (🇩🇪 is D E).
_ENCLOSED = {
    start + n: chr(ord("A") + n) for start in (0x1F130, 0x1F150, 0x1F170, 0x1F1E6) for n in range(26)
}


def folded(text: str) -> str:
    """``text`` as it reads: compatibility forms (full-width letters, ligatures, enclosed letters),
    accents and look-alike letters folded to ASCII, zero-width and control characters gone."""
    return _unaccented(clean_text(text)).translate(_ENCLOSED).translate(_LOOKS_ASCII)


def _dotted(text: str) -> list[str]:
    """Words written as single letters with dots or dashes between (``D.E.L.E.T.E.S``), joined."""
    out = []
    for chunk in text.split():
        parts = [p for p in chunk.replace("-", ".").replace("_", ".").replace("·", ".").split(".") if p]
        if len(parts) >= 3 and all(len(p) == 1 and p.isalpha() for p in parts):
            out.append("".join(parts).lower())
    return out


def _spelled_out(words: list[str]) -> list[str]:
    """Runs of three or more single letters read as the word they spell (``d e l e t e s``)."""
    joined: list[str] = []
    run: list[str] = []
    for word in [*words, ""]:
        if len(word) == 1:
            run.append(word)
            continue
        if len(run) >= 3:
            joined.append("".join(run))
        run = []
    return joined


def write_words(description: str) -> list[str]:
    """The destructive verbs a tool's description uses, as flags (empty: none). The name is read by
    :func:`diagnostics.mcp.wording.name_says`."""
    found: list[str] = []
    foreign = foreign_write_words(clean_text(unicodedata.normalize("NFKC", description)))
    description = folded(description)
    for sentence in re.split(r"[.;:!?\n]+", description[:4000]):
        previous = ""
        words = tokens(sentence)
        for n, word in enumerate(words + _spelled_out(words)):
            verb = _STRONG_FORMS.get(word)
            following = words[n + 1] if n + 1 < len(words) else ""
            if (base := _PHRASAL_FORMS.get(word)) and following == _PHRASAL[base][0]:
                verb = _PHRASAL[base][1]  # "rolls back": counts as its form does below
                word = word if word != base else verb
            # "deletes", "purging": a verb anywhere; the bare form ("restart") is also a noun ("the
            # restart count"), so it counts where a verb goes: first in a sentence, after "to", "and"...,
            # or before its object ("DROP TABLE users", "kill the process")
            verb_like = (
                verb is not None
                and previous not in _NEGATIONS  # "won't stop the operation", "does not delete"
                and not (verb in ("exec", "execute") and READ_OBJECTS & set(words[n + 1 : n + 6]))
                and not (verb in _NOUN_TOO and word != verb and n < len(words) and following in _AFTER_NOUN)
                and (word != verb or n == 0 or previous in _BEFORE_VERB or following in _OBJECT_WORDS)
            )
            if verb_like and f"description says {verb!r}" not in found:
                found.append(f"description says {verb!r}")
            previous = word
    for word in _dotted(description[:4000]):
        verb = _STRONG_FORMS.get(word)
        if verb is not None and f"description says {verb!r}" not in found:
            found.append(f"description says {verb!r}")
    found += [f"description says {stem!r}" for stem in foreign]
    return found[:6]


def schema_write_words(schema: Any) -> list[str]:
    """The write verbs a tool's input schema offers while its hints say read: a property named for one
    (``delete_all``, ``purge``), a string ``enum``/``const``/``default``/``examples`` value that is one
    (``"action": {"enum": ["get", "delete"]}``: the caller picks the write; a default runs unasked), and
    a property's description read as a tool's is. At most 200 schema nodes, 8 deep."""
    found: list[str] = []
    budget = [200]

    def strong(text: str) -> str:
        return next((_STRONG_FORMS[w] for w in tokens(text) if w in _STRONG_FORMS), "")

    def walk(node: Any, depth: int) -> None:
        if depth > 8 or budget[0] <= 0 or not isinstance(node, dict):
            return
        budget[0] -= 1
        for value in [
            *(node.get("enum") or [] if isinstance(node.get("enum"), list) else []),
            *(node.get("examples") or [] if isinstance(node.get("examples"), list) else [])[:20],
            node.get("const"),
            node.get("default"),  # what runs when the caller says nothing
        ]:
            if isinstance(value, str) and (verb := strong(value)):
                found.append(f"input schema offers {verb!r} ({value[:40]!r})")
        if isinstance(node.get("description"), str):
            found.extend(f"input schema {w}" for w in write_words(node["description"]))
        properties = node.get("properties")
        for key, sub in properties.items() if isinstance(properties, dict) else []:
            if verb := strong(str(key)):
                found.append(f"input schema has a property {str(key)[:40]!r} ({verb})")
            walk(sub, depth + 1)
        for key in ("items", "additionalProperties"):
            walk(node.get(key), depth + 1)
        for key in ("anyOf", "oneOf", "allOf"):
            for sub in node.get(key) or [] if isinstance(node.get(key), list) else []:
                walk(sub, depth + 1)

    walk(schema, 0)
    return list(dict.fromkeys(found))[:4]


# Destructive verbs in other languages a description may be written in, as stems: a word of the
# description starting with one counts (Latin and Cyrillic scripts, accents folded); the CJK ones count
# anywhere in the text (no spaces between words). Conservative on purpose: each stem is a verb that says
# the tool deletes or destroys, and no English read word starts with one.
_FOREIGN_STEMS = (
    "losch", "loesch", "vernicht",  # German ("entfernt" also means remote)
    "supprim", "efface", "detrui", "detruis",  # French
    "elimin", "borra", "apaga", "destruir", "destruye", "destroi", "distrugg", "exclui",  # es, pt, it
    "verwijder", "usuwa", "usun", "smaz", "odstran", "sterg",  # Dutch, Polish, Czech/Slovak, Romanian
    "удал", "уничтож", "стира", "очища", "видал", "знищ",  # Russian, Ukrainian
    "διαγραφ", "σβην", "καταστρεφ",  # Greek (accents folded)
    "radera", "slett", "poista", "torol", "menghapus", "hapus",  # sv, da/no, fi, hu, id/ms
    # Stopping, killing, restarting, resetting, overwriting: a write as much as deleting is.
    "entfern", "beend", "stoppt", "neustart", "uberschreib", "zurucksetz", "deinstall", "herunterfahr",  # de
    "redemarr", "arrete", "reinitialis", "ecras", "desinstall", "annule",  # French
    "reinici", "detien", "deten", "sobrescrib", "desinstal", "remuev", "desliga", "interromp",  # es, pt
    "riavvi", "uccid", "rimuov", "sovrascriv", "arresta", "interromp",  # Italian
    "herstart", "beeindig", "zatrzym", "zabij", "restartuj",  # Dutch, Polish
    "durdur", "baslat", "kaldir", "kald\u0131r",  # Turkish (the dotless i NFKD keeps)
    "перезапуск", "перезагруж", "останов", "останавл", "убива", "убить", "заверша", "сброс",  # Russian
    "зупин", "вбива",  # Ukrainian
    "τερματ", "σταματ", "επανεκκιν",  # Greek
)  # fmt: skip
# Whole words only: as stems they would start English words ("cancellation", "silent").
_FOREIGN_WORDS = frozenset(
    """cancella cancellare cancellano elimina siler silinir siliyor xoa sletter tue tuer mata matar ferma
    fermare termina stopt cancela""".split()
)
# Scripts written without spaces between words, or whose words take prefixes: matched anywhere.
_FOREIGN_CJK = (
    "删除", "刪除", "清除", "销毁", "銷毀", "清空", "削除", "消去", "破棄", "삭제", "제거",  # zh, ja, ko
    "حذف", "يمسح", "מחק", "מוחק", "हटा", "मिटा", "डिलीट", "ลบ",  # ar, he, hi, th
    "终止", "終止", "停止", "重启", "重啟", "杀死", "殺死", "杀掉", "关闭", "關閉", "卸载", "卸載", "回滚",
    "回滾", "执行", "執行", "重置", "覆盖", "覆蓋",  # zh: stop, restart, kill, shut, uninstall, roll back
    "再起動", "終了", "実行", "上書き", "アンインストール", "ロールバック", "リセット", "キル",  # ja
    "재시작", "중지", "종료", "실행", "초기화", "롤백", "덮어",  # ko
    "إيقاف", "ايقاف", "إعادة تشغيل", "تنفيذ", "עצור", "הפעל מחדש", "रोक", "बंद",  # ar, he, hi
)  # fmt: skip


def _unaccented(text: str) -> str:
    """Compatibility forms folded (NFKD) and combining marks dropped: ``Dé́letes`` reads ``Deletes``."""
    return "".join(c for c in unicodedata.normalize("NFKD", text) if not unicodedata.combining(c))


def foreign_write_words(description: str) -> list[str]:
    """The destructive verbs of other languages a (folded) description uses, as their stems."""
    text = _unaccented(description[:4000].lower()).translate(_LOOKS_ASCII)  # mixed scripts read as one
    words = "".join(c if c.isalpha() else " " for c in text).split()
    found = [
        stem for stem in _FOREIGN_STEMS if any(w.startswith(stem.translate(_LOOKS_ASCII)) for w in words)
    ]
    found += sorted({w for w in words if w in _FOREIGN_WORDS})
    return found + [verb for verb in _FOREIGN_CJK if verb in description]


_NEGATIONS = frozenset("not never t cannot nor".split())  # "won't" is the words "won" and "t"
_BEFORE_VERB = frozenset(
    "to and or then will can may also permanently immediately irreversibly forcibly please".split()
)


# --- look-alikes --------------------------------------------------------------------------------

_FOLDS = (("rn", "m"), ("vv", "w"), ("cl", "d"), ("0", "o"), ("1", "l"), ("i", "l"), ("|", "l"), ("5", "s"))


def skeleton(name: str) -> str:
    """What a name looks like: lower case, no separators, ASCII confusables folded."""
    shape = re.sub(r"[_.\-]+", "", name.lower())
    for pair, one in _FOLDS:
        shape = shape.replace(pair, one)
    return shape
