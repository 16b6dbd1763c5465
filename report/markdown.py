"""``report.md``: the summary as a reader wants it, every figure taken from ``summary.json``
so the page and the file never disagree. It leads with what became of every turn — a reply
heard while the caller was still speaking, or never, is a failure before it is a latency —
then the latencies of the turns answered, then every turn in a table."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from cadence.pipeline.tracing import VOICE_TO_VOICE, TurnOutcome
from cadence.report.stages import LABELS, STAGE_NAMES
from cadence.report.summary import LatencyStats, ReportSummary, VariantSummary

_V2V = VOICE_TO_VOICE.name

MAX_TABLE_TURNS = 200
"""Rows of the per-turn table at most (evenly through the run); ``summary.json`` has all."""

OUTCOME_LABELS = {
    TurnOutcome.ANSWERED: "answered",
    TurnOutcome.INTERRUPTED: "answered, then interrupted by the caller",
    TurnOutcome.TALKED_OVER: "**talked over** (heard before the caller finished)",
    TurnOutcome.UNANSWERED: "**unanswered**",
    TurnOutcome.FAILED: "**failed** (a stage failed: fallback or nothing)",
    TurnOutcome.WITHDRAWN: "withdrawn (a false start; the caller went on)",
}

END_ANCHORS = {
    "audio_heard_first": "the first reply sound the caller heard (`audio_heard_first`; the "
    "rule is in docs/report.md)",
    "audio_out_first": "the first reply frame the server handed to its transport "
    "(`audio_out_first`): the caller did not measure these turns, so what it heard came later",
}


def render_markdown(summary: ReportSummary, plots: Mapping[str, str]) -> str:
    """The report page; ``plots`` maps each figure's file name to its caption."""
    sections = [
        _header(summary),
        _outcomes(summary),
        _voice_to_voice(summary),
        _stage_table(summary),
        _where_the_milliseconds_go(summary),
        _tools(summary),
        _transcription_and_speculation(summary),
    ]
    if summary.variants:
        sections.append(_variants_table(summary))
    sections.append(_per_turn(summary))
    sections.append(
        "## Figures\n\n" + "\n\n".join(f"![{caption}]({name})" for name, caption in plots.items())
    )
    return "\n\n".join(sections) + "\n"


def _header(s: ReportSummary) -> str:
    command = f"`{s.command}`" if s.command else "not recorded"
    config = "in `summary.json` (`config`)" if s.config is not None else "not recorded"
    runs = f"{s.turns} turns in {s.sessions} sessions"
    if s.concurrency is not None:
        runs += f", {s.concurrency} at a time"
    if s.variants:
        runs += f"; variant `{s.variant}` below, all {len(s.variants)} side by side at the end"
    return (
        f"# Latency report{f' — {s.variant}' if s.variants else ''}\n\n"
        f"Machine: {s.machine}.  \nCommand: {command}.  \nConfiguration: {config}.  \n"
        f"{runs}. Times in ms; ✓ = within the stage's budget share."
    )


def _outcomes(s: ReportSummary) -> str:
    rows = ["## What became of each turn", "", "| outcome | turns | share |", "|---|---:|---:|"]
    rows += [
        f"| {OUTCOME_LABELS[o]} | {n} | {_fraction(n / s.turns if s.turns else None)} |"
        for o, n in s.outcomes.items()
    ]
    rows.append(f"| **all** | **{s.turns}** | |")
    early = s.talked_over_by_ms
    notes = [
        f"Talked over: {s.outcomes[TurnOutcome.TALKED_OVER]} turns, the reply heard "
        f"p50 {_ms(early.p50)} / max {_ms(early.max)} ms before the caller's end of speech."
        if early.count
        else "Talked over: none — no reply was heard before the caller's end of speech.",
        f"Barge-ins (the caller cut a reply, whatever its outcome): {s.barge_ins}.",
    ]
    if s.within_budget_fraction is not None:
        within = round(s.within_budget_fraction * s.budget_turns)
        notes.append(
            f"**Within the {s.budget_ms[_V2V]:.0f} ms budget: {within} of {s.budget_turns} "
            f"caller turns ({s.within_budget_fraction:.0%})** — a talked-over, unanswered or "
            "failed turn is a miss; withdrawn turns are false starts of the turn after them."
        )
    return "\n".join(rows) + "\n\n" + "  \n".join(notes)


