// hailstorm ui: draws /api/console every interval. Everything is built with DOM calls and
// textContent (names, reasons and errors are never parsed as HTML).
"use strict";

const SVG = "http://www.w3.org/2000/svg";

function el(tag, attrs = {}, text = null) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
  if (text !== null) node.textContent = text;
  return node;
}

function svg(tag, attrs = {}, text = null) {
  const node = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, String(v));
  if (text !== null) node.textContent = text;
  return node;
}

function fmt(value, digits = 0) {
  if (value === null || value === undefined) return "-";
  return Number(value).toLocaleString("en-US", {maximumFractionDigits: digits});
}

function seconds(value) {
  if (value === null || value === undefined) return "-";
  return value < 1 ? `${fmt(value * 1000)} ms` : `${fmt(value, 2)} s`;
}

function bytes(value) {
  if (value === null || value === undefined) return "-";
  const units = ["B", "KiB", "MiB", "GiB"];
  let v = value, i = 0;
  while (v >= 1024 && i < units.length - 1) { v /= 1024; i += 1; }
  return `${fmt(v, i ? 1 : 0)} ${units[i]}`;
}

function clockTime(epochSeconds) {
  if (!epochSeconds) return "-";
  return new Date(epochSeconds * 1000).toLocaleTimeString("en-GB");
}

function row(cells, attrs = {}) {
  const tr = el("tr", attrs);
  for (const cell of cells) {
    if (cell instanceof Node) { const td = el("td"); td.appendChild(cell); tr.appendChild(td); }
    else if (typeof cell === "object" && cell !== null) tr.appendChild(el("td", cell.attrs || {}, cell.text));
    else tr.appendChild(el("td", {}, String(cell)));
  }
  return tr;
}

function fill(tbodySelector, rows) {
  const body = document.querySelector(tbodySelector);
  body.replaceChildren(...rows);
}

function sparkline(values, width = 220, height = 26, label = "") {
  const chart = svg("svg", {width, height, class: "spark", "aria-label": label});
  const known = values.map((v, i) => [i, v]).filter(([, v]) => v !== null && v !== undefined);
  if (known.length < 2) return chart;
  const max = Math.max(1, ...known.map(([, v]) => v));
  const step = width / Math.max(1, values.length - 1);
  const points = known.map(([i, v]) => `${(i * step).toFixed(1)},${(height - 2 - (v / max) * (height - 4)).toFixed(1)}`);
  chart.appendChild(svg("polyline", {points: points.join(" "), class: "spark"}));
  chart.appendChild(svg("title", {}, `${label}: max ${fmt(max)}`));
  return chart;
}

function drawHeader(doc) {
  const status = doc.status;
  document.getElementById("topology").textContent = doc.topology;
  document.title = `${doc.topology} · hailstorm`;
  const state = document.getElementById("state");
  const label = status ? status.state : "waiting for the first sample";
  state.textContent = label;
  state.dataset.state = label;
  state.dataset.phase = status ? doc.view.master_phase : "dead";
  document.getElementById("epoch").textContent = status && status.epoch !== null ? `round ${status.epoch}` : "";
  document.getElementById("leader").textContent = status && status.leader ? `leader ${status.leader}` : "";
  const committed = status && status.committed;
  document.getElementById("committed").textContent = committed
    ? `committed round ${committed.epoch}, ${seconds(committed.age_s)} ago` : "nothing committed yet";
  document.getElementById("updated").textContent = status ? `updated ${clockTime(status.time)}` : "";
  const problems = [...doc.problems, ...(status ? status.problems : [])];
  document.getElementById("problems").replaceChildren(...problems.map((p) => el("li", {}, p)));
}

