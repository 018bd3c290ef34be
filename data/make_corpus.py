#!/usr/bin/env python3
"""Generate tiny_tales.txt: a small English corpus of simple stories.

Every sentence comes from word lists and templates written for this
project; no third-party text is used. The generator is deterministic: the
same --seed and --tokens always give the same bytes (Python 3 standard
library only; the generation path never iterates over a set or dict).

Token rule (the project's word-level tokenizer): each maximal run of ASCII
letters/digits is a token, every other non-whitespace byte is a token of
its own, whitespace is dropped, case is kept. Vocabulary = distinct tokens
plus one [EOS] token.

    python3 data/make_corpus.py            # writes data/tiny_tales.txt
    python3 data/make_corpus.py --stats    # ... and prints bytes/tokens/vocab
    python3 data/make_corpus.py --check    # only measures the existing file
"""

import argparse
import os
import random
import re
import sys

DEFAULT_SEED = 2024
DEFAULT_TOKENS = 64000

# --------------------------------------------------------------------------
# Word lists (kept small on purpose: the corpus trains a tiny model with a
# word-level vocabulary of a couple of hundred tokens)
# --------------------------------------------------------------------------

# (name, pronoun, "girl"/"boy")
PEOPLE = [("Mia", "she", "girl"), ("Lily", "she", "girl"),
          ("Tom", "he", "boy"), ("Ben", "he", "boy")]

ELDERS = [("mother", "she"), ("father", "he"),
          ("grandmother", "she"), ("grandfather", "he")]

# animal -> (what it does well, what it likes to eat)
ANIMALS = [
    ("fox", "run", "bread"),
    ("rabbit", "run", "apples"),
    ("dog", "run", "bread"),
    ("cat", "climb", "fish"),
    ("duck", "swim", "bread"),
    ("owl", "fly", "seeds"),
    ("bear", "climb", "fish"),
    ("bird", "fly", "seeds"),
]

ADJ = ["little", "small", "kind", "brave", "happy", "quiet", "old"]
DAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday",
        "Saturday", "Sunday"]
NUMBERS = ["one", "two", "three", "four", "five", "six", "seven"]
COLORS = ["red", "green", "yellow", "brown", "white", "blue"]

SEASON_NAMES = ["spring", "summer", "autumn", "winter"]
SEASONS = {
    "spring": [
        "the trees were green again, and the birds sang in the morning",
        "the flowers came up in the garden, and the sun was warm",
        "the rain was warm, and the garden was green",
    ],
    "summer": [
        "the sun was big in the sky, and the day was long and warm",
        "the river was warm, and the fish played in the water",
        "the field was yellow, and the sun was warm all day",
    ],
    "autumn": [
        "the leaves were red and yellow, and they fell from the trees",
        "the wind was cold in the evening, and the apples were red",
        "the forest was brown and quiet, and the wind was cold",
    ],
    "winter": [
        "the snow was white on the hill, and the river was cold",
        "the night was long, and every house had a warm fire",
        "the field was white, and the wind blew over the hill",
    ],
}

WEATHER = [
    ("warm", "the sun was warm and the sky was blue"),
    ("wet", "the rain fell all day on the village"),
    ("cold", "the wind blew over the hill all day"),
    ("cold", "the sky was white and the wind was cold"),
    ("quiet", "the sky was white and the birds did not sing"),
    ("happy", "the sun was warm and the birds sang in the trees"),
]

MORALS = [
    "It is good to help a friend, because one day a friend will help you.",
    "When we share, we all have more.",
    "A good friend will come when you need help.",
    "Every day is a good day when you are with a friend.",
    "It is better to be kind, and it is better to be friends.",
]

PLACES = ["in the garden", "under the big tree", "by the river",
          "near the bridge", "in the field", "near the house",
          "on the hill", "near the forest"]


# --------------------------------------------------------------------------
# Characters
# --------------------------------------------------------------------------

class Who:
    """A character: how to name it and its pronouns."""

    def __init__(self, name, short, subj, intro=None, noun=None):
        self.name = name            # first mention, e.g. "the little fox"
        self.short = short          # later mentions, e.g. "the fox"
        self.intro = intro or name  # "a girl named Mia", "a little fox"
        self.noun = noun            # "girl", "boy", "fox"
        self.he = subj
        self.him = "her" if subj == "she" else "him"
        self.his = "her" if subj == "she" else "his"
        self.kind = self.can = self.food = self.adj = None


