"""A read must say that it reads (plain Python, no ORM): whether a tool whose hints say read is worded as
one. A word list of writes is always one synonym short ("obliterates", "fusionne", "performs a deletion"),
so the rule is the other way round:

1. **Nothing may say write.** The name's action (its first verb) is a write verb (``mergePullRequest``,
   ``git_push``, ``post_message``), or a write verb follows a conjunction in it (``get_and_delete``) or is
   a destructive verb in its base form (``get_file_purge``); the description uses a write verb where a
   verb goes (first in a clause, after "to", "and", "then", "will", "that", "it", ...: "Merges the pull
   request", "and pushes it", "a tool that posts a message"; not "Lists commits of a branch" nor "the
   merge status"), names one in the present or future passive ("will be merged", "is deleted"), performs
   one as a noun ("performs a deletion", "carries out the transfer") or splits one in two ("de lete");
   and the checks of :mod:`diagnostics.mcp.vetting` (destructive verbs anywhere, other languages, the
   input schema).
2. **Something must say read.** The name's action is a read verb (``get_pull_request``, ``list_commits``,
   ``search_posts``: what follows is its object), or, with no verb in the name, one of its words names a
   reading (``git_status``, ``pod_logs``, ``cache_info``); else the description's first verb is a read
   verb ("Returns ...", "Shows ...", "Use this to look up ...", "Liest ...").
3. **A description in another language** (its function words say so: "la", "der", "и") must open with a
   read verb it is written in (``FOREIGN_READS``), whatever the name says: a word list of that language's
   writes is not kept.

Anything else is *unclear*: classified write and flagged "does not say it reads". An operator who checked
such a tool promotes it with an audited override. Text is read folded (:func:`vetting.folded`: invisible
characters gone, look-alike letters and accents folded); markdown strike-through and HTML tags end a clause.
"""

from __future__ import annotations

from diagnostics.agent import rx
from diagnostics.mcp import vetting

READ_VERBS = frozenset(
    """get list read search describe show query fetch find view lookup look inspect check count retrieve
    browse peek preview diff compare explain summarize summarise analyze analyse tail grep cat ls print
    display echo return report watch monitor explore scan validate verify lint measure calculate compute
    estimate evaluate answer provide give tell poll ping probe stat locate translate convert parse render
    detect diagnose identify recommend suggest test dump whoami is has""".split()
)
# Words that name a reading: a name made only of nouns says read with one of these.
READ_NOUNS = frozenset(
    """status state info information details detail logs log diff diffs tree health metrics metric events
    history stats statistics summary usage version versions time weather help overview schema docs
    documentation manifest inventory topology capabilities quota quotas limits uptime listing report
    env environment whoami me""".split()
)
# Every verb that says a tool changes something: vetting's lexicon and the ones only a verb's place in
# the sentence tells from a noun (merge, push, commit, post, pay, ...).
WRITE_VERBS = vetting.NAME_VERBS | frozenset(
    """merge push commit post pay transfer send publish rename archive unarchive revoke rotate scale restart
    apply deploy approve invite assign unassign nuke obliterate expunge eradicate annihilate scrub clobber
    trash discard dispose prune reap sweep charge refund withdraw deposit buy purchase order sell book
    reserve subscribe unsubscribe register unregister enroll share unshare kick ban unban block unblock mute
    unmute fork tag untag release promote demote provision deprovision allocate deallocate reboot halt sign
    submit dispatch enqueue schedule reschedule notify reply comment vote close reopen dismiss acknowledge
    silence snooze escalate toggle change alter amend adjust configure reconfigure increase decrease shrink
    expand extend renew sync upload mark flag unset disconnect fuse squash rebase
    reject deny accept confirm finalize redeploy recreate regenerate reinstall""".split()
)
_IRREGULAR = {"sent": "send", "paid": "pay", "put": "put", "set": "set", "run": "run", "written": "write",
              "wrote": "write", "sold": "sell", "bought": "buy", "shut": "shutdown"}  # fmt: skip