function drawGraph(view) {
  const layout = view.layout;
  const root = document.getElementById("dag");
  root.setAttribute("viewBox", `0 0 ${layout.width} ${layout.height}`);
  root.setAttribute("width", layout.width);
  root.setAttribute("height", layout.height);
  const parts = [];
  const defs = svg("defs");
  const marker = svg("marker", {id: "arrow", viewBox: "0 0 10 10", refX: 10, refY: 5,
    markerWidth: 7, markerHeight: 7, orient: "auto-start-reverse"});
  marker.appendChild(svg("path", {d: "M 0 0 L 10 5 L 0 10 z", fill: "#6b7280"}));
  defs.appendChild(marker);
  parts.push(defs);
  for (const edge of layout.edges) {
    const [x1, y1] = edge.from, [x2, y2] = edge.to;
    const mid = (x1 + x2) / 2;
    const key = `${edge.source}->${edge.target}`;
    parts.push(svg("path", {class: "edge", "data-edge": key, "marker-end": "url(#arrow)",
      d: `M ${x1} ${y1} C ${mid} ${y1}, ${mid} ${y2}, ${x2} ${y2}`}));
    parts.push(svg("text", {class: "edge-rate", "data-edge-rate": key, x: mid, y: (y1 + y2) / 2 - 6,
      "text-anchor": "middle"}, edge.rate === null ? "- /s" : `${fmt(edge.rate)} /s`));
    parts.push(svg("text", {class: "caption", x: mid, y: (y1 + y2) / 2 + 12, "text-anchor": "middle"},
      edge.routing === "key" ? "by key" : "all"));
  }
  for (const node of layout.nodes) {
    const group = svg("g", {class: `node node-${node.kind || "unknown"}`, "data-node": node.name});
    group.appendChild(svg("rect", {class: "box", x: node.x, y: node.y, width: node.w, height: node.h, rx: 6}));
    const count = node.instances.length;
    const title = `${node.kind || ""} ${node.name}` + (count > 1 ? `  ×${count}` : "");
    group.appendChild(svg("text", {class: "node-title", x: node.x + 8, y: node.y + 18}, title));
    node.caption.slice(0, 2).forEach((line, i) => {
      group.appendChild(svg("text", {class: "caption", x: node.x + 8, y: node.y + 34 + i * 14}, line));
    });
    for (const instance of node.instances) {
      const warning = view.dead_letters.over_half_budget[instance.id];
      const square = svg("rect", {class: `instance phase-${instance.phase}` + (warning ? " over-budget" : ""),
        x: instance.x, y: instance.y, width: instance.size, height: instance.size, rx: 3,
        "data-instance": instance.id, "data-phase": instance.phase});
      square.appendChild(svg("title", {}, `${instance.label}: ${instance.phase}` + (warning ? `; ${warning}` : "")));
      group.appendChild(square);
    }
    parts.push(group);
  }
  root.replaceChildren(...parts);
}

function drawInstances(doc) {
  const status = doc.status, view = doc.view;
  if (!status) return;
  fill("#instances tbody", status.processors.map((p) => {
    const phase = view.phases[p.id] || "dead";
    const badge = el("span", {class: "badge", "data-phase": phase}, p.error ? `${phase}: ${p.error}` : phase);
    return row([
      p.label || p.id, badge, p.address || "-",
      {text: fmt(p.in_per_s), attrs: {class: "num", "data-rate-in": p.id}},
      {text: fmt(p.out_per_s), attrs: {class: "num", "data-rate-out": p.id}},
      {text: p.cpu_percent == null ? "-" : `${fmt(p.cpu_percent)} %`,
       attrs: {class: "num", "data-cpu": p.id}},
      {text: p.memory_bytes == null ? "-" : `${fmt(Math.round(p.memory_bytes / 1048576))} MiB`,
       attrs: {class: "num", "data-memory": p.id}},
      {text: fmt(p.state_keys), attrs: {class: "num"}},
      {text: fmt(p.rows_committed), attrs: {class: "num"}},
      {text: fmt(p.quarantined), attrs: view.dead_letters.over_half_budget[p.id]
        ? {class: "num warn", title: view.dead_letters.over_half_budget[p.id]} : {class: "num"}},
      {text: fmt(p.late), attrs: {class: "num", "data-late": p.id}},
      sparkline(view.series.in[p.id] || [], 220, 26, `${p.label || p.id} in/s`),
    ], {"data-instance-row": p.id, "data-phase": phase});
  }));
}

function drawLag(doc) {
  const status = doc.status;
  if (!status) return;
  fill("#lag tbody", status.partitions.map((r) => row([
    r.partition,
    {text: fmt(r.committed), attrs: {class: "num"}},
    {text: fmt(r.position), attrs: {class: "num"}},
    {text: fmt(r.log_end) + (r.log_end_below_read ? "!" : ""), attrs: {class: "num"}},
    {text: fmt(r.lag), attrs: {class: "num", "data-lag": r.partition}},
    sparkline(doc.view.series.lag[r.partition] || [], 200, 26, `${r.partition} lag`),
  ])));
}