def cap(s):
    return s[0].upper() + s[1:]


def low(s):
    return s[0].lower() + s[1:]


class Teller:
    def __init__(self, rng):
        self.r = rng

    # -- small helpers --------------------------------------------------------
    def pick(self, seq):
        return self.r.choice(seq)

    def chance(self, p):
        return self.r.random() < p

    def person(self, avoid=()):
        name, subj, noun = self.pick([p for p in PEOPLE if p[0] not in avoid])
        return Who(name, name, subj, "a " + noun + " named " + name, noun)

    def elder(self, child):
        role, subj = self.pick(ELDERS)
        return Who(child.his + " " + role, child.his + " " + role, subj)

    def animal(self, avoid=()):
        kind, can, food = self.pick([a for a in ANIMALS if a[0] not in avoid])
        subj = self.pick(["he", "she"])
        adj = self.pick(ADJ)
        art = "an" if adj[0] in "aeiou" else "a"
        w = Who("the " + adj + " " + kind, "the " + kind, subj,
                art + " " + adj + " " + kind, kind)
        w.kind, w.can, w.food, w.adj = kind, can, food, adj
        return w

    def said(self, words, who, verb="said"):
        """'"Words," said Mia.' with the right punctuation."""
        if words[-1] == ".":
            words = words[:-1] + ","
        if who.short[0].isupper() and self.chance(0.5):
            return '"' + words + '" ' + who.short + " " + verb + "."
        return '"' + words + '" ' + verb + " " + who.short + "."

    def day_opening(self):
        day = self.pick(DAYS)
        kind, desc = self.pick(WEATHER)
        form = self.r.randrange(5)
        if form == 0:
            return "On " + day + " morning, " + desc + "."
        if form == 1:
            return "It was a " + kind + " " + day + ", and " + desc + "."
        if form == 2:
            return "One " + kind + " day, " + desc + "."
        if form == 3:
            return "It was " + day + ". " + cap(desc) + "."
        return "On " + day + ", " + desc + "."

    def season_line(self):
        s = self.pick(SEASON_NAMES)
        if self.chance(0.5):
            return "It was " + s + ", and " + self.pick(SEASONS[s]) + "."
        return "It was " + s + ". " + cap(self.pick(SEASONS[s])) + "."

    # -- openings and endings -------------------------------------------------
    def setting(self, hero, friend=None):
        out = []
        form = self.r.randrange(5)
        if form == 0:
            out.append("Once upon a time, there was a " +
                       self.pick(["small", "quiet", "little"]) +
                       " village by a river.")
            out.append("In the village lived " + hero.intro + ".")
        elif form == 1:
            out.append(cap(hero.name) + " lived in a " +
                       self.pick(["small", "little", "white", "brown"]) +
                       " house near the village.")
            out.append("There was a " +
                       self.pick(["big garden", "green field", "small hill"]) +
                       " near the house, and an old tree.")
        elif form == 2:
            out.append("In a small village near the " +
                       self.pick(["river", "forest", "hill"]) +
                       ", there lived " + hero.intro + ".")
        elif form == 3:
            out.append("There was once " + hero.intro +
                       " who lived by the river.")
        else:
            out.append("Once upon a time, " + hero.intro + " lived " +
                       self.pick(["near the forest", "by the river",
                                  "on a green hill", "in a small village"]) +
                       ".")
        if friend is not None:
            g = self.r.randrange(3)
            if g == 0:
                out.append(cap(hero.he) + " had a good friend, " +
                           friend.intro + ".")
            elif g == 1:
                out.append(cap(hero.short) + " and " + friend.intro +
                           " were good friends.")
            else:
                out.append("Every day, " + hero.short + " and " +
                           friend.name + " played together.")
        if hero.kind is not None and self.chance(0.6):
            adj = self.pick([a for a in ("kind", "brave", "happy", "good")
                             if a != hero.adj])
            out.append(cap(hero.short) + " was " + adj + ", and " +
                       hero.he + " could " + hero.can + " very well.")
        elif self.chance(0.5):
            out.append(cap(hero.he) + " was " +
                       self.pick(["kind", "brave", "happy", "good"]) +
                       ", and everyone in the village liked " + hero.him + ".")
        return out

    def ending(self, a, b=None, span="day"):
        out = []
        form = self.r.randrange(6)
        if span != "day" and form in (0, 1, 2, 5):
            form = self.pick([3, 4])
        both = a.short + " and " + b.short if b is not None else a.short
        if form == 0:
            if b is not None:
                out.append("From that day on, " + both +
                           " were good friends.")
            else:
                out.append("From that day on, " + a.short + " was a brave " +
                           a.noun + ", and " + a.he + " was not afraid of "
                           "the dark.")
        elif form == 1:
            out.append("That night, " + both + " slept well, warm and happy.")
        elif form == 2:
            out.append("When the sun went down, " + both +
                       " went home, tired and happy.")
        elif form == 3:
            out.append(cap(both) + " remembered this " + span +
                       " for a long time.")
        elif form == 4:
            out.append("It was a good " + span + ", and " + both +
                       (" were" if b is not None else " was") +
                       " very happy.")
        else:
            out.append("So the day came to an end, and all was well in the "
                       "village.")
        if self.chance(0.45):
            out.append(self.pick(MORALS))
        if self.chance(0.25):
            out.append("The end.")
        return out

    # -- story types ----------------------------------------------------------
    def story_market(self):
        hero = self.person()
        elder = self.elder(hero)
        title = self.pick(["A day at the market",
                           cap(hero.name) + " and the market"])
        p1 = self.setting(hero)
        p2 = [self.day_opening()]
        p2.append(self.said(self.pick([
            "Can we go to the market?",
            "Can I come with you to the market?",
            "Can we go to the market and see the baker?"]), hero, "asked"))
        want = self.r.sample([("apple", "apples"), ("egg", "eggs"),
                              ("fish", "fish")], 2)
        p2.append(self.said("Yes. We need " + want[0][1] + " and " +
                            want[1][1] + ".", elder))
        if self.chance(0.5):
            p2.append('"Come with me, and do not run on the bridge."')
        p3 = []
        p3.append(self.pick([
            "So they walked down the road and over the bridge to the "
            "market.",
            "They walked together down the road and over the old bridge.",
            "On the way, they saw the river, the bridge and the big tree."]))
        p3.append(self.pick([
            "The market was full, and everyone was happy.",
            "The market was full of good food!",
            "The baker had bread, and there were apples, eggs and fish."]))
        n1, n2 = self.r.randrange(2, 8), self.r.randrange(2, 8)
        c1, c2 = self.r.sample(COLORS, 2)
        p3.append(cap(hero.short) + " saw " + NUMBERS[n1 - 1] + " " + c1 +
                  " " + want[0][1] + " and " + NUMBERS[n2 - 1] + " " +
                  want[1][1] + " in a " + c2 + " basket.")
        p3.append(cap(hero.he) + " counted the " + want[0][1] + ": " +
                  ", ".join(NUMBERS[:n1]) + ".")
        p3.append(self.said("Can we take them all?", hero, "asked"))
        m = self.r.randrange(1, n1)
        p3.append(self.said("No, we need " + NUMBERS[m - 1] + " " +
                            want[0][1] +
                            " and " + NUMBERS[self.r.randrange(0, n2)] +
                            " " + want[1][1] + ".", elder))
        if self.chance(0.6):
            p3.append("The old baker gave " + hero.short +
                      " some warm bread, and " + hero.he +
                      " said thank you.")
        p4 = ["In the evening, they came home with a full basket."]
        if self.chance(0.6):
            p4.append(cap(hero.short) + " helped " + elder.short +
                      ", and they ate together by the fire.")
        p4 += self.ending(hero)
        return title, [p1 + p2, p3, p4]

    def story_lost(self):
        hero = self.person()
        pet = self.animal()
        title = "The lost " + pet.kind
        p1 = self.setting(hero, pet)
        p2 = [self.day_opening()]
        p2.append("But in the evening, " + pet.short + " did not come home.")
        places = self.r.sample(PLACES, 4)
        p2.append(cap(hero.short) + " looked " + places[0] + ".")
        p2.append(cap(hero.he) + " looked " + places[1] + ".")
        p2.append("Then " + hero.he + " looked " + places[2] + ".")
        p2.append(self.said("Where are you, " + pet.adj + " " + pet.kind +
                            "?", hero, "called"))
        p3 = []
        p3.append("It was dark now, and " + hero.short + " was " +
                  self.pick(["cold", "tired", "afraid"]) + ".")
        p3.append("Then " + hero.he + " heard a small sound " + places[3] +
                  ".")
        p3.append("It was " + pet.short + ", " +
                  self.pick(["wet and cold", "tired and hungry",
                             "small and afraid"]) + ".")
        p3.append(self.said("I was lost, and I could not find the way home.",
                            pet))
        p3.append(self.said(self.pick([
            "Do not be afraid. I am with you now.",
            "Come home with me. It is warm by the fire.",
            "I looked for you all evening!"]), hero))
        p4 = []
        p4.append("They walked home together, and " + hero.short +
                  " gave " + pet.short + " some " + pet.food + ".")
        p4 += self.ending(hero, pet)
        return title, [p1 + p2, p3, p4]

    def story_river(self):
        a = self.animal(avoid=("duck", "bird", "owl"))
        b = self.animal(avoid=(a.kind, "mouse"))
        title = "The " + a.kind + " and the " + b.kind
        p1 = self.setting(a)
        p1.append(self.day_opening())
        p2 = []
        p2.append(cap(a.short) + " wanted to go to the other side of the "
                  "river, but the water was too deep.")
        p2.append(self.said(self.pick([
            "Can you help me?", "Can you help me, friend?",
            "I can not swim. Can you help me?"]), a, "asked"))
        p2.append(cap(b.short) + " looked at " + a.short + ".")
        if self.chance(0.5):
            p2.append(self.said("What do you need?", b, "asked"))
            p2.append(self.said("The water is too deep for me.", a))
        p2.append(self.said("Yes, I will help you.", b))
        if b.can in ("swim", "fly"):
            p2.append("So " + b.short + " took " + a.short +
                      " over the water, and they came to the other side.")
        else:
            p2.append("So " + b.short + " found a long tree by the water, "
                      "and " + a.short + " walked over it to the other "
                      "side.")
        p2.append(self.said(self.pick(["Thank you, friend!",
                                       "Thank you! You are very kind."]), a))
        p3 = []
        season = self.pick(SEASON_NAMES)
        p3.append("Then " + season + " came, and " +
                  self.pick(SEASONS[season]) + ".")
        p3.append(cap(b.short) + " could not find any food, and " + b.he +
                  " was very hungry.")
        p3.append("When " + a.short + " saw this, " + a.he + " came with " +
                  "a basket of " + b.food + ".")
        p3.append(self.said("You helped me, and now I will help you.", a))
        p4 = self.ending(a, b)
        return title, [p1, p2, p3, p4]

    def story_stones(self):
        hero = self.person()
        thing = self.pick([("stone", "stones"), ("flower", "flowers")])
        color = self.pick(COLORS)
        title = "The seven " + thing[1]
        p1 = self.setting(hero)
        p2 = []
        where = "by the river" if thing[0] == "stone" else "in the field"
        p2.append("On Monday, " + hero.short + " found one " + color + " " +
                  thing[0] + " " + where + ".")
        have = 1
        for d in range(1, 7):
            day = DAYS[d]
            f = self.r.randrange(3)
            if f == 0:
                p2.append("On " + day + ", " + hero.he + " found one more.")
            elif f == 1:
                p2.append("On " + day + ", there was one more " + thing[0] +
                          ", and " + hero.he + " took it home.")
            else:
                p2.append(day + " came, and " + hero.he + " found one more " +
                          thing[0] + ".")
            have += 1
            if self.chance(0.5) or d == 6:
                p2.append("Now " + hero.he + " had " + NUMBERS[have - 1] +
                          " " + thing[1] + ".")
        p3 = []
        p3.append(cap(hero.he) + " put them by the fire and counted them: " +
                  ", ".join(NUMBERS) + ".")
        p3.append(self.said("I have seven " + thing[1] +
                            ", one for every day!", hero))
        friend = self.person(avoid=(hero.name,))
        p3.append(cap(hero.he) + " gave " + self.pick(NUMBERS[1:4]) +
                  " of them to " + hero.his + " friend " + friend.name + ".")
        p3.append(self.said(self.pick(["Thank you! They are very good.",
                                       "Thank you! You are a good friend."]),
                            friend))
        p4 = self.ending(hero, friend)
        return title, [p1, p2, p3, p4]

    def story_storm(self):
        hero = self.person()
        elder = self.elder(hero)
        title = self.pick(["The big rain", "A night of rain", "The big wind"])
        p1 = self.setting(hero)
        p1.append(self.season_line())
        p2 = []
        p2.append("In the evening, the sky was dark, and the wind blew over "
                  "the hill.")
        p2.append("Then the rain fell on the house all night.")
        p2.append(cap(hero.short) + " sat by the fire with " + elder.short +
                  ".")
        p2.append(self.said(self.pick(["I do not like the wind.",
                                       "I am afraid of the wind."]), hero))
        p2.append(self.said(self.pick([
            "Do not be afraid. The house is warm, and we are together.",
            "The rain is good for the garden. In the morning, you will see.",
            "Come and stay by the fire with me."]),
            elder))
        if self.chance(0.6):
            p2.append("So they sat together and sang, and then the wind "
                      "was quiet.")
        p3 = []
        p3.append("In the morning, the sun came out, and the sky was blue "
                  "again.")
        p3.append("The garden was wet, and the leaves were green.")
        if self.chance(0.7):
            p3.append(cap(hero.short) + " saw " +
                      NUMBERS[self.r.randrange(1, 7)] +
                      " small birds in the tree.")
        p3 += self.ending(hero)
        return title, [p1, p2, p3]

    def story_garden(self):
        hero = self.person()
        elder = self.elder(hero)
        title = cap(hero.name) + " and the garden"
        p1 = self.setting(hero)
        seq = []
        seq.append("In spring, " + hero.short + " and " + elder.short +
                   " put seeds in the garden.")
        seq.append(self.said("When will they come up?", hero, "asked"))
        seq.append(self.said("They need water every day. Then you will "
                             "see.", elder))
        seq.append("In summer, the sun was warm, and the garden was green.")
        seq.append("Every morning, " + hero.short + " gave it water from "
                   "the river.")
        seq.append("In autumn, the apples were red, and they put them in a "
                   "big basket.")
        seq.append(cap(hero.he) + " counted them, and " + elder.short +
                   " counted them too.")
        seq.append("In winter, the garden was white with snow, but the "
                   "house was warm.")
        seq.append("They ate apples by the fire and remembered the summer.")
        seq.append(self.pick([
            "Then spring came again, and they put seeds in the garden.",
            "When spring came again, " + hero.short + " wanted to help "
            "again.",
            "In spring, the garden was green again, and they were happy."]))
        if self.chance(0.4):
            seq.append(self.pick(MORALS))
        return title, [p1, seq[:3], seq[3:7], seq[7:]]

    def story_share(self):
        a = self.animal()
        b = self.animal(avoid=(a.kind,))
        wise = self.pick([k for k in ("owl", "bear", "bird")
                          if k not in (a.kind, b.kind)])
        thing = self.pick(["apple", "fish"])
        title = "The " + a.kind + ", the " + b.kind + " and the " + thing
        p1 = self.setting(a, b)
        p1.append(self.day_opening())
        p2 = []
        what = self.pick(["big", "good", "red"] if thing == "apple"
                         else ["big", "good"]) + " " + thing
        p2.append(self.pick([
            "They found one " + what + " under the old tree.",
            "On the way home, they saw one " + what + " by the road.",
            "Then they found one " + what + " near the bridge."]))
        p2.append(self.said(self.pick([
            "It is mine! I saw it.", "This " + thing + " is mine!",
            "I found it! It is mine!"]), a))
        p2.append(self.said(self.pick(["No, it is mine!",
                                       "No! I saw it too!"]), b))
        p2.append("They were hungry, and they were angry.")
        p2.append("The old " + wise + " looked down from a tree.")
        p2.append(self.said(self.pick([
            "Can you not share it?",
            "You are friends. Can you not share it?",
            "There is one " + thing + ", and there are two of you. Can you "
            "not share it?"]),
                            Who("the " + wise, "the " + wise, "she"),
                            "asked"))
        p3 = []
        p3.append(cap(a.short) + " looked at " + b.short + ", and " +
                  b.short + " looked at " + a.short + ".")
        p3.append(self.pick([
            "So they ate the " + thing + " together.",
            "So they sat down and ate the " + thing + " together.",
            "So " + a.short + " gave some of the " + thing + " to " +
            b.short + ", and they ate it together."]))
        if self.chance(0.5):
            p3.append(self.said("It is good to share.", b))
            p3.append(self.said("Yes, and it is better to be friends.", a))
        else:
            p3.append(self.said("I am sorry I was angry.", a))
            p3.append(self.said("I am sorry too. You are my friend.", b))
        p4 = self.ending(a, b)
        return title, [p1, p2, p3, p4]

    def story_week(self):
        hero = self.person()
        title = cap(hero.name) + "'s week"
        p1 = self.setting(hero)
        p2 = []
        acts = [
            "helped " + hero.his + " mother in the garden",
            "went to the market with " + hero.his + " father",
            "played by the river with a little duck",
            "walked up the hill to see the village",
            "sat under the big tree and sang",
            "gave bread to the birds on the bridge",
            "helped the old baker with the bread",
            "looked for red stones in the field",
            "went to see " + hero.his + " grandmother",
            "ate bread with " + hero.his + " grandfather",
        ]
        picks = self.r.sample(acts, 7)
        skies = self.r.sample(WEATHER, len(WEATHER))
        for i in range(7):
            who = hero.short if self.chance(0.5) else hero.he
            p2.append("On " + DAYS[i] + ", " + who + " " + picks[i] + ".")
            if skies and self.chance(0.3):
                kind, desc = skies.pop()
                p2.append(cap(desc) + ".")
        p3 = []
        p3.append("On Sunday evening, " + hero.short + " was tired but "
                  "happy.")
        p3.append(self.said("What was the best day?",
                            Who(hero.his + " mother", hero.his + " mother",
                                "she"), "asked"))
        best = self.r.randrange(7)
        p3.append(self.said(self.pick([
            DAYS[best] + " was the best day, because I was with friends.",
            "Every day was good!",
            "I liked " + DAYS[best] + " best. Can we do it again?"]), hero))
        p3 += self.ending(hero, span="week")
        return title, [p1, p2, p3]

    def story(self):
        kinds = [self.story_market, self.story_lost, self.story_river,
                 self.story_stones, self.story_storm, self.story_garden,
                 self.story_share, self.story_week]
        weights = [3, 4, 4, 2, 3, 2, 3, 2]
        fn = self.r.choices(kinds, weights=weights)[0]
        title, paras = fn()
        lines = [title]
        for p in paras:
            if p:
                lines.append(" ".join(cap(s) for s in p))
        return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------