def _voice_to_voice(s: ReportSummary) -> str:
    v2v = s.voice_to_voice_ms
    title = "## Voice-to-voice of the turns answered\n\n"
    if not v2v.count:
        return title + "No turn was answered after the caller's end of speech."
    text = (
        f"End of speech → {END_ANCHORS[s.end_anchor]}, over the {v2v.count} turns answered "
        f"after the end of speech: **p50 {_ms(v2v.p50)}**, p95 {_ms(v2v.p95)}, "
        f"p99 {_ms(v2v.p99)}, max {_ms(v2v.max)} ms."
    )
    if s.end_anchor == "audio_heard_first":
        server, playback = s.server_voice_to_voice_ms, s.playback_ms
        text += (
            f"  \nOf which the server (to its first frame sent): p50 {_ms(server.p50)}, "
            f"p95 {_ms(server.p95)} ms; then playback to the caller's ear: "
            f"p50 {_ms(playback.p50)}, p95 {_ms(playback.p95)} ms."
        )
    decided = s.decision_to_sound_ms
    text += (
        f"  \nDecision → sound (the end-of-turn decision → the same anchor; near 0 when the "
        f"first audio was already waiting in playout): p50 {_ms(decided.p50)}, "
        f"p95 {_ms(decided.p95)}, max {_ms(decided.max)} ms."
    )
    return title + text


