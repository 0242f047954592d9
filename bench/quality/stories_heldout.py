"""The held-out split's world: other people, other storylines, other small talk.

Written once, before any tuning, and never used to choose a method, a weight or a setting:
its figures are reported next to the development split's to show what carries over to
data the choices were not made on. The format is the development split's
(``stories_dev.py``).
"""

from __future__ import annotations

from dialogue_model import Story, World

STORIES = (
    Story(
        topic="allotment",
        slots={
            "plot": ("plot 14", "plot 27"),
            "crop": ("tomatoes", "runner beans"),
            "neighbour": ("Mr Haddad", "Mrs Ferreira"),
            "pest": ("slugs", "aphids"),
        },
        start="I got an allotment at last, {plot} by the railway, and I planted {crop} along "
        "the fence before the rain came.",
        start_facts=("plot", "crop"),
        echo="An allotment! Bring me some {crop} in the summer please.",
        probe="How is the vegetable patch doing? Anything to harvest?",
        detail="The {pest} ate half of everything, but {neighbour} from the next plot showed "
        "me how to protect the seedlings with copper tape.",
        detail_facts=("pest", "neighbour"),
        update="Harvest time: I carried home two full baskets from {plot} and made a huge pot "
        "of soup for the whole street.",
        update_facts=("plot", "soup"),
        ask_start=(
            "Which growing space was {name} given, and what went in first?",
            "Which allotment plot did {name} get, and what was planted?",
        ),
        ask_detail=(
            "What creatures ruined {name}'s seedlings, and who helped?",
            "What ate {name}'s seedlings, and who helped?",
        ),
        ask_multi=(
            "What did {name} sow, and who taught the trick against the pests?",
            "What did {name} plant, and which neighbour helped with the pests?",
        ),
        ask_when=(
            "When did {name} get the piece of land for vegetables?",
            "When did {name} get the allotment?",
        ),
        about="the vegetable garden",
        absent="the vegetable garden {name} looks after",
    ),
    Story(
        topic="sailing",
        slots={
            "boat": ("dinghy", "small catamaran"),
            "lake": ("Lake Orta", "Windermere"),
            "instructor": ("Brigitte", "Callum"),
            "knot": ("bowline", "clove hitch"),
        },
        start="I took a weekend sailing course on {lake}, we had a {boat} each and I capsized "
        "twice on the first morning.",
        start_facts=("lake", "boat"),
        echo="Sailing on {lake}, how glamorous. Did you fall in a lot?",
        probe="Did you keep going with the sailing after that first weekend?",
        detail="I did the second level, my instructor {instructor} made us tie a {knot} with "
        "our eyes closed until we could do it in five seconds.",
        detail_facts=("instructor", "knot"),
        update="I passed the skipper exam! {instructor} says I can now rent a boat on my own "
        "and take friends out on {lake}.",
        update_facts=("instructor", "exam"),
        ask_start=(
            "Where did {name} learn to handle a vessel, and in what?",
            "Where did {name} take the sailing course, and in what boat?",
        ),
        ask_detail=(
            "Which rope trick did {name} practise blindfolded, and who taught it?",
            "Which knot did {name} practise, and who is the instructor?",
        ),
        ask_multi=(
            "On which water did {name} train, and who was the teacher?",
            "Where did {name} sail, and who was the instructor?",
        ),
        ask_when=(
            "When did {name} do the first course on the water?",
            "When did {name} do the sailing course?",
        ),
        about="the boat lessons",
        absent="the boat lessons {name} did",
    ),
    Story(
        topic="astronomy",
        slots={
            "scope": ("reflector telescope", "pair of astronomy binoculars"),
            "object": ("Saturn's rings", "the Andromeda galaxy"),
            "club": ("Hilltop Stargazers", "North Field Astronomy Society"),
        },
        start="I bought a {scope} with my bonus and I have been up on the roof every clear "
        "night, my sleep schedule is ruined.",
        start_facts=("scope",),
        echo="A {scope}, so nerdy, I love it. Have you seen aliens yet?",
        probe="Seen anything good in the night sky recently?",
        detail="Yes, I finally found {object}, I literally shouted, and I joined the "
        "{club} so I can use their dark field outside town.",
        detail_facts=("object", "club"),
        update="The {club} asked me to run the public viewing night, so I will explain "
        "{object} to fifty strangers with a laser pointer.",
        update_facts=("club", "viewing"),
        ask_start=(
            "What optical gear did {name} treat themselves to?",
            "What telescope gear did {name} buy?",
        ),
        ask_detail=(
            "Which celestial sight did {name} spot, and what society did {name} join?",
            "What did {name} finally find in the sky, and which club did {name} join?",
        ),
        ask_multi=(
            "What stargazing equipment does {name} own, and which group is {name} in?",
            "What does {name} observe with, and which club is {name} in?",
        ),
        ask_when=(
            "When did {name} get the equipment for observing the heavens?",
            "When did {name} buy the telescope gear?",
        ),
        about="the night sky hobby",
        absent="the stargazing {name} does",
    ),
    Story(
        topic="wedding",
        slots={
            "sister": ("Clara", "Imogen"),
            "venue": ("a vineyard near Bordeaux", "a barn in the Cotswolds"),
            "dress": ("a dark blue suit", "an emerald dress"),
            "speech": ("the maid of honour speech", "the toast"),
        },
        start="My sister {sister} got engaged and the wedding is at {venue} in September, I "
        "am already panicking about {speech}.",
        start_facts=("sister", "venue", "speech"),
        echo="{sister} is getting married? Give her a huge hug from me!",
        probe="How did your sister's big day go in the end?",
        detail="It was perfect, I wore {dress}, cried through my own speech and danced until "
        "three in the morning.",
        detail_facts=("dress", "danced"),
        update="{sister} just sent the wedding photos, there is one of me mid-sneeze during "
        "the vows and it is now framed in her hallway.",
        update_facts=("sister", "photos"),
        ask_start=(
            "Whose marriage ceremony is {name} preparing for, and where?",
            "Whose wedding is {name} going to, and where is it?",
        ),
        ask_detail=(
            "What outfit did {name} have on at the celebration?",
            "What did {name} wear at the wedding?",
        ),
        ask_multi=(
            "Where was the ceremony held, and what was {name} wearing?",
            "Where is the wedding, and what did {name} wear?",
        ),
        ask_when=(
            "When did {name} learn about the engagement in the family?",
            "When did {name}'s sister get engaged?",
        ),
        about="the family celebration",
        absent="the family marriage {name} attended",
    ),
    Story(
        topic="chess",
        slots={
            "rating": ("1450", "1620"),
            "opponent": ("a twelve-year-old", "a retired judge"),
            "tournament": ("city rapid tournament", "library chess open"),
        },
        start="I have been playing chess online every night and my rating just went past "
        "{rating}, which is the highest it has ever been.",
        start_facts=("rating",),
        echo="Chess at midnight, you are such a night owl. Teach me sometime?",
        probe="Still playing chess every evening?",
        detail="I entered the {tournament} last weekend and lost the final to {opponent} who "
        "played incredibly fast.",
        detail_facts=("tournament", "opponent"),
        update="I started a little chess club at work, twelve people came to the first "
        "lunchtime session and we ran out of boards.",
        update_facts=("club", "boards"),
        ask_start=(
            "What score has {name} reached in the board game online?",
            "What chess rating has {name} reached?",
        ),
        ask_detail=(
            "Which competition did {name} play in, and who beat {name}?",
            "Which tournament did {name} enter, and who won the final?",
        ),
        ask_multi=(
            "What level is {name} at, and who defeated {name} in the final?",
            "What is {name}'s chess rating, and who beat {name} in the final?",
        ),
        ask_when=(
            "When did {name} reach a personal best at the board game?",
            "When did {name}'s chess rating hit a new high?",
        ),
        about="the board game",
        absent="the board game {name} plays",
    ),
    Story(
        topic="bees",
        slots={
            "hives": ("two hives", "three hives"),
            "mentor": ("Old Pieter", "Auntie Grace"),
            "honey": ("twelve jars", "twenty jars"),
        },
        start="I took up beekeeping, I have {hives} at the bottom of the garden and {mentor} "
        "from the beekeeping association checks on me.",
        start_facts=("hives", "mentor"),
        echo="Bees? Are you not terrified of getting stung?",
        probe="How are the bees? Stung yet?",
        detail="Twice, on the same finger! But the colony is strong and I got {honey} of "
        "honey from the first harvest.",
        detail_facts=("honey", "finger"),
        update="A swarm left one of my hives and settled in a tree, {mentor} came with a "
        "cardboard box and we coaxed them back in.",
        update_facts=("swarm", "mentor"),
        ask_start=(
            "What insect hobby did {name} start, and who supervises?",
            "How many hives does {name} keep, and who checks on them?",
        ),
        ask_detail=(
            "How much did {name} collect from the colony?",
            "How much honey did {name} harvest?",
        ),
        ask_multi=(
            "Who mentors {name} with the insects, and what was the yield?",
            "Who checks on {name}'s hives, and how much honey came from them?",
        ),
        ask_when=(
            "When did {name} first set up the insect colonies?",
            "When did {name} take up beekeeping?",
        ),
        about="the insects in the garden",
        absent="the insect colonies {name} keeps",
    ),
    Story(
        topic="language",
        slots={
            "language": ("Portuguese", "Korean"),
            "tutor": ("Beatriz", "Min-jun"),
            "exam": ("B1", "level 3"),
        },
        start="I signed up for {language} lessons twice a week with a tutor called {tutor}, "
        "my pronunciation is hilarious.",
        start_facts=("language", "tutor"),
        echo="{language}! Say something to me next time, I will pretend to understand.",
        probe="How are the language lessons coming along?",
        detail="Slowly but surely, I passed the {exam} exam with a decent grade and I can "
        "order food without pointing now.",
        detail_facts=("exam", "food"),
        update="I watched a whole film in {language} without subtitles yesterday and only "
        "got lost twice.",
        update_facts=("film", "subtitles"),
        ask_start=(
            "Which foreign tongue is {name} studying, and with whom?",
            "Which language lessons did {name} sign up for, and with which tutor?",
        ),
        ask_detail=("Which certificate did {name} obtain?", "Which exam did {name} pass?"),
        ask_multi=(
            "Who teaches {name} the new tongue, and which test did {name} pass?",
            "Who is {name}'s tutor, and which exam did {name} pass?",
        ),
        ask_when=(
            "When did {name} begin studying a foreign tongue?",
            "When did {name} start the language lessons?",
        ),
        about="the foreign tongue",
        absent="the foreign tongue {name} studies",
    ),
    Story(
        topic="bike",
        slots={
            "route": ("the coast path to Whitby", "the canal towpath to Oxford"),
            "bike": ("gravel bike", "vintage steel road bike"),
            "club": ("Saturday Spinners", "Night Owls Cycling"),
        },
        start="I bought a {bike} and rode {route} on Sunday, my legs have not forgiven me.",
        start_facts=("bike", "route"),
        echo="That is a long way on two wheels, are you a machine?",
        probe="Still cycling every weekend?",
        detail="Yes, I joined a group called {club}, we meet at the bakery at seven and the "
        "winner of the hill sprint buys cinnamon buns.",
        detail_facts=("club", "buns"),
        update="I did my first hundred-mile ride with {club}, it took eight hours and I ate "
        "four bananas on the way.",
        update_facts=("club", "hundred-mile"),
        ask_start=(
            "What did {name} ride, and along which way?",
            "What bike did {name} buy, and where did {name} ride it?",
        ),
        ask_detail=(
            "Which riding group did {name} join, and what is the prize?",
            "Which cycling group did {name} join?",
        ),
        ask_multi=(
            "What kind of two-wheeler does {name} own, and with which group does {name} ride?",
            "What bike does {name} have, and which group does {name} ride with?",
        ),
        ask_when=(
            "When did {name} make the first long outing on two wheels?",
            "When did {name} buy the bike?",
        ),
        about="the two-wheeler",
        absent="the two-wheeler {name} rides",
    ),
    Story(
        topic="flat flood",
        slots={
            "room": ("bathroom", "kitchen"),
            "landlord": ("Mr Petrov", "Ms Adeyemi"),
            "plumber": ("Wojtek", "Siobhan"),
        },
        start="Disaster: a pipe burst in the {room} upstairs and water came through my "
        "ceiling at two in the morning.",
        start_facts=("room", "pipe"),
        echo="Oh no, water through the ceiling? Is your stuff okay?",
        probe="Did the landlord ever sort out that ceiling?",
        detail="Eventually, {landlord} sent a plumber called {plumber} who replaced the pipe "
        "and now the ceiling has a big brown stain shaped like Italy.",
        detail_facts=("landlord", "plumber"),
        update="They finally repainted the ceiling, so the stain shaped like Italy is gone, I "
        "almost miss it.",
        update_facts=("ceiling", "repainted"),
        ask_start=(
            "What went wrong in the apartment above {name}?",
            "Which room upstairs from {name} had the burst pipe?",
        ),
        ask_detail=(
            "Who came to repair the leak at {name}'s place, and who sent them?",
            "Who did the landlord send to {name}'s flat?",
        ),
        ask_multi=(
            "Which room flooded upstairs from {name}, and who fixed the damage?",
            "Where was the burst pipe, and which plumber replaced it?",
        ),
        ask_when=(
            "When did the leak at {name}'s apartment happen?",
            "When did the pipe burst above {name}?",
        ),
        about="the apartment leak",
        absent="the leak in {name}'s apartment",
    ),
    Story(
        topic="choir",
        slots={
            "choir": ("St Anne's community choir", "the Harbour Voices"),
            "conductor": ("Yusuf", "Delphine"),
            "piece": ("Handel's Messiah", "a Beatles medley"),
        },
        start="I auditioned for {choir} and got in as an alto, rehearsals are on Monday nights "
        "in a freezing church hall.",
        start_facts=("choir", "alto"),
        echo="You sing? I had no idea! I want front row tickets.",
        probe="How is the singing going?",
        detail="Our conductor {conductor} is strict but funny, we are learning {piece} for the "
        "winter concert and I keep forgetting my entry.",
        detail_facts=("conductor", "piece"),
        update="The concert went well, {conductor} gave me a little solo in {piece} and my "
        "voice only cracked once.",
        update_facts=("solo", "piece"),
        ask_start=(
            "Which vocal ensemble accepted {name}, and in what voice part?",
            "Which choir did {name} join, and as what voice?",
        ),
        ask_detail=(
            "What music is {name}'s ensemble rehearsing, and who leads it?",
            "Which piece is {name}'s choir learning for the concert?",
        ),
        ask_multi=(
            "Which ensemble took {name} in, and which work are they performing?",
            "Which choir is {name} in, and which piece are they learning?",
        ),
        ask_when=(
            "When did {name} try out for the singing group?",
            "When did {name} audition for the choir?",
        ),
        about="the singing group",
        absent="the singing group {name} is in",
    ),
)

