"""``cadence build-sgd-catalogue``: the offline SGD services' data, from the corpora.

For each method of the chosen services: its published schema (``schemas_{split}.json``: the
description, required and optional slots with defaults, result slots, slot descriptions and
categorical values) and every distinct row its calls returned in the corpora's dialogues
(``sgd_tools_{split}.jsonl``), in the order first seen. Written as gzipped JSON, the package
data ``cadence.pipeline.tools.sgd_services`` serves from. Only the training and development
splits are read: ``sgd_tools_test`` stays evaluation only.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

SPLITS = ("train", "dev")


def build_catalogue(data_dir: Path, services: Sequence[str], out: Path) -> dict[str, int]:
    """Write the catalogue of ``services``; returns the rows kept per method."""
    methods: dict[str, dict[str, Any]] = {}
    for split in SPLITS:
        for schema in json.loads((data_dir / f"schemas_{split}.json").read_text()):
            if schema["service_name"] in services:
                for intent in schema["intents"]:
                    key = f"{schema['service_name']}.{intent['name']}"
                    methods.setdefault(key, _method(schema, intent))
    missing = sorted(set(services) - {m["service"] for m in methods.values()})
    if missing:
        raise ValueError(f"no schema for {', '.join(missing)} in {data_dir}")
    rows: dict[str, list[dict[str, str]]] = {key: [] for key in methods}
    seen: set[str] = set()
    for split in SPLITS:
        with (data_dir / f"sgd_tools_{split}.jsonl").open(encoding="utf-8") as lines:
            for line in lines:
                for turn in json.loads(line)["turns"]:
                    call = turn.get("call")
                    key = f"{call['service']}.{call['method']}" if call else ""
                    for row in turn.get("results", []) if key in rows else []:
                        text = json.dumps([key, row], sort_keys=True)
                        if text not in seen:
                            seen.add(text)
                            rows[key].append(row)
    payload = {"methods": methods, "rows": rows}
    out.parent.mkdir(parents=True, exist_ok=True)
    data = json.dumps(payload, ensure_ascii=False, separators=(",", ":")).encode()
    out.write_bytes(gzip.compress(data, mtime=0))
    return {key: len(value) for key, value in rows.items()}


def training_services(data_dir: Path) -> list[str]:
    """Every service of the training split's schemas."""
    schemas = json.loads((data_dir / "schemas_train.json").read_text())
    return sorted(schema["service_name"] for schema in schemas)


def _method(schema: dict[str, Any], intent: dict[str, Any]) -> dict[str, Any]:
    slots = {slot["name"]: slot for slot in schema["slots"]}
    return {
        "service": schema["service_name"],
        "name": intent["name"],
        "description": intent["description"],
        "transactional": intent["is_transactional"],
        "required": intent["required_slots"],
        "optional": intent["optional_slots"],
        "result_slots": intent["result_slots"],
        "slot_descriptions": {name: slot["description"] for name, slot in slots.items()},
        "slot_values": {
            name: slot["possible_values"]
            for name, slot in slots.items()
            if slot["is_categorical"] and slot["possible_values"]
        },
    }
