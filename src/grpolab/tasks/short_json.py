"""The "short_json" task: extract fields from a short text into a JSON object that fits a schema.

Made for small instruct models (docs/tasks.md, "short_json"). One item::

    prompt:         "Extract the fields of the text into one JSON object that follows this JSON
                     schema.\\nSchema: {"type": "object", "properties": {"customer": {"type":
                     "string"}, ...}, "required": [...], "additionalProperties": false}\\n
                     Text: Order from Ana Berg: 3 units of desk lamp.\\n
                     Answer with the JSON object only, in a ```json code block."
    reference:      the same schema with each property's reference value as its ``const``
    reward:         "json_schema" with ``partial: true`` (:mod:`grpolab.rewards.json_schema`):
                    1.0 for the right object; otherwise the share of checks passed, one per field
                    (present, right type, right value) plus one for the object as a whole (no
                    extra keys), so 2 of 3 right fields score 3/4
    demonstration:  the reference object in a ```json block
    privileged:     option ``privileged``: "solution" (the reference object), "documents" (the
                    field glossary a company would hold: what each field means and how to write
                    it, :func:`glossary`; no values) or "both"
    meta:           {"difficulty": level, "family": record kind, "solution": ..., "documents": ...}

Levels (option ``levels``): 1 = three fields copied as written; 2 = five or six fields with
numbers, booleans and a stated category; 3 = values to normalise by the glossary's rules (dates
to YYYY-MM-DD, euros to cents, durations to minutes, "urgent" to a priority).

Each (kind, level) has :data:`PER_KIND` records drawn from a constant seed (the same everywhere,
whatever the task's seed), unique by prompt.
"""

from __future__ import annotations

import json
import random
from typing import Any

from grpolab.tasks.base import TaskItem, register_task
from grpolab.tasks.catalog import PRIVILEGED_CHOICES, CatalogTask, Spec, check_levels, check_privileged

__all__ = ["KINDS", "LEVELS", "ShortJSONTask", "glossary"]

LEVELS = (1, 2, 3)
KINDS = ("order", "ticket", "event")
#: Records drawn per (kind, level).
PER_KIND = 300
_FIRST = ("Ana", "Ben", "Clara", "David", "Elena", "Felix", "Greta", "Hugo", "Ines", "Jonas", "Karin", "Luca",
          "Mira", "Nils", "Olga", "Pavel", "Rosa", "Sven", "Tara", "Uwe")
_LAST = ("Berg", "Costa", "Dahl", "Engel", "Falk", "Gomez", "Horn", "Ivanova", "Jensen", "Klein")
_PRODUCTS = ("desk lamp", "coffee grinder", "yoga mat", "travel mug", "phone stand", "wall clock", "bike light",
             "garden hose", "chess set", "rain jacket", "water bottle", "notebook")
_CITIES = ("Lyon", "Porto", "Graz", "Ghent", "Turin", "Bergen", "Krakow", "Seville")
_VENUES = ("Town Hall", "Old Theatre", "River Pavilion", "Central Library", "Harbour Arena", "Glass House")
_EVENTS = ("Jazz Night", "Book Fair", "Film Club", "Chess Open", "Spring Market", "Science Talk", "Choir Concert",
           "Dance Workshop")
_MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
           "November", "December")

_STR, _INT, _NUM, _BOOL = {"type": "string"}, {"type": "integer"}, {"type": "number"}, {"type": "boolean"}
_DATE = {"type": "string", "pattern": "^[0-9]{4}-[0-9]{2}-[0-9]{2}$"}
_GLOSSARY = {
    "customer": "customer: the full name of the person who orders, as written.",
    "product": "product: the product name, as written, without the quantity.",
    "quantity": "quantity: the number of units, an integer.",
    "city": "city: the city, as written (for an order: where the parcel is shipped).",
    "unit_price": "unit_price: the price of one unit in euros, a number.",
    "gift_wrap": "gift_wrap: true when the customer asks for gift wrapping, else false.",
    "delivery_date": "delivery_date: the promised delivery day, written YYYY-MM-DD.",
    "total_cents": "total_cents: what the order costs, quantity times the unit price, in euro cents (an integer).",
    "priority": "priority: high when the customer says it is urgent, low when they say there is no rush, "
                "normal otherwise.",
    "email": "email: the customer's e-mail address, as written.",
    "error_code": "error_code: the code the device shows, as written (letters, a dash, digits).",
    "days_owned": "days_owned: how many days since the purchase, an integer.",
    "under_warranty": "under_warranty: true when the customer says the device is under warranty, else false.",
    "severity": "severity: minor, major or critical, as the customer rates the problem.",
    "opened": "opened: the day the problem started, written YYYY-MM-DD.",
    "refund_cents": "refund_cents: the amount the customer asks back, in euro cents (an integer).",
    "channel": "channel: phone when the customer called, email when they wrote an e-mail, chat when they used the chat.",
    "event": "event: the event's name, as written.",
    "venue": "venue: the building where it takes place.",
    "seats": "seats: the number of seats, an integer.",
    "ticket_price": "ticket_price: the price of one ticket in euros, a number.",
    "sold_out": "sold_out: true when no tickets are left, else false.",
    "date": "date: the day of the event, written YYYY-MM-DD.",
    "duration_minutes": "duration_minutes: how long it lasts, in minutes (an integer).",
    "price_cents": "price_cents: the price of one ticket in euro cents (an integer).",
}