# Nouns a write is performed as ("performs a deletion"), and the light verbs that perform them.
NOMINALS = frozenset(
    """deletion removal erasure destruction termination purge purging wipe merge push commit payment
    transfer publication rename archival revocation rotation deployment restart approval invitation
    assignment update creation modification write shutdown reboot rollback migration installation upgrade
    downgrade cancellation suspension reset refund withdrawal charge purchase eviction truncation overwrite
    execution kill drop flush drain insertion upload edit change changes mutation transaction teardown
    cleanup wipeout takedown""".split()
)
LIGHT_VERBS = frozenset(
    """perform execute carry do make initiate conduct effect complete process submit issue trigger
    schedule handle run start cause kick fire launch apply commit enact""".split()
)
# What may stand before a verb (its subject, a modal, a conjunction, an adverb of manner).
_BEFORE_VERB = frozenset(
    """to and or then but also will would can could may might must shall should please that which who it
    tool function server endpoint this automatically directly immediately permanently actually instantly
    silently quietly simply just instead finally subsequently afterwards thereby irreversibly forcibly
    safely first""".split()
)
# What follows a noun, not a verb: "Commits of a branch", "merges and tags", "posts matching a query".
_NOUN_AFTER = frozenset(
    """of for in on by from with at per since between across within about over under and or is are was
    were be been has have had count counts history list log logs status events details info data that
    which time date request requests queue conflicts point points matching containing including where
    whose named created made like such""".split()
)
_RUN = frozenset("run exec execute".split())
# What makes a write verb in a name a noun's modifier: "get_restart_count", "get_scale_status".
_NOUN_FOLLOWERS = READ_NOUNS | frozenset("count counts time date policy type types config".split())
_OWN_ANSWER = frozenset(
    """output outputs result results response responses answer text content contents listing entries lines
    json payload list page""".split()
)
_DETERMINERS = frozenset(
    "the a an all every each its their this that these those your our any some his her my".split()
)
_BE = frozenset("is are be being gets get become becomes".split())
_NEGATIONS = frozenset("not never t cannot nor no without".split())
# Opening words before a description's first verb ("This tool returns", "Use this to look up").
_LEAD_IN = frozenset(
    """this tool function endpoint method api server mcp a an the it that which who use used using can could
    may might will would should shall must be to you your helps help allows allow lets let enables enable
    agent model assistant llm user caller simply just only also quickly easily safely efficiently directly
    recursively automatically here we i please for tools call calls""".split()
)
# A description in another language: its function words, and the read verbs it may open with.
_FOREIGN_FUNCTION = frozenset(
    """la le les des du une et est der die das den dem und ein eine ist el los las del una un al por para
    con il gli della
    degli het een van och att och ett til og af ja sono sind wird il dei""".split()
)
_ENGLISH_FUNCTION = frozenset("the of and to a in for is on with by from that this it an or are".split())
FOREIGN_READS = frozenset(
    """liest zeigt listet gibt sucht holt ruft lit affiche liste listes renvoie retourne cherche obtient
    recupere lee muestra lista devuelve obtiene busca consulta legge mostra elenca restituisce cerca
    ottiene leest toont geeft zoekt haalt czyta pokazuje zwraca wyszukuje visar hamtar listar laser lukee
    nayttaa listaa hakee le mostra retorna obtem busca""".split()
)  # folded: accents dropped (récupère -> recupere, läser -> laser)
_FOREIGN_READS_OTHER = frozenset(
    """читает показывает возвращает получает ищет выводит перечисляет читає показує повертає отримує
    διαβαζει εμφανιζει επιστρεφει""".split()
)
_CJK_READS = ("获取", "查询", "列出", "显示", "读取", "返回", "搜索", "查看", "取得", "表示", "一覧", "検索",
              "読み", "조회", "표시", "검색", "가져", "읽")  # fmt: skip


def _forms(verb: str) -> set[str]:
    forms = {verb, verb + "s", verb + "es", verb + "ing", verb + "ed", verb + "d"}
    if verb.endswith("e"):
        forms |= {verb[:-1] + "ing"}
    if verb.endswith("y"):
        forms |= {verb[:-1] + "ies", verb[:-1] + "ied"}
    if len(verb) > 2 and verb[-1] in "bdgmnprt" and verb[-2] in "aeiou" and verb[-3] not in "aeiou":
        forms |= {verb + verb[-1] + "ing", verb + verb[-1] + "ed"}  # stop -> stopping, commit -> committed
    return forms


