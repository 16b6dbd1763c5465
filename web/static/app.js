// Cadence demo page: one WebRTC call to the voice agent, its events shown as they come.
// Plain JavaScript, no build step. The protocol is described in docs/web.md.
"use strict";

const STAGE_LABELS = {
  endpoint: "End of turn",
  stt: "Speech to text",
  llm_first_emit: "LLM first text",
  tts_first_audio: "TTS first audio",
  transport: "Transport",
};
const STAGE_ANCHORS = {
  endpoint: ["user_speech_end", "endpoint"],
  stt: ["endpoint", "stt_final"],
  llm_first_emit: ["stt_final", "llm_first_emit"],
  tts_first_audio: ["llm_first_emit", "tts_first_audio"],
  transport: ["tts_first_audio", "audio_out_first"],
};
// A stage done before the caller began waiting on it was done ahead of time (speculation);
// what that means, in words. (A reply ready during the pause and held while the end of turn
// was decided is "End of turn" time: docs/trace-schema.md.)
const READY_EARLY = {
  stt: "the transcript was decoded during your pause, before the turn was declared over",
  llm_first_emit: "the reply's first words were generated from the transcript of your pause, before the final one",
  tts_first_audio: "the reply's first audio was synthesized during your pause, before the turn was declared over",
  transport: "the reply's first audio was ready before the turn was declared over",
};

// Who has the floor, as the page shows it: the phase, its announcement and a hint.
const PHASES = {
  idle: ["Microphone off", "Click Start talking and allow the microphone."],
  connecting: ["Connecting…", "Allow the microphone when the browser asks."],
  listening: ["Listening", "Go ahead — say something."],
  thinking: ["Thinking…", "Your turn is over; the reply is on its way."],
  speaking: ["Agent speaking", "Speak over it to cut in."],
};
const VAD_HINTS = { speech: "Hearing you…", pause: "Hearing you… (pause)" };

// What became of a turn (the server's outcome, docs/report.md), as its card says it.
const OUTCOMES = {
  answered: "Answered",
  interrupted: "You cut in",
  talked_over: "Talked over you",
  unanswered: "No reply",
  failed: "A stage failed",
};

// Page-side voice-to-voice: levels of the microphone and of the reply, sampled every 10 ms.
const LOUD_RMS = 0.01; // about −40 dBFS
const REPLY_QUIET_MS = 400; // the reply starts when it is loud after this much quiet
const METER_INTERVAL_MS = 10;
const AXIS_TICKS = 5; // about this many steps on the waterfall's time axis

const params = new URLSearchParams(location.search);
// Echo cancellation keeps the agent from hearing itself through loudspeakers; tests that play
// a recording as the microphone turn it off (?echo-cancellation=off), since it mutes the
// recording while the reply plays.
const processAudio = params.get("echo-cancellation") !== "off";
// A server with a shared token (server.auth_token_env) is opened as /?token=…; a page cannot
// set headers on a websocket, so the token goes on in the signaling URL (docs/security.md).
const signalingQuery = params.has("token")
  ? `?token=${encodeURIComponent(params.get("token"))}`
  : "";

const $ = (id) => document.getElementById(id);
const ui = {
  talk: $("talk"),
  status: $("status"),
  phase: $("phase"),
  phaseText: $("phase-text"),
  phaseHint: $("phase-hint"),
  scope: $("scope"),
  scopeText: $("scope-text"),
  examples: $("examples"),
  audio: $("agent-audio"),
  conversation: $("conversation"),
  partial: $("partial"),
  waterfall: $("waterfall"),
  legendStages: $("legend-stages"),
  legendBudget: $("legend-budget"),
  budget: $("budget"),
  download: $("download"),
  stats: {
    server: document.querySelector("#stats [data-source=server]"),
    page: document.querySelector("#stats [data-source=page]"),
  },
};

// What the page knows; read-only for tests and debugging as window.cadence.
const state = {
  sessionId: null,
  budget: null,
  stages: Object.keys(STAGE_LABELS),
  phase: "idle",
  vad: null, // what the voice detector last heard: speech, pause or endpoint
  openReply: null, // the committed reply not yet played out or cut off
  traces: [],
  cards: [], // the turns shown in the waterfall: {trace, outcome, answeredInTime, talkedOverByMs}
  axis: null, // the waterfall's time axis, shared by every card: {lo, hi, step}
  serverV2V: [],
  pageV2V: [],
  turns: new Map(), // turn index → {user, agent, pieces, committed}
  call: null,
};
window.cadence = state;

