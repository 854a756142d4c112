"""The page ``GET /`` serves: the queue as a timeline (Gantt) of predicted starts and ends.

One self-contained document: inline CSS, one inline script (allowed by its hash in the
Content-Security-Policy, nothing else may run), SVG drawn from ``queue`` (a relative URL, so
the page also works behind a reverse proxy under a sub-path). Job and user names are put in
the page as text nodes only, never as markup.
"""

PAGE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>asrpt queue</title>
<style>
body { font: 13px/1.4 system-ui, sans-serif; margin: 1em; color: #222; }
h1 { font-size: 1.3em; margin: 0 0 .3em; }
#status { color: #555; margin-bottom: .6em; }
#status.error { color: #b00; }
label { margin-right: 1em; }
svg { display: block; margin-top: .6em; }
.lane { fill: #fff; }
.lane.alt { fill: #eef1f5; }
.run { fill: #2f7d32; }
.pend { fill: #4a78c2; }
.held { fill: #d08a1c; }
.unknown { fill: #999; font-style: italic; }
.label { fill: #222; font: 12px monospace; }
.axis { stroke: #ccc; }
.tick { fill: #555; font: 11px sans-serif; }
.now { stroke: #c62828; stroke-width: 1.5; }
.legend span { display: inline-block; width: .9em; height: .9em; margin: 0 .3em 0 1em; vertical-align: middle; }
</style>
</head>
<body>
<h1>asrpt queue</h1>
<div id="status">loading&hellip;</div>
<div>
<label>user <input id="user" size="12" placeholder="all"></label>
<label>partition <input id="partition" size="10" placeholder="all"></label>
<span class="legend"><span style="background:#2f7d32"></span>running<span style="background:#4a78c2"></span>pending<span style="background:#d08a1c"></span>held by asrpt</span>
</div>
<svg id="chart" xmlns="http://www.w3.org/2000/svg" width="1000" height="40"></svg>
<script>
"use strict";
const NS = "http://www.w3.org/2000/svg";
const ROW = 22, LABEL = 300, WIDTH = 1000, TOP = 24;
const STEPS = [60, 300, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400, 172800, 604800];
let last = null;

function node(name, attrs, text) {
  const e = document.createElementNS(NS, name);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, String(v));
  if (text !== undefined) e.textContent = text;
  return e;
}
function when(t) {
  return t === null ? "unknown" : new Date(t * 1000).toLocaleString();
}
function draw(q) {
  const svg = document.getElementById("chart");
  while (svg.firstChild) svg.removeChild(svg.firstChild);
  const users = document.getElementById("user").value.split(",").map(s => s.trim()).filter(Boolean);
  const parts = document.getElementById("partition").value.split(",").map(s => s.trim()).filter(Boolean);
  const jobs = q.jobs.filter(j => (!users.length || users.includes(j.user)) &&
    (!parts.length || parts.includes(j.partition) || j.partitions.some(p => parts.includes(p))));
  const now = q.now_s || Date.now() / 1000;
  const status = document.getElementById("status");
  status.className = "";
  status.textContent = q.made_at_s === null ? "no cycle has run yet" :
    `${jobs.length} of ${q.jobs.length} jobs, policy ${q.policy}, forecast made ${when(q.made_at_s)}`;
  // A job of unknown length has no predicted end, only its time limit's bound (latest_end).
  const endOf = j => j.predicted_end_s !== null ? j.predicted_end_s : j.latest_end_s;
  const ends = jobs.map(endOf).filter(t => t !== null);
  let t1 = Math.max(now + 600, ...ends);
  let t0 = now - (t1 - now) * 0.08;
  const scale = (WIDTH - LABEL - 10) / (t1 - t0);
  const x = t => LABEL + (Math.max(t, t0) - t0) * scale;
  svg.setAttribute("height", TOP + jobs.length * ROW + 10);
  jobs.forEach((j, i) => {
    svg.appendChild(node("rect", {class: i % 2 ? "lane alt" : "lane", x: 0, y: TOP + i * ROW, width: WIDTH, height: ROW}));
  });
  let step = STEPS.find(s => (t1 - t0) / s <= 8) || STEPS[STEPS.length - 1];
  for (let t = Math.ceil(t0 / step) * step; t <= t1; t += step) {
    svg.appendChild(node("line", {class: "axis", x1: x(t), x2: x(t), y1: TOP - 4, y2: TOP + jobs.length * ROW}));
    const d = new Date(t * 1000);
    const text = step >= 86400 ? d.toLocaleDateString() : d.toLocaleTimeString([], {hour: "2-digit", minute: "2-digit"});
    svg.appendChild(node("text", {class: "tick", x: x(t) + 2, y: TOP - 8}, text));
  }
  jobs.forEach((j, i) => {
    const y = TOP + i * ROW;
    const g = node("g", {class: "job", "data-job": j.job_id});
    const name = (j.name || "").slice(0, 16);
    const pos = j.position === null ? " R " : String(j.position).padStart(3);
    g.appendChild(node("text", {class: "label", x: 4, y: y + 15},
      `${pos} ${j.job_id.padEnd(9)} ${(j.user || "").padEnd(9).slice(0, 9)} ${name}`));
    const tip = `${j.job_id} ${j.name || ""} (${j.user}), ${j.accelerators} accelerators, ${j.state}` +
      `${j.held ? " (held)" : ""} on ${j.partition || j.partitions.join(",") || "?"}\\n` +
      `start ${when(j.predicted_start_s)}\\nend ${j.end_unknown ? "unknown, at most " + when(j.latest_end_s) : when(j.predicted_end_s)}` +
      (j.reason ? `\\n${j.reason}` : "");
    if (j.predicted_start_s === null || endOf(j) === null) {
      const t = node("text", {class: "unknown", x: LABEL + 4, y: y + 15}, "no predicted start");
      t.appendChild(node("title", {}, tip));
      g.appendChild(t);
    } else {
      const cls = j.state === "RUNNING" ? "run" : (j.held ? "held" : "pend");
      const bar = node("rect", {class: "bar " + cls, "data-job": j.job_id, x: x(j.predicted_start_s), y: y + 4,
        width: Math.max(x(endOf(j)) - x(j.predicted_start_s), 2), height: ROW - 8, rx: 3});
      bar.appendChild(node("title", {}, tip));
      g.appendChild(bar);
    }
    svg.appendChild(g);
  });
  svg.appendChild(node("line", {class: "now", x1: x(now), x2: x(now), y1: TOP - 4, y2: TOP + jobs.length * ROW}));
}
async function refresh() {
  try {
    const res = await fetch("queue", {cache: "no-store"});
    if (!res.ok) throw new Error(`HTTP ${res.status}`);
    last = await res.json();
    draw(last);
  } catch (err) {
    const status = document.getElementById("status");
    status.className = "error";
    status.textContent = `cannot load the queue: ${err.message}`;
  }
}
for (const id of ["user", "partition"]) {
  document.getElementById(id).addEventListener("input", () => { if (last) draw(last); });
}
refresh();
setInterval(refresh, 30000);
</script>
</body>
</html>
"""