def _table(verbs: frozenset[str]) -> dict[str, str]:
    return {form: verb for verb in sorted(verbs) for form in _forms(verb)}


_WRITE = _table(WRITE_VERBS) | {form: verb for form, verb in _IRREGULAR.items()}
_READ = _table(READ_VERBS)
_LIGHT = _table(LIGHT_VERBS)


_PAST = frozenset(
    form
    for verb in WRITE_VERBS
    for form in _forms(verb)
    if form.endswith(("ed", "d")) and form not in WRITE_VERBS
) | frozenset(_IRREGULAR)


def _past(word: str) -> bool:
    return word in _PAST


# --- the name ------------------------------------------------------------------------------------


def name_says(name: str) -> tuple[str, str]:
    """("read" | "write" | "", the word): what a tool's name says it does. Read with its digits as the
    letters they stand for too (``de1ete_fi1e``, ``dr0p``): a write in any reading is a write."""
    verdicts = [_name_says(name)]
    for leet in vetting._LEET:
        if (spelled := name.translate(leet)) != name:
            verdicts.append(_name_says(spelled))
    return next((v for v in verdicts if v[0] == "write"), verdicts[0])


def _name_says(name: str) -> tuple[str, str]:
    words = vetting.tokens(name)
    action = ""
    for n, word in enumerate(words):
        verb = _WRITE.get(word)
        following = words[n + 1] if n + 1 < len(words) else ""
        if verb in _RUN and vetting.READ_OBJECTS & set(words[n + 1 :]):
            action = action or "query"  # execute_query, run_promql_query: what it runs is a read
            continue
        if verb and not _past(word) and word not in _READ:
            after_conjunction = n > 0 and words[n - 1] in {"and", "or", "then", "plus"}
            # after a read verb a write is the object ("list_commits", "get_restart_count"), unless it
            # follows a conjunction or is a destructive verb with no noun after it ("get_file_purge")
            bare = word == verb and verb in vetting.STRONG_VERBS and following not in _NOUN_FOLLOWERS
            if not action or after_conjunction or bare:
                return "write", verb
        if not action and word in _READ:
            action = _READ[word]
    if len(words) == 1 and not action:  # one word run together: "purgecache", "cachepurge", "getstatus"
        word = words[0]
        for verb in sorted(WRITE_VERBS, key=len, reverse=True):
            if len(verb) >= 4 and word != verb and (word.startswith(verb) or word.rstrip("s").endswith(verb)):
                return "write", verb
        action = next((v for v in ("get", "list", "read", "search", "show", "fetch", "find", "query",
                                   "describe", "lookup", "view") if word.startswith(v)), "")  # fmt: skip
    if action:
        return "read", action
    noun = next((w for w in words if w in READ_NOUNS), "")
    return ("read", noun) if noun else ("", "")


# --- the description -----------------------------------------------------------------------------


def _clauses(text: str) -> list[list[str]]:
    text = rx.sub(r"~~|</?[A-Za-z!][^>]{0,200}>|-->", ". ", vetting.folded(text[:4000]))
    text = rx.sub(r"(\w)-[ \t]*\n[ \t]*(\w)", r"\1\2", text)  # a word broken across lines: "de-\nletes"
    return [words for part in rx.split(r"[.;:!?\n,()\[\]|]+", text) if (words := vetting.tokens(part))]