function setStatus(kind, text) {
  ui.status.dataset.state = kind;
  ui.status.textContent = text;
}

function setPhase(phase) {
  const [text, hint] = PHASES[phase];
  state.phase = phase;
  ui.phase.dataset.phase = phase;
  if (ui.phaseText.textContent !== text) ui.phaseText.textContent = text; // announced (aria-live)
  ui.phaseHint.textContent = (phase === "listening" && VAD_HINTS[state.vad]) || hint;
}

function fmtMs(ms) {
  return ms === null || ms === undefined ? "–" : `${Math.round(ms)} ms`;
}

// Linear interpolation between closest ranks (numpy's default).
function percentile(values, p) {
  if (!values.length) return null;
  const sorted = [...values].sort((a, b) => a - b);
  const rank = (p / 100) * (sorted.length - 1);
  const lo = Math.floor(rank);
  const hi = Math.ceil(rank);
  return sorted[lo] + (sorted[hi] - sorted[lo]) * (rank - lo);
}

function renderStatsRow(row, values) {
  row.querySelector(".p50").textContent = fmtMs(percentile(values, 50));
  row.querySelector(".p95").textContent = fmtMs(percentile(values, 95));
  row.querySelector(".count").textContent = String(values.length);
}

function renderStats() {
  renderStatsRow(ui.stats.server, state.serverV2V);
  renderStatsRow(ui.stats.page, state.pageV2V);
  const budget = state.budget ? fmtMs(state.budget.voice_to_voice) : "–";
  ui.budget.textContent = budget;
  ui.legendBudget.textContent = budget;
}

const stageLabel = (stage) => STAGE_LABELS[stage] ?? stage;

function listItems(texts) {
  return texts.map((text) => {
    const item = document.createElement("li");
    item.textContent = text;
    return item;
  });
}

function renderLegend() {
  const items = listItems(state.stages.map(stageLabel));
  items.forEach((item, i) => (item.dataset.stage = state.stages[i]));
  ui.legendStages.replaceChildren(...items);
}

function renderScope(scope, examples) {
  ui.scopeText.textContent = scope;
  ui.examples.replaceChildren(...listItems(examples.map((text) => `“${text}”`)));
  ui.scope.hidden = false;
}

// --- conversation --------------------------------------------------------------------------

function message(speaker, text) {
  const item = document.createElement("li");
  item.className = `message ${speaker}`;
  const who = document.createElement("span");
  who.className = "speaker";
  who.textContent = speaker === "user" ? "You" : "Agent";
  const said = document.createElement("span");
  said.className = "text";
  said.textContent = text;
  item.append(who, said);
  ui.conversation.append(item);
  return item;
}

function turn(index) {
  if (!state.turns.has(index)) state.turns.set(index, { pieces: [], committed: false });
  return state.turns.get(index);
}

// The reply `index` is over (played out, cut off or taken back): the floor is the caller's.
function closeReply(index) {
  if (state.openReply !== index) return;
  state.openReply = null;
  setPhase("listening");
}

function onTurn(event) {
  const t = turn(event.reply_index);
  switch (event.state) {
    case "committed":
      // Replies generated for other transcripts were dropped unheard.
      for (const [index, other] of state.turns) if (!other.committed && index !== event.reply_index) state.turns.delete(index);
      t.committed = true;
      t.user = message("user", event.user_text);
      t.agent = message("agent", t.pieces.join(" "));
      t.agent.dataset.state = "speaking";
      ui.partial.textContent = "";
      state.openReply = event.reply_index;
      if (state.phase === "listening") setPhase("thinking");
      break;
    case "withdrawn": // the caller went on: this turn continues in the next commit
      t.user?.remove();
      t.agent?.remove();
      state.turns.delete(event.reply_index);
      closeReply(event.reply_index);
      break;
    case "interrupted":
      if (t.agent) {
        t.agent.dataset.state = "interrupted";
        const heard = event.heard || "…";
        t.agent.querySelector(".text").textContent = `${heard} — (interrupted)`;
      }
      closeReply(event.reply_index);
      break;
    case "played":
      if (t.agent) t.agent.dataset.state = "done";
      closeReply(event.reply_index);
      break;
  }
}

