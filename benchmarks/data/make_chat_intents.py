"""Write chat_intents.json: short, noisy, chat-like requests to a personal assistant.

52 intents of everyday requests (banking, travel, home devices, shopping, health, food,
language, small utilities), many in near-miss groups (alarm vs timer vs reminder, lost card
vs change PIN, order status vs track package vs return). Each intent has 12 hand-written
seed requests: 7 make the train split (each as written plus two noisy variants: 21), 2 the
calibration split and 3 the test split (two noisy variants each: 4 and 6). 80 out-of-domain
requests in the same style are split 40/40 (one noisy variant each). Noise is deterministic:
lower case, dropped punctuation, chat spellings (u, ur, pls, thx), one swapped-letter typo,
a filler word before or after. Written for this project; no public set was used.

    python benchmarks/data/make_chat_intents.py   # writes benchmarks/data/chat_intents.json
"""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

INTENTS = {
    "check-balance": ("Tell the user how much money is in their bank account.", [
        "how much money do i have", "what's my account balance", "check my balance", "how much is left in checking",
        "am i broke right now", "balance on my savings account?", "show me what's in my account",
        "do i have enough money in the bank", "current balance please", "how much cash is in my account today",
        "what does my savings look like", "can you see how much i have left"]),
    "transfer-money": ("Move money between accounts or send it to someone.", [
        "send 50 bucks to mike", "transfer money to my savings", "move 200 from checking to savings",
        "wire money to my mom", "pay back sarah 20 dollars", "i need to send money to a friend",
        "transfer funds between my accounts", "send $100 to john", "can u move money into savings",
        "put 300 into my other account", "i owe tom money send it to him", "make a transfer to my sister"]),
    "lost-card": ("Block and replace a lost or stolen bank card.", [
        "i lost my card", "my credit card got stolen", "block my debit card", "can't find my bank card anywhere",
        "someone took my wallet with my card", "freeze my card it's missing", "need a replacement card i lost mine",
        "my card is gone", "report a stolen card", "i think i left my card at the bar", "lock my card asap",
        "wallet stolen need to cancel card"]),
    "dispute-charge": ("Dispute a wrong or unknown charge on a statement.", [
        "there's a charge i don't recognize", "i was charged twice", "dispute a transaction",
        "weird payment on my statement", "i didn't buy this", "refund a wrong charge on my card",
        "why is there a 40 dollar charge from some random store", "fraudulent charge on my account",
        "got billed for something i never ordered", "double charge on my card", "contest this payment",
        "unknown purchase showed up"]),
    "pay-bill": ("Pay a utility, phone or credit card bill.", [
        "pay my electric bill", "pay the phone bill", "i need to pay my credit card", "settle my water bill",
        "pay internet bill today", "when is my gas bill due, pay it", "make a payment on my card balance",
        "pay rent", "pay the cable bill", "take care of my utilities payment", "pay what i owe on the visa",
        "schedule my bill payment"]),
    "change-pin": ("Change the PIN code of a bank card.", [
        "change my pin", "i want a new pin for my card", "reset my card pin", "forgot my pin number",
        "update the pin on my debit card", "how do i change my atm code", "set a different pin",
        "my pin is too easy change it", "new pin please", "need to pick another pin", "pin change for my credit card",
        "can i modify my card's pin"]),
    "book-flight": ("Book a plane ticket.", [
        "book a flight to paris", "i need a plane ticket to chicago", "find me flights to tokyo next week",
        "get me a ticket to london", "fly to denver on friday", "cheapest flight to miami",
        "book me on a plane to rome", "reserve a flight home for christmas", "i wanna fly to berlin",
        "any flights to seattle tomorrow", "plane tickets for two to cancun", "book air travel to boston"]),
    "cancel-flight": ("Cancel a booked flight.", [
        "cancel my flight", "i can't make my trip cancel the plane ticket", "cancel my booking to denver",
        "get rid of my flight reservation", "i need to cancel my trip to paris", "drop my flight on monday",
        "cancel the ticket i booked", "refund my flight i'm not going", "call off my flight",
        "undo my plane reservation", "scrap the flight to vegas", "i want to cancel my air ticket"]),
    "flight-status": ("Say whether a flight is on time, delayed or cancelled.", [
        "is my flight on time", "is flight ua 123 delayed", "when does my plane land", "flight status please",
        "has my flight been cancelled", "what gate does my flight leave from", "is the 6pm to boston late",
        "did my flight get delayed", "when does my flight board", "arrival time for flight 456",
        "is my plane leaving on schedule", "check if my flight is delayed"]),
    "baggage": ("Explain baggage allowance and fees.", [
        "how many bags can i bring", "what's the carry on limit", "checked bag fee", "can i bring two suitcases",
        "luggage weight limit", "is a backpack ok as a personal item", "how much to check a bag",
        "max size for carry on", "can i take my guitar on the plane", "overweight baggage cost",
        "how heavy can my suitcase be", "do i pay for a second bag"]),
    "book-hotel": ("Book a hotel room.", [
        "book a hotel in new york", "find me a room for tonight", "i need a hotel near the airport",
        "reserve a hotel for 3 nights", "cheap hotel in madrid", "get me a place to stay in sf",
        "book a room with two beds", "hotel for the weekend in napa", "any hotels downtown available",
        "i need accommodation in lisbon", "reserve a suite", "find lodging near the conference center"]),
    "rent-car": ("Rent a car.", [
        "rent a car", "i need a rental car at the airport", "book a car for the weekend", "cheapest car rental",
        "get me an suv rental", "rent a car in phoenix", "reserve a rental for friday",
        "i want to hire a car for a week", "car rental near me", "book a minivan", "need wheels for my trip",
        "pick up a rental car tomorrow"]),
    "visa": ("Explain visa and entry requirements for a country.", [
        "do i need a visa for japan", "visa requirements for brazil", "can i go to canada without a visa",
        "what papers do i need to enter india", "how do i get a visa for china", "is a visa required for the uk",
        "entry rules for australia", "do americans need a visa for france", "tourist visa for vietnam",
        "travel documents needed for egypt", "how long does a schengen visa take", "visa on arrival in thailand?"]),
    "currency-exchange": ("Convert between currencies or give exchange rates.", [
        "how much is 100 dollars in euros", "exchange rate usd to yen", "convert 50 pounds to dollars",
        "what's the euro worth today", "how many pesos for a dollar", "currency conversion",
        "swap 200 euros into francs", "dollar to rupee rate", "what is 1000 yen in usd",
        "how much are canadian dollars worth", "convert my money to euros", "gbp to eur"]),
    "weather": ("Give the weather forecast.", [
        "what's the weather like", "is it going to rain today", "forecast for tomorrow", "do i need an umbrella",
        "how hot is it outside", "will it snow this weekend", "weather in chicago", "is it cold out",
        "temperature right now", "should i wear a jacket", "any storms coming", "sunny tomorrow?"]),
    "set-alarm": ("Set an alarm for a time of day.", [
        "set an alarm for 7am", "wake me up at 6", "alarm at 5:30 tomorrow", "set my alarm for noon",
        "i need to get up at 8", "make an alarm for 6 45", "wake me at seven", "alarm for tomorrow morning",
        "set a wake up alarm", "get me up at 4 am", "put an alarm on for 9", "alarm 6am weekdays"]),
    "set-timer": ("Start a countdown timer.", [
        "set a timer for 10 minutes", "timer 5 min", "start a 20 minute timer", "count down 30 seconds",
        "timer for the pasta 12 minutes", "set timer one hour", "remind me in 15 min with a timer",
        "start the countdown", "3 minute timer for my tea", "set a quick timer", "time 45 minutes",
        "egg timer please"]),
    "reminder": ("Create a reminder to do something later.", [
        "remind me to call mom", "remind me to buy milk tomorrow", "don't let me forget the meeting",
        "set a reminder to take my pills", "remind me to pay rent on the first", "make a reminder for the dentist",
        "remember to water the plants", "remind me about trash day", "note to self: email boss",
        "ping me to pick up the kids", "remind me at 5 to leave", "add a reminder for the birthday"]),
    "calendar": ("Add, move or check events on the calendar.", [
        "what's on my calendar today", "add a meeting at 3", "schedule lunch with anna on friday",
        "move my 2pm to 4", "am i free tomorrow afternoon", "put a dentist appointment on my calendar",
        "what do i have next week", "book a meeting with the team", "clear my schedule friday",
        "when is my next meeting", "create an event saturday", "check my agenda"]),
    "play-music": ("Play music, a song, artist or playlist.", [
        "play some music", "put on taylor swift", "play my workout playlist", "i wanna hear some jazz",
        "play the new drake song", "shuffle my favorites", "play something relaxing", "start my spotify",
        "play rock music", "put on some beats", "play that song from the movie", "music please"]),
    "volume": ("Turn the speaker volume up, down or mute.", [
        "turn it up", "lower the volume", "mute", "too loud", "volume to 50 percent", "can't hear it louder",
        "quieter please", "turn the sound down", "max volume", "unmute", "volume up a bit", "make it softer"]),
    "smart-lights": ("Switch or dim the lights at home.", [
        "turn off the lights", "lights on in the kitchen", "dim the living room", "make it brighter",
        "switch off bedroom light", "set the lights to blue", "turn the lamp on", "kill the lights",
        "lights at 30 percent", "is the porch light on", "turn on all the lights", "lights off downstairs"]),
    "thermostat": ("Change or check the home heating and cooling.", [
        "set the heat to 70", "it's cold turn up the heat", "make it cooler in here", "turn on the ac",
        "what's the thermostat at", "lower the temperature 2 degrees", "heat the house", "turn off the air conditioning",
        "set thermostat to 68", "warm it up in here", "too hot inside", "put the heating on"]),
    "order-status": ("Say where an online order is in processing.", [
        "where is my order", "has my order shipped", "status of my amazon order", "did my order go through",
        "when will my stuff arrive", "order 5521 status", "is my purchase processed yet", "what happened to my order",
        "has the shop sent my order", "check on my order", "my order is late", "order confirmation status"]),
    "track-package": ("Track a parcel with its tracking number.", [
        "track my package", "where is my parcel", "tracking number 1z999", "ups tracking", "fedex package location",
        "is the delivery truck close", "follow my shipment", "where's the box i'm expecting",
        "track usps parcel", "package says delivered but not here", "find my shipment", "tracking info please"]),
    "return-item": ("Return a product and get a refund.", [
        "i want to return this", "how do i send back my shoes", "return policy", "refund for a broken item",
        "start a return", "the shirt doesn't fit return it", "get my money back for this order",
        "can i exchange this", "return label please", "send back a damaged product", "how long do i have to return",
        "item arrived broken want a refund"]),
    "change-address": ("Update a shipping or home address.", [
        "change my address", "i moved update my address", "new shipping address", "update where you send my stuff",
        "edit my delivery address", "change address on my account", "wrong address on my order fix it",
        "my new home address is 12 oak st", "update billing address", "ship to my work instead",
        "i have a new apartment", "change the address for deliveries"]),
    "reset-password": ("Reset a forgotten account password.", [
        "forgot my password", "reset my password", "can't log in", "locked out of my account",
        "change my login password", "password not working", "i need a new password", "help me get back into my account",
        "password reset link", "my account won't let me sign in", "recover my account", "update my password"]),
    "wifi": ("Fix a home wifi or internet connection.", [
        "my wifi isn't working", "internet is down", "can't connect to wifi", "wifi keeps dropping",
        "slow internet", "router not working", "no internet connection", "how do i reset my router",
        "wifi password", "my laptop won't connect to the network", "connection keeps cutting out",
        "internet so slow today"]),
    "printer": ("Fix a printer that does not print.", [
        "my printer won't print", "printer is offline", "paper jam", "printer says out of ink",
        "can't connect to the printer", "print job stuck", "printer printing blank pages", "how do i add a printer",
        "printer not responding", "the printer is jammed again", "why won't it print", "printer error message"]),
    "phone-battery": ("Help with a phone battery that drains or will not charge.", [
        "my phone battery dies fast", "phone won't charge", "battery draining quickly", "how to save battery",
        "my phone is always at 10 percent", "charger not working", "battery health low", "phone gets hot while charging",
        "why does my battery die so fast", "phone dies by noon", "make my battery last longer", "charging is super slow"]),
    "restaurant": ("Book a table at a restaurant.", [
        "book a table for two at 7", "reserve dinner at olive garden", "table for 4 tonight",
        "make a reservation at the sushi place", "can you get us a table saturday", "book dinner for my anniversary",
        "reserve a spot for brunch", "restaurant booking for 6 people", "get me a table at 8",
        "dinner reservation please", "book lunch for tomorrow", "table at the steakhouse friday"]),
    "food-delivery": ("Order food for delivery.", [
        "order a pizza", "get me some chinese food delivered", "i'm hungry order something",
        "order thai for delivery", "can u get me a burger", "order dinner to my house", "doordash some tacos",
        "delivery from the sushi place", "order food", "get me wings delivered", "i want takeout",
        "order my usual from the indian place"]),
    "recipe": ("Suggest a recipe or how to cook a dish.", [
        "how do i make lasagna", "recipe for chocolate chip cookies", "what can i cook with chicken and rice",
        "easy dinner ideas", "how to make pancakes", "vegan recipe please", "how long to bake salmon",
        "give me a soup recipe", "what can i make with eggs", "how do you make guacamole",
        "quick lunch idea", "recipe for banana bread"]),
    "grocery-list": ("Add or remove items on the shopping list.", [
        "add milk to my shopping list", "put eggs on the list", "what's on my grocery list",
        "remove bread from the list", "add apples and bananas", "i need to buy coffee add it",
        "shopping list please", "clear my grocery list", "add toilet paper", "put butter on my list",
        "did i add cheese", "add dog food to groceries"]),
    "calories": ("Say how many calories or nutrients a food has.", [
        "how many calories in a banana", "calories in a big mac", "is pizza high in calories",
        "protein in an egg", "how much sugar in coke", "calorie count for rice", "nutrition facts for avocado",
        "how fattening is ice cream", "carbs in a bagel", "how many calories did i eat",
        "calories in a glass of wine", "is oatmeal healthy"]),
    "workout": ("Suggest exercises or a training plan.", [
        "give me a workout", "exercises for abs", "how do i get stronger", "30 minute home workout",
        "leg day routine", "how to start running", "best exercises to lose weight", "workout plan for beginners",
        "how many pushups should i do", "gym routine please", "cardio ideas", "stretching routine"]),
    "sleep": ("Give tips for sleeping better.", [
        "i can't sleep", "how to fall asleep faster", "tips for better sleep", "i keep waking up at night",
        "how many hours should i sleep", "insomnia help", "is napping bad", "why am i always tired",
        "help me sleep", "bedtime routine ideas", "can't stay asleep", "should i drink coffee before bed"]),
    "meditation": ("Guide a short meditation or breathing exercise.", [
        "help me meditate", "breathing exercise please", "i'm stressed calm me down", "guided meditation",
        "how do i meditate", "5 minute mindfulness", "relaxation exercise", "i feel anxious help me breathe",
        "start a meditation session", "teach me box breathing", "i need to chill out", "calming exercise"]),
    "doctor-appointment": ("Book or change a doctor's appointment.", [
        "book a doctor appointment", "i need to see my doctor", "schedule a checkup", "make an appointment with dr lee",
        "can i see a doctor tomorrow", "reschedule my doctor visit", "cancel my appointment with the dentist",
        "book a physical", "get me in with a dermatologist", "i need a doctor's visit this week",
        "appointment with my gp", "when's my next doctor appointment"]),
    "pharmacy": ("Refill a prescription at the pharmacy.", [
        "refill my prescription", "i need more of my meds", "order my medication", "is my prescription ready",
        "refill at cvs", "running out of pills", "renew my prescription", "pharmacy pickup",
        "get my meds refilled", "when can i pick up my prescription", "reorder my inhaler", "prescription refill please"]),
    "translate": ("Translate a phrase into another language.", [
        "how do you say hello in spanish", "translate thank you to french", "what's cat in german",
        "say good morning in japanese", "translate this to italian", "how do i say where is the bathroom in french",
        "what does gracias mean", "english to chinese please", "translate i love you into korean",
        "how to say cheers in portuguese", "what is goodbye in russian", "translate my sentence to arabic"]),
    "define-word": ("Give the meaning of a word.", [
        "what does ubiquitous mean", "define serendipity", "meaning of the word ephemeral", "what's a synonym for happy",
        "definition of irony", "what does lol mean", "what is the meaning of pragmatic", "explain the word nostalgia",
        "dictionary definition of apathy", "what does gaslighting mean", "word meaning please", "define the term"]),
    "spelling": ("Spell a word correctly.", [
        "how do you spell necessary", "spell restaurant", "is it recieve or receive", "correct spelling of definitely",
        "spell it out for me", "how is separate spelled", "spelling of accommodate", "did i spell this right",
        "spell the word rhythm", "how to spell february", "which is right, occured or occurred", "spell check this word"]),
    "unit-conversion": ("Convert units of length, weight, volume or temperature.", [
        "how many cups in a liter", "convert 5 miles to km", "what's 70 fahrenheit in celsius", "pounds to kilograms",
        "how many ounces in a pound", "10 inches in cm", "how many feet in a meter", "convert 2 gallons to liters",
        "grams in a tablespoon", "how tall is 180 cm in feet", "kilometers to miles", "celsius to fahrenheit"]),
    "calculator": ("Work out an arithmetic calculation.", [
        "what's 15 times 23", "calculate 450 divided by 6", "what is 17 plus 38", "square root of 144",
        "20 percent of 85", "what's 2 to the power of 10", "do the math 1234 minus 567", "multiply 12 by 12",
        "whats 3.5 times 4", "add up 45 67 and 89", "divide 100 by 7", "what's 7 squared"]),
    "tip": ("Work out the tip or split a restaurant bill.", [
        "how much should i tip", "calculate 20 percent tip on 64", "split the bill 4 ways", "tip on a 50 dollar check",
        "what's a good tip for a haircut", "how much each if the bill is 120 for 3", "15 percent tip please",
        "divide dinner cost between us", "tip calculator", "how much to tip the delivery guy",
        "bill is 88 what's the tip", "do i tip at a buffet"]),
    "joke": ("Tell a joke.", [
        "tell me a joke", "make me laugh", "say something funny", "know any good jokes", "tell me a pun",
        "i need a laugh", "dad joke please", "joke about cats", "got a knock knock joke", "funny story",
        "cheer me up with a joke", "one more joke"]),
    "movie": ("Recommend a movie or show to watch.", [
        "what should i watch tonight", "recommend a good movie", "any good horror films", "best comedy on netflix",
        "suggest a show to binge", "movie like inception", "family movie for tonight", "what's a good documentary",
        "romantic movie ideas", "something to watch with my kids", "top rated movies this year", "what to stream"]),
    "book-recommendation": ("Recommend a book to read.", [
        "recommend a good book", "what should i read next", "books like harry potter", "best mystery novels",
        "a good book for the beach", "non fiction recommendations", "sci fi book suggestions",
        "what's a good audiobook", "books for learning to invest", "novel for a book club", "fantasy series to start",
        "book gift ideas for my dad"]),
    "traffic": ("Give traffic conditions and commute time.", [
        "how's traffic", "how long to get to work", "is the highway jammed", "best route home",
        "traffic on i-95", "how long is my commute today", "any accidents on the way", "fastest way downtown",
        "will i be late if i leave now", "traffic report", "is the bridge backed up", "drive time to the airport"]),
    "gas-station": ("Find a nearby gas or charging station.", [
        "where's the nearest gas station", "i need gas", "cheapest gas near me", "find a charging station",
        "gas station on my route", "where can i fill up", "low on fuel", "ev charger nearby",
        "closest shell station", "gas prices around here", "running on empty", "find diesel near me"]),
}

