"""The data of the writing tasks (`loops.optimize.writing`), apart from its code: each task as (split, id, topic,
brief, checks), and the hand-written drafts for half of each split's tasks, each with the kind its author meant
it to be. Nothing here computes: `loops.optimize.writing` builds the tasks' requirements from their checks' rules
and labels every draft with `check`.

Its own module because tasks and drafts are added and reworded as the benchmarks need, and a reader of the code
should not scroll through them.
"""

from __future__ import annotations

from loops.vocabulary.checks import Avoid, CapitalizedLines, Count, EndsWith, Include, ListOf, Mentions

__all__ = ["DRAFTS", "ECHO", "TASKS"]

# Moderately easy for a small model: one required word of the topic (which also fails off-topic
# drafts), and one or two simple rules of form or length.
# (split, id, topic, brief, checks)
TASKS = [
    ("train", "bike-shop-slogan", "bicycle repair", "A slogan for a bicycle repair shop.",
     (Count("word", max=8), Include("wheel"))),
    ("train", "rain-haiku", "rain", "A haiku about rain.", (Count("line", 3, 3), Include("rain"))),
    ("train", "water-bottle-description", "reusable water bottle",
     "A product description for a reusable water bottle.",
     (Count("sentence", 2, 2), Include("bottle"), Avoid("cheap"))),
    ("train", "meeting-decline-email", "declining a meeting", "A short email declining a meeting invitation politely.",
     (Count("word", 20, 60), Include("meeting"))),
    ("train", "library-hours-tweet", "library opening hours", "A tweet announcing a library's new opening hours.",
     (Count("character", max=140), Mentions(9), Include("library"))),
    ("train", "hike-packing-list", "day hike", "A packing list for a day hike.",
     (ListOf(3, "numbered"), Include("water"))),
    ("train", "green-tea-instructions", "green tea", "Instructions for brewing a cup of green tea.",
     (ListOf(4, "numbered"), Include("minutes"))),
    ("train", "sleep-summary", "sleep and students", "A summary of why sleep matters for students.",
     (Count("sentence", 2, 3), Count("word", max=60), Include("memory"))),
    ("train", "bakery-slogan", "bakery", "A slogan for a neighbourhood bakery.",
     (Count("word", max=10), Include("bread"), Avoid("cheap"))),
    ("train", "ocean-haiku", "ocean", "A haiku about the ocean.",
     (Count("line", 3, 3), CapitalizedLines(), Include("waves"))),
    ("train", "dog-walker-ad", "dog walking", "A short ad for a dog walking service.",
     (Count("word", 10, 30), Include("dog"))),
    ("train", "coffee-question-tweet", "coffee", "A tweet asking followers how they take their coffee.",
     (Count("character", max=120), EndsWith("?"), Include("coffee"))),
    ("train", "plant-thanks-note", "watered plants", "A thank-you note to a neighbour who watered my plants.",
     (Count("sentence", 2, 3), Count("word", max=50), Include("plants"))),
    ("train", "recycling-tips", "recycling", "Tips for recycling at home.", (ListOf(3, "bulleted"), Include("glass"))),
    ("train", "headphones-description", "wireless headphones", "A product description for wireless headphones.",
     (Count("word", 15, 40), Include("battery"), Avoid("best"))),
    ("train", "gym-renewal-email", "gym membership", "An email reminding a member to renew their gym membership.",
     (Count("word", 20, 60), Include("renew"), Mentions(30))),
    ("train", "moon-haiku", "moon", "A haiku about the moon.", (Count("line", 3, 3), Include("moon"))),
    ("train", "chess-club-invitation", "chess club", "An invitation to join a school chess club.",
     (Count("sentence", 2, 2), Include("chess"), Mentions(4))),
    ("train", "umbrella-slogan", "umbrellas", "A slogan for an umbrella brand.",
     (Count("word", max=8), Include("dry"))),
    ("train", "tomato-seed-steps", "planting tomatoes", "Steps for planting tomato seeds.",
     (ListOf(3, "numbered"), Include("soil"))),
    ("train", "museum-tweet", "museum", "A tweet announcing free entry to the city museum on Sundays.",
     (Count("character", max=140), Include("free"))),
    ("train", "tortoise-hare-summary", "the tortoise and the hare",
     "A summary of the fable of the tortoise and the hare.",
     (Count("sentence", 2, 2), Include("tortoise"), Avoid("rabbit"))),
    ("train", "forest-poem", "forest", "A short poem about a forest.",
     (Count("line", 4, 4), CapitalizedLines(), Include("trees"))),
    ("train", "phone-case-description", "phone case", "A product description for a phone case.",
     (Count("word", 10, 30), Include("drop"), Avoid("unbreakable"))),
    ("train", "study-tips", "studying for exams", "Tips for studying for an exam.",
     (ListOf(4, "bulleted"), Include("break"))),
    ("train", "lost-cat-notice", "lost cat", "A notice about a lost cat.",
     (Count("word", 15, 40), Include("cat"), Include("reward"))),
    ("train", "pizza-slogan", "pizzeria", "A slogan for a pizzeria.",
     (Count("word", max=8), Include("pizza"), Avoid("best"))),
    ("train", "birthday-question", "birthday gift",
     "A message asking a friend what they would like for their birthday.",
     (Count("word", max=25), EndsWith("?"), Include("birthday"))),
    ("train", "wifi-instructions", "office wifi", "Instructions for connecting to the office wifi.",
     (ListOf(3, "numbered"), Include("password"))),
    ("train", "snow-haiku", "snow", "A haiku about snow.",
     (Count("line", 3, 3), Count("word", max=20), Include("snow"))),

    ("heldout", "car-wash-slogan", "car wash", "A slogan for a car wash.", (Count("word", max=8), Include("shine"))),
    ("heldout", "wind-haiku", "wind", "A haiku about the wind.", (Count("line", 3, 3), Include("wind"))),
    ("heldout", "backpack-description", "backpack", "A product description for a travel backpack.",
     (Count("sentence", 2, 2), Include("pockets"), Avoid("cheap"))),
    ("heldout", "dentist-reschedule-email", "dentist appointment",
     "An email asking to reschedule a dentist appointment.", (Count("word", 20, 60), Include("appointment"))),
    ("heldout", "pool-hours-tweet", "swimming pool hours", "A tweet announcing the summer hours of a swimming pool.",
     (Count("character", max=140), Mentions(7), Include("pool"))),
    ("heldout", "beach-packing-list", "beach day", "A packing list for a day at the beach.",
     (ListOf(3, "numbered"), Include("sunscreen"))),
    ("heldout", "pancake-instructions", "pancakes", "Instructions for making pancakes.",
     (ListOf(4, "numbered"), Include("pan"))),
    ("heldout", "exercise-summary", "exercise and older adults",
     "A summary of why regular exercise matters for older adults.",
     (Count("sentence", 2, 3), Count("word", max=60), Include("heart"))),
    ("heldout", "flower-shop-slogan", "flower shop", "A slogan for a flower shop.",
     (Count("word", max=10), Include("bloom"))),
    ("heldout", "mountain-haiku", "mountains", "A haiku about a mountain.",
     (Count("line", 3, 3), CapitalizedLines(), Include("peak"))),
    ("heldout", "math-tutoring-ad", "math tutoring", "A short ad for a math tutoring service.",
     (Count("word", 10, 30), Include("math"))),
    ("heldout", "book-question-tweet", "reading", "A tweet asking followers what book they are reading.",
     (Count("character", max=120), EndsWith("?"), Include("book"))),
    ("heldout", "teacher-thanks-note", "thanking a teacher", "A thank-you note to a teacher at the end of the year.",
     (Count("sentence", 2, 3), Count("word", max=50), Include("lessons"))),
    ("heldout", "energy-saving-tips", "saving energy", "Tips for saving energy at home.",
     (ListOf(3, "bulleted"), Include("lights"))),
    ("heldout", "smartwatch-description", "smartwatch", "A product description for a smartwatch.",
     (Count("word", 15, 40), Include("steps"), Avoid("best"))),
    ("heldout", "rent-reminder-email", "rent", "An email reminding a tenant that the rent is due.",
     (Count("word", 20, 60), Include("rent"), Mentions(3))),
    ("heldout", "stars-haiku", "stars", "A haiku about the stars.", (Count("line", 3, 3), Include("stars"))),
    ("heldout", "choir-invitation", "choir", "An invitation to join a community choir.",
     (Count("sentence", 2, 2), Include("sing"), Mentions(6))),
    ("heldout", "ice-cream-slogan", "ice cream", "A slogan for an ice cream shop.",
     (Count("word", max=8), Include("scoop"))),
    ("heldout", "repotting-steps", "repotting a houseplant", "Steps for repotting a houseplant.",
     (ListOf(3, "numbered"), Include("roots"))),
    ("heldout", "zoo-tweet", "zoo", "A tweet announcing that the zoo has new penguins.",
     (Count("character", max=140), Include("penguins"))),
    ("heldout", "fox-grapes-summary", "the fox and the grapes", "A summary of the fable of the fox and the grapes.",
     (Count("sentence", 2, 2), Include("fox"), Avoid("wolf"))),
    ("heldout", "river-poem", "river", "A short poem about a river.",
     (Count("line", 4, 4), CapitalizedLines(), Include("river"))),
    ("heldout", "desk-lamp-description", "desk lamp", "A product description for a desk lamp.",
     (Count("word", 10, 30), Include("bright"), Avoid("cheap"))),
    ("heldout", "interview-tips", "job interviews", "Tips for a job interview.",
     (ListOf(4, "bulleted"), Include("questions"))),
    ("heldout", "found-keys-notice", "found keys", "A notice about a set of keys found in the park.",
     (Count("word", 15, 40), Include("keys"))),
    ("heldout", "taco-truck-slogan", "taco truck", "A slogan for a taco truck.",
     (Count("word", max=8), Include("taco"), Avoid("best"))),
    ("heldout", "weekend-question", "weekend plans", "A message asking a friend about their weekend plans.",
     (Count("word", max=25), EndsWith("?"), Include("weekend"))),
    ("heldout", "printer-instructions", "office printer", "Instructions for adding paper to the office printer.",
     (ListOf(3, "numbered"), Include("tray"))),
    ("heldout", "autumn-leaves-haiku", "autumn leaves", "A haiku about autumn leaves.",
     (Count("line", 3, 3), Count("word", max=20), Include("leaves"))),
]