def description_writes(text: str) -> list[str]:
    """What in a description says the tool writes, beyond vetting's destructive verbs."""
    found: list[str] = []
    for words in _clauses(text):
        spelled = vetting._spelled_out(words)  # "p u s h e s the branch"
        found += [f"description says {_WRITE[w]!r} (spelled out)" for w in spelled if w in _WRITE]
        for n, word in enumerate(words):
            previous = words[n - 1] if n else ""
            following = words[n + 1] if n + 1 < len(words) else ""
            verb = _WRITE.get(word)
            if verb and previous not in _NEGATIONS and not _past(word) and word not in _READ:
                placed = n == 0 or previous in _BEFORE_VERB
                if verb in _RUN and vetting.READ_OBJECTS & set(words[n + 1 : n + 6]):
                    placed = False  # "Runs a read-only query": what it runs is a read
                if placed and ((following and following not in _NOUN_AFTER) or previous in {"to", "will"}):
                    found.append(f"description says {verb!r}")
            runs_read = verb in _RUN and vetting.READ_OBJECTS & set(words[max(0, n - 4) : n])
            if verb and _past(word) and _passive(words[:n]) and not runs_read:  # not "the query is executed"
                found.append(f"description says {verb!r} (passive: '{previous} {word}')")
            if word in _LIGHT and previous not in _NEGATIONS:
                noun = next((w for w in words[n + 1 : n + 5] if w in NOMINALS), "")
                if noun:
                    found.append(f"description performs a write: '{word} ... {noun}'")
            joined = word + following
            split = len(following) >= 2 and len(joined) >= 5 and _WRITE.get(joined) and not _past(joined)
            if split and not {word, following, joined} & (_READ.keys() | _WRITE.keys() - {joined}):
                found.append(f"description says {_WRITE[joined]!r} (split: '{word} {following}')")
    return list(dict.fromkeys(found))


def _passive(before: list[str]) -> bool:
    """The words before a past participle end in a present or future 'be' ("will be", "is", "are
    permanently", "gets resolved and closed"); a past one ("were deleted") tells what happened, not what
    the tool does, and one whose
    subject is the tool's own answer ("the output is formatted", "results are truncated") shapes it."""
    words = [w for w in before if not w.endswith("ly") and w not in {"then", "also", "always", "still"}]
    while words and (words[-1] in _PAST or words[-1].endswith("ed") or words[-1] in {"and", "or"}):
        words.pop()
    words = words[-3:]
    if not words or words[-1] not in _BE:
        return False
    return not (set(words[:-1]) & (_NEGATIONS | _OWN_ANSWER))


def _foreign(text: str) -> bool:
    words = vetting.tokens(vetting.folded(text[:4000]).lower())
    letters = [c for c in vetting.folded(text[:4000]) if c.isalpha()]
    if letters and sum(1 for c in letters if not c.isascii()) * 2 > len(letters):
        return True
    # Some are English words too ("pods that die", "the Del key"): English function words outweigh them.
    foreign = sum(1 for w in words if w in _FOREIGN_FUNCTION)
    english = sum(1 for w in words if w in _ENGLISH_FUNCTION)
    return (foreign >= 1 and english == 0) or (foreign >= 2 and foreign > english)


def opening_verb(text: str) -> str:
    """The verb a description opens with when it acts on an object ("Raises the quota", "Use this to
    flip every flag"), '' when it opens otherwise (a noun phrase: "The service's status")."""
    for words in _clauses(text)[:1]:
        if words[0] in {"the", "a", "an"}:
            return ""
        n = next((n for n, w in enumerate(words) if w not in _LEAD_IN), len(words))
        if n + 1 < len(words) and words[n + 1] in _DETERMINERS:
            runs = _LIGHT.get(words[n]) in _RUN | {"perform"} or _WRITE.get(words[n]) in _RUN
            return "" if runs and vetting.READ_OBJECTS & set(words[n + 1 : n + 6]) else words[n]
    return ""


def description_reads(text: str) -> str:
    """The read verb a description opens with ('' when its first verb is not one)."""
    folded = vetting.folded(text[:4000])
    if _foreign(text):
        raw = "".join(c if c.isalpha() else " " for c in vetting._unaccented(folded.lower())).split()
        first = next((w for w in raw if w not in _FOREIGN_FUNCTION), "")
        if first in FOREIGN_READS or first in _FOREIGN_READS_OTHER:
            return first
        return next((v for v in _CJK_READS if folded.lstrip().startswith(v)), "")
    for words in _clauses(text)[:1]:
        first = next((w for w in words if w not in _LEAD_IN), "")
        return _READ.get(first, "")
    return ""


