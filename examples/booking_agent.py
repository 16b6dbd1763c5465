"""A restaurant booking agent that looks things up and books: three tools and the built-in
``end_call``, served on the browser demo, Twilio and AudioSocket, its model any
OpenAI-compatible service (Mercury 2, vLLM, SGLang, …). Run it as::

    export CADENCE_LLM_API_KEY=…    # the service's key
    python examples/booking_agent.py --base-url https://api.inceptionlabs.ai/v1 --model mercury-2
"""

import argparse
import asyncio
from typing import Annotated

from pydantic import BaseModel, Field

from cadence.pipeline.config import CadenceConfig
from cadence.pipeline.tools import tool
from cadence.web.server import serve_until_stopped

Time = Annotated[str, Field(pattern=r"^\d{2}:\d{2}$", description="24-hour time, e.g. 19:30")]
PartySize = Annotated[int, Field(ge=1, le=12, description="people at the table")]


class Restaurant(BaseModel):
    name: str
    cuisine: str
    area: str
    free_tables: dict[str, int]
    """Free tables tonight: time → the most people one of them seats."""


RESTAURANTS = [
    Restaurant(
        name="Ancient Szechuan",
        cuisine="chinese",
        area="Mission",
        free_tables={"18:00": 4, "19:30": 2, "21:00": 6},
    ),
    Restaurant(
        name="Trattoria Lucca",
        cuisine="italian",
        area="North Beach",
        free_tables={"17:30": 2, "20:00": 8},
    ),
    Restaurant(
        name="La Taqueria Verde",
        cuisine="mexican",
        area="Mission",
        free_tables={"19:00": 4, "19:30": 4},
    ),
]
BOOKINGS: list[dict[str, str | int]] = []


def _restaurant(name: str) -> Restaurant | None:
    return next((r for r in RESTAURANTS if r.name.lower() == name.strip().lower()), None)


@tool(read_only=True)
async def find_restaurants(cuisine: str) -> list[dict[str, str]]:
    """Restaurants that serve a cuisine tonight ("chinese", "italian", "mexican")."""
    return [
        {"name": r.name, "area": r.area}
        for r in RESTAURANTS
        if r.cuisine == cuisine.strip().lower()
    ]


@tool(read_only=True)
async def check_availability(
    restaurant: str, party_size: PartySize, time: Time
) -> dict[str, object]:
    """Whether a restaurant has a table for the party at that time tonight; if not, the times
    it does have one."""
    found = _restaurant(restaurant)
    if found is None:
        return {"error": f"no restaurant named {restaurant}"}
    fits = [t for t, seats in sorted(found.free_tables.items()) if seats >= party_size]
    return {"restaurant": found.name, "available": time in fits, "other_times": fits}


@tool
async def book_table(
    restaurant: str, party_size: PartySize, time: Time, name: str
) -> dict[str, object]:
    """Book a table, once the caller has confirmed the restaurant, time, party size and the
    name for the booking."""
    found = _restaurant(restaurant)
    if found is None or found.free_tables.get(time, 0) < party_size:
        return {"booked": False, "reason": "that table is no longer free"}
    del found.free_tables[time]
    booking: dict[str, str | int] = {
        "restaurant": found.name,
        "party_size": party_size,
        "time": time,
        "name": name,
        "reference": f"R{len(BOOKINGS) + 1:04d}",
    }
    BOOKINGS.append(booking)
    return {"booked": True, **booking}


TOOLS = [find_restaurants, check_availability, book_table]

SYSTEM_PROMPT = (
    "You are the phone host of a restaurant booking line. You find restaurants, check free "
    "tables and book them with the tools; never make up a restaurant, a time or a booking. "
    "Answer in one or two short spoken sentences, without lists or markdown. Before a tool "
    "call, say a few words such as 'Let me check.' Confirm the details before booking. When "
    "the caller is done, say goodbye and call end_call."
)


def configuration(base_url: str, model: str) -> CadenceConfig:
    """The default configuration with the agent's model on the service at ``base_url``."""
    openai = {"base_url": base_url, "model": model, "system_prompt": SYSTEM_PROMPT}
    return CadenceConfig.model_validate(
        {"models": {"llm": {"backend": "openai", "openai": openai}}}
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base-url", required=True, help="the service's API root (…/v1)")
    parser.add_argument("--model", required=True, help="the model's name at the service")
    args = parser.parse_args()
    ready = lambda url: print(f"Booking agent at {url}  (Ctrl-C stops it)")  # noqa: E731
    asyncio.run(serve_until_stopped(configuration(args.base_url, args.model), ready, TOOLS))


if __name__ == "__main__":
    main()
