"""The development split's world: people, storylines and small talk. Tune on this only.

Every storyline is one person's thread through a conversation, told in beats that land in
different sessions: ``start`` (what happened), ``probe`` (the friend asks about it later),
``detail`` (the answer to that probe), ``update`` (news weeks later). ``echo`` is the
friend's reaction right after the start, repeating its topic (a realistic distractor).
Questions are written with other words than the beats they ask about (paraphrased); the
speaker's name is filled in. ``{slot}`` fields are drawn per conversation from ``slots``;
the slots named in ``*_facts`` are the labelled facts of a beat (the encoder's retention
measure checks they survive in the 200-character content).

The held-out split (``stories_heldout.py``) has other names, other storylines and other
small talk, and is never used to choose anything.
"""

from __future__ import annotations

from dialogue_model import Story, World

STORIES = (
    Story(
        topic="pottery",
        slots={
            "craft": ("pottery", "ceramics"),
            "venue": ("community centre on Elm Road", "arts college on Quay Street"),
            "day": ("Tuesday", "Thursday"),
            "teacher": ("Ingrid", "Paolo"),
            "piece": ("a lopsided bowl", "a tall green vase"),
        },
        start="I finally signed up for a {craft} class at the {venue}, it runs every {day} "
        "evening and I already love getting my hands dirty.",
        start_facts=("craft", "venue", "day"),
        echo="A {craft} class, how fun! I tried that once years ago and made a total mess.",
        probe="Are you still going to {craft} on {day}s? Did you make anything nice yet?",
        detail="Yes! {teacher} finally showed me how to centre the clay on the wheel and I "
        "made {piece}, which I gave to my mum for her birthday.",
        detail_facts=("teacher", "piece"),
        update="Quick update on the clay front: {teacher} moved me up to the advanced group "
        "and next month I get to fire my own glazes in the big kiln.",
        update_facts=("teacher", "kiln"),
        ask_start=(
            "What creative course did {name} enrol in, and where does it meet?",
            "Which weekday evening is {name} busy with a hands-on workshop?",
            "What class did {name} enrol in, and where does it meet?",
        ),
        ask_detail=(
            "What did {name} produce at the wheel, and who received it?",
            "What did {name} make on the wheel, and who got it?",
        ),
        ask_multi=(
            "Where is {name}'s evening course held, and what has {name} crafted there?",
            "Where is {name}'s class held, and what has {name} made on the wheel?",
        ),
        ask_when=(
            "When did {name} enrol in the evening workshop?",
            "When did {name} join the evening class?",
        ),
        about="the clay lessons",
        absent="the clay lessons {name} was taking",
    ),
    Story(
        topic="marathon",
        slots={
            "race": ("Lisbon half marathon", "Berlin marathon"),
            "coach": ("Tomasz", "Leah"),
            "pace": ("5:40", "6:10"),
            "distance": ("18 kilometres", "21 kilometres"),
        },
        start="Big news, I registered for the {race} and I have been running four mornings a "
        "week with a coach called {coach} to get ready.",
        start_facts=("race", "coach"),
        echo="The {race}? That's huge, I can barely run for a bus these days!",
        probe="How is the running going? Is {coach} still making you get up at dawn?",
        detail="It is brutal but I love it. Last Sunday I did my longest run so far, "
        "{distance} at about {pace} per kilometre, and my knees survived.",
        detail_facts=("distance", "pace"),
        update="So the race is done! I crossed the finish line of the {race} and {coach} met "
        "me there with a banana and a medal photo.",
        update_facts=("race", "coach"),
        ask_start=(
            "Which long-distance event did {name} sign on for?",
            "Who is preparing {name} for the big footrace?",
            "Which race did {name} enter, and who is the coach?",
        ),
        ask_detail=(
            "How far did {name} manage on the weekend training outing, and how quick?",
            "How long was {name}'s longest run, and at what speed?",
        ),
        ask_multi=(
            "Who trained {name}, and how far was {name}'s longest practice jog?",
            "Who is {name}'s coach, and what was {name}'s longest run?",
        ),
        ask_when=(
            "When did {name} commit to the long-distance footrace?",
            "When did {name} enter the race?",
        ),
        about="the road race",
        absent="the road race {name} trained for",
    ),
    Story(
        topic="puppy",
        slots={
            "dog": ("Biscuit", "Pepper"),
            "breed": ("beagle", "border collie"),
            "shelter": ("Riverside shelter", "Hillcrest rescue"),
            "vet": ("Dr Amani", "Dr Kowal"),
        },
        start="We adopted a {breed} puppy from the {shelter} on Saturday! We named him {dog} "
        "and he already chewed one of my shoes.",
        start_facts=("breed", "shelter", "dog"),
        echo="A puppy! Please send me a hundred pictures of {dog}, I need them.",
        probe="How is {dog} settling in? Still eating all your shoes?",
        detail="He is getting better, we started obedience lessons and {vet} gave him his "
        "second vaccination, he was so brave about the needle.",
        detail_facts=("vet", "vaccination"),
        update="{dog} turned one last week, we threw him a tiny party in the park with a "
        "peanut butter cake and three other dogs from the street.",
        update_facts=("dog", "cake"),
        ask_start=(
            "What kind of animal did {name}'s household take in, and from where?",
            "What is the name of the pet {name} got recently?",
            "What puppy did {name}'s family get, and where from?",
        ),
        ask_detail=(
            "Which animal doctor treated {name}'s pet, and for what?",
            "Which vet saw {name}'s pet, and for which shot?",
        ),
        ask_multi=(
            "What breed is {name}'s dog and who gave it its jab?",
            "What breed is {name}'s puppy, and which vet vaccinated it?",
        ),
        ask_when=("When did {name} bring the new pet home?", "When did {name} adopt the puppy?"),
        about="the family pet",
        absent="the pet {name} adopted",
    ),
    Story(
        topic="job",
        slots={
            "company": ("Northwind Logistics", "Halvorsen Design"),
            "role": ("team lead", "senior analyst"),
            "boss": ("Mrs Okafor", "Mr Lindqvist"),
            "city": ("Rotterdam", "Leeds"),
        },
        start="I got the offer! I am starting at {company} next month as a {role}, the "
        "interview panel called me this morning.",
        start_facts=("company", "role"),
        echo="No way, {company}! Congratulations, we have to celebrate that properly.",
        probe="So how is the new job treating you? Do you like the people at {company}?",
        detail="The team is lovely, my manager {boss} is very calm, but I have to go to the "
        "{city} office every other week, which is a long train ride.",
        detail_facts=("boss", "city"),
        update="Guess what, after six months {boss} put me in charge of the whole onboarding "
        "programme, so I am hiring two people now.",
        update_facts=("boss", "onboarding"),
        ask_start=(
            "Which employer hired {name}, and in what position?",
            "What new post did {name} accept?",
            "Which company gave {name} an offer, and for which role?",
        ),
        ask_detail=(
            "Who supervises {name} at work, and where does {name} travel for it?",
            "Who is {name}'s manager, and which office does {name} visit?",
        ),
        ask_multi=(
            "What firm does {name} work for, and who is {name}'s manager?",
            "Which company hired {name}, and who manages {name} there?",
        ),
        ask_when=(
            "When did {name} hear that the application was successful?",
            "When did {name} get the job offer?",
        ),
        about="the new workplace",
        absent="the new employer {name} joined",
    ),
    Story(
        topic="trip",
        slots={
            "place": ("Porto", "Kyoto"),
            "friend": ("Maren", "Dev"),
            "sight": ("a boat ride along the Douro", "the bamboo forest at dawn"),
            "souvenir": ("a hand-painted tile", "a set of lacquered chopsticks"),
        },
        start="We booked flights to {place} for the spring, my old roommate {friend} is "
        "coming too and we have already planned every single day.",
        start_facts=("place", "friend"),
        echo="{place}! I am so jealous, you have to tell me everything when you are back.",
        probe="How was the holiday? Did everything go to plan with {friend}?",
        detail="It was magical. The highlight was {sight}, and I brought back {souvenir} for "
        "the kitchen wall.",
        detail_facts=("sight", "souvenir"),
        update="I am already daydreaming about going back to {place}, {friend} and I started "
        "a shared photo album and it has six hundred pictures.",
        update_facts=("place", "album"),
        ask_start=(
            "Where is {name} heading on vacation, and with whom?",
            "Which destination did {name} buy plane tickets for?",
            "Where did {name} book flights to, and who is coming?",
        ),
        ask_detail=(
            "What was the best moment of {name}'s holiday, and what keepsake came home?",
            "What was the highlight of {name}'s holiday, and what did {name} bring back?",
        ),
        ask_multi=(
            "Who did {name} travel with, and what memento did {name} bring home?",
            "Which roommate travelled with {name}, and what did {name} bring back?",
        ),
        ask_when=(
            "When did {name} reserve the plane tickets for the getaway?",
            "When did {name} book the flights?",
        ),
        about="the holiday abroad",
        absent="the holiday {name} took abroad",
    ),
    Story(
        topic="guitar",
        slots={
            "song": ("Blackbird", "Wonderwall"),
            "teacher": ("Rafael", "Oona"),
            "guitar": ("secondhand Yamaha", "cherry red Fender"),
        },
        start="I bought a {guitar} guitar from a neighbour and I am teaching myself to play "
        "from videos, my fingertips are killing me.",
        start_facts=("guitar",),
        echo="You play guitar now? I want a concert next time I visit.",
        probe="Have you kept up with the guitar or is it collecting dust?",
        detail="Still at it! I found a teacher, {teacher}, who comes on Wednesdays, and I can "
        "almost play {song} from start to finish.",
        detail_facts=("teacher", "song"),
        update="I played {song} at my cousin's wedding last weekend, my hands were shaking "
        "but nobody threw tomatoes at me.",
        update_facts=("song", "wedding"),
        ask_start=(
            "What instrument did {name} acquire, and how is {name} learning it?",
            "What guitar did {name} buy, and how is {name} learning?",
        ),
        ask_detail=(
            "Which tune can {name} nearly perform, and who gives {name} lessons?",
            "Which song can {name} almost play, and who is the teacher?",
        ),
        ask_multi=(
            "What model of instrument does {name} own, and who is {name}'s tutor?",
            "What guitar does {name} have, and who teaches {name}?",
        ),
        ask_when=(
            "When did {name} get the instrument from next door?",
            "When did {name} buy the guitar?",
        ),
        about="the music lessons",
        absent="the musical instrument {name} picked up",
    ),
    Story(
        topic="house",
        slots={
            "area": ("Greenfield", "the old harbour district"),
            "rooms": ("three bedrooms", "two bedrooms"),
            "agent": ("Colette", "Barnaby"),
            "colour": ("sage green", "terracotta"),
        },
        start="We finally signed the papers for a house in {area}, it has {rooms} and a tiny "
        "garden, and the mortgage is terrifying.",
        start_facts=("area", "rooms"),
        echo="A house in {area}, you grown-up! When is the housewarming?",
        probe="Have you moved into the new place yet? How is the unpacking?",
        detail="Almost done, we painted the living room {colour} last weekend and the estate "
        "agent {agent} even dropped off a plant as a welcome gift.",
        detail_facts=("colour", "agent"),
        update="The housewarming was a success, forty people squeezed into {area} and the "
        "neighbours brought homemade lemonade.",
        update_facts=("area", "lemonade"),
        ask_start=(
            "Where did {name} purchase property, and how big is it?",
            "Where is {name}'s new house, and how many bedrooms?",
        ),
        ask_detail=(
            "What shade did {name} choose for the lounge walls, and who sent a present?",
            "What colour did {name} paint the living room?",
        ),
        ask_multi=(
            "Which neighbourhood did {name} settle in, and what colour is the lounge?",
            "In which area is {name}'s house, and what colour is the living room?",
        ),
        ask_when=(
            "When did {name} close on the property purchase?",
            "When did {name} sign for the house?",
        ),
        about="the new home",
        absent="the property {name} purchased",
    ),
    Story(
        topic="injury",
        slots={
            "body": ("left ankle", "right wrist"),
            "sport": ("football", "climbing"),
            "physio": ("Helga", "Marcus"),
            "weeks": ("six weeks", "four weeks"),
        },
        start="Bad luck this week: I sprained my {body} playing {sport} with my colleagues and "
        "now I am hobbling around like a pirate.",
        start_facts=("body", "sport"),
        echo="Ouch, your {body}? That sounds painful, please rest it!",
        probe="How is the {body} healing? Are you back on your feet?",
        detail="Slowly. My physiotherapist {physio} gave me exercises with a rubber band and "
        "said I should stay off {sport} for {weeks}.",
        detail_facts=("physio", "weeks"),
        update="I am fully recovered and I went back to {sport} on Friday, I was careful and "
        "wore a brace the whole time.",
        update_facts=("sport", "brace"),
        ask_start=(
            "What did {name} hurt, and doing which activity?",
            "What did {name} sprain, and how?",
        ),
        ask_detail=(
            "Who is treating {name}'s damaged joint, and how long must {name} pause?",
            "Who is {name}'s physiotherapist, and how long is the break?",
        ),
        ask_multi=(
            "Which joint did {name} damage, and who is the therapist?",
            "What did {name} sprain, and who is the physiotherapist?",
        ),
        ask_when=("When did {name} get hurt during a game?", "When did {name} get the sprain?"),
        about="the sports accident",
        absent="the accident {name} had",
    ),
    Story(
        topic="book club",
        slots={
            "book": ("The Salt Road", "Nine Winters"),
            "author": ("Amara Diallo", "Jonas Berg"),
            "host": ("Priya", "Gunnar"),
            "cafe": ("Lantern Cafe", "the Blue Door bakery"),
        },
        start="I joined a book club that meets at {cafe} once a month, and our first pick is "
        "{book} by {author}.",
        start_facts=("cafe", "book", "author"),
        echo="A book club, that is so you. Tell me if {book} is any good.",
        probe="What did the reading group think of the novel in the end?",
        detail="Everyone argued about the ending for two hours, {host} who runs the group "
        "cried a bit, and we voted to read another one by {author}.",
        detail_facts=("host", "author"),
        update="I am hosting the book club next month for the first time, I am baking scones "
        "and picking a poetry collection to shake things up.",
        update_facts=("scones", "poetry"),
        ask_start=(
            "Which novel did {name}'s new reading circle start with, and who wrote it?",
            "Where does {name}'s literature group gather?",
            "Which book did {name}'s club pick first, and who is the author?",
        ),
        ask_detail=(
            "Who leads {name}'s literature group, and how did the discussion go?",
            "Who runs {name}'s book group, and how did the evening go?",
        ),
        ask_multi=(
            "Where does {name}'s reading circle meet, and who organises it?",
            "Where does {name}'s book club meet, and who runs it?",
        ),
        ask_when=(
            "When did {name} become a member of the literature group?",
            "When did {name} join the book club?",
        ),
        about="the reading circle",
        absent="the reading circle {name} belongs to",
    ),
    Story(
        topic="car",
        slots={
            "car": ("blue Skoda Octavia", "white Toyota Yaris"),
            "price": ("9,500 euros", "7,200 euros"),
            "seller": ("an elderly teacher", "a retired pilot"),
            "mechanic": ("Stefan", "Aylin"),
        },
        start="I finally bought a car, a used {car} for {price} from {seller} who kept every "
        "service receipt in a folder.",
        start_facts=("car", "price"),
        echo="You have wheels now! Road trip this summer, no excuses.",
        probe="How is the car? Any problems since you bought it?",
        detail="One scare: the brakes started squeaking, but {mechanic} at the garage on "
        "the corner fixed them in an hour for eighty euros.",
        detail_facts=("mechanic", "brakes"),
        update="We drove the {car} all the way to the coast and back, nine hours, and it did "
        "not complain once.",
        update_facts=("car", "coast"),
        ask_start=(
            "What vehicle did {name} purchase, and how much did it cost?",
            "Which car did {name} buy, and for how much?",
        ),
        ask_detail=(
            "What went wrong with {name}'s vehicle, and who repaired it?",
            "What was wrong with the brakes on {name}'s car, and who fixed them?",
        ),
        ask_multi=(
            "What model does {name} drive now, and who sorted out its fault?",
            "What car does {name} have, and which mechanic fixed it?",
        ),
        ask_when=("When did {name} buy the secondhand vehicle?", "When did {name} buy the car?"),
        about="the vehicle",
        absent="the vehicle {name} bought",
    ),
    Story(
        topic="volunteering",
        slots={
            "place": ("food bank on Mill Lane", "animal rescue by the river"),
            "day": ("Saturday", "Sunday"),
            "lead": ("Farah", "Oskar"),
        },
        start="I started volunteering at the {place} every {day} morning, sorting donations "
        "and helping at the front desk.",
        start_facts=("place", "day"),
        echo="That is really lovely of you, I should do something like that too.",
        probe="Are you still helping out on weekend mornings?",
        detail="Every week! The coordinator {lead} asked me to train the new volunteers, so "
        "now I make the schedule too.",
        detail_facts=("lead", "schedule"),
        update="We ran a fundraiser at the {place} and collected more than two thousand "
        "euros, {lead} nearly fainted when we counted it.",
        update_facts=("fundraiser", "place"),
        ask_start=(
            "Where does {name} give time for free, and when?",
            "Where does {name} volunteer, and on which morning?",
        ),
        ask_detail=(
            "Who coordinates the charity work, and what new task did {name} get?",
            "Who is the coordinator where {name} helps out?",
        ),
        ask_multi=(
            "Where does {name} do unpaid work, and who runs it?",
            "Where does {name} volunteer, and who is the coordinator?",
        ),
        ask_when=(
            "When did {name} begin the unpaid weekend work?",
            "When did {name} start volunteering?",
        ),
        about="the charity work",
        absent="the charity work {name} does",
    ),
    Story(
        topic="baking",
        slots={
            "bread": ("sourdough", "rye bread"),
            "starter": ("Gloria", "Bubbles"),
            "contest": ("village fair", "street market"),
        },
        start="I have been baking {bread} every weekend, I even gave my starter a name, it is "
        "called {starter} and lives on top of the fridge.",
        start_facts=("bread", "starter"),
        echo="Fresh {bread}? Save me a loaf, I am serious.",
        probe="Is the baking obsession still going strong?",
        detail="Even stronger, I entered a loaf in the baking contest at the {contest} and it "
        "came second, the judge said the crust was perfect.",
        detail_facts=("contest", "second"),
        update="I taught my niece to bake last weekend, she kneaded the dough with so much "
        "flour that the kitchen looked like it had snowed.",
        update_facts=("niece", "dough"),
        ask_start=(
            "What does {name} make in the oven on weekends, and what is the yeast culture called?",
            "What does {name} bake, and what is the starter called?",
        ),
        ask_detail=(
            "How did {name} place in the competition, and where was it held?",
            "How did {name}'s loaf do in the contest?",
        ),
        ask_multi=(
            "What loaf does {name} make, and at which event did it win a prize?",
            "What bread does {name} bake, and where did the loaf win a prize?",
        ),
        ask_when=(
            "When did {name} mention naming the fermenting culture?",
            "When did {name} start baking every weekend?",
        ),
        about="the kitchen hobby",
        absent="the bread {name} makes",
    ),
)