function onAgentText(event) {
  const t = turn(event.reply_index);
  t.pieces.push(event.text);
  if (t.committed && t.agent) t.agent.querySelector(".text").textContent = t.pieces.join(" ");
}

// The voice detector: the caller speaking (or resuming) has the floor unless the agent is
// speaking (then only a barge-in, the server's `interrupted`, takes it); the end of their turn
// starts the wait for the reply.
function onVad(event) {
  state.vad = event.state;
  if (state.phase === "speaking") {
    if (event.state === "speech") ui.phaseHint.textContent = "Hearing you — keep talking to cut in.";
  } else {
    setPhase(event.state === "endpoint" ? "thinking" : "listening");
  }
}

// The reply's audio is loud in this page: the agent is heard speaking.
function onReplyLoud() {
  if (state.openReply !== null && state.phase !== "speaking") setPhase("speaking");
}

function onTranscript(event) {
  ui.partial.textContent = event.text;
  ui.partial.dataset.final = String(event.final);
}

// --- waterfall -----------------------------------------------------------------------------

function onTrace(event) {
  const trace = event.trace;
  state.traces.push(trace);
  ui.download.disabled = false;
  if (event.outcome === "withdrawn") return; // a false start, part of the next turn
  if (event.answered_in_time) state.serverV2V.push(trace.latencies_ms.voice_to_voice);
  state.cards.push({
    trace,
    outcome: event.outcome,
    answeredInTime: event.answered_in_time,
    talkedOverByMs: event.talked_over_by_ms,
  });
  renderWaterfall();
  renderStats();
}

// Each stage's span along the caller's wait, in ms from the end of speech (null where an
// anchor is missing): from the later of its start anchor and the end of the stages before it,
// as the server measures latencies_ms (docs/trace-schema.md). Audio ready during the pause and
// held while the end of turn was decided is the end of turn's time, not the transport's.
// `early`: how long before the caller began waiting on it the stage was done (speculation).
function spans(trace) {
  const events = trace.events;
  const origin = events.user_speech_end;
  let done = null;
  return state.stages.map((stage) => {
    const [from, to] = STAGE_ANCHORS[stage];
    const ms = trace.latencies_ms[stage];
    if (origin === undefined || !(from in events) || !(to in events)) {
      return { stage, start: null, end: null, ms, early: 0 };
    }
    const begin = done === null ? events[from] : Math.max(events[from], done);
    const end = done === null ? events[to] : Math.max(events[to], begin);
    const early = done === null ? 0 : Math.max(begin - events[to], 0);
    done = end;
    return { stage, start: begin - origin, end: end - origin, ms, early };
  });
}

// A round step (1, 2, 2.5 or 5 × 10^k ms) giving about AXIS_TICKS steps over `range`.
function niceStep(range) {
  const raw = range / AXIS_TICKS;
  const power = 10 ** Math.floor(Math.log10(raw));
  return [1, 2, 2.5, 5, 10].map((m) => m * power).find((step) => step >= raw);
}

// One axis for every card, so that a millisecond is as wide in each: it covers every anchor
// of every turn shown and the whole budget, from a tick at or before 0 to one past the end.
function sharedAxis() {
  const times = state.cards.flatMap((card) =>
    spans(card.trace).flatMap((s) => (s.start === null ? [] : [s.start, s.end])),
  );
  const lo = Math.min(0, ...times);
  const hi = Math.max(state.budget?.voice_to_voice ?? 0, ...times, 1);
  const step = niceStep(hi - lo);
  return { lo: Math.floor(lo / step) * step, hi: Math.ceil(hi / step) * step, step };
}

function renderWaterfall() {
  state.axis = sharedAxis();
  ui.waterfall.replaceChildren(...state.cards.map(waterfallFigure).reverse()); // newest first
}

// Where things go on the shared axis, in % of a track, and its ticks.
function axisScale({ lo, hi, step }) {
  return {
    ticks: Array.from({ length: Math.round((hi - lo) / step) + 1 }, (_, i) => lo + i * step),
    at: (ms) => ((ms - lo) / (hi - lo)) * 100,
    wide: (ms) => (ms / (hi - lo)) * 100,
  };
}