# Verbs a read uses for what it does with what it read, or for how it is called: not a read's action, not
# a change of anything ("Supports pagination", "including the panels", "extracts its contents").
BENIGN_VERBS = frozenset(
    """include support accept require take use extract match contain cover filter sort paginate limit cap
    exclude omit skip ignore follow respect honor honour group aggregate combine collect gather decode encode
    format download demonstrate resolve expand need expect work default wait retry stream highlight rank
    score order annotate truncate base specify deprecate authenticate select connect name call prefer define
    determine consider treat interpret allow pass strip wrap trim normalize deduplicate redact mask split
    flatten""".split()
)
_BENIGN = _table(BENIGN_VERBS)
_KNOWN = _READ.keys() | _WRITE.keys() | _BENIGN.keys()
# What a verb acts on: its object ("frobnicates it", "retires them", "voids those older than", "bumps its
# rollout"), or a particle before one ("cleans up the").
_OBJECT = frozenset(
    """the a an it them its their this these those every each any all some one ones his her your our my
    up out down off away over back""".split()
)
_CONJUNCTIONS = frozenset("and then or but also plus thereafter afterwards subsequently finally next".split())
_GERUND_AFTER = frozenset("after before by while then thereby when upon".split())
_SUBJECT = _LEAD_IN | _CONJUNCTIONS | frozenset("additionally optionally".split())
_ADVERBS = frozenset("then also always".split())
_STATE_OF = frozenset("that which who whose whether if when where what once unless until".split())
_FUNCTION = (
    _LEAD_IN
    | _DETERMINERS
    | _NOUN_AFTER
    | _NEGATIONS
    | _OBJECT
    | _BE
    | frozenset(
        """not only also then if when while as to into onto via each more most less least other than very
    does do did has have had""".split()
    )
)


_MODALS = frozenset("will would may might must shall should can could".split())
# What stands before a verb that has no object ("It wipes.", "then yeets", "should then expunge").
_VERB_BEFORE = _MODALS | frozenset("it then also afterwards thereafter subsequently finally".split())
_NOUN_ENDINGS = ("ers", "ors", "ments", "tions", "sions", "ities", "ness", "nesses", "ics", "ings", "ists")
# A read's own verbs that stand without an object ("Results may vary", "and paginates"), and the
# benign verbs that do: the others, with no object, act on what the tool was given.
_ALONE = _table(frozenset("vary differ wait retry stream work paginate default expire apply".split()))


def _verb_form(word: str, previous: str) -> bool:
    """``word`` (which ends its clause) is an action no list holds as a read's: an unknown word or a
    write, in a verb's third person (``-s``) unless a verb stands before it, never a noun's ending."""
    participle = word.endswith("ed") and _WRITE.get(word) != word  # not "shred", a write's own base
    if word in _FUNCTION or len(word) < 3 or word in _READ or word in _ALONE or participle:
        return False
    if word.endswith(("ly", "ing")) or (word in _KNOWN and word not in _WRITE and word not in _BENIGN):
        return False
    third_person = word.endswith("s") and not word.endswith(_NOUN_ENDINGS)
    return previous in _VERB_BEFORE or third_person


def _objectless(words: list[str], n: int, before: str = "") -> bool:
    """A verb ends the clause with nothing it acts on said: after what only stands before a verb ("Will
    nuke", "It then decommissions.", "Afterwards, shred."), a gerund after "after", "by" ("after
    zapping."), or after "and" when the noun before is singular and the word agrees with the tool as its
    subject ("Gets the PR and frobnicates.", "Gets the bucket, and empties.", not "Lists commits and
    tags"). ``before``: the last word of the clause before (a comma splits "afterwards, shred")."""
    word, previous = words[n], words[n - 1] if n else before
    if previous in _GERUND_AFTER and word.endswith("ing") and len(word) > 5:
        stem = word[:-3]
        return not {stem, stem + "e"} & (_READ.keys() | _BENIGN.keys() | _ALONE.keys() | _FUNCTION)
    if not _verb_form(word, previous):
        return False
    if previous in _VERB_BEFORE:
        return True
    noun = "" if previous != "and" else words[n - 2] if n >= 2 else before
    return bool(noun) and noun not in _OBJECT | _BE and not noun.endswith("s") and word.endswith("s")


