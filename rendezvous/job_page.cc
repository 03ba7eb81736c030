// The job page: its JSON and its static files (see job_page.h).
#include "rendezvous/job_page.h"

#include <cmath>
#include <type_traits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/json.h"

namespace cpptorchrun::rdzv {
namespace {


const char* StateName(v1::RunStatusResponse::State state) {
  switch (state) {
    case v1::RunStatusResponse::FORMING: return "forming";
    case v1::RunStatusResponse::ACTIVE: return "active";
    case v1::RunStatusResponse::CLOSED: return "closed";
    default: return "unknown";
  }
}

// [1,2] of numbers, ["a"] of strings.
template <typename List>
std::string JsonList(const List& items) {
  std::string out = "[";
  bool first = true;
  for (const auto& item : items) {
    if constexpr (std::is_arithmetic_v<std::decay_t<decltype(item)>>) {
      absl::StrAppend(&out, first ? "" : ",", base::JsonNumber(int64_t{item}));
    } else {
      absl::StrAppend(&out, first ? "" : ",", base::JsonString(item));
    }
    first = false;
  }
  return out + "]";
}

}  // namespace

std::string NodeFaultsJson(const v1::NodeFaults& f) {
  using base::JsonNumber;
  using base::JsonString;
  std::string out = "{\"last_hang\":";
  if (f.has_last_hang()) {
    const v1::HangReport& h = f.last_hang();
    absl::StrAppend(&out, "{\"unix_ms\":", h.unix_ms(), ",\"culprit_ranks\":", JsonList(h.culprit_ranks()),
                    ",\"culprit_hosts\":", JsonList(h.culprit_hosts()), ",\"waiting_ranks\":",
                    JsonList(h.waiting_ranks()), ",\"step\":", h.step(), ",\"collective_seq\":", h.collective_seq(),
                    ",\"waited_s\":", JsonNumber(h.waited_s()), ",\"deadline_s\":", JsonNumber(h.deadline_s()),
                    ",\"process_states\":", JsonString(h.process_states()), "}");
  } else {
    out += "null";
  }
  out += ",\"last_straggler\":";
  if (f.has_last_straggler()) {
    const v1::StragglerReport& g = f.last_straggler();
    absl::StrAppend(&out, "{\"unix_ms\":", g.unix_ms(), ",\"ranks\":", JsonList(g.ranks()),
                    ",\"hosts\":", JsonList(g.hosts()), ",\"slowdown\":", JsonNumber(g.slowdown()),
                    ",\"policy\":", JsonString(g.policy()), "}");
  } else {
    out += "null";
  }
  return out + "}";
}

std::string RunStatusJson(const v1::RunStatusResponse& s, const ProgressHistory& history) {
  std::string out = absl::StrCat(
      "{\"run_id\":", base::JsonString(s.run_id()), ",\"state\":\"", StateName(s.state()),
      "\",\"round\":", s.round(), ",\"version\":", s.version(),
      ",\"closed_reason\":", base::JsonString(s.closed_reason()), ",\"store_bytes\":", s.server_store_bytes(),
      ",\"options\":{\"min_nodes\":", s.options().min_nodes(), ",\"max_nodes\":", s.options().max_nodes(),
      ",\"keep_alive_interval_s\":", base::JsonNumber(s.options().keep_alive_interval_s()),
      ",\"keep_alive_max_attempt\":", s.options().keep_alive_max_attempt(), "},\"nodes\":[");
  int world = 0;
  for (int i = 0; i < s.nodes_size(); ++i) {
    const v1::NodeStatus& n = s.nodes(i);
    const v1::Participant& p = n.participant();
    world += p.local_world_size();
    absl::StrAppend(&out, i ? "," : "", "{\"node_id\":", base::JsonString(p.node_id()),
                    ",\"host\":", base::JsonString(p.host()), ",\"group_rank\":", p.group_rank(),
                    ",\"rank_offset\":", p.rank_offset(), ",\"local_world_size\":", p.local_world_size(),
                    ",\"keep_alive_age_ms\":", n.heartbeat_age_ms(), ",\"restart_count\":", n.restart_count(),
                    ",\"last_restart\":");
    if (n.has_last_restart()) {
      const v1::RestartPhases& r = n.last_restart();
      absl::StrAppend(&out, "{\"cause\":", base::JsonString(r.cause()), ",\"round\":", r.round(),
                      ",\"total_s\":", base::JsonNumber(r.total_s()),
                      ",\"detected_to_stopped_s\":", base::JsonNumber(r.detected_to_stopped_s()),
                      ",\"stopped_to_joined_s\":", base::JsonNumber(r.stopped_to_joined_s()),
                      ",\"joined_to_started_s\":", base::JsonNumber(r.joined_to_started_s()),
                      ",\"started_to_comm_ready_s\":", base::JsonNumber(r.started_to_comm_ready_s()),
                      ",\"comm_ready_to_restored_s\":", base::JsonNumber(r.comm_ready_to_restored_s()),
                      ",\"restored_to_first_step_s\":", base::JsonNumber(r.restored_to_first_step_s()),
                      ",\"total_to_first_step_s\":", base::JsonNumber(r.total_to_first_step_s()),
                      ",\"path\":", base::JsonString(r.path().empty() ? std::string("gang") : r.path()), "}");
    } else {
      out += "null";
    }
    absl::StrAppend(&out, ",\"faults\":", NodeFaultsJson(n.faults()));
    out += ",\"ranks\":[";
    for (int k = 0; k < n.progress_size(); ++k) {
      const v1::RankProgress& r = n.progress(k);
      absl::StrAppend(&out, k ? "," : "", "{\"rank\":", r.rank(), ",\"local_rank\":", r.local_rank(),
                      ",\"epoch\":", r.epoch(), ",\"step\":", r.step(), ",\"total_steps\":", r.total_steps(),
                      ",\"loss\":", base::JsonNumber(r.loss()), ",\"samples_per_s\":", base::JsonNumber(r.samples_per_s()),
                      ",\"heartbeat_age_ms\":", r.heartbeat_age_ms(), "}");
    }
    out += "]}";
  }
  out += "],\"waiting\":[";
  for (int i = 0; i < s.waiting_size(); ++i) {
    absl::StrAppend(&out, i ? "," : "", "{\"node_id\":", base::JsonString(s.waiting(i).node_id()),
                    ",\"host\":", base::JsonString(s.waiting(i).host()), "}");
  }
  out += "],\"quarantined\":[";
  for (int i = 0; i < s.quarantined_size(); ++i) {
    const v1::QuarantinedHost& q = s.quarantined(i);
    absl::StrAppend(&out, i ? "," : "", "{\"host\":", base::JsonString(q.host()), ",\"failures\":", q.failures(),
                    ",\"remaining_ms\":", q.remaining_ms(), ",\"reason\":", base::JsonString(q.reason()), "}");
  }
  absl::StrAppend(&out, "],\"world_size\":", world, ",\"history\":{");
  bool first_rank = true;
  for (const auto& [rank, points] : history) {
    absl::StrAppend(&out, first_rank ? "" : ",", "\"", rank, "\":[");
    first_rank = false;
    for (size_t i = 0; i < points.size(); ++i) {
      absl::StrAppend(&out, i ? "," : "", "[", points[i].step, ",", base::JsonNumber(points[i].loss), ",",
                      base::JsonNumber(points[i].samples_per_s), "]");
    }
    out += "]";
  }
  out += "}}";
  return out;
}

std::string RunListJson(const ServiceSnapshot& snapshot) {
  std::string out = "{\"runs\":[";
  for (size_t i = 0; i < snapshot.exported.size(); ++i) {
    const RunSample& r = snapshot.exported[i];
    int64_t restarts = 0;
    for (const auto& [cause, n] : r.restarts) restarts += n;
    absl::StrAppend(&out, i ? "," : "", "{\"run_id\":", base::JsonString(r.run_id), ",\"state\":",
                    base::JsonString(r.state), ",\"round\":", r.round, ",\"nodes\":", r.nodes,
                    ",\"world_size\":", r.world_size, ",\"restarts\":", restarts, "}");
  }
  absl::StrAppend(&out, "],\"not_shown\":", snapshot.runs - static_cast<int>(snapshot.exported.size()), "}");
  return out;
}

absl::string_view RunListHtml() {
  return R"(<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>cpptorchrun: runs</title>
<link rel="stylesheet" href="/static/page.css"></head>
<body data-page="list"><h1>cpptorchrun runs</h1>
<table id="runs"><thead><tr><th>run</th><th>state</th><th>round</th><th>nodes</th><th>world size</th><th>restarts</th></tr></thead><tbody></tbody></table>
<p id="note"></p><p id="error" class="error"></p>
<script src="/static/page.js"></script></body></html>
)";
}

