"""A deterministic simulated developer for ``memlane bench predictor --dataset simulated``.

``generate(seed)`` returns one user: a memory store that grows over 200 sessions (166 notes at
session 0, about 1.5 new per session, ~440-500 in all) and, per session, a local time, a
project, the context text it starts with and graded relevance (memory key -> 1.0 needed /
0.5 useful, 2-6 keys). Stdlib only (a ``random.Random(seed)``, no network, no set iteration
order used): the same seed gives the same user in every process.

Honesty: the baseline sees the same context text and the same memories. Relevant notes are
always of the session's project and topic, general notes of that topic, or preferences, so
a good text matcher ranks most of them high; it cannot tell which project, which version or
which habit is in play. The personal patterns, each one a real developer's store shows:

(a) Projects share topics. ``acme-api`` (work, Python/fly.io), ``ledger`` (work, Go/k8s),
    ``tidepool`` (side project, SvelteKit/Cloudflare) and ``orbit-web`` (work, Django/ECS,
    from ``change_at``) all have parallel notes on 8 topics (deploy, migrations, tests, auth,
    logging, ci, deps, config): "Deploys go out via make release to fly.io" vs "... via the
    deploy.yml workflow to the EKS cluster through Argo CD". ~60 % of them name the project.
    People do the same chores in several codebases. ~42 % of contexts (30-55 % per seed) are vague ("fix the
    failing build", "continue with the migration"): they name the topic only, so recall ranks
    every project's notes on it alike while only the session project's are relevant.
(b) Time-of-day habits (``HABITS``, ``TOPIC_BIAS``). Weekday mornings: the main work project
    (~75 %), ops topics (deploy, ci, logging, migrations); afternoons: ``ledger`` or the main
    project, auth/tests/config; evenings and weekends: ``tidepool`` (~80 %), deps and tests.
    Habits are why people open a session without saying where they are; the text has no clock.
(c) Staleness (``VOLATILE``). Versions, URLs, commands and TTLs change: the old note is wrong
    from the session after the change (``stale_from``) and superseded only 2-6 sessions later
    (nobody updates notes at once); in between it is never relevant, afterwards its
    near-identical replacement is (and weighs more for 30 sessions). Text cannot tell them apart.
(d) Change of project at ``change_at``: ``orbit-web`` becomes the main project (notes from
    ``change_at - 3``: onboarding; it also takes half the afternoons) and ``acme-api`` drops to
    ~4 % of sessions, leaving ~100 acme-api notes that still match every topic.
(e) Always-useful preferences: four global ones (commit style, typing, test-first, plan first)
    are relevant in ~50 % of sessions whatever the topic; contexts never mention them. Topic
    and per-project preferences are relevant sometimes (p = 0.4 when they apply).
(f) Threads: a session continues its project's last topic with p = 0.35 (then 65 % vague);
    60 % of sessions leave a dated summary note; a continued thread needs its last summary,
    and notes written in the last 8 sessions are picked as relevant 2.5x as often.

Scope: preferences and general notes have ``project=None``; a project's notes are stored with
``project`` set with p = 0.3, else None (global); ``about`` always names the project a note
concerns. Session indices are 0-based; times are naive local datetimes from Mon 2024-01-08.
"""

from __future__ import annotations

import random
import re
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from benchmarks.simulated_user_data import (
    CORE_PREF_WEIGHTS,
    FACTS,
    GENERAL,
    GENERAL_TAG,
    HABITS,
    HABITS_AFTER,
    LESSONS,
    MENTION_SHARE,
    N_GENERAL_AT_START,
    NEW_MAIN,
    NEXT,
    OLD_MAIN,
    OPEN,
    PREFS,
    PROJECTS,
    SCOPED_SHARE,
    SECOND,
    SIDE,
    SLOTS,
    START,
    TASKS,
    TOPIC_BIAS,
    TOPICS,
    VAGUE,
    VAGUE_SHARE_RANGE,
    VOLATILE,
    VOLATILE_VALUES,
)
from memlane.normalize import content_hash

__all__ = ["SimMemory", "SimSession", "SimulatedUser", "generate", "TOPICS", "VAGUE_SHARE_RANGE"]

_FIELD, _ALT = re.compile(r"<(\w+)>"), re.compile(r"\[([^\[\]|]*(?:\|[^\[\]|]*)+)\]")


@dataclass(frozen=True)
class SimMemory:
    """One memory. ``created_session``: exists from that session index on. ``stale_from``:
    wrong from that session index on (None: never); ``superseded_at``: the session whose
    ``supersede_events`` replace it (>= ``stale_from``). ``about``: the project it concerns
    (None for preferences/general notes); ``project``: the stored scope (mostly None).
    ``kind``: fact (static project note), lesson, volatile, summary, preference or general."""

    key: str
    content: str
    project: str | None
    type: str
    importance: float
    created_session: int
    supersedes: str | None = None
    about: str | None = None
    topic: str | None = None
    kind: str = "fact"
    stale_from: int | None = None
    superseded_at: int | None = None

    def alive(self, index: int) -> bool:
        """True if the memory exists and is not stale at session ``index``."""
        return self.created_session <= index and (self.stale_from is None or index < self.stale_from)