NAMES = (
    "Mara",
    "Tobias",
    "Helena",
    "Dario",
    "Sofie",
    "Kwame",
    "Lucia",
    "Anders",
    "Noor",
    "Felix",
    "Ruth",
    "Emil",
)

GREETINGS = (
    "Hey {other}!",
    "Hi {other}, good to hear from you!",
    "Morning {other}!",
    "Hello hello!",
    "Hey you!",
    "Oh hi {other}, perfect timing.",
)
REACTIONS = (
    "Wow, that is amazing!",
    "Haha, I love that.",
    "Oh no, that sounds rough.",
    "No way, really?",
    "That is so cool, honestly.",
    "Ha, typical!",
    "Aww, that is sweet.",
    "Oh wow, good for you.",
)
SMALL_TALK = (
    "Work has been absolutely non-stop this week and I barely had time to breathe.",
    "The weather here has been all over the place, sunshine one minute and hail the next.",
    "I have been drinking far too much coffee lately, my hands are basically vibrating.",
    "My neighbour started renovating his kitchen, so there has been drilling since seven.",
    "I finally cleaned out the spare room and found a box of old birthday cards.",
    "The kids next door learned the trumpet, which is a whole experience at dinner time.",
    "I binge-watched a silly baking show all weekend and regret nothing.",
    "Honestly I just want a long nap and a quiet weekend with nothing planned.",
    "My phone screen cracked again, so I am typing around a spiderweb right now.",
    "We tried the new noodle place on the corner and it was surprisingly good.",
    "I keep meaning to call my grandmother but the days just disappear.",
    "Traffic was terrible this morning, I sat in the same spot for twenty minutes.",
)
FOLLOW_UPS = (
    "How about you, anything new?",
    "What have you been up to lately?",
    "How was your week?",
    "Tell me something good!",
    "Are you keeping well?",
    "How is everyone at home?",
)
CLOSINGS = (
    "Anyway, I have to run, talk soon!",
    "Okay, bedtime for me, speak tomorrow.",
    "Gotta go, dinner is ready. Bye for now!",
    "Let us catch up again next week, take care!",
)
WORLD = World(
    stories=STORIES,
    names=NAMES,
    greetings=GREETINGS,
    reactions=REACTIONS,
    small_talk=SMALL_TALK,
    follow_ups=FOLLOW_UPS,
    closings=CLOSINGS,
)
