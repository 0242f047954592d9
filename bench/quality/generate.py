"""A seeded, labelled dataset for measuring recall quality: simulated agent conversations
turned into zeromem memories, and questions with the keys of the memories that answer them.

Run: ``.venv/bin/python bench/quality/generate.py [--seed 7] [--users 8] [--turns 40]
[--out dataset.json]`` prints a summary (and writes the dataset as JSON with ``--out``).
``bench/quality/run.py`` imports ``build()`` directly.

The world
---------
An assistant agent serves several users, each in six sessions spread over ~90 days of
simulated time (the last one 1-4 days before "now"). A session has ~``turns`` messages
(user, assistant and tool output lines). Every user lives through the same storylines with
their own entities (names, ids, amounts, places), so the questions are comparable:

- preferences stated early (language, diet, contact channel in session 0, ~80-88 days
  ago; seat and answer style in session 1, ~55-66 days ago), never repeated;
- facts: home and office addresses, customer account, payment card, orders, a flight;
- tool results: parcel tracking (twice, the later one supersedes the first), an invoice
  from the billing API, a hotel search, a flight status;
- decisions, several referencing the memories they rest on (``references``): deliveries
  to the office during a renovation, then home again; pay an invoice with the card on
  file; keep the Premium plan, then downgrade; refund an order to the card; book a hotel;
- task states logged as separate memories per update (``task:uN-t1:state-1..4``), so
  older, conflicting statuses coexist with the current one, as in an append-only log;
- chit-chat: most user messages, stored as ``message`` memories in the session's owner.
  Fillers are drawn from templates that deliberately reuse the questions' vocabulary
  (dinner, language, parcels, card, plan, seat, order ids...), as real chatter does.

How the agent writes memories: a user message that carries information becomes the
distilled memory (a preference, a fact, a task state...), not a ``message`` as well; every
other user message is logged as a ``message``. Assistant replies and raw tool output are
in the transcript only (an agent pasting its history would send them).

Keys: ``user:uN:<name>`` for what is about the user, ``task:uN-tK:state-M`` for task logs,
``session:uN-sJ:<name>`` for a session's messages, tool results and events.

Questions
---------
All questions are asked at "now", after every session. Kinds:

- ``single``: one memory answers; worded differently, sharing a salient word or id.
- ``linked``: two memories; the second is reachable from the first through
  ``references`` (and may share no word with the question).
- ``temporal``: the latest of several conflicting memories (task status, tracking,
  flight status, "what did we decide last week about X"); ``superseded`` lists the
  older ones, which must not win.
- ``old_preference``: a preference stated ~2-3 months ago that must still be found.

Each question records ``history_tokens``: the cl100k tokens of that user's whole
transcript up to the question (``zeromem.recall.tokens.count_tokens``).

A sanity check (``check()``) runs on every build: unique keys, content within 200
characters, references and answers pointing at existing keys, time order, and every
question sharing at least one analysed term (``zeromem.recall.text``) with its first
answer, since a lexical recall cannot be asked to find a memory with no word in common.
"""

from __future__ import annotations

import argparse
import json
import random
import string
import sys
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from zeromem.recall.text import index_terms, terms
from zeromem.recall.tokens import count_tokens
from zeromem.schemas import CONTENT_MAX_CHARS, MemoryKey

DAY = 86_400.0
# "now" of the simulation: fixed so a seed always gives the same dataset, byte for byte.
SIM_NOW = datetime(2025, 6, 2, 9, 0, tzinfo=UTC).timestamp()
# (oldest, newest) age in days of each session's start; the gaps keep sessions apart.
SESSION_AGES = ((80, 88), (55, 66), (34, 44), (18, 26), (8, 12), (1, 4))
KINDS = ("single", "linked", "temporal", "old_preference")