ECHO = "<the task's requirements, read back>"
"""Stands in (in `DRAFTS`) for a draft that is the task's whole requirements: the commonest junk."""

# task id -> (kind, draft). The kind is what the author meant the draft to be, and the tests hold
# `check` to it: `good` passes; `flawed` breaks exactly one rule; `off-topic` misses the topic's
# word; `junk` is caught by `is_junk`. The label itself is only ever computed by `check`.
DRAFTS: dict[str, list[tuple[str, str]]] = {
    "bike-shop-slogan": [
        ("good", "Every wheel true, every ride new."),
        ("good", "Bent wheel? Flat tire? We fix it fast."),
        ("good", "Back on the wheel by Friday."),
        ("flawed", "Bring us your bent wheel and your flat tires and we will have you riding again by Friday."),
        ("flawed", "Flat tire? Bent frame? We fix bikes fast."),
        ("junk", "Your original content"),
    ],
    "rain-haiku": [
        ("good", "Soft rain on the roof\nThe garden drinks in silence\nPuddles hold the sky"),
        ("good", "Grey clouds gather low\nCold rain taps the window glass\nThe cat dreams inside"),
        ("flawed", "Rain on the rooftop\nDrumming a slow lullaby\nThe street shines like glass\n"
                   "And then the sun comes"),
        ("flawed", "Drops on the window\nThe garden drinks in silence\nPuddles hold the sky"),
        ("off-topic", "Summer sun so bright\nChildren laugh beside the lake\nIce cream melts too fast"),
        ("junk", "[draft]"),
    ],
    "water-bottle-description": [
        ("good", "This steel bottle keeps water cold for 24 hours and never leaks in your bag. "
                 "Refill it anywhere and skip the plastic waste."),
        ("good", "Meet the bottle that goes everywhere you do. "
                 "Its double wall keeps drinks cold all day and hot all morning."),
        ("good", "Our leak-proof bottle fits every cup holder and keeps tea hot for 12 hours. "
                 "It is made from recycled steel and comes in six colours."),
        ("flawed", "Meet the bottle that goes everywhere you do. It keeps drinks cold all day. "
                   "It fits in every cup holder."),
        ("flawed", "This bottle is cheap to buy and keeps water cold all day. "
                   "Refill it anywhere and skip plastic waste."),
        ("junk", ECHO),
    ],
    "meeting-decline-email": [
        ("good", "Hi Sam,\n\nThank you for the invitation to Thursday's meeting. Unfortunately I have a deadline that "
                 "afternoon and cannot attend. Could you share the notes afterwards? I am happy to help with any "
                 "follow-up.\n\nBest regards,\nAna"),
        ("good", "Dear Ms. Lee, thank you for inviting me to the budget meeting on Monday. I am sorry, but I will be "
                 "travelling that day and cannot join. Please go ahead without me. Kind regards, Tom"),
        ("good", "Hello Priya,\nI'm afraid I can't make the planning meeting tomorrow because of a doctor's "
                 "appointment. Please keep me posted on any decisions.\nThanks,\nJo"),
        ("flawed", "Sorry, I can't make the meeting. Thanks."),
        ("flawed", "Dear Ms. Lee, thank you for the invitation on Monday. I am sorry, but I will be travelling that "
                   "day and cannot join. Please go ahead without me. Kind regards, Tom"),
        ("off-topic", "Dear team, the office kitchen will be cleaned on Friday, so please take your food home by "
                      "Thursday evening. Thank you for your help. Kind regards, Facilities"),
        ("junk", "Your original content"),
    ],
    "library-hours-tweet": [
        ("good", "Good news! From Monday the library opens at 9 every morning and stays open until 8 pm. "
                 "See you there!"),
        ("good", "New hours at the Elm Street library: 9 am to 6 pm, Monday to Saturday. Come and borrow something!"),
        ("good", "Early birds, rejoice: the library now opens at 9 on weekdays and 10 on Saturdays."),
        ("flawed", "Big news for readers everywhere: starting next Monday our public library will open its doors at 9 "
                   "in the morning and stay open until 8 in the evening, every day!"),
        ("flawed", "Good news! From Monday the library opens earlier every morning and stays open later at night."),
        ("junk", "TODO"),
        ("junk", "]["),
    ],
    "hike-packing-list": [
        ("good", "1. Two litres of water\n2. A light rain jacket\n3. Snacks and a map"),
        ("good", "1. Sturdy boots\n2. A water bottle and a snack\n3. Sunscreen and a hat"),
        ("good", "Day hike essentials:\n1. Water\n2. A map of the trail\n3. A first aid kit"),
        ("flawed", "1. Water\n2. Boots\n3. Map\n4. Snacks"),
        ("flawed", "- Two litres of water\n- A light rain jacket\n- Snacks and a map"),
        ("off-topic", "1. Flour\n2. Sugar\n3. Eggs"),
        ("junk", "{draft}"),
    ],
    "green-tea-instructions": [
        ("good", "1. Boil fresh water and let it cool for 2 minutes.\n2. Put one tea bag in a cup.\n"
                 "3. Pour the water over the bag.\n4. Steep for 3 minutes, then remove the bag."),
        ("good", "1. Heat water until it is hot but not boiling.\n2. Add a spoon of green tea leaves to a pot.\n"
                 "3. Pour in the water and wait 2 minutes.\n4. Strain into a cup and enjoy."),
        ("flawed", "1. Heat the water.\n2. Add the tea.\n3. Pour and wait.\n4. Strain and enjoy."),
        ("flawed", "1. Heat water.\n2. Steep the tea for 3 minutes.\n3. Pour into a cup."),
        ("junk", ECHO),
    ],
    "sleep-summary": [
        ("good", "Sleep lets the brain turn the day's lessons into lasting memory. "
                 "Students who sleep well focus better in class and get sick less often."),
        ("good", "During deep sleep the brain sorts and stores what we learned, which strengthens memory. "
                 "Tired students react slower, feel more stressed and score lower on tests. "
                 "Eight hours a night is a simple way to study better."),
        ("flawed", "Sleep strengthens memory and helps students focus."),
        ("flawed", "Sleep is one of the most important habits a student can build, because during the night the "
                   "brain sorts through everything learned during the day and moves the most useful parts into "
                   "long-term memory. Without enough rest, students struggle to focus, feel more anxious, and often "
                   "make careless mistakes on homework and tests. Going to bed at a regular time every night is one "
                   "of the simplest ways to improve grades."),
        ("junk", "Lorem ipsum dolor sit amet, consectetur adipiscing elit."),
    ],
    "bakery-slogan": [
        ("good", "Warm bread, warm hearts, right around the corner."),
        ("good", "Fresh bread every morning, baked by your neighbours."),
        ("good", "Our bread rises before you do."),
        ("flawed", "Good bread at cheap prices, baked fresh every day."),
        ("flawed", "The finest bread in town, baked fresh every single morning by people who love what they do."),
        ("junk", "Your original content"),
    ],
    "ocean-haiku": [
        ("good", "Waves fold into foam\nSalt wind carries gull voices\nThe tide pulls me home"),
        ("good", "Blue waves roll ashore\nShells glitter in the wet sand\nThe sea hums all night"),
        ("good", "Grey waves crash and break\nA lighthouse blinks through the fog\nShips dream of the shore"),
        ("flawed", "waves fold into foam\nsalt wind carries gull voices\nthe tide pulls me home"),
        ("flawed", "Waves fold into foam\nThe tide pulls me home"),
        ("off-topic", "Dry sand dunes at noon\nA lizard sleeps on a rock\nNo cloud in the sky"),
        ("junk", "A haiku about the ocean."),
    ],
    "dog-walker-ad": [
        ("good", "Busy day? Our friendly walkers take your dog out for a happy hour in the park. "
                 "Book your first walk today!"),
        ("good", "Reliable dog walking in the neighbourhood, seven days a week. "
                 "Insured, GPS-tracked, and always with treats."),
        ("good", "Your dog deserves a long walk even when you work late. We pick up, walk, and bring back a tired, "
                 "happy friend."),
        ("flawed", "Dog walks daily!"),
        ("flawed", "Busy day? Our friendly walkers take your puppy out for a happy hour in the park. "
                   "Book your first walk today!"),
        ("junk", "  \n\t "),
    ],
    "coffee-question-tweet": [
        ("good", "Quick poll for a Monday morning: how do you take your coffee? Black, with milk, or far too sweet?"),
        ("good", "Coffee lovers, settle this for us: milk first or coffee first?"),
        ("good", "Oat milk, two sugars, or black as night: how do you take your coffee?"),
        ("flawed", "Tell us how you take your coffee this morning: black, milk, or sugar."),
        ("flawed", "Good morning everyone! We are curious about your habits, so tell us in the replies: how exactly do "
                   "you take your coffee every single morning?"),
        ("off-topic", "What is everyone reading this weekend?"),
        ("junk", "[draft]"),
    ],
    "plant-thanks-note": [
        ("good", "Dear Rosa, thank you so much for watering my plants while I was away. "
                 "They look happier than when I left, and I owe you a cake!"),
        ("good", "Thank you for looking after my plants last week. The basil even grew a new leaf. "
                 "Please let me return the favour soon."),
        ("flawed", "Thanks for watering my plants!"),
        ("flawed", "Dear Rosa, thank you so much for watering the garden while I was away. "
                   "It looks happier than when I left, and I owe you a cake!"),
        ("junk", "TODO: write the note"),
    ],
    "recycling-tips": [
        ("good", "- Rinse glass jars before you recycle them\n- Flatten cardboard boxes to save space\n"
                 "- Keep plastic bags out of the bin"),
        ("good", "- Keep a separate box for glass and cans\n- Check the local rules for plastics\n"
                 "- Compost food scraps instead of binning them"),
        ("good", "- Put glass bottles in the green bin\n- Wash out yogurt pots\n- Take batteries back to the shop"),
        ("flawed", "1. Rinse glass jars\n2. Flatten boxes\n3. Keep bags out of the bin"),
        ("flawed", "- Rinse jars before you recycle them\n- Flatten cardboard boxes\n"
                   "- Keep plastic bags out of the bin"),
        ("junk", "]["),
    ],
    "headphones-description": [
        ("good", "Slip on these wireless headphones and hear every detail. Soft ear cushions stay comfortable for "
                 "hours, and one charge gives the battery 30 hours of music."),
        ("good", "Light, foldable and wireless, with a battery that lasts a full week of commutes. "
                 "Noise cancelling shuts out the train; a quick charge adds five hours."),
        ("good", "Cut the cord without cutting the sound: deep bass, clear calls, and a battery that outlasts "
                 "your longest flight."),
        ("flawed", "The best wireless headphones for your commute, with a battery that lasts 30 hours and cushions "
                   "that stay soft all day."),
        ("flawed", "Wireless headphones with a long battery."),
        ("junk", "Your original content"),
    ],

    "car-wash-slogan": [
        ("good", "Drive in dusty, drive out with a shine."),
        ("good", "Shine like new in ten minutes flat."),
        ("good", "Your car deserves to shine."),
        ("flawed", "We wash, wax and polish every car until it has a shine you can see from a mile away."),
        ("flawed", "Drive in dusty, drive out spotless."),
        ("off-topic", "Fresh bagels baked daily since 1987."),
        ("junk", "Your original content"),
    ],
    "wind-haiku": [
        ("good", "The wind combs the grass\nA kite tugs against its string\nClouds race to the hills"),
        ("good", "Cold wind at the door\nOld shutters knock like neighbours\nThe kettle answers"),
        ("good", "Wind through the bare trees\nA paper bag dances by\nThe whole street whistles"),
        ("flawed", "A kite tugs its string\nClouds race over the green hills\nThe grass bends and sways"),
        ("flawed", "The wind combs the grass\nClouds race to the hills"),
        ("junk", ECHO),
        ("junk", "..."),
    ],
    "backpack-description": [
        ("good", "This canvas backpack has six pockets, including a padded sleeve for a 15-inch laptop. "
                 "The straps are soft, and the whole bag weighs less than a kilo."),
        ("good", "Organise your trip with a backpack built around smart pockets. "
                 "A hidden zip keeps your passport safe while you travel."),
        ("good", "Built for long trips, this waterproof backpack has eight pockets and a chest strap. "
                 "It opens like a suitcase, so packing takes minutes."),
        ("flawed", "This backpack has six pockets. It fits a laptop. It weighs under a kilo."),
        ("flawed", "A cheap backpack with six pockets and a padded laptop sleeve. It weighs less than a kilo."),
        ("off-topic", "This ceramic mug holds a full pint of tea. It is safe in the dishwasher and the microwave."),
        ("junk", "{draft}"),
    ],
    "dentist-reschedule-email": [
        ("good", "Dear Dr. Brown's office,\n\nI have a dental appointment on Tuesday at 10 am, but a work trip came "
                 "up. Could we move it to any morning next week? Thank you for your help.\n\nBest wishes,\n"
                 "Lena Fischer"),
        ("good", "Hello, this is Omar Haddad. I need to reschedule my cleaning appointment on 3 May because of a "
                 "family event. Is there a free slot later that month? Many thanks, Omar"),
        ("good", "Hi, I booked an appointment for Friday at 2 pm, but my son is ill and I need to stay home. "
                 "Could you offer me a new time next week? Thank you, Maria Silva"),
        ("flawed", "Please move my appointment. Thanks."),
        ("flawed", "Hello, this is Omar Haddad. I need to reschedule my cleaning on 3 May because of a family event. "
                   "Is there a free slot later that month? Many thanks, Omar"),
        ("junk", "Lorem ipsum dolor sit amet."),
        ("junk", "An email asking to reschedule a dentist appointment."),
    ],
    "pool-hours-tweet": [
        ("good", "Summer hours start today: the pool opens at 7 am for early swimmers and closes at 9 pm. Dive in!"),
        ("good", "The city pool is now open 7 days a week. Bring a towel and a friend!"),
        ("good", "Pool news: summer hours begin Monday, 7 am to 8 pm every day. Lifeguards on duty all day!"),
        ("flawed", "Summer hours start today: the pool opens early for swimmers and closes late. Dive in!"),
        ("flawed", "Big news for swimmers of all ages: starting this Saturday the outdoor pool will open at 7 in the "
                   "morning and stay open until late in the evening all summer!"),
        ("junk", "TODO"),
    ],
    "beach-packing-list": [
        ("good", "1. Sunscreen and a hat\n2. A big towel\n3. Cold drinks in a cooler"),
        ("good", "1. A beach umbrella\n2. Sunscreen with SPF 50\n3. A good book"),
        ("good", "Beach bag:\n1. Sunscreen\n2. Flip-flops\n3. A bucket and spade"),
        ("flawed", "- Sunscreen and a hat\n- A big towel\n- Cold drinks"),
        ("flawed", "1. A hat\n2. A big towel\n3. Cold drinks"),
        ("off-topic", "1. Gloves\n2. A warm scarf\n3. Ski goggles"),
        ("junk", "[draft]"),
    ],
    "pancake-instructions": [
        ("good", "1. Whisk one cup of flour, one egg and one cup of milk.\n2. Heat a buttered pan over medium heat.\n"
                 "3. Pour in a ladle of batter.\n4. Flip when bubbles appear and cook one more minute."),
        ("good", "1. Mix the batter until smooth.\n2. Warm a pan with a little oil.\n"
                 "3. Cook each pancake until golden on both sides.\n4. Serve with fruit and syrup."),
        ("good", "Serves two:\n1. Mix flour, milk and an egg.\n2. Heat a pan with butter.\n"
                 "3. Fry a ladle of batter per pancake.\n4. Turn once and serve warm."),
        ("flawed", "1. Mix flour, egg and milk.\n2. Heat a pan.\n3. Pour in batter.\n4. Flip it.\n5. Serve."),
        # "pancake" holds "pan" but not as a word: the rule is the word.
        ("flawed", "1. Mix the batter until smooth.\n2. Heat a griddle with a little oil.\n"
                   "3. Cook each pancake until golden.\n4. Serve with syrup."),
        ("junk", "Your original content"),
    ],
    "exercise-summary": [
        ("good", "Regular exercise keeps the heart strong and the blood pressure low in older adults. "
                 "It also improves balance, which prevents falls."),
        ("good", "Walking thirty minutes a day makes the heart and lungs work better. Stronger muscles help older "
                 "adults stay independent for longer. Exercise also lifts the mood and helps people sleep."),
        ("flawed", "Exercise keeps the heart healthy."),
        ("flawed", "Regular exercise keeps the lungs strong and the blood pressure low in older adults. "
                   "It also improves balance, which prevents falls."),
        ("junk", ECHO),
    ],
    "flower-shop-slogan": [
        ("good", "Let every day bloom with fresh flowers."),
        ("good", "Fresh flowers, local growers, and bouquets that bloom for days."),
        ("good", "Where every bouquet is in bloom."),
        ("flawed", "We help every garden and every kitchen table bloom with fresh flowers from local growers."),
        ("flawed", "Fresh flowers from local growers, delivered today."),
        ("junk", "]["),
    ],
    "mountain-haiku": [
        ("good", "Snow on the far peak\nPine trees lean into the wind\nAn eagle circles"),
        ("good", "First light on the peak\nMist drifts out of the valley\nBoots crunch on cold stone"),
        ("flawed", "snow on the far peak\npine trees lean into the wind\nan eagle circles"),
        ("flawed", "Snow on the far summit\nPine trees lean into the wind\nAn eagle circles"),
        ("off-topic", "Traffic lights turn red\nTaxis honk along the street\nThe city never sleeps"),
        ("junk", "A haiku about a mountain."),
    ],
    "math-tutoring-ad": [
        ("good", "Struggling with fractions or algebra? Friendly math tutoring for ages 10 to 16, online or at home. "
                 "First lesson free!"),
        ("good", "Patient math tutor with eight years of experience helps your child build confidence before exams."),
        ("good", "Turn math homework from tears into cheers. Small groups, clear steps, and weekly progress notes "
                 "for parents."),
        ("flawed", "Math tutoring available!"),
        ("flawed", "Struggling with fractions or algebra? Friendly tutoring for ages 10 to 16, online or at home. "
                   "First lesson free!"),
        ("junk", "Your original content"),
    ],
    "book-question-tweet": [
        ("good", "Rainy Sunday plans: what book are you reading right now?"),
        ("good", "Book club question of the week: which ending surprised you the most?"),
        ("good", "Which book would you take to a desert island?"),
        ("flawed", "Tell us which book you are reading this weekend."),
        ("flawed", "We love hearing from all of you, so here is our weekly question for the whole community: which "
                   "book changed the way you think?"),
        ("junk", "{draft}"),
    ],
    "teacher-thanks-note": [
        ("good", "Thank you for a wonderful year, Mr Jones. Your lessons made science my favourite subject."),
        ("good", "Dear Ms Rivera, thank you for your patience this year. Your lessons were always fun, even on "
                 "Friday afternoons. I will miss your class."),
        ("good", "Thank you for every one of your lessons this year. You made history feel like a story."),
        ("flawed", "Thank you for a wonderful year, Mr Jones. You made science my favourite subject."),
        ("flawed", "Thank you, Mr Jones. Your lessons were fun. I learned a lot. I will miss you."),
        ("junk", "TODO"),
    ],
    "energy-saving-tips": [
        ("good", "- Switch off the lights when you leave a room\n- Unplug chargers you are not using\n"
                 "- Wash clothes in cold water"),
        ("good", "- Use LED lights\n- Turn the heating down one degree\n- Dry laundry on a line"),
        ("flawed", "- Switch off lights\n- Unplug chargers\n- Wash in cold water\n- Use LED bulbs"),
        ("flawed", "- Unplug chargers you are not using\n- Wash clothes in cold water\n- Dry laundry on a line"),
        ("junk", "  "),
    ],
    "smartwatch-description": [
        ("good", "This light smartwatch counts your steps, tracks your sleep and shows messages at a glance. "
                 "The battery lasts a week, and the strap is waterproof."),
        ("good", "Count steps, check your heart rate and pay for coffee with a flick of the wrist. "
                 "A bright screen stays readable in full sun."),
        ("flawed", "The best smartwatch for runners: it counts steps, tracks your heart rate and lasts a whole week "
                   "on one charge."),
        ("flawed", "A smartwatch that counts steps."),
        ("junk", "Your original content"),
    ],
}