@dataclass(frozen=True)
class SimSession:
    """One session. ``relevant``: memory key -> 1.0 (needed) / 0.5 (useful), 2-6 keys.
    ``supersede_events``: (new_key, old_key) pairs applied at the start of this session.
    ``slot``: morning/afternoon/evening/weekend; ``vague``: the context names no project detail."""

    index: int
    local_time: datetime
    project: str
    context: str
    relevant: dict[str, float]
    supersede_events: tuple[tuple[str, str], ...] = ()
    topic: str = ""
    slot: str = ""
    vague: bool = False


@dataclass(frozen=True)
class SimulatedUser:
    """The generated user. ``memories`` in creation order (``created_session`` non-decreasing),
    ``sessions`` by index (tuples, read like lists)."""

    seed: int
    change_at: int
    memories: tuple[SimMemory, ...]
    sessions: tuple[SimSession, ...]
    projects: tuple[str, ...] = (OLD_MAIN, SECOND, SIDE, NEW_MAIN)
    _by_key: dict = field(default_factory=dict, repr=False, compare=False)

    def __post_init__(self) -> None:
        self._by_key.update({m.key: m for m in self.memories})

    def memory(self, key: str) -> SimMemory:
        """The memory with ``key`` (KeyError if none)."""
        return self._by_key[key]

    def relevant_at(self, index: int) -> dict[str, float]:
        """Graded relevance of session ``index``: key -> 1.0 / 0.5."""
        return dict(self.sessions[index].relevant)

    def memories_at(self, index: int) -> list[SimMemory]:
        """Memories that exist at the start of session ``index`` (stale ones included)."""
        return [m for m in self.memories if m.created_session <= index]

    def stats(self) -> dict:
        """Counts: memories per about/scope/type, sessions per project before/after the change,
        per slot, mean relevant keys per session, vague-context share, supersessions."""
        before = Counter(s.project for s in self.sessions[: self.change_at])
        after = Counter(s.project for s in self.sessions[self.change_at :])
        return {
            "memories": len(self.memories),
            "initial_memories": sum(m.created_session == 0 for m in self.memories),
            "memories_by_about": dict(Counter(m.about or "(none)" for m in self.memories)),
            "memories_by_scope": dict(Counter(m.project or "(global)" for m in self.memories)),
            "memories_by_type": dict(Counter(m.type for m in self.memories)),
            "supersessions": sum(len(s.supersede_events) for s in self.sessions),
            "stale_never_superseded": sum(m.stale_from is not None and m.superseded_at is None for m in self.memories),
            "sessions": len(self.sessions),
            "change_at": self.change_at,
            "sessions_before_change": dict(before),
            "sessions_after_change": dict(after),
            "sessions_by_slot": dict(Counter(s.slot for s in self.sessions)),
            "mean_relevant": round(sum(len(s.relevant) for s in self.sessions) / max(1, len(self.sessions)), 3),
            "vague_share": round(sum(s.vague for s in self.sessions) / max(1, len(self.sessions)), 3),
        }

    def describe(self) -> str:
        """One paragraph for the bench report."""
        st = self.stats()
        return (
            f"Simulated developer (seed {self.seed}): {st['sessions']} sessions from "
            f"{self.sessions[0].local_time:%Y-%m-%d} to {self.sessions[-1].local_time:%Y-%m-%d}, "
            f"{st['memories']} memories ({st['initial_memories']} at start), 4 projects sharing 8 topics "
            f"(deploy, migrations, tests, auth, logging, ci, deps, config), time-of-day habits, "
            f"{st['supersessions']} stale facts superseded 2-6 sessions late, main project "
            f"{OLD_MAIN} -> {NEW_MAIN} at session {self.change_at}, always-useful preferences; "
            f"{st['vague_share']:.0%} vague contexts, {st['mean_relevant']:.1f} relevant memories per session."
        )


def _fill(tpl: str, fields: dict, rng: random.Random) -> str:
    s = _ALT.sub(lambda m: rng.choice(m.group(1).split("|")), tpl)
    return _FIELD.sub(lambda m: fields[m.group(1)], s)


def _wchoice(rng: random.Random, items: list, weights: list):
    return rng.choices(items, weights=weights, k=1)[0]