# --- Data model ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Memory:
    key: str
    content: str
    type: str  # a zeromem.schemas.MemoryType value
    created_at: float  # simulated epoch seconds
    user: str
    tags: tuple[str, ...] = ()
    references: tuple[str, ...] = ()
    value: dict[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class Question:
    id: str
    user: str
    kind: str
    text: str
    answers: tuple[str, ...]  # every one of these keys is needed for a full answer
    superseded: tuple[str, ...]  # older conflicting memories (temporal questions)
    asked_at: float
    history_tokens: int


@dataclass(frozen=True, slots=True)
class User:
    id: str
    name: str
    owners: tuple[str, ...]  # the recall scope an agent serving this user would pass
    turns: int
    history_tokens: int


@dataclass(slots=True)
class Dataset:
    seed: int
    now: float
    users: list[User]
    memories: list[Memory]  # in creation order
    questions: list[Question]

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    def summary(self) -> dict[str, Any]:
        return {
            "seed": self.seed,
            "users": len(self.users),
            "memories": len(self.memories),
            "memory_types": dict(sorted(Counter(m.type for m in self.memories).items())),
            "questions": len(self.questions),
            "question_kinds": {k: sum(q.kind == k for q in self.questions) for k in KINDS},
            "turns": sum(u.turns for u in self.users),
            "mean_history_tokens": round(
                sum(q.history_tokens for q in self.questions) / max(1, len(self.questions))
            ),
            "span_days": round((self.now - min(m.created_at for m in self.memories)) / DAY, 1),
        }


@dataclass(frozen=True, slots=True)
class Turn:
    at: float
    role: str  # user | assistant | tool
    text: str


# --- Pools -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class City:
    name: str
    home: str
    office: str
    hub: str  # the carrier's sorting hub
    carrier: str
    airline: str  # IATA code of the home carrier


CITIES = (
    City("Berlin", "Lindenstrasse 14, flat 3B, 10115 Berlin",
         "Kantstrasse 21, 3rd floor, 10623 Berlin", "Leipzig", "DHL", "LH"),
    City("Lisbon", "Rua das Flores 28, 2nd left, 1200-195 Lisboa",
         "Avenida da Liberdade 110, 5th floor, 1250-146 Lisboa", "Alverca", "CTT", "TP"),
    City("Madrid", "Calle de Toledo 52, 4B, 28005 Madrid",
         "Paseo de la Castellana 89, 7th floor, 28046 Madrid", "Getafe", "SEUR", "IB"),
    City("Lyon", "12 rue Mercière, 3rd floor, 69002 Lyon",
         "45 cours Lafayette, 6th floor, 69003 Lyon", "Saint-Priest", "Colissimo", "AF"),
    City("Milan", "Via Paolo Sarpi 33, int. 7, 20154 Milano",
         "Corso Como 15, 4th floor, 20154 Milano", "Lacchiarella", "BRT", "AZ"),
    City("Vienna", "Kettenbrückengasse 9/14, 1050 Wien",
         "Praterstrasse 40, 2nd floor, 1020 Wien", "Wiener Neudorf", "Post AT", "OS"),
    City("Warsaw", "ul. Hoża 27 m. 12, 00-521 Warszawa",
         "ul. Prosta 51, 9th floor, 00-838 Warszawa", "Błonie", "InPost", "LO"),
    City("Dublin", "17 Synge Street, Portobello, Dublin 8, D08 K2X4",
         "2 Grand Canal Square, 3rd floor, Dublin 2, D02 A342", "Naas Road", "An Post", "EI"),
    City("Copenhagen", "Jægersborggade 22, 2. th, 2200 København N",
         "Kalvebod Brygge 39, 4th floor, 1560 København V", "Taastrup", "PostNord", "SK"),
    City("Prague", "Vinohradská 48, flat 11, 120 00 Praha 2",
         "Na Příkopě 22, 5th floor, 110 00 Praha 1", "Jažlovice", "PPL", "OK"),
)  # fmt: skip

NAMES = ("Anna", "Bruno", "Chiara", "Dmitri", "Elena", "Farid", "Greta", "Hugo", "Ines",
         "Jonas", "Katja", "Luis")  # fmt: skip
LANGUAGES = ("German", "Portuguese", "Spanish", "French", "Italian", "Dutch", "Polish",
             "Swedish", "Czech", "Greek")  # fmt: skip

# (what the user says, what the agent stores)
DIETS = (
    ("Quick note for later: I'm vegetarian, and I'm allergic to peanuts.",
     "Vegetarian, allergic to peanuts: no meat, no fish, nothing with peanut sauce"),
    ("I should tell you I'm vegan, and I stay away from soy as well.",
     "Vegan: no meat, dairy or eggs, and avoids soy"),
    ("Heads-up: I'm coeliac, so everything has to be gluten-free, sauces included.",
     "Coeliac, strictly gluten-free: no wheat, barley or rye, even in sauces"),
    ("I eat fish but no meat, and dairy doesn't agree with me at all.",
     "Pescatarian (fish yes, meat no) and lactose intolerant"),
    ("For food stuff: I only eat halal, and no alcohol in the cooking please.",
     "Eats halal only: no pork, no alcohol in the food"),
    ("Important: I have a severe tree-nut allergy, I carry an EpiPen.",
     "Severe tree-nut allergy (carries an EpiPen); otherwise eats everything"),
)  # fmt: skip
CONTACTS = (
    ("Please only email me. SMS is ok if a delivery is urgent, but never call.",
     "Contact by email only; SMS just for urgent delivery problems, never phone calls"),
    ("Signal is best for anything urgent, email for everything else. No calls at work.",
     "Prefers Signal messages for anything urgent, email for the rest; no calls during work hours"),
    ("Calls are fine after 18:00, otherwise email me. Please no SMS.",
     "Phone calls fine after 18:00, otherwise contact by email; no SMS"),
)  # fmt: skip
SEATS = (
    ("When you book flights for me: aisle seat, never the middle one.",
     "Flights: aisle seat, never the middle"),
    ("I like a window seat on planes, front rows if possible.",
     "Flights: window seat, front rows if possible"),
    ("I'm 1.95 m, so on flights I need an exit row or at least an aisle.",
     "Flights: exit-row seat for legroom (1.95 m tall), else an aisle seat"),
)  # fmt: skip
STYLES = (
    ("Can you keep your answers short? Bullet points, and no emojis please.",
     "Likes short bullet-point answers, no emojis"),
    ("I prefer detailed answers, step by step, with an example if you can.",
     "Wants detailed step-by-step answers with examples"),
    ("Keep it formal please, no small talk, and under 100 words per answer.",
     "Prefers formal answers under 100 words, no small talk"),
)  # fmt: skip

# (product, short name, plural, what went wrong with it)
PRODUCTS = (
    ("ergonomic keyboard", "keyboard", "keyboards", "three keys don't register"),
    ("27-inch monitor", "monitor", "monitors", "a line of dead pixels"),
    ("pair of noise-cancelling headphones", "headphones", "headphones", "left ear cup crackles"),
    ("4K webcam", "webcam", "webcams", "autofocus keeps hunting"),
    ("office chair", "chair", "chairs", "gas lift slowly sinks"),
    ("espresso machine", "espresso machine", "espresso machines", "pump leaks water"),
    ("air purifier", "purifier", "purifiers", "fan rattles loudly"),
    ("robot vacuum", "vacuum", "vacuums", "won't return to its dock"),
)  # fmt: skip
BIG_PRODUCTS = (("standing desk", "desk"), ("bookshelf", "bookshelf"), ("sofa bed", "sofa bed"),
                ("washing machine", "washing machine"), ("bike trainer", "trainer"))  # fmt: skip
DESTINATIONS = (
    ("Porto", "Casa da Ribeira"), ("Seville", "Hotel Alcázar Viejo"),
    ("Edinburgh", "The Grassmarket Rooms"), ("Krakow", "Kazimierz Loft Hotel"),
    ("Athens", "Plaka Garden Suites"), ("Valencia", "Hostal Ruzafa"),
    ("Copenhagen", "Nyhavn Corner Hotel"), ("Vienna", "Pension Naschmarkt"),
    ("Ghent", "Hotel Gravensteen View"), ("Bologna", "Albergo delle Torri"),
)  # fmt: skip
FRIENDS = ("sister", "brother", "best friend", "cousin", "old flatmate", "colleague")
CUISINES = ("Thai", "Georgian", "Lebanese", "Sichuan", "Peruvian", "Ethiopian", "Korean")
SPORTS = ("climbing", "running", "swimming", "tennis", "yoga", "cycling")
SHOWS = ("the new detective series", "that cooking competition", "the space documentary")
WEEKDAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
DEVICES = ("the iOS app", "the Android app", "the web app", "the desktop app")

# User chatter, logged as message memories. Fields: {city} {dest} {friend} {lang2}
# {cuisine} {weekday} {sport} {show} {product} {order} {other_city}. Many reuse the
# questions' words on purpose: a realistic distractor shares vocabulary, not meaning.
FILLER_USER = (
    "thanks, that helps a lot",
    "ok cool",
    "haha fair enough",
    "good morning! quick one today",
    "sorry, was in a meeting. where were we?",
    "let's pick this up tomorrow",
    "can you summarise that in two lines?",
    "what's the weather looking like in {city} this weekend?",
    "remind me to call my mum on {weekday}",
    "I'm thinking about picking up {sport} again, any beginner tips?",
    "have you seen {show}? everyone at work talks about it",
    "my {friend} is visiting next week, any ideas for a day out in {city}?",
    "how do I say 'see you soon' in {lang2}?",
    "I started learning {lang2} on an app, the language is harder than I thought",
    "please answer in English for this one, it's for my colleague",
    "can you translate this reply into {lang2} for my {friend}?",
    "we had dinner at a {cuisine} place on {weekday}, the food was great",
    "any quick recipe ideas for a weeknight dinner?",
    "I'm cooking for six people on {weekday}, help me plan a menu",
    "can you find a table for two on {weekday} evening, something {cuisine}?",
    "what's a good gift for my {friend} who loves cooking?",
    "the coffee at the office is terrible lately",
    "is it normal for a parcel to take more than a week?",
    "the delivery driver left a note again instead of ringing",
    "my neighbour keeps getting my parcels by mistake",
    "my card got declined at the supermarket today, weird",
    "what does an invoice due date mean exactly, legally?",
    "I hate paperwork, thanks for dealing with it",
    "we're trying to decide between {dest} and {other_city} for a long weekend",
    "I still haven't decided what to do about the gym membership",
    "what's the latest news about the rail strike?",
    "my flight to {other_city} last year was a nightmare, six hours late",
    "do you know if window seats are colder on planes?",
    "can you rewrite this email so it sounds more polite?",
    "shorter please",
    "what time is it in Tokyo right now?",
    "my team is spread over three time zones, meetings are chaos",
    "is a {product} worth it for working from home?",
    "the {product} reviews online are all over the place",
    "any news on {order}?",
    "still waiting on {order}, I guess",
    "thanks for keeping track of {order}",
    "this week has been so long",
    "last week was crazy at work",
    "can you explain how refunds usually work with card payments?",
    "should I get a credit card with travel insurance?",
    "I need a new plan for my morning routine",
    "my phone plan is way too expensive, any idea how to compare them?",
    "what's a nice area to stay in {dest}?",
    "do hotels usually let you cancel for free?",
    "I need to update my address with the bank too, ugh",
    "what's the status of the Mars mission, did it launch?",
    "our office is moving to a new floor next month",
    "can you remind me what we talked about last time?",
    "the task list at work keeps growing",
    "I'm so tired today",
    "what should I read on the train to {other_city}?",
    "how long does it take to get used to a new {product}?",
    "I decided to finally clean up my inbox",
    "any tips for sleeping better?",
)  # fmt: skip
FILLER_ASSISTANT = (
    "Happy to help. In short: it depends on your situation, but the usual approach is to "
    "start small, check the results after a week, and adjust from there. Want me to put "
    "together a concrete plan with a few options and what each would cost you?",
    "Good question. There are a few ways to look at it. The quickest is to compare the "
    "two or three most common options side by side; I can do that now if you like, and "
    "flag anything that needs a decision from you before we go further.",
    "Sure! Here's a short version: the main point is timing, the second is cost, and the "
    "rest is mostly preference. If you tell me which of those matters most to you today, "
    "I'll narrow it down to one recommendation instead of a list.",
    "Noted. I'll keep that in mind for the next steps. Is there anything else on your "
    "list for today, or should we pick this up in our next session?",
    "I looked into it: opinions vary a lot online, and most reviews mix up different "
    "versions. The consistent points are build quality and support; the complaints are "
    "mostly about shipping. I can dig into a specific model if you want.",
    "That sounds like a long day. If it helps, I can take a couple of small things off "
    "your plate, such as drafting replies or sorting the open items by urgency.",
    "Here's what I found: the short answer is yes, usually, but the details depend on the "
    "provider's terms. I'd check the fine print for fees and deadlines; I can summarise "
    "the relevant clause if you paste it here.",
    "Of course. I've drafted something below; feel free to tell me what to change in "
    "tone or length, and I'll adjust it before you send it.",
    "Ha, fair. Let me know whenever you want to continue; I keep track of the open points "
    "so we can pick up exactly where we left off.",
    "A few ideas: a walk through the old town, a food market, and a museum that isn't "
    "too crowded on weekdays. If the weather turns, there are good indoor options too; "
    "want me to check opening hours and book anything?",
)  # fmt: skip


# --- One user's story ------------------------------------------------------------------


@dataclass(slots=True)
class Profile:
    uid: str
    name: str
    city: City
    language: str
    lang2: str  # a language the user is learning: chatter about it is a distractor
    diet: tuple[str, str]
    contact: tuple[str, str]
    seat: tuple[str, str]
    style: tuple[str, str]
    account: str
    plan_price: str
    card: tuple[str, str, str]  # brand, last four digits, expiry
    product: tuple[str, str, str, str]
    qty: int
    order_a: str
    price_a: str
    tracking: str
    signer: str
    big: tuple[str, str]
    order_b: str
    price_b: str
    invoice: str
    invoice_amount: str
    dest: str
    hotel: str
    other_city: str
    flight: str
    pnr: str
    flight_day: float  # epoch seconds of the departure
    hotel_rate: int
    nights: int
    gate: str
    home_session: int  # 4 ("last week") or 5 ("this week"): when deliveries go home again


def make_profile(rng: random.Random, uid: str, name: str, city: City) -> Profile:
    language, lang2 = rng.sample(LANGUAGES, 2)
    dest, hotel = rng.choice([d for d in DESTINATIONS if d[0] != city.name])
    other_city = rng.choice([c.name for c in CITIES if c.name not in (city.name, dest)])
    letters = rng.sample("ABCDEFGHJKMNPRSTUVWXZ", 2)
    product = rng.choice(PRODUCTS)
    qty = rng.choice((1, 1, 2))
    unit = rng.randint(49, 399) + 0.99
    return Profile(
        uid=uid, name=name, city=city, language=language, lang2=lang2,
        diet=rng.choice(DIETS), contact=rng.choice(CONTACTS), seat=rng.choice(SEATS),
        style=rng.choice(STYLES),
        account=f"ACC-{rng.randint(10000, 99999)}", plan_price=rng.choice(("39.90", "49.00")),
        card=(rng.choice(("Visa", "Mastercard", "Amex")), f"{rng.randint(0, 9999):04d}",
              f"{rng.randint(1, 12):02d}/{rng.randint(26, 29)}"),
        product=product, qty=qty, order_a=f"{letters[0]}{rng.randint(1000, 9999)}",
        price_a=f"{unit * qty:.2f}",
        tracking=f"{rng.randint(10**9, 10**10 - 1)}",
        signer=rng.choice(("the reception desk", "a colleague", "the building concierge")),
        big=rng.choice(BIG_PRODUCTS), order_b=f"{letters[1]}{rng.randint(1000, 9999)}",
        price_b=f"{rng.randint(180, 900)}.00",
        invoice=f"INV-{rng.randint(1000, 9999)}", invoice_amount=f"{rng.randint(20, 140)}.90",
        dest=dest, hotel=hotel, other_city=other_city,
        flight=f"{city.airline}{rng.randint(100, 1999)}",
        pnr="".join(rng.choice(string.ascii_uppercase + "23456789") for _ in range(6)),
        # departures between 06:00 and 20:45 UTC, on a quarter hour
        flight_day=SIM_NOW + rng.randint(9, 20) * DAY + rng.randint(-12, 47) * 900,
        hotel_rate=rng.randint(68, 99), nights=rng.randint(2, 4),
        gate=f"{rng.choice('ABCDE')}{rng.randint(2, 40)}",
        home_session=rng.choice((4, 5)),
    )  # fmt: skip


def day(ts: float) -> str:
    """``3 March``: how an agent writes a date into a short memory."""
    d = datetime.fromtimestamp(ts, UTC)
    return f"{d.day} {d.strftime('%B')}"


def month(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%B")


def clock(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%H:%M")


def when_phrase(age_s: float) -> str:
    """How a user refers to a moment: the phrase follows the actual simulated age."""
    days = age_s / DAY
    if days < 7:
        return "this week"
    if days < 14:
        return "last week"
    return "a few weeks ago"


class Session:
    """Builds one session: turns on a moving clock, and the memories written along."""

    def __init__(self, story: Story, index: int, start: float) -> None:
        self.story = story
        self.index = index
        self.owner = f"session:{story.p.uid}-s{index}"
        self.now = start
        self.messages = 0
        self.said: set[str] = set()  # templates used in this session: no repeats within one

    def _tick(self, low: int = 15, high: int = 110) -> float:
        self.now += self.story.rng.randint(low, high)
        return self.now

    def say(self, role: str, text: str) -> float:
        at = self._tick()
        self.story.turns.append(Turn(at, role, text))
        return at

    def tool(self, name: str, payload: dict[str, Any]) -> float:
        return self.say("tool", f"{name} -> {json.dumps(payload, ensure_ascii=False)}")

    def remember(self, key: str, content: str, type_: str, *, tags: Sequence[str] = (),
                 refs: Sequence[str] = (), value: dict[str, Any] | None = None) -> str:
        """A memory created at the current simulated time (after the turn behind it)."""
        self.story.memories.append(Memory(key, content, type_, self.now, self.story.p.uid,
                                          tuple(tags), tuple(refs), value))  # fmt: skip
        return key

    def chatter(self) -> None:
        """One exchange of small talk; the user's side is logged as a message memory."""
        rng, p = self.story.rng, self.story.p
        fields = {
            "city": p.city.name, "dest": p.dest, "friend": rng.choice(FRIENDS),
            "lang2": p.lang2, "cuisine": rng.choice(CUISINES), "weekday": rng.choice(WEEKDAYS),
            "sport": rng.choice(SPORTS), "show": rng.choice(SHOWS), "product": p.product[1],
            "other_city": p.other_city,
        }  # fmt: skip
        if self.story.known_orders:
            fields["order"] = rng.choice(self.story.known_orders)
        fits = [t for t in FILLER_USER if _fields_of(t) <= fields.keys()]
        usable = [t for t in fits if t not in self.said] or fits  # a long session repeats
        template = rng.choice(usable)
        self.said.add(template)
        text = template.format(**fields)
        self.say("user", text)
        self.messages += 1
        self.remember(f"{self.owner}:m{self.messages:02d}", text, "message")
        self.say("assistant", rng.choice(FILLER_ASSISTANT))


def _fields_of(template: str) -> set[str]:
    return {name for _, name, _, _ in string.Formatter().parse(template) if name}


@dataclass(slots=True)
class Story:
    """One user's six sessions: turns, memories, and the keys questions point at."""

    rng: random.Random
    p: Profile
    turns: list[Turn] = field(default_factory=list)
    memories: list[Memory] = field(default_factory=list)
    keys: dict[str, str] = field(default_factory=dict)  # role in the story -> memory key
    known_orders: list[str] = field(default_factory=list)
    notes: dict[str, str] = field(default_factory=dict)  # details questions refer to

    @property
    def user_key(self) -> str:
        return f"user:{self.p.uid}"

    def task(self, n: int) -> str:
        return f"task:{self.p.uid}-t{n}"

    # Events: each one is an exchange (and a tool call) that leaves a distilled memory.

    def events(self, index: int) -> list[Callable[[Session], None]]:
        plan: list[list[Callable[[Session], None]]] = [
            [self.pref_language, self.pref_diet, self.addr_home, self.account, self.card,
             self.pref_contact],
            [self.pref_seat, self.pref_style, self.addr_office, self.decide_office,
             self.order_a, self.track_first],
            [self.track_second, self.task1_opened, self.invoice, self.decide_pay,
             self.decide_keep_plan, self.order_b],
            [self.task1_return, self.decide_refund, self.flight_booked, self.hotel_search,
             self.decide_hotel, self.task2_booked],
            [self.task1_refund_pending, self.task2_transfer],
            [self.task1_closed, self.task2_done, self.flight_status, self.decide_downgrade],
        ]  # fmt: skip
        events = plan[index]
        if index == self.p.home_session:
            events.insert(self.rng.randint(0, len(events)), self.decide_home)
        return events

    def pref_language(self, s: Session) -> None:
        lang = self.p.language
        s.say("user", f"One thing: please answer me in {lang} from now on, even when I write "
                      "in English.")  # fmt: skip
        s.say("assistant", f"Understood, I'll reply in {lang} from now on, whatever language "
                           "you write in.")  # fmt: skip
        self.keys["pref_language"] = s.remember(
            f"{self.user_key}:pref_language", f"Wants replies in {lang}, even when writing in "
            "English", "user_preference", tags=("preference", "language"))  # fmt: skip

    def pref_diet(self, s: Session) -> None:
        said, stored = self.p.diet
        s.say("user", said)
        s.say("assistant", "Noted. I'll take that into account for restaurants, recipes and "
                           "any food orders.")  # fmt: skip
        self.keys["pref_diet"] = s.remember(f"{self.user_key}:pref_diet", stored,
                                            "user_preference", tags=("preference", "diet"))

    def pref_contact(self, s: Session) -> None:
        said, stored = self.p.contact
        s.say("user", said)
        s.say("assistant", "Got it, I'll stick to that whenever I need to reach you.")
        self.keys["pref_contact"] = s.remember(f"{self.user_key}:pref_contact", stored,
                                               "user_preference", tags=("preference",))

    def pref_seat(self, s: Session) -> None:
        said, stored = self.p.seat
        s.say("user", said)
        s.say("assistant", "Noted for all future flight bookings.")
        self.keys["pref_seat"] = s.remember(f"{self.user_key}:pref_seat", stored,
                                            "user_preference", tags=("preference", "travel"))

    def pref_style(self, s: Session) -> None:
        said, stored = self.p.style
        s.say("user", said)
        s.say("assistant", "Will do.")
        self.keys["pref_style"] = s.remember(f"{self.user_key}:pref_style", stored,
                                             "user_preference", tags=("preference",))

    def addr_home(self, s: Session) -> None:
        home = self.p.city.home
        s.say("user", f"For deliveries, my home address is {home}.")
        s.say("assistant", "Saved as your home delivery address.")
        self.keys["addr_home"] = s.remember(f"{self.user_key}:addr_home", f"Home address: {home}",
                                            "fact", tags=("address",),
                                            value={"address": home})  # fmt: skip

    def addr_office(self, s: Session) -> None:
        office = self.p.city.office
        s.say("user", "We're renovating the flat for a few weeks. My office is at "
                      f"{office}; reception takes parcels 9 to 5.")  # fmt: skip
        s.say("assistant", "Thanks, I've saved the office address.")
        self.keys["addr_office"] = s.remember(
            f"{self.user_key}:addr_office",
            f"Office address: {office}; reception accepts parcels 9:00-17:00", "fact",
            tags=("address",), value={"address": office, "reception": "09:00-17:00"})

    def decide_office(self, s: Session) -> None:
        s.say("assistant", "Then should I send all deliveries to the office until the "
                           "renovation is over?")  # fmt: skip
        s.say("user", "Yes, do that.")
        self.keys["decision_office"] = s.remember(
            f"{self.user_key}:decision-delivery-1",
            "Decided: while the flat is being renovated, all parcels are delivered to the "
            "office address", "decision", tags=("delivery",), refs=(self.keys["addr_office"],))

    def decide_home(self, s: Session) -> None:
        s.say("user", "Renovation is finally done! You can send things home again.")
        s.say("assistant", "Great news. From now on all deliveries go to your home address.")
        self.keys["decision_home"] = s.remember(
            f"{self.user_key}:decision-delivery-2",
            "Decided: renovation is finished, parcels go to the home address again from now on",
            "decision", tags=("delivery",), refs=(self.keys["addr_home"],))

    def account(self, s: Session) -> None:
        p = self.p
        s.say("user", "Can you check which plan my account is on?")
        s.tool("billing.get_account", {"account": p.account, "plan": "premium", "seats": 3,
                                       "billing": "monthly", "price_eur": float(p.plan_price),
                                       "since": "2023-09-01"})  # fmt: skip
        s.say("assistant", f"You're on Premium with 3 seats (account {p.account}), billed "
                           f"monthly at {p.plan_price} EUR.")  # fmt: skip
        self.keys["account"] = s.remember(
            f"{self.user_key}:account",
            f"Customer account {p.account}: Premium plan, 3 seats, billed monthly at "
            f"{p.plan_price} EUR", "fact", tags=("billing",),
            value={"account": p.account, "plan": "premium", "seats": 3})

    def card(self, s: Session) -> None:
        brand, last4, expiry = self.p.card
        s.say("user", f"I replaced my card, the new one is a {brand} ending {last4}, valid "
                      f"until {expiry}.")  # fmt: skip
        s.say("assistant", "Thanks, I've updated the card on file.")
        self.keys["card"] = s.remember(
            f"{self.user_key}:card", f"Payment card on file: {brand} ending {last4}, expires "
            f"{expiry}", "fact", tags=("payment",),
            value={"brand": brand, "last4": last4, "expiry": expiry})  # fmt: skip

    def order_a(self, s: Session) -> None:
        p = self.p
        product, _, plural, _ = p.product
        what = f"{p.qty} {plural}" if p.qty > 1 else f"an {product}" if product[0] in "aeio" \
            else f"a {product}"
        s.say("user", f"I ordered {what} this morning, order {p.order_a}.")
        s.say("assistant", f"Noted order {p.order_a}, I'll keep an eye on it.")
        self.known_orders.append(p.order_a)
        self.keys["order_a"] = s.remember(
            f"{self.user_key}:order-{p.order_a}",
            f"Order {p.order_a}: {p.qty}x {product}, {p.price_a} EUR total, placed {day(s.now)}",
            "fact", tags=("order",),
            value={"order": p.order_a, "item": product, "qty": p.qty, "total_eur": p.price_a})

    def track_first(self, s: Session) -> None:
        p = self.p
        s.say("user", f"Can you track {p.order_a} for me?")
        eta = day(s.now + 3 * DAY)
        s.tool("shipping.track", {"carrier": p.city.carrier, "tracking": p.tracking,
                                  "order": p.order_a, "status": "in_transit", "eta": eta,
                                  "events": [{"at": day(s.now), "where": p.city.hub,
                                              "what": "handed over to carrier"}]})  # fmt: skip
        s.say("assistant", f"It's with {p.city.carrier} now, expected on {eta}.")
        self.keys["track_first"] = s.remember(
            f"{s.owner}:track-{p.order_a}",
            f"{p.city.carrier} tracking {p.tracking} for order {p.order_a}: in transit via "
            f"{p.city.hub}, delivery expected {eta}", "tool_result", tags=("shipping",))

    def track_second(self, s: Session) -> None:
        p = self.p
        first = next(m for m in self.memories if m.key == self.keys["track_first"])
        delivered = day(first.created_at + 3 * DAY)
        item = p.product[2] if p.qty > 1 else p.product[1]
        s.say("user", f"The {item} from {p.order_a} came a while ago, but something's wrong. "
                      "When was it delivered?")  # fmt: skip
        s.tool("shipping.track", {"carrier": p.city.carrier, "tracking": p.tracking,
                                  "order": p.order_a, "status": "delivered",
                                  "delivered": delivered, "signed_by": p.signer})  # fmt: skip
        s.say("assistant", f"Delivered on {delivered}, signed by {p.signer}. What's wrong?")
        self.keys["track_second"] = s.remember(
            f"{s.owner}:track-{p.order_a}",
            f"{p.city.carrier} tracking {p.tracking} for order {p.order_a}: delivered "
            f"{delivered} at the office, signed by {p.signer}", "tool_result", tags=("shipping",))

    def _task_state(self, s: Session, task: int, step: int, content: str) -> None:
        self.keys[f"t{task}_{step}"] = s.remember(
            f"{self.task(task)}:state-{step}", content, "task_state", tags=("task",))

    def task1_opened(self, s: Session) -> None:
        p = self.p
        s.say("user", f"The {p.product[1]}'s {p.product[3]}. Can you sort out a claim?")
        s.say("assistant", "I've opened a claim with the seller and will follow up (task t1).")
        self._task_state(s, 1, 1, f"Task t1, faulty {p.product[1]} from order {p.order_a} "
                                  f"({p.product[3]}): claim opened with the seller, waiting "
                                  "for their reply")  # fmt: skip

    def task1_return(self, s: Session) -> None:
        p = self.p
        s.say("assistant", f"The seller answered on the {p.product[1]} claim: return it for a "
                           "replacement or a refund. Which do you prefer?")  # fmt: skip
        s.say("user", "Refund please, I'll buy a different model.")
        self._task_state(s, 1, 2, f"Task t1 ({p.order_a}): seller accepted the return; user "
                                  "chose a refund over a replacement; return label sent")

    def decide_refund(self, s: Session) -> None:
        p = self.p
        s.say("assistant", "Should the refund go to your card or as store credit?")
        s.say("user", "Card, definitely.")
        self.keys["decision_refund"] = s.remember(
            f"{self.user_key}:decision-refund-{p.order_a}",
            f"Decided: the refund for order {p.order_a} goes back to the card on file, not "
            "store credit", "decision", tags=("refund",),
            refs=(self.keys["card"], self.keys["order_a"]))

    def task1_refund_pending(self, s: Session) -> None:
        p = self.p
        s.say("user", f"Any movement on the {p.product[1]} refund?")
        s.say("assistant", "The seller has the parcel back; the refund is being processed.")
        self._task_state(s, 1, 3, f"Task t1 ({p.order_a}): seller received the return; refund "
                                  f"of {p.price_a} EUR pending, 5-7 business days")

    def task1_closed(self, s: Session) -> None:
        p = self.p
        s.say("user", "I see the refund on my statement!")
        s.say("assistant", "Great, I'll close the claim then.")
        self._task_state(s, 1, 4, f"Task t1 ({p.order_a}): refund of {p.price_a} EUR arrived "
                                  "on the card; claim closed")

    def invoice(self, s: Session) -> None:
        p = self.p
        billed = s.now - 30 * DAY
        self.notes["invoice_month"] = month(billed)
        s.say("user", "Did my last invoice go through?")
        s.tool("billing.list_invoices", {"account": p.account, "invoices": [
            {"id": p.invoice, "period": month(billed), "amount_eur": float(p.invoice_amount),
             "status": "overdue", "due": day(billed + 14 * DAY)}]})  # fmt: skip
        s.say("assistant", f"No: invoice {p.invoice} ({p.invoice_amount} EUR) is overdue.")
        self.keys["invoice"] = s.remember(
            f"{s.owner}:invoice-{p.invoice}",
            f"Billing API: invoice {p.invoice} ({month(billed)}), {p.invoice_amount} EUR, "
            f"overdue since {day(billed + 14 * DAY)}", "tool_result", tags=("billing",))

    def decide_pay(self, s: Session) -> None:
        s.say("user", "Ugh. Pay it with my card then.")
        s.say("assistant", "Done, paid with the card on file.")
        self.keys["decision_pay"] = s.remember(
            f"{self.user_key}:decision-pay-{self.p.invoice}",
            f"Decided: pay overdue invoice {self.p.invoice} now with the card on file",
            "decision", tags=("billing",), refs=(self.keys["card"], self.keys["invoice"]))

    def decide_keep_plan(self, s: Session) -> None:
        s.say("user", "Should I drop to Basic? Actually no, let's keep Premium for now.")
        s.say("assistant", "OK, staying on Premium. We can revisit any time.")
        self.keys["decision_plan_1"] = s.remember(
            f"{self.user_key}:decision-plan-1",
            "Decided to keep the Premium plan for now; revisit if the team shrinks",
            "decision", tags=("billing",), refs=(self.keys["account"],))

    def decide_downgrade(self, s: Session) -> None:
        start = month(SIM_NOW + 31 * DAY)
        s.say("user", "Two people left the team. Let's go down to Basic after all.")
        s.say("assistant", f"Done: you'll be on Basic (1 seat) from {start}.")
        self.keys["decision_plan_2"] = s.remember(
            f"{self.user_key}:decision-plan-2",
            f"Decided: downgrade from Premium to the Basic plan (1 seat) starting {start}",
            "decision", tags=("billing",), refs=(self.keys["account"],))

    def order_b(self, s: Session) -> None:
        p = self.p
        s.say("user", f"Ordered a {p.big[0]} for the office: order {p.order_b}.")
        s.say("assistant", f"Noted {p.order_b}; it'll ship to the office.")
        self.known_orders.append(p.order_b)
        self.keys["order_b"] = s.remember(
            f"{self.user_key}:order-{p.order_b}",
            f"Order {p.order_b}: {p.big[0]}, {p.price_b} EUR, placed {day(s.now)}, shipping to "
            "the office", "fact", tags=("order",),
            value={"order": p.order_b, "item": p.big[0], "total_eur": p.price_b})

    def flight_booked(self, s: Session) -> None:
        p = self.p
        when = f"{day(p.flight_day)} at {clock(p.flight_day)}"
        s.say("user", f"I booked a flight to {p.dest}: {p.flight} on {when}, booking reference "
                      f"{p.pnr}.")  # fmt: skip
        s.say("assistant", "Saved the flight details.")
        self.keys["flight"] = s.remember(
            f"{self.user_key}:flight-{p.flight}",
            f"Flight {p.flight} {p.city.name} to {p.dest}, {when}, booking reference {p.pnr}",
            "fact", tags=("travel",), value={"flight": p.flight, "pnr": p.pnr})

    def hotel_search(self, s: Session) -> None:
        p = self.p
        cancel = day(p.flight_day - 4 * DAY)
        s.say("user", f"Find me a hotel in {p.dest} for {p.nights} nights, under 100 EUR a "
                      "night.")  # fmt: skip
        results = [
            {"name": p.hotel, "eur_per_night": p.hotel_rate, "free_cancel_until": cancel},
            {"name": "Central Plaza", "eur_per_night": 131, "free_cancel_until": None},
        ]
        s.tool("travel.search_hotels", {"city": p.dest, "checkin": day(p.flight_day),
                                        "nights": p.nights, "results": results})  # fmt: skip
        s.say("assistant", f"{p.hotel} fits: {p.hotel_rate} EUR a night, free cancellation "
                           f"until {cancel}.")  # fmt: skip
        self.keys["hotel_search"] = s.remember(
            f"{s.owner}:hotel-search",
            f"Hotel search: {p.hotel}, {p.dest}, {p.nights} nights from {day(p.flight_day)}, "
            f"{p.hotel_rate} EUR/night, free cancellation until {cancel}", "tool_result",
            tags=("travel",))

    def decide_hotel(self, s: Session) -> None:
        p = self.p
        s.say("user", "Sounds good, book it.")
        s.say("assistant", f"Booked {p.hotel}.")
        end = day(p.flight_day + p.nights * DAY)
        self.keys["decision_hotel"] = s.remember(
            f"{self.user_key}:decision-hotel-{p.dest.lower()}",
            f"Decided: book {p.hotel} in {p.dest} from {day(p.flight_day)} to {end}, within the "
            "100 EUR/night budget", "decision", tags=("travel",),
            refs=(self.keys["hotel_search"],))

    def task2_booked(self, s: Session) -> None:
        self._task_state(s, 2, 1, f"Task t2, {self.p.dest} trip: flight and hotel booked; "
                                  "airport transfer still to arrange")

    def task2_transfer(self, s: Session) -> None:
        s.say("user", f"Can the hotel in {self.p.dest} pick me up at the airport?")
        s.say("assistant", "I've asked them and will let you know.")
        self._task_state(s, 2, 2, f"Task t2, {self.p.dest} trip: asked the hotel for an "
                                  "airport transfer, waiting for their confirmation")

    def task2_done(self, s: Session) -> None:
        pickup = clock(self.p.flight_day + 3.5 * 3600)
        s.say("assistant", f"The hotel confirmed the airport pickup at {pickup}.")
        self._task_state(s, 2, 3, f"Task t2, {self.p.dest} trip: all set, the hotel confirmed "
                                  f"the airport pickup at {pickup}")

    def flight_status(self, s: Session) -> None:
        p = self.p
        delay = self.rng.choice((25, 35, 50, 70))
        new = clock(p.flight_day + delay * 60)
        s.say("user", f"Is {p.flight} still on schedule?")
        s.tool("travel.flight_status", {"flight": p.flight, "date": day(p.flight_day),
                                        "scheduled": clock(p.flight_day), "estimated": new,
                                        "gate": p.gate})  # fmt: skip
        s.say("assistant", f"It now leaves at {new}, {delay} minutes late.")
        self.keys["flight_status"] = s.remember(
            f"{s.owner}:flight-status",
            f"Flight status API: {p.flight} to {p.dest} on {day(p.flight_day)} now departs "
            f"{new} instead of {clock(p.flight_day)} ({delay} min delay), gate {p.gate}",
            "tool_result", tags=("travel",))

    # Questions, asked at SIM_NOW. Templates are alternatives; one is drawn per question.

    def questions(self, history_tokens: int) -> list[Question]:
        p, k = self.p, self.keys
        decided_home = next(m for m in self.memories if m.key == k["decision_home"])
        decided_plan = next(m for m in self.memories if m.key == k["decision_plan_2"])
        short_a, short_b = p.product[1], p.big[1]
        specs: list[tuple[str, Sequence[str], Sequence[str], Sequence[str]]] = [
            ("single", (f"What did I pay in total for order {p.order_a}?",
                        f"How much was the {short_a} order {p.order_a} again?"),
             (k["order_a"],), ()),
            ("single", (f"When did I order the {short_b}, and what did it cost?",
                        f"How much was the {short_b} ({p.order_b})?"), (k["order_b"],), ()),
            ("single", ("What's my customer account number?",
                        "Which account ID do I have with you?"), (k["account"],), ()),
            ("single", (f"What amount was on invoice {p.invoice}?",
                        f"How much was that overdue {self.notes['invoice_month']} invoice?"),
             (k["invoice"],), ()),
            ("single", (f"What's the booking reference for my {p.dest} flight?",
                        f"Which booking code do I need to check in for {p.dest}?"),
             (k["flight"],), ()),
            ("linked", (f"Which card will the {p.order_a} refund go back to?",
                        f"The refund for {p.order_a}: which card is it landing on, and when "
                        "does that card expire?"), (k["decision_refund"], k["card"]), ()),
            ("linked", ("Where should parcels go from now on? I need the full address for a form.",
                        "What address are my parcels delivered to now? Give me the full one."),
             (k["decision_home"], k["addr_home"]), ()),
            ("linked", (f"Which hotel did we book in {p.dest}, and until when can I cancel for "
                        "free?",
                        f"Remind me of the {p.dest} hotel we went with and its free "
                        "cancellation deadline"), (k["decision_hotel"], k["hotel_search"]), ()),
            ("temporal", ("What's the latest status of task t1?",
                          f"Where do we stand on the {short_a} claim (task t1)?"),
             (k["t1_4"],), (k["t1_1"], k["t1_2"], k["t1_3"])),
            ("temporal", (f"Any update on task t2, the {p.dest} trip?",
                          f"What's the current state of the {p.dest} trip planning?"),
             (k["t2_3"],), (k["t2_1"], k["t2_2"])),
            ("temporal", (f"Did the {p.order_a} parcel arrive? What does the latest tracking say?",
                          f"Latest tracking for order {p.order_a}?"),
             (k["track_second"],), (k["track_first"],)),
            ("temporal", (f"What did we decide {when_phrase(SIM_NOW - decided_home.created_at)} "
                          "about where my parcels get delivered?",),
             (k["decision_home"],), (k["decision_office"],)),
            ("temporal", (f"What did I decide {when_phrase(SIM_NOW - decided_plan.created_at)} "
                          "about my plan?",
                          "Did I end up changing my plan? What did we decide?"),
             (k["decision_plan_2"],), (k["decision_plan_1"],)),
            ("temporal", (f"Is flight {p.flight} still on time?",
                          f"When does my {p.dest} flight leave now?"),
             (k["flight_status"],), (k["flight"],)),
        ]  # fmt: skip
        old_prefs = {
            "pref_language": ("Remind me, which language should your replies be in?",
                              "What language do you normally answer me in?"),
            "pref_diet": (f"I'm booking dinner for {self.rng.choice(WEEKDAYS)}; what should the "
                          "restaurant know about my diet?",
                          "Planning the team lunch: remind me of my diet restrictions?"),
            "pref_contact": ("If a delivery goes wrong, how should you contact me?",
                             "What's the best way to contact me about an urgent problem?"),
            "pref_seat": ("What kind of seat do I like on flights?",
                          f"Booking my {p.dest} flight: which seat should you pick for me?"),
            "pref_style": ("How do I like your answers formatted?",
                           "What style of answers do I prefer from you?"),
        }  # fmt: skip
        for name in sorted(self.rng.sample(sorted(old_prefs), 3)):
            specs.append(("old_preference", old_prefs[name], (k[name],), ()))
        out = []
        for n, (kind, wordings, answers, superseded) in enumerate(specs):
            out.append(Question(
                id=f"{p.uid}-q{n:02d}", user=p.uid, kind=kind, text=self.rng.choice(wordings),
                answers=tuple(answers), superseded=tuple(superseded), asked_at=SIM_NOW,
                history_tokens=history_tokens,
            ))  # fmt: skip
        return out


# --- Building the dataset --------------------------------------------------------------


def _session_starts(rng: random.Random) -> list[float]:
    starts = []
    for oldest, newest in SESSION_AGES:
        age = rng.uniform(newest, oldest) * DAY
        start = SIM_NOW - age
        # Sessions begin in the user's daytime, between 07:00 and 20:00 UTC.
        midnight = start - start % DAY
        starts.append(midnight + rng.uniform(7, 20) * 3600)
    return [min(s, SIM_NOW - 6 * 3600) for s in starts]  # never in the future


def _transcript(turns: Sequence[Turn], until: float) -> str:
    """What an agent that pastes its history would send: every line, sessions marked."""
    lines: list[str] = []
    previous = None
    for turn in turns:
        if turn.at > until:
            break
        stamp = datetime.fromtimestamp(turn.at, UTC)
        if previous is None or turn.at - previous > 6 * 3600:
            lines.append(f"--- session of {stamp:%Y-%m-%d} ---")
        previous = turn.at
        lines.append(f"{turn.role}: {turn.text}")
    return "\n".join(lines) + "\n"


def build_user(seed: int, index: int, name: str, city: City, turns_per_session: int
               ) -> tuple[User, list[Memory], list[Question]]:  # fmt: skip
    uid = f"u{index + 1}"
    # One generator per user, seeded by (seed, user): a user's story depends on nothing
    # but the seed, its index and the session length, never on how many users there are.
    rng = random.Random(f"zeromem-quality:{seed}:{uid}")
    story = Story(rng, make_profile(rng, uid, name, city))
    for index_, start in enumerate(_session_starts(rng)):
        session = Session(story, index_, start)
        device = rng.choice(DEVICES)
        session.say("user", "hi")
        session.remember(f"{session.owner}:start", f"Session started from {device}",
                         "system_event", tags=("session",))  # fmt: skip
        events = story.events(index_)
        # An event takes ~2.3 lines; the rest of the session is small talk, two lines each.
        target = max(8, turns_per_session + rng.randint(-4, 4))
        chatter = max(2, round((target - 1 - 2.3 * len(events)) / 2))
        slots = ["event"] * len(events) + ["chatter"] * chatter
        rng.shuffle(slots)
        pending = iter(events)
        for slot in slots:
            if slot == "event":
                next(pending)(session)
            else:
                session.chatter()
        if rng.random() < 0.35:
            session.say("user", "that answer was a bit long, but thanks")
            session.remember(f"{session.owner}:feedback", "User found the last answer too long",
                             "user_feedback", tags=("feedback",))  # fmt: skip
    history_tokens = count_tokens(_transcript(story.turns, SIM_NOW))
    owners = (f"user:{uid}", story.task(1), story.task(2),
              *(f"session:{uid}-s{i}" for i in range(len(SESSION_AGES))))
    user = User(uid, name, owners, len(story.turns), history_tokens)
    return user, story.memories, story.questions(history_tokens)


def build(seed: int = 7, users: int = 8, turns: int = 40) -> Dataset:
    """The whole dataset; the same arguments always give the same dataset."""
    if not 1 <= users <= min(len(CITIES), len(NAMES)):
        raise ValueError(f"users must be within 1..{min(len(CITIES), len(NAMES))}")
    rng = random.Random(f"zeromem-quality:{seed}")
    cities = rng.sample(CITIES, len(CITIES))
    names = rng.sample(NAMES, len(NAMES))
    all_users, memories, questions = [], [], []
    for i in range(users):
        user, mems, qs = build_user(seed, i, names[i], cities[i], turns)
        all_users.append(user)
        memories += mems
        questions += qs
    memories.sort(key=lambda m: (m.created_at, m.key))
    dataset = Dataset(seed, SIM_NOW, all_users, memories, questions)
    check(dataset)
    return dataset


def check(dataset: Dataset) -> None:
    """Fail loudly on a dataset that would make the benchmark lie."""
    by_key: dict[str, Memory] = {}
    for m in dataset.memories:
        if m.key in by_key:
            raise AssertionError(f"duplicate key {m.key}")
        MemoryKey.parse(m.key)
        if len(m.content) > CONTENT_MAX_CHARS:
            raise AssertionError(f"{m.key}: content of {len(m.content)} chars")
        if m.created_at >= dataset.now:
            raise AssertionError(f"{m.key} is created in the future")
        by_key[m.key] = m
    for m in dataset.memories:
        for ref in m.references:
            if ref not in by_key or by_key[ref].created_at > m.created_at:
                raise AssertionError(f"{m.key} references {ref}, missing or newer")
    for q in dataset.questions:
        for key in (*q.answers, *q.superseded):
            if key not in by_key:
                raise AssertionError(f"{q.id}: unknown key {key}")
        latest = by_key[q.answers[0]].created_at
        if any(by_key[key].created_at >= latest for key in q.superseded):
            raise AssertionError(f"{q.id}: a superseded memory is newer than the answer")
        first = by_key[q.answers[0]]
        indexed = index_terms(first.content, MemoryKey.parse(first.key).name, first.tags)
        if not set(terms(q.text)) & indexed.keys():
            raise AssertionError(f"{q.id}: {q.text!r} shares no term with {first.key}")
        if q.kind == "linked" and q.answers[1] not in first.references:
            raise AssertionError(f"{q.id}: second answer not referenced by the first")


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--users", type=int, default=8)
    parser.add_argument("--turns", type=int, default=40, help="messages per session, about")
    parser.add_argument("--out", type=Path, help="write the dataset here as JSON")
    args = parser.parse_args(argv)
    dataset = build(args.seed, args.users, args.turns)
    if args.out:
        args.out.write_text(json.dumps(dataset.to_json(), indent=1, ensure_ascii=False))
    json.dump(dataset.summary(), sys.stdout, indent=2)
    print()


if __name__ == "__main__":
    main()