def unknown_actions(text: str) -> list[str]:
    """The verbs a description acts on something with that no list knows (lowercase words as written):
    every verb of a read must be a known one, so "Gets the PR and frobnicates it" is not a read. A verb is
    a word where one goes, before its object (``_OBJECT``): first in a clause (after its subject: "it",
    "the tool", "then", "also"), after a conjunction ("and settles it", "& anonymize each"), an ``-ing``
    form after "after", "by", "while" ("after zeroing it"); or a present or future passive's participle
    ("the VM is decommissioned", "is then tombstoned") whose subject is not the tool's own answer."""
    found: list[str] = []
    sentences = rx.split(r"[.;!?\n]+", vetting.folded(text[:4000]))
    lone = {w[0] for part in sentences if len(w := vetting.tokens(part)) == 1 and _verb_form(w[0], "")}
    last = ""  # the last word of the clause before: "Reads it. Afterwards, shred."
    for words in _clauses(text.replace("&", " and ").replace("+", " and ")):
        lead, last = last, words[-1]
        slots = [next((n for n, w in enumerate(words) if w not in _SUBJECT), len(words))]
        slots += [n + 1 for n, w in enumerate(words[:-1]) if w in _CONJUNCTIONS]
        gerunds = [n + 1 for n, w in enumerate(words[:-1]) if w in _GERUND_AFTER]
        slots += [n for n in gerunds if words[n].endswith("ing")]
        for n in sorted(set(slots)):
            for _ in range(3):  # "and optionally extracts", "and then retires" (bounded: "and and and ...")
                if n < len(words) and (words[n].endswith("ly") or words[n] in _CONJUNCTIONS | _MODALS):
                    n += 1
            if n + 1 >= len(words):
                if n < len(words) and _objectless(words, n, lead):  # "Will nuke", "and frobnicates."
                    found.append(words[n])
                continue
            word, following = words[n], words[n + 1]
            if word in _KNOWN or word in _FUNCTION or len(word) < 3 or following not in _OBJECT:
                continue
            if _LIGHT.get(word) and vetting.READ_OBJECTS & set(words[n + 1 : n + 6]):
                continue  # "Performs a web search"
            found.append(word)
        if len(words) == 1 and words[0] in lone:  # a sentence of one verb: "Frobnicates."
            found.append(words[0])
        for n, word in enumerate(words):
            if not word.endswith("ed") or word in _KNOWN:
                continue
            then = "then" in words[max(0, n - 3) : n]  # "which is then frobnicated": an action after all
            before = [w for w in words[max(0, n - 12) : n] if not w.endswith("ly") and w not in _ADVERBS]
            if len(before) < 2 or before[-1] not in _BE:
                continue
            # a state, not an action: "changes that are staged", "whether the VM is powered on", and "the
            # query is run" (what it runs is a read)
            state = _STATE_OF & set(before) and not then
            if state or before[-2] in _NEGATIONS or vetting.READ_OBJECTS & set(before[-4:]):
                continue
            found.append(word)
    return list(dict.fromkeys(found))


def read_claim_flags(name: str, description: str) -> list[str]:
    """Why a tool whose hints say read is not worded as one (empty: it is)."""
    said, word = name_says(name)
    flags = [f"name says {word!r}"] if said == "write" else []
    flags += description_writes(description)
    flags += vetting.write_words(description)
    if flags:
        return list(dict.fromkeys(flags))[:6]
    reads = description_reads(description)
    if _foreign(description) and description.strip() and not reads:
        return ["unclear: a description in another language that does not open with a read verb"]
    opening = opening_verb(description) if not reads and not _foreign(description) else ""
    if opening and opening not in _READ:
        return [f"unclear: the description opens with {opening!r} acting on something, not a read verb"]
    if unknown := ([] if _foreign(description) else unknown_actions(description)):
        return [
            f"unclear: the description also acts with {unknown[0]!r}, which is not a known read verb "
            "(every verb of a read must say it reads)"
        ]
    if said == "read" or reads:
        return []
    return [
        "unclear: neither the name nor the description says it reads "
        "(a read says so: get, list, read, search, show, describe, ...)"
    ]