OUT_OF_DOMAIN = [
    "who is the president of france", "what's the meaning of life", "tell me about black holes", "how old are you",
    "do you like pizza", "what's your name", "i'm bored", "write me a poem", "how do i fix my bike chain",
    "what's the capital of peru", "explain quantum physics", "help me with my taxes", "who won the super bowl",
    "are you a robot", "what is love", "how far is the moon", "who invented the telephone", "can dogs eat grapes",
    "what's the tallest mountain", "tell me a fun fact", "how do plants grow", "what year did ww2 end",
    "is coffee bad for you", "how do i learn to code", "what's the best phone to buy", "why is the sky blue",
    "teach me to play chess", "how do airplanes fly", "what's bitcoin", "recommend a good laptop",
    "how do i tie a tie", "what is the speed of light", "who painted the mona lisa", "how do vaccines work",
    "what time is it in tokyo", "how many people live in china", "how to make friends", "what's a black friday deal",
    "can you keep a secret", "do aliens exist", "how do i grow tomatoes", "what's the best pizza topping",
    "who wrote hamlet", "how do magnets work", "what should i name my dog", "explain the stock market",
    "how to write a resume", "what's the longest river", "is it healthy to run every day", "how old is the universe",
    "sing me a lullaby", "what is artificial intelligence", "how do i change a tire", "what's the best video game",
    "how does wifi work", "why do cats purr", "how do i start a business", "what is democracy", "tell me a story",
    "how to paint a room", "what's the biggest animal", "how do i jump start a car", "who discovered penicillin",
    "what language do they speak in brazil", "how to get rid of hiccups", "what's your favorite color",
    "can you dance", "how do i clean my oven", "what's a good name for a band", "how does the internet work",
    "who is the richest person", "what's the best way to study", "how do i knit a scarf", "what is yoga",
    "how many planets are there", "how do bees make honey", "help me write a speech", "what's the news today",
    "how to become a pilot", "why do we dream",
]