def generate(seed: int = 0, sessions: int = 200, change_at: int = 100) -> SimulatedUser:
    """Generate the user: ``sessions`` sessions (index 0..sessions-1), main project change at
    session index ``change_at``. Deterministic in ``seed``."""
    if not 0 < change_at < sessions:
        raise ValueError("need 0 < change_at < sessions")
    rng = random.Random(seed)
    mems: list[dict] = []
    hashes: set[str] = set()  # membership only, never iterated
    by_pt: dict[tuple, list[dict]] = {}  # (about, topic) -> notes
    pending: dict[int, list[tuple[str, str]]] = {}  # session -> (project, kind) replacements due
    chains: dict[tuple[str, str], list] = {}  # (project, kind) -> [current memory, index of its value]

    def add(content: str, typ: str, kind: str, created: int, about=None, topic=None, scope=None, supersedes=None):
        if about is not None and about not in content and rng.random() < MENTION_SHARE:
            content = f"{about}: {content}"
        if content_hash(content) in hashes and about is not None and about not in content:
            content = f"{about}: {content}"
        if content_hash(content) in hashes:
            return None
        assert 60 <= len(content) <= 300, content
        lo, hi = {"preference": (0.6, 0.9), "decision": (0.5, 0.85), "procedural": (0.45, 0.85)}.get(typ, (0.3, 0.8))
        if about is not None and scope is None and rng.random() < SCOPED_SHARE:
            scope = about
        m = dict(
            key=f"m{len(mems) + 1:04d}",
            content=content,
            project=scope,
            type=typ,
            importance=round(rng.uniform(lo, hi), 2),
            created_session=created,
            supersedes=supersedes,
            about=about,
            topic=topic,
            kind=kind,
            stale_from=None,
            superseded_at=None,
        )
        hashes.add(content_hash(content))
        mems.append(m)
        by_pt.setdefault((about, topic), []).append(m)
        return m

    backlog: dict[tuple, list] = {}  # (project, topic) -> notes not yet written: static facts, then lessons
    for p in PROJECTS:
        for t in TOPICS:
            backlog[(p, t)] = [(typ, "fact", x) for typ, x in FACTS[t]] + [
                ("fact", "lesson", x) for x in rng.sample(LESSONS[t], len(LESSONS[t]))
            ]

    def learn(p: str, t: str, created: int, n: int) -> None:
        while n > 0 and backlog[(p, t)]:
            typ, kind, tpl = backlog[(p, t)].pop(0)
            n -= add(_fill(tpl, PROJECTS[p], rng), typ, kind, created, p, t) is not None

    def volatile(p: str, kind: str, i: int, created: int, supersedes=None):
        topic, typ, tpl = VOLATILE[kind]
        m = add(tpl.replace("<v>", VOLATILE_VALUES[p][kind][i]), typ, "volatile", created, p, topic, None, supersedes)
        if m is not None:
            chains[(p, kind)] = [m, i]
        return m

    for typ, topic, about, text in PREFS:
        add(text, typ, "preference", 0, topic=topic, scope=about)
    for topic, _tag, text in GENERAL[:N_GENERAL_AT_START]:
        add(text, "fact", "general", 0, topic=topic)
    for p in (OLD_MAIN, SECOND, SIDE):
        for kind in VOLATILE_VALUES[p]:
            volatile(p, kind, 0, 0)
        for t in TOPICS:
            learn(p, t, 0, 5)  # the 4 static facts + 1 lesson
    late_general = list(GENERAL[N_GENERAL_AT_START:])
    prefs = [m for m in mems if m["kind"] == "preference"]

    times: list[tuple[datetime, str]] = []  # calendar: consecutive days, up to 3 slots a day
    day = START
    while len(times) < sessions:
        weekend = day.weekday() >= 5
        for name, p_wd, p_we, h0, h1 in SLOTS:
            if rng.random() < (p_we if weekend else p_wd) and len(times) < sessions:
                times.append((day + timedelta(minutes=int(rng.uniform(h0, h1) * 60)), "weekend" if weekend else name))
        day += timedelta(days=1)

    out: list[SimSession] = []
    last_topic: dict[str, str] = {}
    for s, (when, slot) in enumerate(times):
        if s in (max(0, change_at - 3), change_at):  # onboarding notes of the new project
            for kind in VOLATILE_VALUES[NEW_MAIN] if s == max(0, change_at - 3) else ():
                volatile(NEW_MAIN, kind, 0, s)
            for t in TOPICS:
                learn(NEW_MAIN, t, s, 1)
        events = []
        for p, kind in pending.pop(s, []):
            old, i = chains[(p, kind)]
            new = volatile(p, kind, i + 1, s, supersedes=old["key"])
            if new is not None:
                old["superseded_at"] = s
                events.append((new["key"], old["key"]))
        habit = (HABITS_AFTER if s >= change_at else HABITS)[slot]  # project by habit; topic by slot or thread
        project = _wchoice(rng, list(habit), list(habit.values()))
        topics = [t for t in TOPICS if any(_alive(m, s) for m in by_pt.get((project, t), []))]
        cont = last_topic.get(project) in topics and rng.random() < 0.35
        topic = last_topic[project] if cont else _wchoice(rng, topics, [TOPIC_BIAS[slot].get(t, 1) for t in topics])
        last_topic[project] = topic
        vague = rng.random() < (0.65 if cont else 0.3)
        task = _fill(rng.choice(TASKS[topic]), PROJECTS[project], rng)
        form = rng.random()
        if vague:
            context = rng.choice(VAGUE[topic])
        elif form < 0.4:
            context = f"{project}: {task}"
        elif form < 0.75:
            context = f"## Session checkpoint\n- Project: {project}\n- Last: {task}\n- Next: {rng.choice(NEXT)}"
        else:
            context = task[0].upper() + task[1:]
        relevant = _relevance(rng, s, project, topic, by_pt, prefs, cont)
        out.append(SimSession(s, when, project, context, relevant, tuple(events), topic, slot, vague))
        # The fact behind one volatile note of this project changes now (p = 0.12): wrong from
        # the next session on, replaced 2-6 sessions after that.
        live = [
            k
            for k, (m, i) in chains.items()
            if k[0] == project
            and m["stale_from"] is None
            and i + 1 < len(VOLATILE_VALUES[project][k[1]])
            and m["created_session"] <= s
        ]
        if live and rng.random() < 0.12:
            k = live[rng.randrange(len(live))]
            chains[k][0]["stale_from"] = s + 1
            pending.setdefault(s + 1 + rng.randint(2, 6), []).append(k)
        # Notes written in this session exist from the next one: a summary (p = 0.6), lessons.
        if rng.random() < 0.6:
            add(
                f"{when:%a %d %b} ({project}): {task}; {rng.choice(OPEN)}: {rng.choice(NEXT)}.",
                "fact",
                "summary",
                s + 1,
                project,
                topic,
            )
        learn(project, topic, s + 1, rng.choice([0, 1, 1, 2]))
        if late_general and rng.random() < 0.05:
            topic, _tag, text = late_general.pop(0)
            add(text, "fact", "general", s + 1, topic=topic)
    return SimulatedUser(
        seed, change_at, tuple(SimMemory(**m) for m in mems if m["created_session"] < sessions), tuple(out)
    )