def _name(rng: random.Random) -> str:
    return f"{rng.choice(_FIRST)} {rng.choice(_LAST)}"


def _day(rng: random.Random) -> tuple[str, str]:
    """``(as written in the text, YYYY-MM-DD)``."""
    y, m, d = rng.choice((2024, 2025)), rng.randint(1, 12), rng.randint(1, 28)
    written = rng.choice((f"{_MONTHS[m - 1]} {d}, {y}", f"{d} {_MONTHS[m - 1]} {y}"))
    return written, f"{y}-{m:02d}-{d:02d}"


def _euros(rng: random.Random, lo: int, hi: int) -> int:
    """A price in cents, a multiple of 5."""
    return rng.randint(lo // 5, hi // 5) * 5


def _order(rng: random.Random, level: int) -> tuple[str, dict[str, Any], dict[str, dict]]:
    who, what, qty = _name(rng), rng.choice(_PRODUCTS), rng.randint(1, 12)
    if level == 1:
        text = rng.choice((f"{who} ordered {qty} x {what}.", f"Order from {who}: {qty} units of {what}.",
                           f"Please send {qty} of the {what} to {who}."))
        return text, {"customer": who, "product": what, "quantity": qty}, {"customer": _STR, "product": _STR,
                                                                           "quantity": _INT}
    cents = _euros(rng, 199, 9999)
    if level == 2:
        city, wrap = rng.choice(_CITIES), rng.random() < 0.5
        text = (f"Order from {who}: {qty} units of {what} at {cents / 100:.2f} euros each, shipped to {city}. "
                + ("Please gift-wrap it." if wrap else "No gift wrapping."))
        values = {"customer": who, "product": what, "quantity": qty, "city": city, "unit_price": cents / 100,
                  "gift_wrap": wrap}
        return text, values, {"customer": _STR, "product": _STR, "quantity": _INT, "city": _STR, "unit_price": _NUM,
                              "gift_wrap": _BOOL}
    written, iso = _day(rng)
    prio, phrase = rng.choice((("high", " It is urgent."), ("low", " There is no rush."), ("normal", "")))
    text = f"{who} orders {qty} x {what} at {cents / 100:.2f} EUR per unit, to arrive on {written}.{phrase}"
    values = {"customer": who, "quantity": qty, "delivery_date": iso, "total_cents": qty * cents, "priority": prio}
    return text, values, {"customer": _STR, "quantity": _INT, "delivery_date": _DATE, "total_cents": _INT,
                          "priority": {"type": "string", "enum": ["low", "normal", "high"]}}


def _ticket(rng: random.Random, level: int) -> tuple[str, dict[str, Any], dict[str, dict]]:
    first, last = rng.choice(_FIRST), rng.choice(_LAST)
    email = f"{first.lower()}.{last.lower()}@{rng.choice(('mail.example', 'post.example', 'web.example'))}"
    code, what = f"{rng.choice('ABEFK')}-{rng.randint(100, 9999)}", rng.choice(_PRODUCTS)
    if level == 1:
        text = f"From {email}: my {what} shows error {code} since this morning."
        return text, {"email": email, "product": what, "error_code": code}, {"email": _STR, "product": _STR,
                                                                             "error_code": _STR}
    if level == 2:
        days, warranty = rng.randint(1, 700), rng.random() < 0.5
        severity = rng.choice(("minor", "major", "critical"))
        text = (f"Ticket from {email}. The {what} I bought {days} days ago shows error {code}. "
                + ("It is under warranty. " if warranty else "The warranty has run out. ")
                + f"I would call this a {severity} problem.")
        values = {"email": email, "product": what, "error_code": code, "days_owned": days,
                  "under_warranty": warranty, "severity": severity}
        return text, values, {"email": _STR, "product": _STR, "error_code": _STR, "days_owned": _INT,
                              "under_warranty": _BOOL, "severity": {"type": "string",
                                                                    "enum": ["minor", "major", "critical"]}}
    written, iso = _day(rng)
    cents = _euros(rng, 199, 9999)
    channel, how = rng.choice((("phone", "I called your hotline"), ("email", "I am writing this e-mail"),
                               ("chat", "I am in your chat")))
    text = (f"{how} as {email}: since {written} my {what} shows {code}. "
            f"I want my {cents / 100:.2f} euros back.")
    values = {"email": email, "error_code": code, "opened": iso, "refund_cents": cents, "channel": channel}
    return text, values, {"email": _STR, "error_code": _STR, "opened": _DATE, "refund_cents": _INT,
                          "channel": {"type": "string", "enum": ["phone", "email", "chat"]}}


def _event(rng: random.Random, level: int) -> tuple[str, dict[str, Any], dict[str, dict]]:
    event, venue, city = rng.choice(_EVENTS), rng.choice(_VENUES), rng.choice(_CITIES)
    if level == 1:
        text = rng.choice((f"The {event} takes place at the {venue} in {city}.",
                           f"Come to the {event}: {venue}, {city}."))
        return text, {"event": event, "venue": venue, "city": city}, {"event": _STR, "venue": _STR, "city": _STR}
    cents = _euros(rng, 0, 6000)
    if level == 2:
        seats, sold_out = rng.randint(20, 900), rng.random() < 0.5
        text = (f"{event} at the {venue}, {city}: {seats} seats, tickets {cents / 100:.2f} euros. "
                + ("Sold out!" if sold_out else "Tickets still available."))
        values = {"event": event, "venue": venue, "city": city, "seats": seats, "ticket_price": cents / 100,
                  "sold_out": sold_out}
        return text, values, {"event": _STR, "venue": _STR, "city": _STR, "seats": _INT,
                              "ticket_price": _NUM, "sold_out": _BOOL}
    written, iso = _day(rng)
    hours, minutes = rng.randint(1, 4), rng.choice((0, 15, 30, 45))
    length = f"{hours} hour{'s' if hours > 1 else ''}" + (f" and {minutes} minutes" if minutes else "")
    text = f"The {event} at the {venue} on {written} lasts {length}; a ticket costs {cents / 100:.2f} EUR."
    values = {"event": event, "venue": venue, "date": iso, "duration_minutes": hours * 60 + minutes,
              "price_cents": cents}
    return text, values, {"event": _STR, "venue": _STR, "date": _DATE, "duration_minutes": _INT,
                          "price_cents": _INT}


_MAKERS = {"order": _order, "ticket": _ticket, "event": _event}


def _schema(props: dict[str, dict]) -> dict:
    return {"type": "object", "properties": props, "required": list(props), "additionalProperties": False}


def glossary(fields) -> str:
    """The field glossary of ``fields``: what each means and how to write it (no values)."""
    return "Field glossary.\n" + "\n".join(_GLOSSARY[f] for f in fields)


@register_task("short_json")
class ShortJSONTask(CatalogTask):
    """Extract fields from a short text into a JSON object (see the module docstring).

    Args:
        levels: a level or a list of levels from (1, 2, 3) (default ``[1]``).
        privileged: "solution" (the reference object, default), "documents" (the field glossary,
            not the answer) or "both" (glossary, then the object).
        seed, eval_fraction: see :class:`grpolab.tasks.catalog.CatalogTask` (``eval_fraction``
            defaults to 0.5: every level holds about 900 texts, so over 400 held out).
    """

    name = "short_json"

    def __init__(self, *, levels=(1,), privileged: str = "solution", seed: int = 0,
                 eval_fraction: float = 0.5) -> None:
        super().__init__(seed=seed, eval_fraction=eval_fraction)
        self.levels = check_levels("short_json", list(levels) if isinstance(levels, tuple) else levels, LEVELS)
        self.privileged = check_privileged("short_json", privileged, PRIVILEGED_CHOICES)

    def catalog(self) -> list[Spec]:
        out, seen = [], set()
        for level in self.levels:
            for kind in KINDS:
                rng = random.Random(f"grpolab:short_json:{kind}:{level}:v1")
                for _ in range(PER_KIND):
                    text, values, props = _MAKERS[kind](rng, level)
                    schema = _schema(props)
                    prompt = ("Extract the fields of the text into one JSON object that follows this JSON schema.\n"
                              f"Schema: {json.dumps(schema)}\nText: {text}\n"
                              "Answer with the JSON object only, in a ```json code block.")
                    if prompt not in seen:
                        seen.add(prompt)
                        out.append(Spec(prompt, kind, level, {"values": values, "schema": schema}))
        return out

    def make_item(self, spec: Spec) -> TaskItem:
        values, schema = spec.data["values"], spec.data["schema"]
        reference = json.loads(json.dumps(schema))
        for key, value in values.items():
            reference["properties"][key]["const"] = value
        solution = f"```json\n{json.dumps(values)}\n```"
        documents = glossary(values)
        privileged = {"solution": solution, "documents": documents,
                      "both": f"{documents}\n\nReference answer:\n{solution}"}[self.privileged]
        return TaskItem(
            prompt=spec.prompt,
            reference=json.dumps(reference),
            privileged=privileged,
            reward="json_schema",
            reward_options={"partial": True},
            demonstration=solution,
            meta={"difficulty": spec.level, "family": spec.family, "solution": solution, "documents": documents},
        )