absl::string_view RunPageHtml() {
  return R"(<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>cpptorchrun: run</title>
<link rel="stylesheet" href="/static/page.css"></head>
<body data-page="run"><p><a href="/">all runs</a></p>
<h1>run <span id="run-id"></span></h1>
<p id="summary">state <b id="state">?</b>, round <b id="round">?</b>, world size <b id="world">?</b>, updated <span id="updated">never</span></p>
<p id="error" class="error"></p>
<h2>Nodes and ranks</h2>
<table id="ranks"><thead><tr><th>node</th><th>host</th><th>keep-alive age</th><th>restarts</th><th>rank</th><th>local</th><th>epoch</th><th>step</th><th>loss</th><th>samples/s</th><th>heartbeat age</th></tr></thead><tbody></tbody></table>
<p>Waiting: <span id="waiting">none</span></p>
<p>Kept out (quarantined): <span id="quarantined">none</span></p>
<h2>Restarts</h2>
<table id="restarts"><thead><tr><th>node</th><th>into round</th><th>cause</th><th>path</th><th>in the launcher</th><th>detected &rarr; stopped</th><th>stopped &rarr; joined</th><th>joined &rarr; started</th><th>started &rarr; communicator</th><th>&rarr; checkpoint</th><th>&rarr; first step</th><th>to first step</th></tr></thead><tbody></tbody></table>
<h2>Hangs and stragglers</h2>
<table id="faults"><thead><tr><th>node</th><th>when</th><th>what</th><th>ranks</th><th>hosts</th><th>detail</th></tr></thead><tbody></tbody></table>
<h2>Loss</h2><svg id="loss" class="chart" viewBox="0 0 600 200"></svg>
<h2>Samples/s</h2><svg id="speed" class="chart" viewBox="0 0 600 200"></svg>
<p id="legend"></p>
<script src="/static/page.js"></script></body></html>
)";
}