CHAT = {"you": "u", "your": "ur", "please": "pls", "thanks": "thx", "are": "r", "what's": "whats", "i'm": "im",
        "don't": "dont", "can't": "cant", "tomorrow": "tmrw", "because": "bc", "about": "abt"}
BEFORE = ["hey", "yo", "um", "ok so", "quick q", "hi", "hey there", "so"]
AFTER = ["pls", "thx", "asap", "?", "lol", "now", "real quick", "!!"]


def noisy(text: str, rng: random.Random) -> str:
    """One chat-like variant: lower case, no final punctuation, chat spellings, a typo, a filler."""
    words = re.sub(r"[.?!]+$", "", text.lower()).split()
    words = [CHAT.get(w, w) if rng.random() < 0.7 else w for w in words]
    long = [i for i, w in enumerate(words) if len(w) > 4 and w.isalpha()]
    if long and rng.random() < 0.6:
        i = rng.choice(long)
        j = rng.randrange(1, len(words[i]) - 2)
        w = words[i]
        words[i] = w[:j] + w[j + 1] + w[j] + w[j + 2:]
    if rng.random() < 0.5:
        words.insert(0, rng.choice(BEFORE))
    if rng.random() < 0.5:
        words.append(rng.choice(AFTER))
    return " ".join(words)