function span(className, leftPct) {
  const element = document.createElement("span");
  element.className = className;
  element.style.left = `${leftPct.toFixed(2)}%`;
  return element;
}

function row(labelText, trackChildren, valueContent) {
  const element = document.createElement("div");
  element.className = "row";
  const label = document.createElement("span");
  label.className = "label";
  label.textContent = labelText;
  const track = document.createElement("span");
  track.className = "track";
  track.append(...trackChildren);
  const value = document.createElement("span");
  value.className = "value";
  value.append(...valueContent);
  element.append(label, track, value);
  return element;
}

function axisRow(scale) {
  const labels = scale.ticks.map((ms) => {
    const tick = span("tick", scale.at(ms));
    tick.dataset.ms = String(ms);
    tick.textContent = String(ms);
    return tick;
  });
  const axis = row("ms after you stopped", labels, ["took / share"]);
  axis.classList.add("axis");
  axis.setAttribute("aria-hidden", "true");
  return axis;
}

// One stage's row: grid lines, its budget share (starting at `shareAt`), its bar, the budget
// line, and its figure against its share.
function stageRow(s, budget, shareAt, scale) {
  const share = budget[s.stage];
  const label = stageLabel(s.stage);
  const ahead = s.early > 0; // done before the caller waited on it: speculation
  const marks = scale.ticks.map((ms) => span(ms === 0 ? "grid zero" : "grid", scale.at(ms)));
  if (share) {
    const box = span("share", scale.at(shareAt));
    box.style.width = `${scale.wide(share).toFixed(2)}%`;
    marks.push(box);
  }
  if (s.start !== null) {
    const bar = span(ahead ? "bar ahead" : "bar", scale.at(Math.min(s.start, s.end)));
    bar.style.width = `max(2px, ${scale.wide(Math.abs(s.end - s.start)).toFixed(2)}%)`;
    marks.push(bar);
  }
  if (budget.voice_to_voice) marks.push(span("budget-line", scale.at(budget.voice_to_voice)));
  const took = ahead ? `ready ${fmtMs(s.early)} early` : fmtMs(s.ms);
  const value = [took];
  if (share) {
    const of = document.createElement("small");
    of.textContent = ` / ${Math.round(share)}`;
    value.push(of);
  }
  const line = row(label, marks, value);
  line.dataset.stage = s.stage;
  if (s.ms !== null && share && s.ms > share) line.querySelector(".value").classList.add("over");
  line.setAttribute("aria-label", `${label}: ${took}${share ? `, budget share ${fmtMs(share)}` : ""}`);
  return line;
}

function earlyNote(s) {
  const why = READY_EARLY[s.stage] ?? "it was done before the stage before it ended";
  return `${stageLabel(s.stage)} was ready ${fmtMs(s.early)} early: ${why}.`;
}

function waterfallFigure(card) {
  const budget = state.budget ?? {};
  const scale = axisScale(state.axis);
  const figure = document.createElement("figure");
  figure.className = "turn";
  figure.dataset.turn = String(card.trace.turn);
  figure.dataset.outcome = card.outcome;
  const plot = document.createElement("div");
  plot.className = "plot";
  plot.append(axisRow(scale));
  const early = [];
  let shareAt = 0; // stage shares laid end to end
  for (const s of spans(card.trace)) {
    plot.append(stageRow(s, budget, shareAt, scale));
    shareAt += budget[s.stage] ?? 0;
    if (s.early > 0) early.push(earlyNote(s));
  }
  figure.append(caption(card, budget), plot);
  const notes = [...outcomeNotes(card), ...early];
  if (notes.length) {
    const list = document.createElement("ul");
    list.className = "notes";
    list.append(...listItems(notes));
    figure.append(list);
  }
  return figure;
}

