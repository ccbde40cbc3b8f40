// The dashboard: one event stream (/v1/internal/events), read with fetch() so that the key goes in
// the Authorization header (EventSource cannot send headers; a key in the URL would be logged).
// Everything the proxy sends is shown with textContent: no HTML is ever built from its data.
"use strict";

const KEY_STORAGE = "api_like_oai.dashboard.key";   // the tab's session only, never a URL
const RECONNECT_MS = 2000;
const view = { key: sessionStorage.getItem(KEY_STORAGE) || "", canAct: false, window: "minute",
               history: null, charts: {}, stream: null };

function $(id) { return document.getElementById(id); }

// An element with properties (text, class, type: never markup) and children (strings become text nodes).
function el(tag, properties, ...children) {
  const node = document.createElement(tag);
  Object.assign(node, properties || {});
  for (const child of children) {
    if (child !== null && child !== undefined) node.append(child instanceof Node ? child : String(child));
  }
  return node;
}

function authHeaders(extra) {
  return Object.assign(view.key ? { Authorization: "Bearer " + view.key } : {}, extra || {});
}

function setConnection(text, kind) {
  const node = $("connection");
  node.textContent = text;
  node.className = "connection " + (kind || "");
}

// --- the stream -----------------------------------------------------------------------------

async function connect() {
  if (view.stream) view.stream.abort();
  const controller = new AbortController();
  view.stream = controller;
  try {
    const response = await fetch("/v1/internal/events", { headers: authHeaders(), signal: controller.signal,
                                                           cache: "no-store" });
    if (response.status === 401 || response.status === 403) {
      setConnection(view.key ? "the key was refused" : "this proxy needs an API key", "down");
      return;   // waits for a key from the form
    }
    if (!response.ok) throw new Error("HTTP " + response.status);
    setConnection("live", "live");
    await readEvents(response.body, handleEvent);
    throw new Error("the stream ended");
  } catch (error) {
    if (controller.signal.aborted) return;
    setConnection("disconnected, retrying…", "down");
    setTimeout(() => { if (view.stream === controller) connect(); }, RECONNECT_MS);
  }
}

// Server-sent events from a byte stream: frames end with a blank line; "event:" and "data:" lines.
async function readEvents(body, onEvent) {
  const reader = body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buffer += value;
    let end;
    while ((end = buffer.indexOf("\n\n")) >= 0) {
      const frame = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      let event = "message", data = "";
      for (const line of frame.split("\n")) {
        if (line.startsWith("event: ")) event = line.slice(7);
        else if (line.startsWith("data: ")) data += line.slice(6);
      }
      if (data) onEvent(event, JSON.parse(data));
    }
  }
}

function handleEvent(event, payload) {
  if (event === "hello") {
    view.canAct = payload.can_act;
  } else if (event === "live") {
    showModels(payload.models, payload.memory);
    showUpstreams(payload.upstreams);
    showFleet(payload.fleet);
    showRequests(payload.requests);
    showBatches(payload.batches || []);
  } else if (event === "history") {
    view.history = payload;
    showCharts();
    showErrors(payload.errors);
  }
}

// --- actions (the admin key once one is configured) -----------------------------------------

async function act(path, body, what) {
  const result = $("action-result");
  result.textContent = what + "…";
  try {
    const response = await fetch(path, { method: "POST", headers: authHeaders({ "Content-Type": "application/json" }),
                                         body: JSON.stringify(body || {}) });
    const answer = await response.json().catch(() => ({}));
    result.textContent = response.ok ? what + ": done"
      : what + ": " + ((answer.error && answer.error.message) || "HTTP " + response.status);
  } catch (error) {
    result.textContent = what + ": " + error.message;
  }
}

function actionButton(label, onClick) {
  const button = el("button", { type: "button", textContent: label, disabled: !view.canAct,
                                title: view.canAct ? "" : "needs the admin key" });
  button.addEventListener("click", () => { button.disabled = true; onClick(); });
  return button;
}

// --- the tables -------------------------------------------------------------------------------

function fill(tableId, rows, emptyId) {
  $(tableId).tBodies[0].replaceChildren(...rows);
  if (emptyId) $(emptyId).hidden = rows.length > 0;
}

function number(value, digits) {
  return value === null || value === undefined ? "–" : Number(value).toFixed(digits === undefined ? 1 : digits);
}

function bar(fraction) {
  const inner = el("span");
  inner.style.width = Math.round(Math.min(Math.max(fraction, 0), 1) * 100) + "%";
  return el("span", { className: "bar" }, inner);
}