def _alive(m: dict, s: int) -> bool:
    return m["created_session"] <= s and (m["stale_from"] is None or s < m["stale_from"])


def _relevance(
    rng: random.Random, s: int, project: str, topic: str, by_pt: dict, prefs: list, cont: bool
) -> dict[str, float]:
    """2-6 keys: the thread's last summary when continuing, 1-2 needed and 0-2 useful notes of
    (project, topic) (recent notes and recent replacements weigh more), then general notes of
    the topic that fit the project's stack, preferences, and other-topic notes to reach 2."""

    def weight(m):
        age = s - m["created_session"]
        return 1.0 + 2.0 * (m["supersedes"] is not None and age < 30) + 1.5 * (m["created_session"] > 0 and age <= 8)

    cands = [m for m in by_pt[(project, topic)] if _alive(m, s)]
    rel: dict[str, float] = {}
    summaries = [m for m in cands if m["kind"] == "summary"]
    if cont and summaries:
        rel[summaries[-1]["key"]] = 1.0
    for grade, n in ((1.0, 1 if rng.random() < 0.55 else 2), (0.5, rng.choice([0, 1, 1, 2]))):
        for _ in range(n):
            pool = [m for m in cands if m["key"] not in rel]
            if pool:
                rel[_wchoice(rng, pool, [weight(m) for m in pool])["key"]] = grade
    stack = PROJECTS[project]["stack"].split()
    gen = [
        m
        for m in by_pt.get((None, topic), [])
        if m["kind"] == "general" and _alive(m, s) and GENERAL_TAG[m["content"]] in (None, *stack)
    ]
    if gen and rng.random() < 0.3:
        rel.setdefault(rng.choice(gen)["key"], 0.5)
    if rng.random() < 0.5:
        rel.setdefault(_wchoice(rng, prefs[:4], list(CORE_PREF_WEIGHTS))["key"], 1.0 if rng.random() < 0.25 else 0.5)
    for m in prefs[4:]:
        if (m["topic"] == topic or m["project"] == project) and rng.random() < 0.4:
            rel.setdefault(m["key"], 0.5)
    others = [m for t in TOPICS if t != topic for m in by_pt.get((project, t), []) if _alive(m, s)]
    while len(rel) < 2 and others:
        rel.setdefault(others.pop(rng.randrange(len(others)))["key"], 0.5)
    return dict(list(rel.items())[:6])
