"""Long multi-session dialogues between named people, and labelled questions about them.

``build(split, seed)`` turns a world (``stories_dev.WORLD`` or ``stories_heldout.WORLD``)
into conversations and questions. Deterministic: a split and a seed always give the same
dataset, byte for byte.

A conversation is two people talking in ``SESSIONS`` sessions, days or weeks apart, on
real dates (2023). Each person lives through a few storylines, whose beats land in
different sessions (see ``stories_dev``); the rest of every session is greetings,
reactions and small talk. Every turn is longer than 200 characters: the beat's sentence
sits among greetings, reactions, small talk and a question back (often addressing the
listener by name), in varying order.

Questions, all naming the person they are about, with other words than the turns that
answer them:

- ``single``: one turn answers (what happened; a detail given when the friend asked);
- ``multi``: two turns in different sessions answer together (what happened, and a
  detail told weeks later);
- ``temporal``: "when did ..." (the turn that tells the event: its date answers) and
  "what did ... say about ... in <Month YYYY>" (the storyline's news of that month, while
  its other beats are in other months);
- ``no_answer``: about a storyline that never happens in this conversation.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

SESSIONS = 16
TURNS_PER_SESSION = (22, 30)
STORIES_PER_PERSON = 4
MIN_TURN_CHARS = 201
# Share of follow-up questions that address the listener by name ("Ruth, how was your
# week?"): without them a name in a turn's text was almost always a session's greeting,
# which made "ignore a name's text mentions" an easy win.
NAMED_FOLLOW_UP = 0.6
KINDS = ("single", "multi", "temporal", "no_answer")
FIRST_DAY = datetime(2023, 1, 9, tzinfo=UTC)


@dataclass(frozen=True, slots=True)
class Story:
    topic: str
    slots: dict[str, tuple[str, ...]]
    start: str
    start_facts: tuple[str, ...]
    echo: str
    probe: str
    detail: str
    detail_facts: tuple[str, ...]
    update: str
    update_facts: tuple[str, ...]
    ask_start: tuple[str, ...]
    ask_detail: tuple[str, ...]
    ask_multi: tuple[str, ...]
    ask_when: tuple[str, ...]
    about: str  # a paraphrase of the topic, for "what did X say about <about> in <month>"
    absent: str  # for no-answer questions in conversations without this storyline


@dataclass(frozen=True, slots=True)
class World:
    stories: tuple[Story, ...]
    names: tuple[str, ...]
    greetings: tuple[str, ...]
    reactions: tuple[str, ...]
    small_talk: tuple[str, ...]
    follow_ups: tuple[str, ...]
    closings: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Turn:
    key: str  # conv:<id>:s<session>-t<turn>
    speaker: str
    text: str  # without the speaker
    at: float  # epoch seconds
    session: int
    facts: tuple[str, ...] = ()  # labelled facts this turn states (beat turns only)

    @property
    def value(self) -> str:
        """The turn as a transcript line: what is imported as the memory's value."""
        return f"{self.speaker}: {self.text}"


@dataclass(frozen=True, slots=True)
class Question:
    id: str
    conversation: str  # the owner, conv:<id>
    kind: str
    text: str
    answers: tuple[str, ...]  # turn keys; empty for no_answer


@dataclass(slots=True)
class Conversation:
    owner: str
    people: tuple[str, str]
    turns: list[Turn] = field(default_factory=list)