function drawRounds(view) {
  const rounds = view.rounds;
  const chart = document.getElementById("rounds-chart");
  const width = 520, height = 90, base = height - 14;
  chart.setAttribute("viewBox", `0 0 ${width} ${height}`);
  chart.setAttribute("width", width);
  chart.setAttribute("height", height);
  const parts = [];
  if (rounds.length) {
    const first = rounds[0].committed_at, last = rounds[rounds.length - 1].committed_at;
    const span = Math.max(1, last - first);
    const longest = Math.max(0.05, ...rounds.map((r) => r.snapshot_s || 0));
    for (const r of rounds) {
      const x = 10 + ((r.committed_at - first) / span) * (width - 30);
      const h = ((r.snapshot_s || 0) / longest) * (base - 8);
      const p = ((r.pause_s || 0) / longest) * (base - 8);
      const bar = svg("rect", {class: "round", x, y: base - h, width: 6, height: Math.max(1, h), "data-round": r.epoch});
      bar.appendChild(svg("title", {}, `round ${r.epoch}: snapshot ${seconds(r.snapshot_s)}, pause ${seconds(r.pause_s)}, ${bytes(r.size_bytes)}`));
      parts.push(bar, svg("rect", {class: "pause", x, y: base - p, width: 6, height: p}));
    }
    parts.push(svg("text", {x: 10, y: height - 2}, clockTime(first)));
    parts.push(svg("text", {x: width - 10, y: height - 2, "text-anchor": "end"}, clockTime(last)));
    parts.push(svg("text", {x: width - 10, y: 10, "text-anchor": "end"}, `longest ${seconds(longest)}`));
  }
  chart.replaceChildren(...parts);
  fill("#rounds tbody", rounds.slice(-10).reverse().map((r) => row([
    String(r.epoch), clockTime(r.committed_at),
    {text: fmt(r.offsets), attrs: {class: "num", title: Object.entries(r.clock).map(([p, o]) => `${p}@${o}`).join(" ")}},
    {text: seconds(r.snapshot_s), attrs: {class: "num"}},
    {text: seconds(r.pause_s), attrs: {class: "num"}},
    {text: bytes(r.size_bytes), attrs: {class: "num"}},
  ], {"data-round-row": r.epoch})));
}

function drawRecoveries(view) {
  fill("#recoveries tbody", view.recoveries.slice().reverse().map((r) => row([
    String(r.epoch), clockTime(r.at),
    r.start ? "start" : {text: r.previous.replace(/\(None\)$/, "").replace(/\(.+\)$/s, "(C)"), attrs: {title: r.previous}},
    {text: r.reason, attrs: {class: "reason"}},
  ], {"data-recovery": r.epoch})));
}

function drawDeadLetters(view) {
  const dead = view.dead_letters;
  const total = document.getElementById("dead-letter-total");
  total.textContent = fmt(dead.total);
  total.classList.toggle("nonzero", dead.total > 0);
  const counts = Object.entries(dead.by_processor).map(([pid, n]) => `${pid}: ${fmt(n)}`);
  document.getElementById("dead-letter-counts").textContent = counts.join(" · ");
  if (dead.topics.length) document.getElementById("dead-letter-topics").textContent = dead.topics.join(", ");
  fill("#dead-letters tbody", dead.latest.slice().reverse().map((d) => row([
    clockTime(d.timestamp), d.node || "-", d.stage || "-", d.source || "-",
    {text: d.error || "-", attrs: {class: "reason"}},
  ])));
}

async function refresh() {
  let interval = 1000;
  try {
    const response = await fetch("api/console", {cache: "no-store"});
    const doc = await response.json();
    interval = Math.max(200, (doc.interval || 1) * 1000);
    drawHeader(doc);
    drawGraph(doc.view);
    drawInstances(doc);
    drawLag(doc);
    drawRounds(doc.view);
    drawRecoveries(doc.view);
    drawDeadLetters(doc.view);
    document.body.dataset.loaded = "true";
  } catch (error) {
    const state = document.getElementById("state");
    state.textContent = `console unreachable: ${error}`;
    state.dataset.phase = "dead";
  }
  setTimeout(refresh, interval);
}

refresh();