function caption(card, budget) {
  const { trace, outcome } = card;
  const element = document.createElement("figcaption");
  const title = document.createElement("span");
  title.className = "title";
  title.textContent = `Turn ${trace.turn + 1}`;
  const badge = document.createElement("span");
  badge.className = "outcome";
  badge.textContent = OUTCOMES[outcome] ?? outcome;
  element.append(title, " ", badge);
  if (card.answeredInTime) {
    const v2v = trace.latencies_ms.voice_to_voice;
    const figure = document.createElement("strong");
    figure.textContent = fmtMs(v2v);
    figure.className = budget.voice_to_voice && v2v > budget.voice_to_voice ? "over" : "within";
    const v2vText = document.createElement("span");
    v2vText.className = "v2v";
    v2vText.append(figure, " voice-to-voice");
    element.append(" ", v2vText);
  }
  const p = trace.annotations?.end_of_turn_p;
  if (typeof p === "number") {
    // Why the end of turn took what it took: how sure the model was that you had finished,
    // and the silence it chose to wait for that.
    const decided = document.createElement("span");
    decided.className = "end-of-turn";
    const waited = trace.annotations.end_of_turn_wait_ms;
    decided.textContent = `P(end of turn) ${p.toFixed(2)}, waited ${fmtMs(waited)}`;
    element.append(" ", decided);
  }
  if (trace.annotations?.transcript) {
    const said = document.createElement("q");
    said.textContent = trace.annotations.transcript;
    element.append(" ", said);
  }
  return element;
}

function outcomeNotes(card) {
  const annotations = card.trace.annotations ?? {};
  switch (card.outcome) {
    case "interrupted":
      return [`You cut the reply off; you had heard “${annotations.heard || "…"}”.`];
    case "talked_over":
      return [`The reply started ${fmtMs(card.talkedOverByMs)} before the end of your speech (as the voice detector placed it): the agent talked over you.`];
    case "unanswered":
      return ["No reply was heard: the call ended first."];
    case "failed":
      return ["A stage failed or ran out of time: a fallback phrase was played, or nothing."];
    default:
      return [];
  }
}

function downloadTraces() {
  const lines = state.traces.map((t) => JSON.stringify(t)).join("\n") + "\n";
  const link = document.createElement("a");
  link.href = URL.createObjectURL(new Blob([lines], { type: "application/x-ndjson" }));
  link.download = `cadence-${state.sessionId ?? "session"}-traces.jsonl`;
  document.body.append(link);
  link.click();
  link.remove();
  setTimeout(() => URL.revokeObjectURL(link.href), 1000);
}

// --- page-side voice-to-voice --------------------------------------------------------------

function rms(analyser, buffer) {
  analyser.getFloatTimeDomainData(buffer);
  let sum = 0;
  for (const x of buffer) sum += x * x;
  return Math.sqrt(sum / buffer.length);
}

// Watches both ends of the call: the last loud moment of the microphone before the reply's
// first loud moment is one page-side voice-to-voice measurement; a loud reply is the agent
// speaking.
function startMeters(call, micStream, replyStream) {
  const context = new AudioContext();
  const analyser = (stream) => {
    const node = context.createAnalyser();
    node.fftSize = 512;
    context.createMediaStreamSource(stream).connect(node);
    return node;
  };
  const mic = analyser(micStream);
  const reply = analyser(replyStream);
  const buffer = new Float32Array(512);
  let lastVoiceAt = null;
  let lastReplyAt = -Infinity;
  let measuredVoiceAt = null;
  call.meterTimer = setInterval(() => {
    const now = performance.now();
    if (rms(mic, buffer) > LOUD_RMS) lastVoiceAt = now;
    if (rms(reply, buffer) > LOUD_RMS) {
      const onset = now - lastReplyAt > REPLY_QUIET_MS;
      // One measure per utterance, and none while the caller is still talking (barge-in).
      if (onset && lastVoiceAt !== null && lastVoiceAt !== measuredVoiceAt && now - lastVoiceAt > 50) {
        state.pageV2V.push(now - lastVoiceAt);
        measuredVoiceAt = lastVoiceAt;
        renderStats();
      }
      lastReplyAt = now;
      onReplyLoud();
    }
  }, METER_INTERVAL_MS);
  call.audioContext = context;
}

// --- the call ------------------------------------------------------------------------------

function iceGatheringComplete(pc) {
  if (pc.iceGatheringState === "complete") return Promise.resolve();
  return new Promise((resolve) => {
    pc.addEventListener("icegatheringstatechange", () => {
      if (pc.iceGatheringState === "complete") resolve();
    });
  });
}