NAMES = ("Ottilie", "Ravi", "Grete", "Samuel", "Yara", "Benedikt", "Ines", "Kofi")

GREETINGS = (
    "Hiya {other}!",
    "Evening {other}!",
    "Oh, {other}! Long time no chat.",
    "Yo!",
    "Hey there {other}.",
    "Hellooo!",
)
REACTIONS = (
    "That is brilliant!",
    "Ha, classic you.",
    "Oof, I am sorry.",
    "Seriously? Amazing.",
    "Oh my goodness.",
    "Love that for you.",
    "That made me laugh out loud.",
)
SMALL_TALK = (
    "I spent the whole afternoon fighting with the printer and the printer won.",
    "The trains were cancelled again so I walked home in the drizzle.",
    "My flatmate adopted a very loud parrot without asking anyone first.",
    "I have been trying to go to bed earlier but the internet keeps winning.",
    "The supermarket moved every single aisle around and I got lost for ten minutes.",
    "It was my turn to cook for everyone and I burnt the rice, spectacularly.",
    "I finally fixed the wobbly chair in the hallway with a folded postcard.",
    "We had a power cut last night so I read by candlelight like a Victorian.",
    "My inbox has three hundred unread emails and I refuse to look at it.",
    "There is a fox that visits the garden every evening at exactly nine.",
)
FOLLOW_UPS = (
    "What is new with you?",
    "How are things your end?",
    "Any news?",
    "How did your weekend go?",
    "What are you up to these days?",
)
CLOSINGS = (
    "Right, I am off, chat later!",
    "Must dash, speak soon.",
    "Going to sleep now, night night!",
    "Talk again soon, look after yourself.",
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