# Token statistics (the project's word-level rule)
# --------------------------------------------------------------------------

TOKEN_RE = re.compile(rb"[A-Za-z0-9]+|[^A-Za-z0-9 \t\n\r\f\v]")


def tokenize(data):
    return TOKEN_RE.findall(data)


def stats(data):
    toks = tokenize(data)
    vocab = len(set(toks)) + 1  # + [EOS]
    return len(data), len(toks), vocab


def generate(seed, target_tokens):
    rng = random.Random(seed)
    teller = Teller(rng)
    stories = []
    n = 0
    while n < target_tokens:
        s = teller.story()
        stories.append(s)
        n += len(tokenize(s.encode("ascii")))
    return "\n".join(stories)


def main(argv=None):
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(
        description="Generate the tiny_tales.txt training corpus "
                    "(deterministic, standard library only).")
    ap.add_argument("--out", default=os.path.join(here, "tiny_tales.txt"),
                    help="output path (default: tiny_tales.txt next to "
                         "this script)")
    ap.add_argument("--seed", type=int, default=DEFAULT_SEED,
                    help="random seed (default: %(default)s)")
    ap.add_argument("--tokens", type=int, default=DEFAULT_TOKENS,
                    help="stop after the first story that reaches this many "
                         "tokens (default: %(default)s)")
    ap.add_argument("--stats", action="store_true",
                    help="print bytes, tokens and vocabulary size of the "
                         "written file")
    ap.add_argument("--check", action="store_true",
                    help="do not generate; only print the stats of --out")
    args = ap.parse_args(argv)

    if not args.check:
        data = generate(args.seed, args.tokens).encode("ascii")
        with open(args.out, "wb") as f:
            f.write(data)
    if args.stats or args.check:
        with open(args.out, "rb") as f:
            data = f.read()
        nbytes, ntok, nvocab = stats(data)
        print("file:   %s" % args.out)
        print("bytes:  %d" % nbytes)
        print("tokens: %d" % ntok)
        print("vocab:  %d (distinct tokens + [EOS])" % nvocab)
        nonascii = sum(1 for b in data if b > 127)
        if nonascii:
            print("warning: %d non-ASCII bytes" % nonascii)
    return 0


if __name__ == "__main__":
    sys.exit(main())
