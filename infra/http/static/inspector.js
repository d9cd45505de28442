// The Grimoire memory inspector: vanilla JavaScript over the HTTP API, no build
// step, nothing from another origin. Every value an agent stored reaches the page
// as text (textContent, SVG text nodes): never as HTML.
"use strict";

(() => {
  const KEY_STORE = "grimoire.inspector.apiKey";
  const AGENT_STORE = "grimoire.inspector.agent";
  const SVG_NS = "http://www.w3.org/2000/svg";
  const STATS_EVERY_MS = 15000;
  const MAX_SAMPLES = 240; // an hour at one sample per 15 s
  const MAX_EPISODES = 4; // episodes shown for one memory
  const GRAPH_SIZE = 640; // the SVG's viewBox side
  const TIME_FIELDS = new Set([
    "ts", "valid_from", "last_accessed", "last_seen", "recorded_at", "retracted_at",
    "watermark_ms", "first_ts", "last_ts",
  ]);
  const FLAGS = ["pinned", "quarantined", "archived", "deleted", "retracted", "off_topic", "locked"];

  const state = {
    agent: "",
    memoryId: "",
    view: "search",
    samples: new Map(), // agent -> [{t, values: {name: number}}], taken while the page is open
    statsTimer: 0,
    searchTicket: 0,
    memoryTicket: 0,
  };

  const $ = (id) => document.getElementById(id);

  // ---- DOM helpers: attributes and text only -----------------------------------

  function build(node, attrs, children) {
    for (const [name, value] of Object.entries(attrs || {})) {
      if (value === undefined || value === null || value === false) continue;
      node.setAttribute(name, value === true ? "" : String(value));
    }
    for (const child of children) {
      if (child === undefined || child === null || child === false) continue;
      node.append(child instanceof Node ? child : document.createTextNode(String(child)));
    }
    return node;
  }

  const el = (tag, attrs, ...children) => build(document.createElement(tag), attrs, children);
  const svgEl = (tag, attrs, ...children) =>
    build(document.createElementNS(SVG_NS, tag), attrs, children);

  function clip(text, length) {
    const value = String(text ?? "");
    return value.length > length ? value.slice(0, length - 1) + "…" : value;
  }

  function formatNumber(value) {
    if (typeof value !== "number" || !Number.isFinite(value)) return String(value ?? "–");
    return Number.isInteger(value) ? String(value) : value.toFixed(4).replace(/0+$/, "").replace(/\.$/, "");
  }

  function formatTime(ms) {
    if (typeof ms !== "number" || !Number.isFinite(ms) || ms <= 0) return String(ms ?? "–");
    return new Date(ms).toISOString().replace("T", " ").replace(/\.\d+Z$/, "Z");
  }

  function formatValue(name, value) {
    if (value === null || value === undefined) return "–";
    if (TIME_FIELDS.has(name) && typeof value === "number") return `${formatTime(value)} (${value})`;
    if (Array.isArray(value)) return value.map((v) => (typeof v === "object" ? JSON.stringify(v) : String(v))).join(", ");
    if (typeof value === "object") return JSON.stringify(value);
    if (typeof value === "number") return formatNumber(value);
    return String(value);
  }

  // An agent id or an episode id may hold `/`: each segment is encoded, the
  // slashes stay (the routes match the agent segment greedily).
  const pathOf = (id) => String(id).split("/").map(encodeURIComponent).join("/");
  const agentPath = (suffix) => "/v1/agents/" + pathOf(state.agent) + suffix;

  // A clade copy's original: the route's `origin`, else read from the copy's source
  // event id, `clade:<agent>/<memory id>` (the agent id may hold `/`, a memory id not).
  const CLADE_SOURCE = "clade:";
  function cladeOrigin(memory) {
    if (!memory || memory.provenance !== "clade") return null;
    const given = memory.origin;
    if (given && given.agent_id && given.memory_id) return given;
    const source = String(memory.source_event_id || "");
    if (!source.startsWith(CLADE_SOURCE)) return null;
    const rest = source.slice(CLADE_SOURCE.length);
    const cut = rest.lastIndexOf("/");
    if (cut <= 0 || cut === rest.length - 1) return null;
    return { agent_id: rest.slice(0, cut), memory_id: rest.slice(cut + 1) };
  }

  // ---- the API -------------------------------------------------------------------

  class ApiFailure extends Error {
    constructor(status, code, detail) {
      super(`${status} ${code}: ${detail}`);
      this.status = status;
      this.code = code;
      this.detail = detail;
    }
  }

  async function api(path, { method = "GET", body, accept = "application/json" } = {}) {
    const headers = { Accept: accept };
    const key = sessionStorage.getItem(KEY_STORE);
    if (key) headers.Authorization = "Bearer " + key;
    if (body !== undefined) headers["Content-Type"] = "application/json";
    let answer;
    try {
      answer = await fetch(path, {
        method,
        headers,
        body: body === undefined ? undefined : JSON.stringify(body),
        cache: "no-store",
      });
    } catch (failure) {
      throw new ApiFailure(0, "network", `the API did not answer (${failure.message})`);
    }
    const type = answer.headers.get("content-type") || "";
    if (!answer.ok) {
      let code = "http_" + answer.status;
      let detail = answer.statusText;
      if (type.includes("json")) {
        try {
          const refused = await answer.json();
          code = refused.error || code;
          detail = refused.detail || detail;
        } catch (_) {
          // the status says enough
        }
      }
      throw new ApiFailure(answer.status, code, detail);
    }
    return type.includes("json") ? answer.json() : answer.text();
  }

  function say(text, kind = "info") {
    const message = $("message");
    message.textContent = text;
    message.className = "message " + kind;
    message.dataset.kind = kind;
  }

  function explain(failure, what) {
    if (!(failure instanceof ApiFailure)) return `${what}: ${failure}`;
    if (failure.status === 401) return `${what}: the API wants a valid key (${failure.detail}).`;
    if (failure.status === 403) return `${what}: this key does not reach ${state.agent} (${failure.detail}).`;
    return `${what}: ${failure.code}: ${failure.detail}`;
  }

  // ---- key and agent -------------------------------------------------------------

  function readHash() {
    const found = new URLSearchParams(location.hash.slice(1));
    return { agent: found.get("agent") || "", memory: found.get("memory") || "" };
  }

  function writeHash() {
    const params = new URLSearchParams();
    if (state.agent) params.set("agent", state.agent);
    if (state.memoryId) params.set("memory", state.memoryId);
    history.replaceState(null, "", "#" + params.toString());
  }

  async function loadAgents() {
    const select = $("agent-select");
    try {
      const { agents } = await api("/v1/agents");
      const first = el("option", { value: "" }, agents.length ? "(pick an agent)" : "(no agents yet)");
      select.replaceChildren(first, ...agents.map((agent) => el("option", { value: agent }, agent)));
      select.disabled = agents.length === 0;
      say(`${agents.length} agent(s) visible with this key.`);
      const wanted = state.agent || readHash().agent || sessionStorage.getItem(AGENT_STORE) || "";
      if (wanted && agents.includes(wanted)) {
        select.value = wanted;
        pickAgent(wanted, readHash().memory);
      } else if (state.agent) {
        pickAgent(""); // the new key does not reach the agent on show
      }
    } catch (failure) {
      select.replaceChildren(el("option", { value: "" }, "(no agents: see the message above)"));
      select.disabled = true;
      say(explain(failure, "Listing agents"), "error");
    }
  }

  function pickAgent(agent, memoryId = "") {
    const changed = agent !== state.agent;
    state.agent = agent;
    sessionStorage.setItem(AGENT_STORE, agent);
    document.querySelector("[data-testid=search-button]").disabled = !agent;
    if (changed) {
      $("results").replaceChildren();
      $("search-summary").textContent = "";
      $("memory").hidden = true;
      state.memoryId = "";
      $("playbook").hidden = true;
      $("playbook-empty").hidden = true;
    }
    writeHash();
    restartSampling();
    if (memoryId) openMemory(memoryId);
    if (state.view === "playbook") loadPlaybook();
  }

  // ---- search with the explain breakdown ----------------------------------------

  async function search(event) {
    event.preventDefault();
    const query = $("search-query").value.trim();
    if (!query || !state.agent) return;
    const k = Math.min(100, Math.max(1, parseInt($("search-k").value, 10) || 10));
    const body = { query, k, explain: true };
    const mode = $("search-mode").value;
    if (mode) body.mode = mode;
    const ticket = ++state.searchTicket;
    $("search-summary").textContent = "Searching…";
    try {
      const result = await api(agentPath("/search"), { method: "POST", body });
      if (ticket === state.searchTicket) renderResults(result);
    } catch (failure) {
      if (ticket !== state.searchTicket) return;
      $("search-summary").textContent = "";
      $("results").replaceChildren();
      say(explain(failure, "Search"), "error");
    }
  }

  function renderResults(result) {
    const items = result.items || [];
    const timings = result.timings_ms || {};
    const budget = result.budget || {};
    const parts = [`${items.length} item(s)`];
    if (result.mode) parts.push(`mode ${result.mode}`);
    if (typeof timings.total === "number") parts.push(`${formatNumber(timings.total)} ms`);
    if (budget.tokens_used !== undefined) parts.push(`${budget.tokens_used}/${budget.token_budget} tokens`);
    if (result.watermark) parts.push(`watermark ${formatTime(result.watermark)}`);
    $("search-summary").textContent = parts.join(" · ");
    $("results").replaceChildren(...items.map((item, rank) => resultItem(item, rank + 1)));
    if (!items.length) say("Nothing matched: try other words, or another mode.");
    else say(`Search answered with ${items.length} item(s); open one to see it whole.`);
  }

  function resultItem(item, rank) {
    const open = el(
      "button",
      { type: "button", class: "gist", "data-testid": "result-open", title: "Open this memory" },
      item.gist || "(no gist)",
    );
    open.addEventListener("click", () => openMemory(item.id));
    const lanes = el(
      "span",
      { class: "lanes", "data-testid": "result-lanes" },
      ...(item.lanes || []).map((lane) => el("span", { class: "badge lane" }, lane)),
    );
    const reasons = (item.reasons || []).length
      ? el("p", { class: "reasons", "data-testid": "result-reasons" }, "why: ", (item.reasons || []).join(", "))
      : null;
    const scores = Object.entries(item.scores || {});
    const breakdown = scores.length
      ? el(
          "table",
          { class: "explain", "data-testid": "result-explain" },
          ...scores.map(([factor, value]) =>
            el(
              "tr",
              { "data-testid": "explain-factor", "data-factor": factor },
              el("th", {}, factor),
              el("td", {}, formatNumber(value)),
              // A bar only for factors on [0, 1] (ranks and raw sums are not).
              el("td", {}, value >= 0 && value <= 1 ? el("meter", { min: 0, max: 1, value }) : null),
            ),
          ),
        )
      : el("p", { class: "hint", "data-testid": "result-explain" }, "(no explain breakdown in this answer)");
    return el(
      "li",
      { class: "result", "data-testid": "result-item", "data-memory-id": item.id },
      el(
        "p",
        { class: "result-head" },
        el("span", { class: "rank" }, `#${rank}`),
        el("span", { class: "score", "data-testid": "result-score" }, formatNumber(item.score)),
        el("span", { class: "badge" }, item.kind),
        el("span", { class: "badge" }, item.layer),
        item.origin ? el("span", { class: "badge shared", "data-testid": "result-shared" }, `shared by ${item.origin.agent_id}`) : null,
        el("span", { class: "when" }, formatTime(item.ts)),
        lanes,
      ),
      open,
      reasons,
      el("details", { class: "why" }, el("summary", {}, "explain"), breakdown),
    );
  }

  // ---- one memory: text, fields, graph, episode ----------------------------------

  async function openMemory(memoryId) {
    if (!state.agent) return;
    const ticket = ++state.memoryTicket;
    state.memoryId = memoryId;
    writeHash();
    for (const item of document.querySelectorAll("[data-testid=result-item]")) {
      item.classList.toggle("selected", item.dataset.memoryId === memoryId);
    }
    $("memory").hidden = false;
    $("memory-id").textContent = memoryId;
    $("memory-text").textContent = "Loading…";
    const memoryPath = agentPath("/memories/" + encodeURIComponent(memoryId));
    const [detail, graph] = await Promise.allSettled([
      api(memoryPath),
      api(memoryPath + "/graph?depth=1&per_key=8&max_nodes=120"),
    ]);
    if (ticket !== state.memoryTicket) return;
    if (detail.status === "rejected") {
      $("memory-text").textContent = "";
      $("memory-badges").replaceChildren();
      renderOrigin(null);
      $("memory-fields").replaceChildren();
      $("graph").replaceChildren();
      $("graph-summary").textContent = "";
      $("episode").replaceChildren();
      say(explain(detail.reason, `Opening ${memoryId}`), "error");
      return;
    }
    renderMemory(detail.value);
    if (graph.status === "fulfilled") drawGraph(graph.value, memoryId);
    else {
      $("graph").replaceChildren();
      $("graph-summary").textContent = explain(graph.reason, "The neighbourhood");
    }
    say(`Opened memory ${memoryId}.`);
    await loadEpisodes(detail.value, ticket);
  }

  function renderMemory(memory) {
    $("memory-text").textContent = memory.text ?? "(no text stored)";
    const badges = [memory.kind, memory.layer, ...FLAGS.filter((flag) => memory[flag] === true)];
    const numbers = ["quality", "importance", "confidence", "strength"]
      .filter((name) => typeof memory[name] === "number")
      .map((name) => `${name} ${formatNumber(memory[name])}`);
    $("memory-badges").replaceChildren(
      ...badges.filter(Boolean).map((badge) => el("span", { class: "badge" }, badge)),
      ...numbers.map((text) => el("span", { class: "badge number" }, text)),
      el("span", { class: "when" }, formatTime(memory.ts)),
    );
    const rows = Object.entries(memory)
      .filter(([name]) => name !== "text")
      .map(([name, value]) =>
        el("tr", { "data-field": name }, el("th", {}, name), el("td", {}, formatValue(name, value))),
      );
    $("memory-fields").replaceChildren(...rows);
    renderOrigin(cladeOrigin(memory));
  }

  // "shared by <agent> (memory <id>)" for a clade copy, with a way to the original
  // when this key reaches its agent (it is then in the agent list).
  function renderOrigin(origin) {
    const box = $("memory-origin");
    if (!origin) {
      box.hidden = true;
      box.replaceChildren();
      return;
    }
    const reachable = [...$("agent-select").options].some((option) => option.value === origin.agent_id);
    const open = reachable
      ? el("button", { type: "button", "data-testid": "origin-open", title: "Open the original" }, "open the original")
      : null;
    if (open) {
      open.addEventListener("click", () => {
        $("agent-select").value = origin.agent_id;
        pickAgent(origin.agent_id, origin.memory_id);
      });
    }
    box.replaceChildren(...[`shared by ${origin.agent_id} (memory ${origin.memory_id})`, open].filter(Boolean));
    box.hidden = false;
  }

  // A deterministic layout: the memory in the middle, its nexus keys evenly on a
  // ring (sorted, so the same neighbourhood always draws the same), and every
  // other memory outside the first of its keys in ring order, fanned out within
  // that key's slice on two alternating radii so neighbours' labels part.
  function layoutGraph(nodes, edges, centerId, size = GRAPH_SIZE) {
    const middle = size / 2;
    const inner = size * 0.28;
    const outer = size * 0.44;
    const spread = size * 0.07;
    const at = (radius, angle) => ({
      x: Math.round((middle + radius * Math.cos(angle)) * 10) / 10,
      y: Math.round((middle + radius * Math.sin(angle)) * 10) / 10,
      angle,
    });
    const links = new Map();
    for (const { source, target } of edges) {
      if (!links.has(source)) links.set(source, new Set());
      if (!links.has(target)) links.set(target, new Set());
      links.get(source).add(target);
      links.get(target).add(source);
    }
    const positions = new Map([[centerId, { x: middle, y: middle, angle: 0 }]]);
    const keys = nodes.filter((node) => node.type === "key").map((node) => node.id).sort();
    const slice = (2 * Math.PI) / Math.max(keys.length, 1);
    const keyAngle = new Map();
    keys.forEach((key, index) => {
      const angle = -Math.PI / 2 + index * slice;
      keyAngle.set(key, angle);
      positions.set(key, at(inner, angle));
    });
    const groups = new Map();
    const others = nodes
      .filter((node) => node.type !== "key" && node.id !== centerId)
      .map((node) => node.id)
      .sort();
    for (const memory of others) {
      const anchor = [...(links.get(memory) || [])].filter((key) => keyAngle.has(key)).sort()[0] ?? "";
      if (!groups.has(anchor)) groups.set(anchor, []);
      groups.get(anchor).push(memory);
    }
    for (const [anchor, members] of groups) {
      const base = anchor ? keyAngle.get(anchor) : Math.PI / 2;
      members.forEach((memory, index) => {
        const offset = members.length === 1 ? 0 : (index / (members.length - 1) - 0.5) * slice * 0.8;
        positions.set(memory, at(outer - (index % 2) * spread, base + offset));
      });
    }
    return positions;
  }

  function drawGraph(graph, centerId) {
    const nodes = graph.nodes || [];
    const edges = graph.edges || [];
    const positions = layoutGraph(nodes, edges, centerId);
    const canvas = $("graph");
    const lines = edges
      .filter((edge) => positions.has(edge.source) && positions.has(edge.target))
      .map((edge) => {
        const a = positions.get(edge.source);
        const b = positions.get(edge.target);
        return svgEl("line", {
          class: "edge",
          "data-testid": "graph-edge",
          x1: a.x, y1: a.y, x2: b.x, y2: b.y,
        });
      });
    const drawn = nodes.filter((node) => positions.has(node.id)).map((node) => graphNode(node, positions.get(node.id), centerId));
    canvas.replaceChildren(svgEl("g", { class: "edges" }, ...lines), svgEl("g", { class: "nodes" }, ...drawn));
    const memories = nodes.filter((node) => node.type !== "key").length;
    const keys = nodes.length - memories;
    $("graph-summary").textContent =
      `${memories} memor${memories === 1 ? "y" : "ies"}, ${keys} key(s), ${edges.length} edge(s)` +
      (graph.truncated ? " (truncated: more neighbours than shown)" : "");
  }

  function graphNode(node, position, centerId) {
    const isKey = node.type === "key";
    const isCenter = node.id === centerId;
    const classes = ["node", isKey ? "key" : "memory"];
    if (isCenter) classes.push("center");
    if (node.status && node.status !== "live") classes.push("status-" + node.status);
    const shape = isKey
      ? svgEl("rect", { x: position.x - 7, y: position.y - 7, width: 14, height: 14, rx: 3 })
      : svgEl("circle", { cx: position.x, cy: position.y, r: isCenter ? 14 : 9 });
    // Labels lean away from the middle; the middle's goes underneath.
    const right = Math.cos(position.angle) >= 0;
    const label = isCenter
      ? svgEl("text", { x: position.x, y: position.y + 30, "text-anchor": "middle" }, clip(node.label, 40))
      : svgEl(
          "text",
          {
            x: position.x + (right ? 12 : -12),
            y: position.y + 4,
            "text-anchor": right ? "start" : "end",
          },
          clip(node.label, isKey ? 30 : 22),
        );
    const hover = `${isKey ? "key" : node.kind || "memory"}: ${node.label}` +
      (isKey && node.degree !== undefined ? ` (${node.degree} memories)` : "") +
      (node.status && node.status !== "live" ? ` [${node.status}]` : "");
    const group = svgEl(
      "g",
      {
        class: classes.join(" "),
        "data-testid": "graph-node",
        "data-node-id": node.id,
        "data-node-type": node.type,
        tabindex: isKey || isCenter ? null : 0,
        role: isKey || isCenter ? null : "button",
      },
      svgEl("title", {}, hover),
      shape,
      label,
    );
    if (!isKey && !isCenter) {
      group.addEventListener("click", () => openMemory(node.id));
      group.addEventListener("keydown", (event) => {
        if (event.key === "Enter" || event.key === " ") {
          event.preventDefault();
          openMemory(node.id);
        }
      });
    }
    return group;
  }

  async function loadEpisodes(memory, ticket) {
    const box = $("episode");
    const ids = (memory.hyperedge_ids || []).slice(0, MAX_EPISODES);
    if (!ids.length) {
      box.replaceChildren(el("p", { class: "empty", "data-testid": "episode-none" }, "This memory belongs to no episode."));
      return;
    }
    const answers = await Promise.allSettled(
      ids.map((id) => api(agentPath("/episodes/" + pathOf(id)))),
    );
    if (ticket !== state.memoryTicket) return;
    box.replaceChildren(
      ...answers.map((answer, index) =>
        answer.status === "fulfilled"
          ? episodeTable(answer.value, memory.id)
          : el("p", { class: "error" }, explain(answer.reason, `Episode ${ids[index]}`)),
      ),
    );
  }

  function episodeTable(episode, memoryId) {
    const rows = (episode.members || []).map((member) => {
      const row = el(
        "tr",
        {
          "data-testid": "episode-member",
          "data-role": member.role,
          "data-memory-id": member.id,
          class: member.id === memoryId ? "selected" : "clickable",
        },
        el("td", {}, el("span", { class: "badge role" }, member.role)),
        el("td", {}, member.kind),
        el("td", {}, member.layer),
        el("td", {}, member.gist),
        el("td", {}, member.status),
        el("td", { class: "when" }, formatTime(member.ts)),
      );
      if (member.id !== memoryId) row.addEventListener("click", () => openMemory(member.id));
      return row;
    });
    return el(
      "div",
      { class: "episode-block" },
      el("h4", {}, "episode ", el("code", { "data-testid": "episode-id" }, episode.episode_id)),
      el(
        "table",
        { class: "members" },
        el("thead", {}, el("tr", {}, ...["role", "kind", "layer", "gist", "status", "when"].map((h) => el("th", {}, h)))),
        el("tbody", {}, ...rows),
      ),
    );
  }

  // ---- the playbook --------------------------------------------------------------

  async function loadPlaybook() {
    const text = $("playbook");
    const empty = $("playbook-empty");
    if (!state.agent) {
      text.hidden = true;
      empty.hidden = false;
      empty.textContent = "Pick an agent to read its PLAYBOOK.md.";
      return;
    }
    const agent = state.agent;
    try {
      const playbook = await api(agentPath("/playbook"), { accept: "text/markdown" });
      if (agent !== state.agent) return;
      text.textContent = playbook;
      text.hidden = false;
      empty.hidden = true;
    } catch (failure) {
      if (agent !== state.agent) return;
      text.hidden = true;
      empty.hidden = false;
      empty.textContent =
        failure instanceof ApiFailure && failure.status === 404
          ? `No PLAYBOOK.md yet for ${agent}: the curator has not written one. It distils one during maintenance once the agent has enough episodes and outcomes.`
          : explain(failure, "Reading the playbook");
    }
  }

  // ---- stats over time -----------------------------------------------------------

  function sampleValues(stats) {
    const values = {};
    for (const [name, value] of Object.entries(stats)) {
      if (typeof value === "number" && !TIME_FIELDS.has(name)) values[name] = value;
    }
    for (const [name, metric] of Object.entries(stats.cognitive || {})) {
      if (typeof metric.value === "number") values["cognitive." + name] = metric.value;
    }
    return values;
  }

  async function sampleStats() {
    if (!state.agent) return;
    const agent = state.agent;
    try {
      const stats = await api(agentPath("/stats"));
      const samples = state.samples.get(agent) || [];
      samples.push({ t: Date.now(), values: sampleValues(stats) });
      if (samples.length > MAX_SAMPLES) samples.splice(0, samples.length - MAX_SAMPLES);
      state.samples.set(agent, samples);
      if (agent === state.agent) renderStats(stats, samples);
    } catch (failure) {
      if (agent === state.agent && state.view === "stats") say(explain(failure, "Reading stats"), "error");
    }
  }

  function restartSampling() {
    clearInterval(state.statsTimer);
    state.statsTimer = 0;
    if (!state.agent) return;
    sampleStats();
    state.statsTimer = setInterval(() => {
      if (document.visibilityState === "visible") sampleStats();
    }, STATS_EVERY_MS);
  }

  function sparkline(samples, name, width = 120, height = 24) {
    const points = samples
      .map((sample) => sample.values[name])
      .filter((value) => typeof value === "number");
    const line = svgEl("svg", {
      class: "sparkline",
      "data-testid": "sparkline",
      "data-points": points.length,
      viewBox: `0 0 ${width} ${height}`,
      width,
      height,
    });
    if (!points.length) return line;
    const low = Math.min(...points);
    const high = Math.max(...points);
    const span = high - low;
    const step = points.length > 1 ? (width - 4) / (points.length - 1) : 0;
    const xy = points.map((value, index) => {
      const x = 2 + index * step;
      // A value that never moved draws level through the middle.
      const y = span ? height - 2 - ((value - low) / span) * (height - 4) : height / 2;
      return `${x.toFixed(1)},${y.toFixed(1)}`;
    });
    line.append(svgEl("title", {}, `${points.length} sample(s), ${formatNumber(low)} to ${formatNumber(high)}`));
    if (points.length > 1) line.append(svgEl("polyline", { points: xy.join(" ") }));
    const [lastX, lastY] = xy[xy.length - 1].split(",");
    line.append(svgEl("circle", { cx: lastX, cy: lastY, r: 2 }));
    return line;
  }

  function renderStats(stats, samples) {
    const metrics = Object.entries(stats.cognitive || {}).map(([name, metric]) => {
      const rate = name.endsWith("_rate") && typeof metric.value === "number";
      const value = rate ? `${(metric.value * 100).toFixed(1)} %` : formatValue(name, metric.value);
      return el(
        "tr",
        { "data-testid": "stats-metric", "data-metric": name, "data-status": metric.status },
        el("th", { title: metric.computed || "" }, name.replaceAll("_", " ")),
        el("td", {}, value),
        el("td", {}, el("span", { class: "badge status-" + metric.status }, metric.status.replace("_", " "))),
        el("td", {}, metric.healthy || ""),
        el("td", {}, metric.alarm || ""),
        el("td", {}, sparkline(samples, "cognitive." + name)),
      );
    });
    $("stats-metrics").replaceChildren(...metrics);
    const counters = Object.entries(stats)
      .filter(([name, value]) => typeof value === "number" && !TIME_FIELDS.has(name))
      .map(([name, value]) =>
        el(
          "tr",
          { "data-testid": "stats-counter", "data-counter": name },
          el("th", {}, name.replaceAll("_", " ")),
          el("td", {}, formatNumber(value)),
          el("td", {}, sparkline(samples, name)),
        ),
      );
    $("stats-counters").replaceChildren(...counters);
    const field = [
      ["regime", stats.regime],
      ["watermark_ms", stats.watermark_ms],
      ["focus", stats.focus],
      ["maintenance_ticks", stats.maintenance_ticks],
    ].map(([name, value]) => el("tr", {}, el("th", {}, name), el("td", {}, formatValue(name, value))));
    $("stats-field").replaceChildren(...field);
    $("stats-samples").textContent =
      `${samples.length} sample(s) of ${stats.agent_id} since ${formatTime(samples[0].t)}, one every ${STATS_EVERY_MS / 1000} s while this page is open`;
  }

  // ---- views and start-up --------------------------------------------------------

  function showView(view) {
    state.view = view;
    for (const tab of document.querySelectorAll("[role=tab]")) {
      tab.setAttribute("aria-selected", String(tab.dataset.view === view));
    }
    for (const name of ["search", "playbook", "stats"]) $("view-" + name).hidden = name !== view;
    if (view === "playbook") loadPlaybook();
    if (view === "stats") {
      if (!state.agent) say("Pick an agent to see its stats.");
      else sampleStats();
    }
  }

  function start() {
    const key = sessionStorage.getItem(KEY_STORE) || "";
    $("api-key").value = key;
    $("key-form").addEventListener("submit", (event) => {
      event.preventDefault();
      const typed = $("api-key").value.trim();
      if (typed) sessionStorage.setItem(KEY_STORE, typed);
      else sessionStorage.removeItem(KEY_STORE);
      loadAgents();
    });
    $("agents-reload").addEventListener("click", loadAgents);
    $("agent-select").addEventListener("change", (event) => pickAgent(event.target.value));
    $("search-form").addEventListener("submit", search);
    $("playbook-reload").addEventListener("click", loadPlaybook);
    $("stats-reload").addEventListener("click", sampleStats);
    for (const tab of document.querySelectorAll("[role=tab]")) {
      tab.addEventListener("click", () => showView(tab.dataset.view));
    }
    document.body.dataset.ready = "true";
    loadAgents();
  }

  // For the console and tests: the layout and a copy's origin are pure functions of
  // their inputs.
  window.grimoireInspector = { layoutGraph, cladeOrigin };
  start();
})();