@dataclass(slots=True)
class Dataset:
    split: str
    seed: int
    conversations: list[Conversation]
    questions: list[Question]

    @property
    def turns(self) -> list[Turn]:
        return [t for c in self.conversations for t in c.turns]

    def summary(self) -> dict[str, object]:
        turns = self.turns
        lengths = sorted(len(t.text) for t in turns)
        return {
            "split": self.split,
            "seed": self.seed,
            "conversations": len(self.conversations),
            "turns": len(turns),
            "median_turn_chars": lengths[len(lengths) // 2],
            "shortest_turn_chars": lengths[0],
            "questions": {k: sum(q.kind == k for q in self.questions) for k in KINDS},
        }


# --- building --------------------------------------------------------------------------


@dataclass(slots=True)
class _Beat:
    session: int
    story: int  # index in the conversation's storylines
    kind: str  # start | probe | update


class _Builder:
    def __init__(
        self,
        world: World,
        rng: random.Random,
        owner: str,
        people: tuple[str, str],
        stories: list[tuple[int, Story, dict[str, str]]],
    ) -> None:
        self.world = world
        self.rng = rng
        self.owner = owner
        self.people = people
        self.stories = stories  # (teller index 0/1, story, slot values)
        self.turns: list[Turn] = []
        self.beat_turns: dict[tuple[int, str], Turn] = {}
        # A draw of its own, so adding names leaves every other draw (and turn) as it was.
        self.naming = random.Random(f"{owner}:naming")

    def text(self, template: str, teller: int, values: dict[str, str]) -> str:
        return template.format(name=self.people[teller], other=self.people[1 - teller], **values)

    def compose(self, core: str, speaker: int, opening: str, position: int) -> str:
        """Core sentence among small talk until the turn is long enough."""
        w, rng = self.world, self.rng
        parts = [opening] if opening else []
        before = rng.random() < 0.4
        if before:
            parts.append(rng.choice(w.small_talk))
        parts.append(core)
        while len(" ".join(parts)) < MIN_TURN_CHARS or rng.random() < 0.25:
            extra = rng.choice(w.small_talk)
            if extra not in parts:
                parts.append(extra)
            if len(" ".join(parts)) > 420:
                break
        if rng.random() < 0.5:
            follow_up = rng.choice(w.follow_ups)
            if self.naming.random() < NAMED_FOLLOW_UP:
                # the listener addressed by name: their name in a turn that says nothing
                # about them (a distractor for questions that name them)
                follow_up = f"{self.people[1 - speaker]}, {follow_up[0].lower()}{follow_up[1:]}"
            parts.append(follow_up)
        return " ".join(parts)

    def add(
        self, session: int, at: float, speaker: int, text: str, facts: tuple[str, ...] = ()
    ) -> Turn:
        index = sum(1 for t in self.turns if t.session == session)
        turn = Turn(
            f"{self.owner}:s{session:02d}-t{index:03d}",
            self.people[speaker],
            text,
            at,
            session,
            facts,
        )
        self.turns.append(turn)
        return turn

    def session(self, number: int, start: datetime, beats: list[_Beat]) -> None:
        w, rng = self.world, self.rng
        target = rng.randint(*TURNS_PER_SESSION)
        # (speaker, core, opening kind, beat, facts)
        plan: list[tuple[int, str, str, _Beat | None, tuple[str, ...]]] = []
        for beat in beats:
            teller, story, values = self.stories[beat.story]
            if beat.kind == "start":
                plan.append(
                    (
                        teller,
                        self.text(story.start, teller, values),
                        "",
                        beat,
                        tuple(values.get(f, f) for f in story.start_facts),
                    )
                )
                plan.append(
                    (1 - teller, self.text(story.echo, teller, values), "reaction", None, ())
                )
            elif beat.kind == "probe":
                plan.append((1 - teller, self.text(story.probe, teller, values), "", beat, ()))
                plan.append(
                    (
                        teller,
                        self.text(story.detail, teller, values),
                        "",
                        _Beat(beat.session, beat.story, "detail"),
                        tuple(values.get(f, f) for f in story.detail_facts),
                    )
                )
            else:
                plan.append(
                    (
                        teller,
                        self.text(story.update, teller, values),
                        "",
                        beat,
                        tuple(values.get(f, f) for f in story.update_facts),
                    )
                )
        # Small talk around the beats; the beats keep their order.
        pairs = [plan[i : i + 2] for i in range(0, len(plan), 2)]
        chat = max(0, target - len(plan) - 2)
        places = set(rng.sample(range(chat + len(pairs)), k=len(pairs)))
        sequence: list[tuple[int | None, str, str, _Beat | None, tuple[str, ...]]] = []
        queued = iter(pairs)
        for position in range(chat + len(pairs)):
            if position in places:
                sequence += next(queued)
            else:
                sequence.append((None, rng.choice(w.small_talk), "reaction", None, ()))
        at = start.timestamp()
        first = rng.randrange(2)
        last_speaker: int | None = None
        greeted: set[int] = set()
        rows: list[tuple[int, str, str, tuple[str, ...], _Beat | None]] = []
        for speaker, core, opening, beat, facts in sequence:
            if speaker is None:
                speaker = first if last_speaker is None else 1 - last_speaker
            elif speaker == last_speaker:
                # keep the dialogue alternating: the other one says something first
                other = 1 - speaker
                rows.append((other, rng.choice(w.small_talk), "reaction", (), None))
            rows.append((speaker, core, opening, facts, beat))
            last_speaker = speaker
        for index, (speaker, core, opening, facts, beat) in enumerate(rows):
            if speaker not in greeted:
                greeted.add(speaker)
                prefix = self.text(rng.choice(w.greetings), speaker, {})
            elif opening == "reaction" and rng.random() < 0.6:
                prefix = rng.choice(w.reactions)
            else:
                prefix = ""
            if index == len(rows) - 1:
                core = core + " " + rng.choice(w.closings)
            text = self.compose(core, speaker, prefix, index)
            at += rng.randint(40, 240)
            turn = self.add(number, at, speaker, text, facts)
            if beat is not None:
                self.beat_turns[(beat.story, beat.kind)] = turn


def _schedule(rng: random.Random, n_stories: int) -> list[_Beat]:
    beats: list[_Beat] = []
    for story in range(n_stories):
        start = rng.randrange(0, SESSIONS - 6)
        probe = rng.randrange(start + 2, SESSIONS - 3)
        update = rng.randrange(probe + 2, SESSIONS)
        beats += [
            _Beat(start, story, "start"),
            _Beat(probe, story, "probe"),
            _Beat(update, story, "update"),
        ]
    return beats


def _month(ts: float) -> tuple[int, int]:
    d = datetime.fromtimestamp(ts, UTC)
    return d.year, d.month


def build(world: World, split: str, seed: int, conversations: int) -> Dataset:
    rng = random.Random(f"{split}:{seed}")
    names = list(world.names)
    rng.shuffle(names)
    convs: list[Conversation] = []
    questions: list[Question] = []
    for c in range(conversations):
        people = (names[(2 * c) % len(names)], names[(2 * c + 1) % len(names)])
        owner = f"conv:{split}{c:02d}"
        picked = rng.sample(range(len(world.stories)), k=2 * STORIES_PER_PERSON)
        stories = []
        for i, s in enumerate(picked):
            story = world.stories[s]
            values = {slot: rng.choice(options) for slot, options in story.slots.items()}
            stories.append((i % 2, story, values))
        absent = [world.stories[s] for s in range(len(world.stories)) if s not in picked]
        builder = _Builder(world, rng, owner, people, stories)
        beats = _schedule(rng, len(stories))
        day = FIRST_DAY + timedelta(days=rng.randrange(0, 60))
        for number in range(SESSIONS):
            start = day.replace(hour=rng.randint(17, 21), minute=rng.randrange(60))
            builder.session(number, start, [b for b in beats if b.session == number])
            day += timedelta(days=rng.randint(5, 21))
        convs.append(Conversation(owner, people, builder.turns))
        questions += _questions(rng, owner, people, stories, absent, builder.beat_turns)
    return Dataset(split, seed, convs, questions)


def _questions(
    rng: random.Random,
    owner: str,
    people: tuple[str, str],
    stories: Sequence[tuple[int, Story, dict[str, str]]],
    absent: Sequence[Story],
    beat_turns: dict[tuple[int, str], Turn],
) -> list[Question]:
    out: list[Question] = []

    def ask(kind: str, template: str, name: str, answers: tuple[str, ...]) -> None:
        text = template.format(name=name)
        out.append(Question(f"{owner}#{len(out):03d}", owner, kind, text, answers))

    for i, (teller, story, _values) in enumerate(stories):
        name = people[teller]
        start, detail, update = (beat_turns[(i, k)] for k in ("start", "detail", "update"))
        ask("single", rng.choice(story.ask_start), name, (start.key,))
        ask("single", rng.choice(story.ask_detail), name, (detail.key,))
        ask("multi", rng.choice(story.ask_multi), name, (start.key, detail.key))
        ask("temporal", rng.choice(story.ask_when), name, (start.key,))
        month = _month(update.at)
        if month not in (_month(start.at), _month(detail.at)):
            label = datetime.fromtimestamp(update.at, UTC).strftime("%B %Y")
            ask(
                "temporal",
                f"What did {{name}} say about {story.about} in {label}?",
                name,
                (update.key,),
            )
    for story in rng.sample(list(absent), k=min(4, len(absent))):
        name = rng.choice(people)
        ask("no_answer", f"What did {{name}} tell us about {story.absent}?", name, ())
    return out


def check(dataset: Dataset) -> None:
    """Labels point at real turns; every turn is long; keys are unique."""
    keys = {t.key for t in dataset.turns}
    if len(keys) != len(dataset.turns):
        raise AssertionError("duplicate turn keys")
    short = [t.key for t in dataset.turns if len(t.text) < MIN_TURN_CHARS]
    if short:
        raise AssertionError(f"turns shorter than {MIN_TURN_CHARS} characters: {short[:3]}")
    for q in dataset.questions:
        if any(a not in keys for a in q.answers):
            raise AssertionError(f"{q.id}: answer outside the dataset")
        if q.kind != "no_answer" and not q.answers:
            raise AssertionError(f"{q.id}: no answer")