def variants(text: str, count: int, rng: random.Random) -> list[str]:
    out: list[str] = []
    for _ in range(20):
        candidate = noisy(text, rng)
        if candidate not in out and candidate != text:
            out.append(candidate)
        if len(out) == count:
            break
    return out


def main() -> None:
    rng = random.Random(25)
    intents = {}
    for name, (description, seeds) in INTENTS.items():
        assert len(seeds) == 12, name
        train = [v for seed in seeds[:7] for v in [seed, *variants(seed, 2, rng)]]
        calibration = [v for seed in seeds[7:9] for v in variants(seed, 2, rng)]
        test = [v for seed in seeds[9:] for v in variants(seed, 2, rng)]
        intents[name] = {"description": description, "manual": description, "train": train,
                         "calibration": calibration, "test": test}
    shuffled = OUT_OF_DOMAIN[:]
    rng.shuffle(shuffled)
    ood = [variants(q, 1, rng)[0] for q in shuffled]
    data = {"intents": intents, "ood": {"calibration": ood[:40], "test": ood[40:]}}
    out = Path(__file__).with_name("chat_intents.json")
    out.write_text(json.dumps(data, indent=1) + "\n")
    print(f"{len(intents)} intents, {sum(len(i['train']) for i in intents.values())} train, "
          f"{sum(len(i['test']) for i in intents.values())} test, {len(ood)} out of domain -> {out}")


if __name__ == "__main__":
    main()