def _stage_table(s: ReportSummary) -> str:
    rows = [
        "## Stages against their budget shares",
        "",
        "| stage | share | p50 | p95 | p99 | turns |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for name in STAGE_NAMES:
        share = f"{s.budget_ms[name]:.0f}"
        if name == "llm_first_emit":
            share += f" (ceiling {s.budget_ms['llm_first_emit_ceiling']:.0f})"
        rows.append(f"| {LABELS[name]} | {share} | {_cells(s.stages_ms[name], s.budget_ms[name])}")
    rows.append(
        f"| **{LABELS[_V2V]}** | **{s.budget_ms[_V2V]:.0f}** "
        f"| {_cells(s.voice_to_voice_ms, s.budget_ms[_V2V])}"
    )
    if s.playback_ms.count:
        playback = s.playback_ms
        cells = " | ".join(_ms(v) for v in (playback.p50, playback.p95, playback.p99))
        rows.append(f"| playback (to the caller's ear) | – | {cells} | {playback.count} |")
    notes = [
        f"Over the turns answered after the end of speech. LLM first emit over its "
        f"{s.budget_ms['llm_first_emit_ceiling']:.0f} ms ceiling: {s.llm_over_ceiling} turns. "
        f"Endpoint before the true end of speech (the engine decided while the caller was "
        f"still speaking): {s.endpoints_before_speech_end} turns."
    ]
    if s.vad_end_error_ms.count:
        error = s.vad_end_error_ms
        notes.append(
            f"The VAD's end of speech against the true one (late > 0): p50 {_ms(error.p50)}, "
            f"p95 {_ms(error.p95)} ms over {error.count} turns."
        )
    return "\n".join(rows) + "\n\n" + "  \n".join(notes)


def _cells(stats: LatencyStats, share: float) -> str:
    marks = [_checked(v, share) for v in (stats.p50, stats.p95, stats.p99)]
    return " | ".join(marks) + f" | {stats.count} |"


def _checked(value: float | None, share: float) -> str:
    return "–" if value is None else f"{value:.0f} {'✓' if value <= share else '✗'}"


def _where_the_milliseconds_go(s: ReportSummary) -> str:
    medians = {n: v for n in STAGE_NAMES if (v := s.stages_ms[n].p50) is not None}
    title = "## Where the milliseconds go\n\n"
    if not medians:
        return title + "No stage was measured."
    whole = s.voice_to_voice_ms.p50
    if whole is None or whole <= 0:
        whole = sum(v for v in medians.values() if v > 0)
    largest = max(medians, key=lambda n: medians[n])
    budget = s.budget_ms[_V2V]
    text = [
        f"The median turn answers in {_ms(s.voice_to_voice_ms.p50)} ms, "
        f"{_percent(s.voice_to_voice_ms.p50, budget)} of the {budget:.0f} ms budget."
        if s.voice_to_voice_ms.p50 is not None
        else "No turn measured voice-to-voice.",
        f"The largest stage is {LABELS[largest]}: {_ms(medians[largest])} ms at the median, "
        f"{_percent(medians[largest], whole)} of the median turn and "
        f"{_percent(medians[largest], s.budget_ms[largest])} of its "
        f"{s.budget_ms[largest]:.0f} ms share.",
    ]
    over = [n for n, v in medians.items() if v > s.budget_ms[n]]
    text.append(
        "Over their share at the median: "
        + ", ".join(f"{LABELS[n]} (+{medians[n] - s.budget_ms[n]:.0f} ms)" for n in over)
        + "."
        if over
        else "Every stage is within its share at the median."
    )
    text += [
        f"{LABELS[n]} is negative at the median ({medians[n]:.0f} ms): it finished before the "
        "anchor it is measured from, its work hidden under the stage before."
        for n, v in medians.items()
        if v < 0
    ]
    return title + " ".join(text)


def _tools(s: ReportSummary) -> str:
    """Said even when no reply called a tool: a missing section would not tell "none" from
    "not measured"."""
    tools = s.tools
    title = "## Tools\n\n"
    if not tools.turns:
        return title + f"No tool calls: none of the {s.turns} turns called a tool."
    calls = sum(tools.calls.values())
    spent, share = tools.time_ms, tools.voice_to_voice_share
    lines = [
        f"{tools.turns} of {s.turns} turns called tools, {calls} calls in all.",
        "",
        "| outcome | calls |",
        "|---|---:|",
        *(f"| {outcome} | {n} |" for outcome, n in tools.calls.items()),
        f"| **all** | **{calls}** |",
        "",
        f"Tool time per turn (the first call's start → the last one's end; calls may overlap): "
        f"p50 {_ms(spent.p50)}, p95 {_ms(spent.p95)} ms over {spent.count} turns.  ",
        f"Its share of the turn's voice-to-voice: p50 {_fraction(share.p50)}, "
        f"p95 {_fraction(share.p95)} over the {share.count} of them answered after the end of "
        "speech."
        if share.count
        else "Its share of voice-to-voice: none of them was answered after the end of speech.",
    ]
    return title + "\n".join(lines)


def _transcription_and_speculation(s: ReportSummary) -> str:
    wer = (
        f"WER {s.wer:.3f} (corpus, normalised) over {s.wer_turns} turns."
        if s.wer is not None
        else "WER: no turn has both a `reference` and a `transcript`."
    )
    spec = s.speculation
    rate = f" (hit rate {spec.hit_rate:.0%})" if spec.hit_rate is not None else ""
    lines = [
        "## Transcription, speculation and discarded work",
        "",
        wer + "  ",
        f"Speculation: {spec.hits} hits, {spec.misses} misses{rate}.",
        "",
    ]
    if not s.discarded:
        return "\n".join([*lines, "No work was discarded."])
    lines += ["| discarded work | count | total ms |", "|---|---:|---:|"]
    lines += [f"| {kind} | {d.count} | {d.total_ms:.0f} |" for kind, d in s.discarded.items()]
    return "\n".join(lines)


def _variants_table(s: ReportSummary) -> str:
    names = [s.variant, *(n for n in s.variants if n != s.variant)]
    latencies: list[tuple[str, Callable[[VariantSummary], float | None]]] = [
        ("voice-to-voice p50", lambda v: v.voice_to_voice_ms.p50),
        ("voice-to-voice p95", lambda v: v.voice_to_voice_ms.p95),
        ("decision → sound p50", lambda v: v.decision_to_sound_ms.p50),
        ("decision → sound p95", lambda v: v.decision_to_sound_ms.p95),
        *((f"{LABELS[n]} p50", _stage_median(n)) for n in STAGE_NAMES),
    ]
    facts: list[tuple[str, Callable[[VariantSummary], str]]] = [
        ("within budget", lambda v: _fraction(v.within_budget_fraction)),
        ("LLM over its ceiling", lambda v: str(v.llm_over_ceiling)),
        ("endpoints before the end of speech", lambda v: str(v.endpoints_before_speech_end)),
        *((OUTCOME_LABELS[o].replace("**", ""), _count(o)) for o in TurnOutcome),
        ("barge-ins", lambda v: str(v.barge_ins)),
        ("WER", lambda v: "–" if v.wer is None else f"{v.wer:.3f}"),
        ("speculation hits / misses", lambda v: f"{v.speculation.hits} / {v.speculation.misses}"),
        ("turns", lambda v: str(v.turns)),
    ]
    rows = [
        f"## Variants side by side (against `{s.variant}`)",
        "",
        _row("variant", [f"`{n}`" for n in names]),
        "|---|" + "---:|" * len(names),
    ]
    for label, get in latencies:
        first, *others = [get(s.variants[n]) for n in names]
        cells = [_ms(first), *(_ms(v) + _against(v, first) for v in others)]
        rows.append(_row(label, cells))
    rows += [_row(label, [show(s.variants[n]) for n in names]) for label, show in facts]
    return "\n".join(rows)


def _stage_median(name: str) -> Callable[[VariantSummary], float | None]:
    return lambda v: v.stages_ms[name].p50


def _count(outcome: TurnOutcome) -> Callable[[VariantSummary], str]:
    return lambda v: str(v.outcomes[outcome])


def _per_turn(s: ReportSummary) -> str:
    rows = s.per_turn
    shown = rows
    if len(rows) > MAX_TABLE_TURNS:
        step = len(rows) / MAX_TABLE_TURNS
        shown = [rows[int(i * step)] for i in range(MAX_TABLE_TURNS)]
    lines = [
        "## Every turn",
        "",
        f"Voice-to-voice to `{s.end_anchor}`; stages in ms"
        + (f"; {len(shown)} of {len(rows)} turns, evenly spread" if shown is not rows else "")
        + ".",
        "",
        "| clip | session · turn | heard | outcome | v2v | decision → sound | "
        + " | ".join(LABELS[n] for n in STAGE_NAMES)
        + " | playback |",
        "|---|---|---|---|---:|---:|" + "---:|" * (len(STAGE_NAMES) + 1),
    ]
    for row in shown:
        stages = " | ".join(_ms(row.stages_ms[n]) for n in (*STAGE_NAMES, "playback"))
        heard = (row.transcript or "").replace("|", "\\|")
        lines.append(
            f"| {row.clip_id or '–'} | {row.session_id} · {row.turn} | {heard or '–'} "
            f"| {row.outcome.value} | {_ms(row.voice_to_voice_ms)} "
            f"| {_ms(row.decision_to_sound_ms)} | {stages} |"
        )
    return "\n".join(lines)


def _row(label: str, cells: list[str]) -> str:
    return f"| {label} | " + " | ".join(cells) + " |"


def _against(value: float | None, base: float | None) -> str:
    """`` (+292 ms, ×1.98)``: the difference from the base and, where a ratio means something
    (a base above zero), how many times the base this is."""
    if value is None or base is None:
        return ""
    ratio = f", ×{value / base:.2f}" if base > 0 else ""
    return f" ({value - base:+.0f} ms{ratio})"


def _ms(value: float | None) -> str:
    return "–" if value is None else f"{value:.0f}"


def _percent(part: float | None, whole: float) -> str:
    return "–" if part is None or whole <= 0 else f"{part / whole:.0%}"


def _fraction(value: float | None) -> str:
    return "–" if value is None else f"{value:.0%}"