function onServerEvent(call, event) {
  switch (event.type) {
    case "hello":
      state.sessionId = event.session_id;
      state.budget = event.budget;
      state.stages = event.stages;
      renderLegend();
      renderStats();
      call.hello(event);
      break;
    case "answer":
      call.pc.setRemoteDescription({ type: "answer", sdp: event.sdp });
      break;
    case "vad":
      onVad(event);
      break;
    case "transcript":
      onTranscript(event);
      break;
    case "agent_text":
      onAgentText(event);
      break;
    case "turn":
      onTurn(event);
      break;
    case "trace":
      onTrace(event);
      break;
    case "error":
      call.error = event;
      // busy: the server is full; draining: it is shutting down, a restart will take calls.
      setStatus(["busy", "draining"].includes(event.code) ? "refused" : "error", event.message);
      break;
    case "hangup": // the agent ended the call; the socket closes next, and endCall follows
      call.hungUp = event;
      break;
  }
}

async function startCall() {
  const call = {
    pc: null,
    ws: null,
    mic: null,
    error: null,
    hungUp: null,
    meterTimer: null,
    audioContext: null,
  };
  state.call = call;
  ui.talk.textContent = "Hang up";
  setStatus("connecting", "Connecting…");
  setPhase("connecting");
  try {
    const scheme = location.protocol === "https:" ? "wss" : "ws";
    call.ws = new WebSocket(`${scheme}://${location.host}/ws${signalingQuery}`);
    const hello = new Promise((resolve, reject) => {
      call.hello = resolve;
      call.ws.addEventListener("close", () => reject(new Error("closed")));
    });
    call.ws.addEventListener("message", (m) => onServerEvent(call, JSON.parse(m.data)));
    call.ws.addEventListener("close", (e) => endCall(call, e));
    const greeting = await hello;

    call.mic = await navigator.mediaDevices.getUserMedia({
      audio: { echoCancellation: processAudio, noiseSuppression: processAudio, autoGainControl: processAudio },
    });
    // The server's STUN and TURN servers (server.ice_servers), with this call's credentials;
    // none by default, so that no server is contacted unless the deployment names one.
    const pc = new RTCPeerConnection({
      iceServers: greeting.ice_servers ?? [],
      iceTransportPolicy: greeting.ice_transport_policy ?? "all",
    });
    call.pc = pc;
    for (const track of call.mic.getAudioTracks()) pc.addTrack(track, call.mic);
    pc.addEventListener("track", (e) => {
      const stream = e.streams[0] ?? new MediaStream([e.track]);
      ui.audio.srcObject = stream;
      startMeters(call, call.mic, stream);
    });
    pc.addEventListener("connectionstatechange", () => {
      if (pc.connectionState === "connected") {
        setStatus("connected", "Connected");
        setPhase("listening");
      } else if (pc.connectionState === "failed") {
        setStatus("error", "The audio connection failed");
      }
    });
    await pc.setLocalDescription(await pc.createOffer());
    await iceGatheringComplete(pc); // no trickle ICE: the offer carries every candidate
    call.ws.send(JSON.stringify({ type: "offer", sdp: pc.localDescription.sdp }));
  } catch (error) {
    if (!call.error) setStatus("error", `Could not start the call: ${error.message}`);
    endCall(call);
  }
}

function endCall(call, closeEvent) {
  if (call.ended) return;
  call.ended = true;
  clearInterval(call.meterTimer);
  call.audioContext?.close();
  call.pc?.close();
  call.mic?.getTracks().forEach((t) => t.stop());
  if (call.ws && call.ws.readyState === WebSocket.OPEN) {
    call.ws.send(JSON.stringify({ type: "hangup" }));
    call.ws.close();
  }
  if (call.hungUp) {
    setStatus("ended", "The agent ended the call");
  } else if (!call.error) {
    const why = closeEvent && closeEvent.code !== 1000 && closeEvent.reason ? ` (${closeEvent.reason})` : "";
    setStatus("ended", `Call ended${why}`);
  }
  state.openReply = null;
  state.vad = null;
  setPhase("idle");
  ui.talk.textContent = "Start talking";
  if (state.call === call) state.call = null;
}

ui.talk.addEventListener("click", () => (state.call ? endCall(state.call) : startCall()));
ui.download.addEventListener("click", downloadTraces);
renderLegend();
// What the agent can talk about, before the visitor decides to call.
fetch("/page.json")
  .then((r) => (r.ok ? r.json() : Promise.reject(new Error(`HTTP ${r.status}`))))
  .then((page) => renderScope(page.scope, page.examples))
  .catch((err) => console.warn("no page.json:", err));