function showModels(models, memory) {
  $("memory").replaceChildren();
  if (memory) {
    $("memory").append("Memory of the models the proxy starts: " + memory.used_mib + " of " + memory.budget_mib + " MiB",
                       bar(memory.budget_mib ? memory.used_mib / memory.budget_mib : 0));
    if (memory.devices && memory.devices.length > 1) {   // a budget per device: each GPU and the CPU
      memory.devices.forEach((use) => $("memory").append(el("br"), use.device + ": " + use.used_mib + " of "
        + use.budget_mib + " MiB", bar(use.budget_mib ? use.used_mib / use.budget_mib : 0)));
    }
  }
  fill("models", models.map((model) => {
    const status = model.status + (model.stage && model.status === "loading" ? " (" + model.stage + ")" : "")
      + (model.error ? ": " + model.error : "");
    const actions = el("td");
    if (model.started) {
      const body = { model: model.name };
      actions.append(model.status === "loaded" || model.status === "loading"
        ? actionButton("Unload", () => act("/v1/internal/model/unload", body, "unload " + model.name))
        : actionButton("Load", () => act("/v1/internal/model/load", body, "load " + model.name)));
    }
    return el("tr", {}, el("td", {}, model.name), el("td", { className: "status-" + model.status }, status),
              el("td", {}, memoryText(model)), el("td", {}, draftText(model.draft)), actions);
  }));
}

function memoryText(model) {
  if (model.memory_mib === null) return "–";
  const devices = model.devices ? Object.entries(model.devices).filter(([, mib]) => mib > 0) : [];
  return model.memory_mib + " MiB" + (devices.length > 1 || (devices.length === 1 && devices[0][0] !== "cpu")
    ? " (" + devices.map(([device, mib]) => device + " " + mib).join(", ") + ")" : "");
}

function draftText(draft) {
  if (!draft) return "–";
  return draft.acceptance_rate === null ? "no drafts yet"
    : Math.round(draft.acceptance_rate * 100) + "% of " + draft.drafted_tokens + " accepted";
}

function showUpstreams(upstreams) {
  fill("upstreams", upstreams.map((upstream) => el("tr", {},
    el("td", {}, upstream.model), el("td", {}, upstream.url),
    el("td", { className: upstream.health === "ok" ? "health-ok" : "health-bad" }, upstream.health),
    el("td", {}, upstream.slots_busy + " / " + (upstream.slots_total === null ? "?" : upstream.slots_total)),
    el("td", {}, number(upstream.prompt_tps)), el("td", {}, number(upstream.generated_tps)),
    el("td", {}, upstream.cache_share === null || upstream.cache_share === undefined ? "–"
      : Math.round(upstream.cache_share * 100) + "%"))));
}

function showFleet(fleet) {
  $("fleet-section").hidden = !fleet;   // an instance without --fleet
  if (!fleet) return;
  $("fleet-error").textContent = fleet.error || "";
  fill("fleet", fleet.boxes.map((box) => el("tr", {},
    el("td", {}, box.box),
    el("td", {}, box.used_mib + " of " + box.budget_mib + " MiB ", bar(box.budget_mib ? box.used_mib / box.budget_mib : 0)),
    el("td", {}, String(box.in_flight)), el("td", {}, String(box.queued)),
    el("td", {}, box.models.map((model) => model.name + " (" + model.state + ")").join(", ")))));
}

function phaseText(request) {
  if (request.phase === "prefill") return "prefill " + number(request.prefill_percent) + "%";
  if (request.phase === "generating") {
    return "generating " + request.generated_tokens + " tokens"
      + (request.tokens_per_second ? " at " + number(request.tokens_per_second) + " tok/s" : "");
  }
  return request.phase;
}

function showRequests(requests) {
  fill("requests", requests.map((request) => {
    const stop = el("td");
    if (request.stoppable) {
      stop.append(actionButton("Stop", () => act("/v1/internal/requests/" + encodeURIComponent(request.request_id)
                                                 + "/stop", null, "stop " + request.request_id)));
    }
    const row = el("tr", {}, el("td", {}, request.request_id), el("td", {}, request.endpoint),
                   el("td", {}, request.model), el("td", {}, request.key || "–"),
                   el("td", { className: "phase phase-" + request.phase.replace(" ", "-") }, phaseText(request)),
                   el("td", {}, number(request.elapsed_seconds) + " s"), stop);
    row.dataset.requestId = request.request_id;
    row.dataset.phase = request.phase;
    return request.mcp ? [row, stepsRow(request.mcp, 7)] : [row];
  }).flat(), "requests-empty");
}

