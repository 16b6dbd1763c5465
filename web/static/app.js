// Cadence demo page: one WebRTC call to the voice agent, its events shown as they come.
// Plain JavaScript, no build step. The protocol is described in docs/web.md.
"use strict";

const STAGE_LABELS = {
  endpoint: "Endpoint",
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

// Page-side voice-to-voice: levels of the microphone and of the reply, sampled every 10 ms.
const LOUD_RMS = 0.01; // about −40 dBFS
const REPLY_QUIET_MS = 400; // the reply starts when it is loud after this much quiet
const METER_INTERVAL_MS = 10;

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
  voice: $("voice"),
  voiceText: $("voice-text"),
  audio: $("agent-audio"),
  conversation: $("conversation"),
  partial: $("partial"),
  waterfall: $("waterfall"),
  legend: $("legend"),
  download: $("download"),
  stat: {
    serverP50: $("server-p50"),
    serverP95: $("server-p95"),
    pageP50: $("page-p50"),
    pageP95: $("page-p95"),
    budget: $("budget"),
  },
};

// What the page knows; read-only for tests and debugging as window.cadence.
const state = {
  sessionId: null,
  budget: null,
  stages: Object.keys(STAGE_LABELS),
  traces: [],
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

function setVoice(kind, text) {
  ui.voice.dataset.state = kind;
  ui.voiceText.textContent = text;
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

function renderStats() {
  const s = ui.stat;
  s.serverP50.textContent = fmtMs(percentile(state.serverV2V, 50));
  s.serverP95.textContent = fmtMs(percentile(state.serverV2V, 95));
  s.pageP50.textContent = fmtMs(percentile(state.pageV2V, 50));
  s.pageP95.textContent = fmtMs(percentile(state.pageV2V, 95));
  s.budget.textContent = state.budget ? fmtMs(state.budget.voice_to_voice) : "–";
}

function renderLegend() {
  ui.legend.replaceChildren(
    ...state.stages.map((stage) => {
      const item = document.createElement("li");
      item.dataset.stage = stage;
      item.textContent = STAGE_LABELS[stage] ?? stage;
      return item;
    }),
  );
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
      break;
    case "withdrawn": // the caller went on: this turn continues in the next commit
      t.user?.remove();
      t.agent?.remove();
      state.turns.delete(event.reply_index);
      break;
    case "interrupted":
      if (t.agent) {
        t.agent.dataset.state = "interrupted";
        const heard = event.heard || "…";
        t.agent.querySelector(".text").textContent = `${heard} — (interrupted)`;
      }
      break;
    case "played":
      if (t.agent) t.agent.dataset.state = "done";
      break;
  }
}

function onAgentText(event) {
  const t = turn(event.reply_index);
  t.pieces.push(event.text);
  if (t.committed && t.agent) t.agent.querySelector(".text").textContent = t.pieces.join(" ");
}

function onVad(event) {
  const labels = { speech: "You are speaking", pause: "Pause…", endpoint: "Turn over" };
  setVoice(event.state, labels[event.state] ?? event.state);
}

function onTranscript(event) {
  ui.partial.textContent = event.text;
  ui.partial.dataset.final = String(event.final);
}

// --- waterfall -----------------------------------------------------------------------------

function onTrace(trace) {
  state.traces.push(trace);
  ui.download.disabled = false;
  if (trace.annotations?.withdrawn) return; // a false start, part of the next turn
  const v2v = trace.latencies_ms.voice_to_voice;
  if (v2v !== null && v2v !== undefined) state.serverV2V.push(v2v);
  ui.waterfall.prepend(waterfallFigure(trace));
  renderStats();
}

function waterfallFigure(trace) {
  const events = trace.events;
  const origin = events.user_speech_end;
  const budget = state.budget ?? {};
  const v2v = trace.latencies_ms.voice_to_voice;
  const spans = state.stages.map((stage) => {
    const [from, to] = STAGE_ANCHORS[stage];
    const known = from in events && to in events;
    return {
      stage,
      start: known ? events[from] - origin : null,
      end: known ? events[to] - origin : null,
      ms: trace.latencies_ms[stage],
    };
  });
  // The axis covers every anchor and the whole budget.
  const times = spans.flatMap((s) => (s.start === null ? [] : [s.start, s.end]));
  const lo = Math.min(0, ...times);
  const hi = Math.max(budget.voice_to_voice ?? 0, v2v ?? 0, ...times) * 1.05 || 1;
  const pct = (ms) => `${(((ms - lo) / (hi - lo)) * 100).toFixed(2)}%`;

  const figure = document.createElement("figure");
  figure.className = "turn";
  figure.dataset.turn = String(trace.turn);
  figure.dataset.outcome = "interrupted" in events ? "interrupted" : "answered";
  const caption = document.createElement("figcaption");
  const over = v2v !== null && budget.voice_to_voice && v2v > budget.voice_to_voice;
  caption.innerHTML = `Turn ${trace.turn + 1} · voice-to-voice <strong></strong>`;
  caption.querySelector("strong").textContent = fmtMs(v2v);
  caption.querySelector("strong").className = over ? "over" : "within";
  caption.append(` (budget ${fmtMs(budget.voice_to_voice)})`);
  if (trace.annotations?.transcript) caption.append(` · “${trace.annotations.transcript}”`);
  figure.append(caption);

  let budgetAt = 0; // stage shares laid end to end
  for (const span of spans) {
    const share = budget[span.stage];
    const row = document.createElement("div");
    row.className = "row";
    row.dataset.stage = span.stage;
    const label = document.createElement("span");
    label.className = "label";
    label.textContent = STAGE_LABELS[span.stage] ?? span.stage;
    const track = document.createElement("span");
    track.className = "track";
    if (share) {
      const box = document.createElement("span");
      box.className = "share";
      box.style.left = pct(budgetAt);
      box.style.width = `${((share / (hi - lo)) * 100).toFixed(2)}%`;
      track.append(box);
      budgetAt += share;
    }
    if (span.start !== null) {
      const bar = document.createElement("span");
      bar.className = "bar";
      if (span.end < span.start) bar.classList.add("ahead"); // finished before it was needed
      bar.style.left = pct(Math.min(span.start, span.end));
      bar.style.width = `max(2px, ${((Math.abs(span.end - span.start) / (hi - lo)) * 100).toFixed(2)}%)`;
      track.append(bar);
    }
    if (budget.voice_to_voice) {
      const line = document.createElement("span");
      line.className = "budget-line";
      line.style.left = pct(budget.voice_to_voice);
      track.append(line);
    }
    const value = document.createElement("span");
    value.className = "value";
    value.textContent = share ? `${fmtMs(span.ms)} / ${fmtMs(share)}` : fmtMs(span.ms);
    if (span.ms !== null && share && span.ms > share) value.classList.add("over");
    row.setAttribute(
      "aria-label",
      `${label.textContent}: ${fmtMs(span.ms)}${share ? `, budget ${fmtMs(share)}` : ""}`,
    );
    row.append(label, track, value);
    figure.append(row);
  }
  return figure;
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
// first loud moment is one page-side voice-to-voice measurement.
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
      onTrace(event.trace);
      break;
    case "error":
      call.error = event;
      setStatus(event.code === "busy" ? "refused" : "error", event.message);
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
  try {
    const scheme = location.protocol === "https:" ? "wss" : "ws";
    call.ws = new WebSocket(`${scheme}://${location.host}/ws${signalingQuery}`);
    const hello = new Promise((resolve, reject) => {
      call.hello = resolve;
      call.ws.addEventListener("close", () => reject(new Error("closed")));
    });
    call.ws.addEventListener("message", (m) => onServerEvent(call, JSON.parse(m.data)));
    call.ws.addEventListener("close", (e) => endCall(call, e));
    await hello;

    call.mic = await navigator.mediaDevices.getUserMedia({
      audio: { echoCancellation: processAudio, noiseSuppression: processAudio, autoGainControl: processAudio },
    });
    const pc = new RTCPeerConnection({ iceServers: [] });
    call.pc = pc;
    for (const track of call.mic.getAudioTracks()) pc.addTrack(track, call.mic);
    pc.addEventListener("track", (e) => {
      const stream = e.streams[0] ?? new MediaStream([e.track]);
      ui.audio.srcObject = stream;
      startMeters(call, call.mic, stream);
    });
    pc.addEventListener("connectionstatechange", () => {
      if (pc.connectionState === "connected") {
        setStatus("connected", "Connected — speak now");
        setVoice("listening", "Listening");
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
  setVoice("idle", "Microphone off");
  ui.talk.textContent = "Start talking";
  if (state.call === call) state.call = null;
}

ui.talk.addEventListener("click", () => (state.call ? endCall(state.call) : startCall()));
ui.download.addEventListener("click", downloadTraces);
renderLegend();