absl::string_view PageStyle() {
  return R"(body{font-family:sans-serif;margin:1.5em;color:#222}
table{border-collapse:collapse;margin:.5em 0}
th,td{border:1px solid #ccc;padding:.2em .6em;text-align:right}
th{background:#eee}td.text{text-align:left}
.stale{background:#f44;color:#fff;font-weight:bold}
.error{color:#c00}
.chart{width:600px;height:200px;border:1px solid #ccc;background:#fafafa}
.legend{display:inline-block;margin-right:1em}
)";
}

namespace {

// The page's script in three parts (data the binary serves): helpers and
// charts, rendering, and the polling loop.
constexpr char kScriptHelpers[] = R"JS('use strict';
// The job page: polls the server's JSON once a second and redraws. Every
// value from the server is set as text (never parsed as HTML).
const COLORS = ['#1f77b4','#d62728','#2ca02c','#ff7f0e','#9467bd','#8c564b','#e377c2','#17becf'];
const history = {};  // rank -> [{step, loss, speed}]
const restarts = {}; // node_id + round -> phases
const faults = {};   // node_id + kind + time -> the node's report (NodeFaults)
function cell(row, text, cls) {
  const td = document.createElement('td');
  td.textContent = text;
  if (cls) td.className = cls;
  row.appendChild(td);
  return td;
}
function fmt(x, digits) { return x === null || x === undefined ? '-' : Number(x).toFixed(digits); }
function ms(x) { return (x / 1000).toFixed(1) + ' s'; }
async function get(url) {
  const res = await fetch(url, {credentials: 'same-origin', cache: 'no-store'});
  if (res.status === 401) { location.href = '/login?next=' + encodeURIComponent(location.pathname); throw new Error('log in'); }
  if (!res.ok) throw new Error(url + ': ' + res.status);
  return res.json();
}
function drawChart(svg, key) {
  while (svg.firstChild) svg.removeChild(svg.firstChild);
  const ranks = Object.keys(history);
  let maxStep = 1, maxY = 0;
  for (const r of ranks) for (const p of history[r]) { maxStep = Math.max(maxStep, p.step); if (p[key] !== null) maxY = Math.max(maxY, p[key]); }
  if (maxY <= 0) maxY = 1;
  ranks.forEach((r, i) => {
    const pts = history[r].filter(p => p[key] !== null).map(p => (p.step / maxStep * 590 + 5).toFixed(1) + ',' + (195 - p[key] / maxY * 190).toFixed(1));
    const line = document.createElementNS('http://www.w3.org/2000/svg', 'polyline');
    line.setAttribute('points', pts.join(' '));
    line.setAttribute('fill', 'none');
    line.setAttribute('stroke', COLORS[i % COLORS.length]);
    line.setAttribute('class', 'series');
    line.setAttribute('data-rank', r);
    svg.appendChild(line);
  });
  const label = document.createElementNS('http://www.w3.org/2000/svg', 'text');
  label.setAttribute('x', 8); label.setAttribute('y', 14);
  label.textContent = 'max ' + maxY.toPrecision(3) + ', steps 0..' + maxStep;
  svg.appendChild(label);
}
function mergeHistory(s) {
  for (const rank of Object.keys(s.history || {})) {
    const points = s.history[rank].map(p => ({step: p[0], loss: p[1], speed: p[2]}));
    const local = (history[rank] || []).filter(p => !points.length || p.step > points[points.length - 1].step);
    history[rank] = points.concat(local);
  }
}
)JS";

constexpr char kScriptRender[] = R"JS(function renderRun(s) {
  mergeHistory(s);
  document.getElementById('state').textContent = s.state;
  document.getElementById('round').textContent = s.round;
  document.getElementById('world').textContent = s.world_size;
  document.getElementById('updated').textContent = new Date().toLocaleTimeString();
  const stale = Math.max(2 * (s.options.keep_alive_interval_s || 5) * 1000, 3000);
  const body = document.querySelector('#ranks tbody');
  body.textContent = '';
  for (const n of s.nodes) {
    const ranks = n.ranks.length ? n.ranks : [null];
    for (const r of ranks) {
      const row = document.createElement('tr');
      row.className = r ? 'rank' : 'node';
      if (r) row.dataset.rank = r.rank;
      cell(row, n.group_rank);
      cell(row, n.host, 'text');
      cell(row, ms(n.keep_alive_age_ms), n.keep_alive_age_ms > stale ? 'stale' : '');
      cell(row, n.restart_count);
      cell(row, r ? r.rank : '-'); cell(row, r ? r.local_rank : '-');
      cell(row, r ? r.epoch : '-'); cell(row, r ? r.step + (r.total_steps ? ' / ' + r.total_steps : '') : '-');
      cell(row, r ? fmt(r.loss, 4) : '-'); cell(row, r ? fmt(r.samples_per_s, 0) : '-');
      if (r) cell(row, ms(r.heartbeat_age_ms), r.heartbeat_age_ms > stale ? 'stale heartbeat' : 'heartbeat');
      else cell(row, '-');
      body.appendChild(row);
      if (r) {
        const h = history[r.rank] || (history[r.rank] = []);
        if (!h.length || h[h.length - 1].step !== r.step) h.push({step: r.step, loss: r.loss, speed: r.samples_per_s});
        if (h.length > 2000) h.shift();
      }
    }
    if (n.last_restart) restarts[n.node_id + '@' + n.last_restart.round] = Object.assign({node: n.group_rank}, n.last_restart);
    const f = n.faults || {};
    if (f.last_hang) faults[n.node_id + '@hang@' + f.last_hang.unix_ms] = Object.assign({node: n.group_rank, kind: 'hang'}, f.last_hang);
    if (f.last_straggler) faults[n.node_id + '@straggler@' + f.last_straggler.unix_ms] = Object.assign({node: n.group_rank, kind: 'straggler'}, f.last_straggler);
  }
  document.getElementById('waiting').textContent = s.waiting.length ? s.waiting.map(w => w.host).join(', ') : 'none';
  document.getElementById('quarantined').textContent = (s.quarantined || []).length
    ? s.quarantined.map(q => q.host + ' for ' + Math.round(q.remaining_ms / 1000) + ' s: ' + q.reason).join('; ') : 'none';
  const rbody = document.querySelector('#restarts tbody');
  rbody.textContent = '';
  for (const key of Object.keys(restarts).sort()) {
    const r = restarts[key];
    const row = document.createElement('tr');
    row.className = 'restart';
    row.dataset.cause = r.cause;
    cell(row, r.node); cell(row, r.round); cell(row, r.cause, 'text'); cell(row, r.path || 'gang', 'text');
    cell(row, fmt(r.total_s, 2) + ' s'); cell(row, fmt(r.detected_to_stopped_s, 2) + ' s');
    cell(row, fmt(r.stopped_to_joined_s, 2) + ' s'); cell(row, fmt(r.joined_to_started_s, 2) + ' s');
    // The workers' part: known once every worker of the node made its first step.
    const w = (v) => r.total_to_first_step_s > 0 ? fmt(v, 2) + ' s' : '-';
    cell(row, w(r.started_to_comm_ready_s)); cell(row, w(r.comm_ready_to_restored_s));
    cell(row, w(r.restored_to_first_step_s)); cell(row, w(r.total_to_first_step_s));
    rbody.appendChild(row);
  }
  const fbody = document.querySelector('#faults tbody');
  fbody.textContent = '';
  for (const f of Object.values(faults).sort((a, b) => a.unix_ms - b.unix_ms)) {
    const row = document.createElement('tr');
    row.className = 'fault';
    row.dataset.kind = f.kind;
    cell(row, f.node); cell(row, new Date(f.unix_ms).toISOString()); cell(row, f.kind, 'text');
    if (f.kind === 'hang') {
      cell(row, f.culprit_ranks.length ? f.culprit_ranks.join(', ') : 'none named (ranks ' + f.waiting_ranks.join(', ') + ' waited)', 'text');
      cell(row, f.culprit_hosts.join(', '), 'text');
      cell(row, 'step ' + f.step + (f.collective_seq ? ', collective ' + f.collective_seq : '') + ', waited ' +
                fmt(f.waited_s, 1) + ' s of ' + fmt(f.deadline_s, 1) + ' s; ' + f.process_states, 'text');
    } else {
      cell(row, f.ranks.join(', '), 'text'); cell(row, f.hosts.join(', '), 'text');
      cell(row, fmt(f.slowdown, 2) + 'x its peers, policy ' + f.policy, 'text');
    }
    fbody.appendChild(row);
  }
  drawChart(document.getElementById('loss'), 'loss');
  drawChart(document.getElementById('speed'), 'speed');
  const legend = document.getElementById('legend');
  legend.textContent = '';
  Object.keys(history).forEach((r, i) => {
    const span = document.createElement('span');
    span.className = 'legend';
    span.style.color = COLORS[i % COLORS.length];
    span.textContent = 'rank ' + r;
    legend.appendChild(span);
  });
}
function renderList(l) {
  const body = document.querySelector('#runs tbody');
  body.textContent = '';
  for (const r of l.runs) {
    const row = document.createElement('tr');
    row.className = 'run';
    const a = document.createElement('a');
    a.href = '/run/' + encodeURIComponent(r.run_id);
    a.textContent = r.run_id;
    const td = document.createElement('td'); td.className = 'text'; td.appendChild(a); row.appendChild(td);
    cell(row, r.state); cell(row, r.round); cell(row, r.nodes); cell(row, r.world_size); cell(row, r.restarts);
    body.appendChild(row);
  }
  document.getElementById('note').textContent = l.not_shown ? l.not_shown + ' less active runs not shown' : '';
}
)JS";

constexpr char kScriptPoll[] = R"JS(async function poll() {
  const page = document.body.dataset.page;
  try {
    if (page === 'run') {
      const id = decodeURIComponent(location.pathname.slice('/run/'.length));
      document.getElementById('run-id').textContent = id;
      renderRun(await get('/api/run/' + encodeURIComponent(id)));
    } else {
      renderList(await get('/api/runs'));
    }
    document.getElementById('error').textContent = '';
  } catch (e) {
    document.getElementById('error').textContent = String(e.message || e);
  }
  setTimeout(poll, 1000);
}
poll();
)JS";

}  // namespace

absl::string_view PageScript() {
  static const std::string* script = new std::string(absl::StrCat(kScriptHelpers, kScriptRender, kScriptPoll));
  return *script;
}

}  // namespace cpptorchrun::rdzv