// The batches being run: lines done of all (a bar), failed, the rate since they began, the time left at it.
function showBatches(batches) {
  fill("batches", batches.map((batch) => {
    const done = batch.completed + batch.failed;
    const progress = el("td", {}, bar(batch.total ? done / batch.total : 0), " " + done + " / " + batch.total);
    const row = el("tr", {}, el("td", {}, batch.id), el("td", {}, batch.endpoint), el("td", {}, batch.key || "–"),
                   el("td", {}, batch.status), progress, el("td", {}, batch.failed),
                   el("td", {}, number(batch.lines_per_minute)),
                   el("td", {}, batch.eta_seconds === null ? "–" : number(batch.eta_seconds, 0) + " s"));
    row.dataset.batchId = batch.id;
    return row;
  }), "batches-empty");
}

// A request's detail: the MCP listings and calls the proxy ran for it (server, tool, duration, error),
// as a row under its own.
function stepsRow(steps, columns) {
  const items = steps.map((step) => el("li", { className: step.error ? "step step-error" : "step" },
    step.server + " · " + step.tool + " · " + number(step.seconds, 2) + " s"
    + (step.running ? " (running)" : "") + (step.error ? " · " + step.error : "")));
  return el("tr", { className: "steps" }, el("td", { colSpan: columns }, "MCP", el("ul", {}, ...items)));
}

function showErrors(errors) {
  fill("errors", errors.map((error) => {
    const row = el("tr", {},
      el("td", {}, new Date(error.time * 1000).toLocaleTimeString()), el("td", {}, error.status),
      el("td", {}, error.endpoint), el("td", {}, error.model), el("td", {}, error.key || "–"),
      el("td", { className: "reason" }, (error.code ? error.code + ": " : "") + error.reason));
    return error.mcp ? [row, stepsRow(error.mcp, 6)] : [row];
  }).flat(), "errors-empty");
}

// --- the charts (uPlot, vendored: ui/vendor/uplot) ---------------------------------------------

const COLORS = ["#2f5fd0", "#b3261e", "#1b7f3b", "#9a6700", "#7b3fb3", "#0b7d8c", "#c2410c", "#4d5566"];

function chartSeries(series) {
  const keys = Object.keys(series.keys).sort();
  return {
    requests: [["requests", series.requests], ["errors", series.errors]],
    tokens: [["prompt", series.prompt_tps], ["generated", series.generated_tps]],
    ttft: [["p50", series.ttft_p50], ["p95", series.ttft_p95]],
    keys: keys.length ? keys.map((key) => [key, series.keys[key]]) : [["(no keys)", series.requests.map(() => null)]],
  };
}

function drawChart(name, time, lines) {
  const container = $("chart-" + name);
  const labels = lines.map(([label]) => label).join("\u0000");
  const data = [time, ...lines.map(([, values]) => values)];
  let chart = view.charts[name];
  if (!chart || chart.labels !== labels) {
    if (chart) chart.plot.destroy();
    const options = {
      width: Math.max(container.clientWidth, 300), height: 170,
      series: [{}, ...lines.map(([label], index) => ({ label, stroke: COLORS[index % COLORS.length], width: 2,
                                                      points: { show: true, size: 4 } }))],
      axes: [{}, { size: 50 }],
    };
    container.replaceChildren();
    chart = view.charts[name] = { plot: new uPlot(options, data, container), labels };
  } else {
    chart.plot.setData(data);
  }
  // How many points hold a value above zero: what a test (or a reader of the page) can check.
  container.dataset.points = lines.reduce((sum, [, values]) => sum + values.filter((v) => v > 0).length, 0);
}

function showCharts() {
  if (!view.history || typeof uPlot === "undefined") return;
  const series = view.history[view.window];
  for (const [name, lines] of Object.entries(chartSeries(series))) drawChart(name, series.time, lines);
}

function chooseWindow(name) {
  view.window = name;
  $("window-minute").classList.toggle("active", name === "minute");
  $("window-hour").classList.toggle("active", name === "hour");
  showCharts();
}

// --- start ----------------------------------------------------------------------------------------

document.addEventListener("DOMContentLoaded", () => {
  $("key").value = view.key;
  $("key-form").addEventListener("submit", (event) => {
    event.preventDefault();
    view.key = $("key").value.trim();
    sessionStorage.setItem(KEY_STORAGE, view.key);
    connect();
  });
  $("forget-key").addEventListener("click", () => {
    view.key = "";
    $("key").value = "";
    sessionStorage.removeItem(KEY_STORAGE);
    connect();
  });
  $("window-minute").addEventListener("click", () => chooseWindow("minute"));
  $("window-hour").addEventListener("click", () => chooseWindow("hour"));
  connect();
});
