// skein console: one page over the public HTTP API. Everything the page shows comes from the
// same routes any client uses, with the bearer token taken from the URL fragment (never sent to
// the server in a URL, so it stays out of access logs) and kept in this tab's sessionStorage.
// Each view has its own fragment (#/sessions?status=failed, #/session/ID, #/memory/ID, ...), so
// Back and Forward walk the views and a session's address can be kept or shared (without the token).
'use strict';

const $ = (id) => document.getElementById(id);
const REFRESH_MS = 4000;
const PALETTE = ['#0969da', '#bf3989', '#1a7f37', '#bc4c00', '#8250df', '#9a6700', '#0550ae', '#cf222e', '#57606a', '#116329'];

let token = sessionStorage.getItem('skein-token') || '';
{
  const m = location.hash.match(/token=(.+)$/);
  if (m) {
    token = decodeURIComponent(m[1]);
    sessionStorage.setItem('skein-token', token);
    history.replaceState(null, '', location.pathname + location.search + '#/sessions');
  }
}

// el builds an element; strings become text nodes, so data never becomes markup.
function el(tag, attrs, ...kids) {
  const e = document.createElement(tag);
  setAttrs(e, attrs);
  for (const k of kids.flat()) {
    if (k === null || k === undefined || k === false) continue;
    e.append(k instanceof Node ? k : String(k));
  }
  return e;
}

function svg(tag, attrs, ...kids) {
  const e = document.createElementNS('http://www.w3.org/2000/svg', tag);
  setAttrs(e, attrs);
  for (const k of kids) e.append(k instanceof Node ? k : String(k));
  return e;
}

function setAttrs(e, attrs) {
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === 'class') e.setAttribute('class', v);
    else if (k.startsWith('on')) e.addEventListener(k.slice(2), v);
    else if (v !== undefined && v !== null && v !== false) e.setAttribute(k, v);
  }
}

function badge(text) { return el('span', { class: 'badge ' + text }, text); }

class APIError extends Error {
  constructor(msg, status, code) { super(msg); this.status = status; this.code = code; }
}

async function api(path, opts = {}) {
  const headers = { Authorization: 'Bearer ' + token };
  let body;
  if (opts.body !== undefined) {
    headers['Content-Type'] = 'application/json';
    body = JSON.stringify(opts.body);
  }
  const r = await fetch(path, { method: opts.method || 'GET', headers, body, signal: opts.signal });
  let data = null;
  try { data = await r.json(); } catch (e) { /* a body that is not JSON: reported below */ }
  if (!r.ok) {
    if (r.status === 401) showLogin();
    throw new APIError((data && data.error) || `${r.status} ${r.statusText}`, r.status, data && data.code);
  }
  return data;
}

function showError(err) {
  const box = $('error');
  if (!err) { box.hidden = true; box.textContent = ''; return; }
  box.hidden = false;
  box.textContent = String(err.message || err);
}

function setLive(ok) { $('live').className = ok ? '' : 'off'; $('live').textContent = ok ? 'live' : 'offline'; }

// Formatting.
const fmtTime = (s) => { if (!s) return ''; const d = new Date(s); return isNaN(d) || d.getFullYear() < 2000 ? '' : d.toLocaleString(); };
const fmtCost = (c) => (c === null || c === undefined) ? '—' : '$' + Number(c).toFixed(c < 0.01 ? 4 : 2);
const fmtInt = (n) => Number(n || 0).toLocaleString();
const fmtSecs = (s) => s ? (s < 1 ? s.toFixed(2) + ' s' : s < 60 ? s.toFixed(1) + ' s' : (s / 60).toFixed(1) + ' min') : '—';
const short = (id) => id && id.length > 20 ? id.slice(0, 20) + '…' : (id || '');
const clip = (s, n) => { s = String(s || ''); return s.length > n ? s.slice(0, n) + '…' : s; };

// Views, one per fragment: #/NAME[/ID][?filters].
const VIEWS = ['sessions', 'session', 'memory', 'usage', 'dlq', 'learning'];
let view = 'sessions';
function show(name) {
  view = name;
  $('login').hidden = true;
  for (const s of document.querySelectorAll('section.view')) s.hidden = s.id !== name;
  for (const b of document.querySelectorAll('nav a')) {
    const on = b.dataset.view === name || (name === 'session' && b.dataset.view === 'sessions');
    b.classList.toggle('active', on);
    if (on) b.setAttribute('aria-current', 'page'); else b.removeAttribute('aria-current');
  }
  if (name !== 'session' && streamAbort) { streamAbort.abort(); streamAbort = null; }
  refresh();
}

function parseHash() {
  const [path, query] = location.hash.replace(/^#\/?/, '').split('?');
  const [name, ...rest] = path.split('/');
  return { name: name || 'sessions', id: decodeURIComponent(rest.join('/')), params: new URLSearchParams(query || '') };
}

// route shows what the address names; it runs on load and on every hashchange (a link followed,
// Back, Forward).
function route() {
  const r = parseHash();
  if (!VIEWS.includes(r.name) || (r.name === 'session' && !r.id)) { location.replace('#/sessions'); return; }
  if (r.name === 'session') { renderSession(r.id); return; }
  if (r.name === 'sessions') setSessionFilters(r.params);
  if (r.name === 'memory') {
    memoryLoaded = false;
    if (r.id) { memoryLoaded = true; show('memory'); loadEntry(r.id); return; }
  }
  show(r.name);
}

// The sessions view's filters live in its address, so a filtered list survives Back and reload.
const SESSION_FILTERS = [['q', 's-q'], ['agent', 's-agent'], ['status', 's-status'], ['since', 's-since']];
function setSessionFilters(p) {
  for (const [k, id] of SESSION_FILTERS) {
    const v = p.get(k);
    if (id === 's-since') { $(id).value = v || '168h'; continue; }
    if (v && $(id).tagName === 'SELECT' && ![...$(id).options].some((o) => o.value === v)) $(id).append(el('option', { value: v }, v));
    $(id).value = v || '';
  }
  sessionsHash();
}
function sessionsHash() {
  const p = new URLSearchParams();
  for (const [k, id] of SESSION_FILTERS) if ($(id).value && !(id === 's-since' && $(id).value === '168h')) p.set(k, $(id).value);
  const h = '#/sessions' + (p.size ? '?' + p : '');
  $('back').href = h;
  document.querySelector('nav a[data-view="sessions"]').href = h;
  return h;
}
function filtersChanged() {
  const h = sessionsHash();
  if (location.hash !== h) history.replaceState(null, '', h);
  refresh();
}

function showLogin() {
  $('login').hidden = false;
  $('token').focus();
  for (const s of document.querySelectorAll('section.view')) s.hidden = true;
}

async function refresh() {
  if (!token) { showLogin(); return; }
  try {
    if (view === 'sessions') await loadSessions();
    else if (view === 'usage') await loadUsage();
    else if (view === 'dlq') await loadDLQ();
    else if (view === 'memory' && !memoryLoaded) await loadMemory();
    setLive(true);
    showError(null);
  } catch (e) {
    setLive(false);
    showError(e);
  }
}

// Sessions.
const knownAgents = new Set();
function addAgents(names) {
  for (const n of names) {
    if (!n || knownAgents.has(n)) continue;
    knownAgents.add(n);
    for (const id of ['s-agent', 'm-agent', 't-agent']) if (![...$(id).options].some((o) => o.value === n)) $(id).append(el('option', { value: n }, n));
  }
}

async function loadSessions() {
  const p = new URLSearchParams({ since: $('s-since').value, limit: '200' });
  for (const [k, id] of [['q', 's-q'], ['agent', 's-agent'], ['status', 's-status']]) if ($(id).value) p.set(k, $(id).value);
  const data = await api('/v1/sessions?' + p);
  addAgents(data.sessions.map((s) => s.agent));
  const rows = data.sessions.map((s) => {
    const u = s.usage, own = u && ownUsage(u), apart = (role, what) => {
      const r = u && u.by_role && u.by_role[role];
      return r ? el('div', { class: 'muted apart ' + role }, `${what} ${fmtInt(r.input_tokens)} / ${fmtInt(r.output_tokens)}`) : null;
    };
    // The row is a link (its session id) for the keyboard; a click anywhere on it follows it too.
    return el('tr', { class: 'click', 'data-session': s.session_id, onclick: (ev) => { if (!ev.target.closest('a, button')) location.hash = sessionHash(s.session_id); } },
      el('td', {}, fmtTime(s.created)),
      el('td', { class: 'mono' }, el('a', { href: sessionHash(s.session_id), title: s.session_id }, short(s.session_id)), s.parent ? el('span', { class: 'muted' }, ' (child)') : null),
      el('td', {}, s.agent),
      el('td', { class: 'task', title: s.task }, s.task),
      el('td', {}, badge(s.outcome || s.status)),
      el('td', { class: 'num tokens' }, own ? `${fmtInt(own.input_tokens)} / ${fmtInt(own.output_tokens)}` : '—',
        apart('subagent', 'child agents'), apart('miner', 'mining')),
      el('td', { class: 'num' }, u ? fmtCost(u.cost_usd) : '—'),
      el('td', { class: 'num' }, u ? fmtSecs(u.wall_time_s) : '—'));
  });
  // The list is drawn again every few seconds: the keyboard's place in it is kept.
  const focused = document.activeElement && document.activeElement.closest('#s-rows tr');
  $('s-rows').replaceChildren(...rows);
  if (focused) focusSession(focused.dataset.session);
  else if (returnTo && view === 'sessions') { focusSession(returnTo); returnTo = ''; }
  $('s-count').textContent = `${data.sessions.length} session(s)${data.truncated ? ' (newest shown; narrow the filter for more)' : ''}`;
}

// ownUsage is a usage report less the miner's calls and the child agents': the session's own
// tokens, as its tree counts them. The list shows the other two apart (the cost is the whole).
function ownUsage(u) {
  const out = {};
  for (const k of ['input_tokens', 'output_tokens', 'cache_creation_input_tokens', 'cache_read_input_tokens']) {
    out[k] = (u[k] || 0) - ['miner', 'subagent'].reduce((a, role) => a + ((u.by_role && u.by_role[role] && u.by_role[role][k]) || 0), 0);
  }
  return out;
}

const sessionHash = (id) => '#/session/' + encodeURIComponent(id);
function focusSession(id) {
  const a = [...$('s-rows').querySelectorAll('tr')].find((tr) => tr.dataset.session === id);
  if (a) a.querySelector('a').focus();
}

// One session: its tree and its live timeline.
let streamAbort = null;
let current = '';
let returnTo = ''; // the session to give the keyboard's focus back to in the list

// openSession goes to a session's address (a link does the same).
function openSession(id) { location.hash = sessionHash(id); }

function renderSession(id) {
  if (current !== id || view !== 'session') {
    current = id;
    $('d-title').textContent = id;
    $('d-tree').replaceChildren();
    $('d-events').replaceChildren();
    $('d-note').textContent = '';
    $('d-cancel').hidden = true;
    show('session');
    loadTree(id);
    followEvents(id);
  }
  returnTo = id;
  $('d-title').focus();
}

async function loadTree(id) {
  try {
    // The record says whether it still runs (a queued session has no trace yet).
    const s = await api('/v1/sessions/' + encodeURIComponent(id));
    if (current !== id) return;
    $('d-cancel').hidden = s.status === 'done';
    const n = await api('/v1/sessions/' + encodeURIComponent(id) + '/tree').catch((e) => { if (e.status === 404 && s.status !== 'done') return null; throw e; });
    if (current === id && n) $('d-tree').replaceChildren(el('ul', {}, treeNode(n, true)));
  } catch (e) { showError(e); }
}

async function cancelSession() {
  const id = current;
  if (!await confirmDialog(`Cancel session ${id}? Its running steps stop, and its child agents with it.`)) return;
  try {
    const r = await api('/v1/sessions/' + encodeURIComponent(id) + '/cancel', { method: 'POST', body: { reason: 'cancelled from the console' } });
    if (current !== id) return;
    $('d-note').textContent = { cancelling: 'cancelling…', already_cancelled: 'already cancelled', already_finished: `already finished (${r.outcome})` }[r.status] || r.status;
    $('d-cancel').hidden = true;
    showError(null);
  } catch (e) { showError(e); }
}

async function startTask(ev) {
  ev.preventDefault();
  const task = $('t-task').value.trim();
  if (!task) { $('t-task').focus(); return; }
  const body = { task };
  if ($('t-agent').value) body.agent = $('t-agent').value;
  try {
    const r = await api('/v1/tasks', { method: 'POST', body });
    $('t-task').value = '';
    showError(null);
    openSession(r.session_id);
  } catch (e) { showError(e); }
}

function treeNode(n, root) {
  const head = el('div', {},
    root ? el('span', { class: 'mono', title: n.session_id }, short(n.session_id)) : el('a', { class: 'mono link', href: sessionHash(n.session_id), title: n.session_id }, short(n.session_id)), ' ',
    el('b', {}, n.agent || ''), ' ', badge(n.outcome || 'running'),
    el('div', { class: 'muted' }, `${n.turns} turn(s) · ${n.tool_calls} tool call(s) · ${fmtInt(n.usage.input_tokens)} in / ${fmtInt(n.usage.output_tokens)} out · ${fmtCost(n.cost_usd)} · ${fmtSecs(n.wall_time_s)}`));
  const kids = [];
  for (const s of n.steps || []) {
    kids.push(el('li', { class: 'step' }, 'step ', el('span', { class: 'mono' }, s.step_id), ' ', s.outcome ? badge(s.outcome) : badge('running'),
      el('span', { class: 'muted' }, ` ${s.turns} turn(s), ${s.tool_calls} tool call(s), ${fmtCost(s.cost_usd)}`),
      s.reason ? el('div', { class: 'muted' }, clip(s.reason, 160)) : null));
  }
  for (const c of n.children || []) {
    const li = treeNode(c, false);
    li.classList.add('child');
    li.setAttribute('data-child', c.session_id);
    kids.push(li);
  }
  return el('li', {}, head, kids.length ? el('ul', {}, kids) : null);
}

async function followEvents(id) {
  if (streamAbort) streamAbort.abort();
  const ac = new AbortController();
  streamAbort = ac;
  let t0 = null;
  try {
    const r = await fetch('/v1/sessions/' + encodeURIComponent(id) + '/events', { headers: { Authorization: 'Bearer ' + token }, signal: ac.signal });
    if (!r.ok) {
      const data = await r.json().catch(() => null);
      throw new APIError((data && data.error) || r.statusText, r.status, data && data.code);
    }
    const reader = r.body.getReader();
    const dec = new TextDecoder();
    let buf = '';
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buf += dec.decode(value, { stream: true });
      let i;
      while ((i = buf.indexOf('\n\n')) >= 0) {
        const chunk = buf.slice(0, i);
        buf = buf.slice(i + 2);
        const line = chunk.split('\n').find((l) => l.startsWith('data: '));
        if (!line) continue;
        const kind = (chunk.split('\n').find((l) => l.startsWith('event: ')) || '').slice(7);
        if (kind === 'delta') { if (current === id) showDelta(JSON.parse(line.slice(6)), t0); continue; }
        const ev = JSON.parse(line.slice(6));
        if (t0 === null) t0 = new Date(ev.time);
        $('d-events').append(eventItem(ev, t0));
        if (['usage', 'step_finished', 'final', 'incomplete', 'failed', 'cancel'].includes(ev.type)) loadTree(id);
      }
    }
  } catch (e) {
    if (e.name !== 'AbortError') showError(e);
  }
}

// The model's text as it is generated (event: delta): one timeline item per model turn whose
// text grows batch by batch; restart empties it, done marks it complete. A missing batch (seq
// gap) is said: the turn's trace events hold the whole text.
function showDelta(d, t0) {
  const key = `${d.step_id}/${d.turn}`;
  let li = [...$('d-events').querySelectorAll('li[data-type="delta"]')].find((e) => e.dataset.key === key);
  if (!li) {
    const dt = t0 === null ? '' : '+' + ((Date.now() - t0) / 1000).toFixed(2) + 's';
    li = el('li', { 'data-type': 'delta', 'data-key': key, class: 'streaming' }, el('span', { class: 't' }, dt),
      el('span', { class: 'ty' }, 'answer'), el('span', { class: 'mono muted' }, ` [${d.step_id}] turn ${d.turn} `),
      el('div', { class: 'stream' }));
    li.dataset.next = '1';
    $('d-events').append(li);
  }
  const text = li.querySelector('.stream');
  if (String(d.seq) !== li.dataset.next && !li.querySelector('.gap')) li.append(el('div', { class: 'gap muted' }, 'part of the text was missed while it streamed; the trace events below hold it whole'));
  li.dataset.next = String(d.seq + 1);
  if (d.restart) text.textContent = '';
  if (d.text) text.textContent += d.text;
  if (d.done) li.classList.remove('streaming');
}

function eventItem(ev, t0) {
  const dt = ((new Date(ev.time) - t0) / 1000).toFixed(2);
  const li = el('li', { 'data-type': ev.type }, el('span', { class: 't' }, '+' + dt + 's'), el('span', { class: 'ty' }, ev.type),
    ev.step_id ? el('span', { class: 'mono muted' }, ` [${ev.step_id}] `) : ' ', eventSummary(ev));
  const d = eventDetail(ev);
  if (d) li.append(d);
  return li;
}

function eventSummary(ev) {
  switch (ev.type) {
    case 'session_started': return `${ev.agent}: ${clip(ev.task, 160)}`;
    case 'plan': return `${(ev.plan || []).length} step(s)`;
    case 'model_call': return `${ev.model} ${ev.latency_ms || 0}ms` + (ev.usage ? ` · in ${ev.usage.input_tokens} out ${ev.usage.output_tokens}` : '');
    case 'tool_call': return el('span', {}, `${ev.tool} ${clip(ev.args ? JSON.stringify(ev.args) : '', 100)} → `,
      ev.result ? (ev.result.ok ? clip(JSON.stringify(ev.result.result), 100) : badge('failed')) : '', ev.result && !ev.result.ok ? ' ' + clip(ev.result.error, 160) : '');
    case 'retrieval': return `${(ev.guidelines || []).length} guideline(s), ${(ev.recalled || []).filter((r) => r.kind === 'case').length} worked example(s), ${(ev.recalled || []).filter((r) => r.kind === 'skill').length} skill(s) from memory`;
    case 'mined': return `${(ev.mined || []).length} candidate(s), ${(ev.cases || []).length} case(s) mined`;
    case 'tools': return `${(ev.attrs && ev.attrs.phase) || ''} [${(ev.tools || []).join(' ')}]`;
    case 'usage': return ev.report ? `in ${fmtInt(ev.report.input_tokens)} out ${fmtInt(ev.report.output_tokens)} · ${fmtCost(ev.report.cost_usd)} · ${fmtSecs(ev.report.wall_time_s)}` + (ev.role === 'miner' ? ' (with mining)' : '') : '';
    case 'final': case 'incomplete': case 'failed': case 'step_finished':
      return el('span', {}, badge(ev.outcome || ev.type), ' ', clip(ev.text || ev.reason || '', 200));
    case 'thought': case 'decision': case 'step_started': return clip(ev.text, 200);
    case 'cancel': case 'budget': case 'compaction': return clip(ev.reason, 200);
    default: return '';
  }
}

// The learning, made visible: what memory gave this session and what the miner did with it.
function eventDetail(ev) {
  if (ev.type === 'retrieval' && ((ev.guidelines || []).length || (ev.recalled || []).length)) {
    return el('div', { class: 'detail' }, (ev.guidelines || []).map((g) => el('div', { class: 'guideline' },
      badge(g.tier), ' ', el('b', {}, g.score.toFixed(3)), ' ', g.text, g.why ? el('div', { class: 'why' }, 'why: ' + g.why) : null)),
    (ev.recalled || []).map((r) => el('div', { class: 'guideline' }, badge(r.kind), ' ', el('b', {}, r.score.toFixed(3)), ' ', entryLink(r.id),
      el('span', { class: 'muted' }, ` ${r.tokens || 0} tokens`), caseBody(r.case), skillBody(r.skill), r.why ? el('div', { class: 'why' }, 'why: ' + r.why) : null)));
  }
  if (ev.type === 'mined') {
    const text = {};
    for (const c of ev.mined || []) text[c.key] = c;
    for (const c of ev.cases || []) text[c.key] = { polarity: 'case', text: c.case.intent };
    return el('div', { class: 'detail' }, (ev.ingested || []).map((a) => el('div', { class: 'decision' },
      badge(a.action), ' ', text[a.key] ? `${text[a.key].polarity}: ${text[a.key].text}` : a.key,
      a.entry_id ? el('span', { class: 'mono muted' }, ' ' + short(a.entry_id)) : null,
      a.detail ? el('div', { class: 'why' }, a.detail) : null)),
    ['helpful', 'harmful', 'followed'].filter((k) => ev.attrs && ev.attrs[k]).map((k) => el('div', { class: 'marks' }, badge(k), ' ', ev.attrs[k].split(',').map(short).join(', '))));
  }
  return null;
}

// Memory.
let memoryLoaded = false;

async function loadMemory() {
  const agent = $('m-agent').value, kind = $('m-kind').value, tier = $('m-tier').value, q = $('m-q').value.trim();
  const counts = await api('/v1/memory/search?' + new URLSearchParams(Object.entries({ agent, kind, tier, top_k: '50', q }).filter(([, v]) => v)));
  addAgents(counts.counts.map((c) => c.agent));
  const by = {};
  for (const c of counts.counts) {
    const t = by[c.agent] || (by[c.agent] = { strategic: 0, tactical: 0, case: 0, skill: 0, inactive: 0 });
    if (c.status !== 'active') t.inactive += c.n; else if (c.kind === 'case' || c.kind === 'skill') t[c.kind] += c.n; else t[c.tier] += c.n;
  }
  $('m-counts').textContent = Object.entries(by).map(([a, t]) => `${a}: guidelines strategic ${t.strategic}, tactical ${t.tactical}; cases ${t.case}; skills ${t.skill}; superseded/retired/quarantined ${t.inactive}`).join(' · ') +
    ` (embedding model ${counts.model})`;
  let rows;
  if (q) {
    $('m-score-h').textContent = 'rank';
    rows = (counts.hits || []).map((h) => memoryRow(h.entry, h));
  } else {
    $('m-score-h').textContent = '';
    const list = await api('/v1/memory?' + new URLSearchParams(Object.entries({ agent, kind, tier, status: $('m-status').value }).filter(([, v]) => v)));
    rows = list.entries.map((e) => memoryRow(e, null));
  }
  $('m-rows').replaceChildren(...rows);
  const what = { guideline: 'guideline', case: 'case', skill: 'skill', all: 'entry' }[kind];
  if (!rows.length) $('m-rows').append(el('tr', {}, el('td', { colspan: 10, class: 'muted' }, q ? `no ${what} matches` : `no ${what}`)));
  memoryLoaded = true;
}

function memoryRow(e, hit) {
  const sessions = Math.max(e.session_count || 0, (e.sessions || []).length);
  const actions = el('td', {});
  if (e.status === 'active') actions.append(el('button', { class: 'retire', onclick: () => retire(e, false) }, 'retire'), ' ');
  actions.append(el('button', { class: 'evict danger', onclick: () => retire(e, true) }, 'evict'));
  return el('tr', { 'data-entry': e.id },
    el('td', { class: 'num', title: hit ? `similarity ${hit.similarity.toFixed(3)}` : '' }, hit ? hit.score.toFixed(3) : ''),
    el('td', { class: 'mono', title: e.id }, short(e.id)),
    el('td', {}, e.kind && e.kind !== 'guideline' ? [badge(e.kind), ' '] : null, badge(e.tier), ' ', badge(e.polarity)),
    el('td', {}, e.text, (e.tools || []).length ? el('span', { class: 'muted' }, ` [${e.tools.join(', ')}]`) : null,
      caseBody(e.case), skillBody(e.skill),
      hit && hit.why ? el('div', { class: 'why' }, 'why: ' + hit.why) : null,
      e.utility ? el('div', { class: 'muted' }, `utility ${e.utility > 0 ? '+' : ''}${e.utility.toFixed(2)} (echo ${e.echoes || 0}, fizzle ${e.fizzles || 0})`) : null,
      e.superseded_by ? el('div', { class: 'muted' }, 'superseded by ', entryLink(e.superseded_by)) : null,
      (e.supersedes || []).length ? el('div', { class: 'muted' }, 'supersedes ', ...e.supersedes.flatMap((id, i) => [i ? ', ' : '', entryLink(id)])) : null,
      entryHistory(e)),
    el('td', { class: 'num', title: (e.sessions || []).join('\n') }, sessions),
    el('td', { class: 'num' }, e.hits),
    el('td', { class: 'num' }, e.helpful),
    el('td', { class: 'num' }, e.harmful),
    el('td', {}, badge(e.status)),
    actions);
}

// caseBody shows a case's evidence: how the episode went step by step, what made the difference
// (with the verbatim quote it rests on), its quality and cost, and the skill it counts for.
function caseBody(c) {
  if (!c) return null;
  const cost = c.cost || {};
  return el('div', { class: 'detail' },
    el('ol', { class: 'steps' }, ...(c.approach || []).map((s) => el('li', {}, el('span', { class: 'mono' }, s.tool), s.args ? el('span', { class: 'muted' }, ' ' + s.args) : null,
      s.ok ? null : [' ', badge('failed'), s.error ? el('span', { class: 'muted' }, ' ' + s.error) : null], s.note ? el('div', { class: 'why' }, s.note) : null))),
    c.insight ? el('div', {}, el('b', {}, 'insight: '), c.insight) : null,
    c.evidence ? el('div', { class: 'why' }, 'evidence: “' + c.evidence + '”') : null,
    el('div', { class: 'muted' }, `${c.outcome} · quality ${(c.quality || 0).toFixed(2)} · ${cost.tool_calls || 0} call(s), ${cost.tool_failures || 0} failed · in ${fmtInt(cost.input_tokens || 0)} out ${fmtInt(cost.output_tokens || 0)}` +
      ` · ${c.extractor || 'template'}` + (c.refused ? ` (model refused: ${c.refused})` : ''), c.skill ? [' · skill ', entryLink(c.skill)] : null));
}

// skillBody shows a skill's procedure and its standing: maturity, confidence, and the cases that
// confirmed or weakened it.
function skillBody(k) {
  if (!k) return null;
  return el('div', { class: 'detail' },
    el('div', {}, el('b', {}, `${k.name} v${k.version}`), ' ', badge(k.maturity), el('span', { class: 'muted' }, ` confidence ${(k.confidence || 0).toFixed(2)} · confirmed ${k.confirmed || 0}, weakened ${k.weakened || 0}`)),
    (k.preconditions || []).length ? el('div', { class: 'muted' }, 'when: ' + k.preconditions.join('; ')) : null,
    el('ol', { class: 'steps' }, ...(k.steps || []).map((s) => el('li', {}, s.tool ? [el('span', { class: 'mono' }, s.tool), ' '] : null, s.text))),
    (k.pitfalls || []).length ? el('div', { class: 'why' }, 'pitfalls: ' + k.pitfalls.join('; ')) : null,
    (k.cases || []).length ? el('div', { class: 'muted' }, 'cases ', ...k.cases.flatMap((id, i) => [i ? ', ' : '', entryLink(id)])) : null);
}

// entryLink goes to one entry's address: the memory view shows just this entry.
function entryLink(id) {
  return el('a', { href: '#/memory/' + encodeURIComponent(id), class: 'mono', title: id }, short(id));
}

async function loadEntry(id) {
  try {
    const e = await api('/v1/memory/' + encodeURIComponent(id));
    $('m-rows').replaceChildren(memoryRow(e, null));
    $('m-rows').querySelector('details.history')?.setAttribute('open', '');
  } catch (err) { showError(err); }
}

// entryHistory shows what happened to an entry, oldest first: promoted, superseded (by whom, why),
// judged again, demoted, retired, quarantined by the lesson gate.
function entryHistory(e) {
  if (!(e.history || []).length) return null;
  return el('details', { class: 'history' }, el('summary', { class: 'muted' }, `history (${e.history.length})`),
    el('ol', {}, ...e.history.map((h) => el('li', {},
      el('span', { class: 'mono muted' }, h.at.replace('T', ' ').replace(/\.\d+/, '').replace('Z', ' UTC')), ' ', badge(h.event),
      h.other ? [' ', entryLink(h.other)] : null, h.reason ? ': ' + h.reason : null))));
}

// confirmDialog asks before a change that cannot be undone. The keyboard stays inside it (Tab
// cycles its two buttons, Escape says no), starts on the harmless answer, and returns where it was.
function confirmDialog(text) {
  return new Promise((resolve) => {
    const back = document.activeElement;
    $('confirm-text').textContent = text;
    $('confirm').hidden = false;
    $('confirm-no').focus();
    const keys = (ev) => {
      if (ev.key === 'Escape') { ev.preventDefault(); done(false); }
      if (ev.key === 'Tab') { ev.preventDefault(); (document.activeElement === $('confirm-yes') ? $('confirm-no') : $('confirm-yes')).focus(); }
    };
    const done = (v) => {
      $('confirm').hidden = true;
      $('confirm-yes').onclick = $('confirm-no').onclick = null;
      $('confirm').removeEventListener('keydown', keys);
      if (back && back.isConnected && !back.hidden) back.focus();
      resolve(v);
    };
    $('confirm').addEventListener('keydown', keys);
    $('confirm-yes').onclick = () => done(true);
    $('confirm-no').onclick = () => done(false);
  });
}

async function retire(e, evict) {
  const noun = e.kind && e.kind !== 'guideline' ? e.kind : 'guideline';
  const what = evict ? `Evict (delete) this ${noun} for good?` : `Retire this ${noun}? It stays listed but is never retrieved again.`;
  if (!await confirmDialog(`${what}\n\n${e.id}: ${clip(e.text, 200)}`)) return;
  try {
    await api('/v1/memory/' + encodeURIComponent(e.id) + '/retire', { method: 'POST', body: { evict, reason: 'from the console' } });
    await loadMemory();
  } catch (err) { showError(err); }
}

// Usage: stacked bars per hour or day.
async function loadUsage() {
  const since = $('u-since').value;
  const data = await api('/v1/usage?' + new URLSearchParams({ since, limit: '2000' }));
  const hourly = since === '24h';
  const step = hourly ? 3600e3 : 86400e3;
  const now = Date.now(), span = parseInt(since, 10) * 3600e3;
  const start = Math.floor((now - span) / step) * step;
  const n = Math.floor((now - start) / step) + 1;
  const labels = [];
  for (let i = 0; i < n; i++) {
    const d = new Date(start + i * step);
    labels.push(hourly ? d.getHours() + 'h' : `${d.getMonth() + 1}/${d.getDate()}`);
  }
  const costAgent = {}, tokModel = {}, costModel = {};
  const add = (m, key, i, v) => { (m[key] || (m[key] = new Array(n).fill(0)))[i] += v; };
  let total = 0, tokens = 0, unpriced = false;
  for (const s of data.sessions) {
    const i = Math.floor((new Date(s.time) - start) / step);
    if (i < 0 || i >= n) continue;
    const r = s.report;
    if (r.cost_usd === null) unpriced = true;
    add(costAgent, s.agent, i, r.cost_usd || 0);
    total += r.cost_usd || 0;
    for (const [m, u] of Object.entries(r.by_model || {})) {
      const t = u.input_tokens + u.output_tokens + u.cache_creation_input_tokens + u.cache_read_input_tokens;
      tokens += t;
      add(tokModel, m, i, t);
      add(costModel, m, i, (s.model_cost_usd || {})[m] || 0);
    }
  }
  $('u-total').textContent = `${data.sessions.length} session(s) · ${fmtCost(total)}${unpriced ? ' + unpriced models' : ''} · ${fmtInt(tokens)} tokens`;
  $('u-cost-agent').replaceChildren(...stackedBars(labels, costAgent, fmtCost));
  $('u-tokens-model').replaceChildren(...stackedBars(labels, tokModel, fmtInt));
  $('u-cost-model').replaceChildren(...stackedBars(labels, costModel, fmtCost));
}

function stackedBars(labels, series, fmt) {
  const W = 880, H = 170, L = 64, B = 20, T = 8;
  const names = Object.keys(series).sort();
  const totals = labels.map((_, i) => names.reduce((a, k) => a + series[k][i], 0));
  const max = Math.max(...totals, 0);
  const s = svg('svg', { width: W, height: H, viewBox: `0 0 ${W} ${H}`, role: 'img' });
  const ph = H - B - T, bw = (W - L - 8) / labels.length;
  s.append(svg('line', { x1: L, y1: T + ph, x2: W - 4, y2: T + ph, stroke: '#8c959f' }));
  s.append(svg('text', { x: L - 6, y: T + 10, 'text-anchor': 'end', 'font-size': 10, fill: '#57606a' }, max ? fmt(max) : '0'));
  s.append(svg('text', { x: L - 6, y: T + ph, 'text-anchor': 'end', 'font-size': 10, fill: '#57606a' }, '0'));
  const every = Math.ceil(labels.length / 12);
  labels.forEach((lab, i) => {
    const x = L + i * bw;
    let y = T + ph;
    names.forEach((k, j) => {
      const v = series[k][i];
      if (!v || !max) return;
      const h = v / max * ph;
      y -= h;
      s.append(svg('rect', { x: x + 1, y, width: Math.max(bw - 2, 1), height: h, fill: PALETTE[j % PALETTE.length] },
        svg('title', {}, `${k} ${lab}: ${fmt(v)}`)));
    });
    if (i % every === 0) s.append(svg('text', { x: x + bw / 2, y: H - 6, 'text-anchor': 'middle', 'font-size': 10, fill: '#57606a' }, lab));
  });
  const legend = el('div', { class: 'legend' }, names.length ? names.map((k, j) => el('span', {},
    svg('svg', { width: 10, height: 10 }, svg('rect', { width: 10, height: 10, fill: PALETTE[j % PALETTE.length] })), ' ', k,
    el('span', { class: 'muted' }, ' ' + fmt(series[k].reduce((a, b) => a + b, 0))))) : el('span', { class: 'muted' }, 'no usage in this window'));
  return [s, legend];
}

// Learning curve: a report of `skein eval --out FILE`, read in the browser (it never leaves it),
// one line per memory arm across the rounds.
function loadEvalReport(rep) {
  const arms = rep.arms || [];
  $('l-title').textContent = `suite ${rep.suite}: ${(rep.tasks || []).length} tasks, model ${rep.model}, ${rep.rounds} round(s)` + (rep.at ? `, run ${fmtTime(rep.at)}` : '');
  const pctf = (v) => `${Math.round(v * 100)}%`;
  $('l-success').replaceChildren(...curve(arms, (r) => r.success_rate, pctf, 1));
  $('l-first').replaceChildren(...curve(arms, (r) => r.first_try_rate, pctf, 1));
  $('l-tokens').replaceChildren(...curve(arms, (r) => r.input_tokens, fmtInt, 0));
  $('l-rows').replaceChildren(...arms.flatMap((a) => (a.rounds || []).map((r) => el('tr', {},
    el('td', {}, badge('memory ' + a.memory)), el('td', { class: 'num' }, r.round),
    el('td', { class: 'num' }, `${r.succeeded}/${r.tasks}`), el('td', { class: 'num' }, `${r.first_try}/${r.tasks}`),
    el('td', { class: 'num' }, r.tool_failures), el('td', { class: 'num' }, `${fmtInt(r.input_tokens)} / ${fmtInt(r.output_tokens)}`),
    el('td', { class: 'num' }, r.cost_known ? fmtCost(r.cost_usd) : '?'), el('td', { class: 'num' }, fmtSecs(r.wall_s)),
    el('td', { class: 'num' }, `${fmtInt(r.mining_input_tokens)} / ${fmtInt(r.mining_output_tokens)}`)))));
}

// curve draws one polyline per arm over the rounds; max is the y axis's top (0: the data's).
function curve(arms, value, fmt, max) {
  const W = 880, H = 170, L = 64, B = 20, T = 8;
  const rounds = Math.max(0, ...arms.map((a) => (a.rounds || []).length));
  const top = max || Math.max(1, ...arms.flatMap((a) => (a.rounds || []).map(value)));
  const s = svg('svg', { width: W, height: H, viewBox: `0 0 ${W} ${H}`, role: 'img' });
  const ph = H - B - T, dx = rounds > 1 ? (W - L - 24) / (rounds - 1) : 0;
  const at = (i, v) => [L + 8 + i * dx, T + ph - v / top * ph];
  s.append(svg('line', { x1: L, y1: T + ph, x2: W - 4, y2: T + ph, stroke: '#8c959f' }));
  s.append(svg('text', { x: L - 6, y: T + 10, 'text-anchor': 'end', 'font-size': 10, fill: '#57606a' }, fmt(top)));
  s.append(svg('text', { x: L - 6, y: T + ph, 'text-anchor': 'end', 'font-size': 10, fill: '#57606a' }, fmt(0)));
  for (let i = 0; i < rounds; i++) s.append(svg('text', { x: at(i, 0)[0], y: H - 6, 'text-anchor': 'middle', 'font-size': 10, fill: '#57606a' }, `round ${i + 1}`));
  arms.forEach((a, j) => {
    const pts = (a.rounds || []).map((r, i) => at(i, value(r)));
    s.append(svg('polyline', { points: pts.map((p) => p.join(',')).join(' '), fill: 'none', stroke: PALETTE[j % PALETTE.length], 'stroke-width': 2 }));
    (a.rounds || []).forEach((r, i) => s.append(svg('circle', { cx: pts[i][0], cy: pts[i][1], r: 3, fill: PALETTE[j % PALETTE.length] },
      svg('title', {}, `memory ${a.memory}, round ${i + 1}: ${fmt(value(r))}`))));
  });
  const legend = el('div', { class: 'legend' }, arms.map((a, j) => el('span', {},
    svg('svg', { width: 10, height: 10 }, svg('rect', { width: 10, height: 10, fill: PALETTE[j % PALETTE.length] })), ' memory ' + a.memory)));
  return [s, legend];
}

$('l-file').addEventListener('change', async (ev) => {
  const f = ev.target.files[0];
  if (!f) return;
  try { loadEvalReport(JSON.parse(await f.text())); showError(null); } catch (err) { showError(new Error(`${f.name} is not a report of skein eval --out: ${err.message}`)); }
});

// Dead letters.
async function loadDLQ() {
  const rows = await api('/v1/dlq?limit=500');
  $('q-rows').replaceChildren(...rows.reverse().map((d) => el('tr', {},
    el('td', {}, fmtTime(d.time)), el('td', { class: 'mono' }, d.subject), el('td', { class: 'mono' }, `${d.stream} #${d.sequence}`),
    el('td', { class: 'mono' }, d.consumer), el('td', { class: 'num' }, d.deliveries), el('td', {}, d.reason || ''), el('td', { class: 'num' }, d.bytes))));
  if (!rows.length) $('q-rows').append(el('tr', {}, el('td', { colspan: 7, class: 'muted' }, 'no dead letters')));
}

// The status filter offers every session status and outcome pkg/protocol knows (vocab.json).
async function loadVocabulary() {
  try {
    const r = await fetch('vocab.json');
    if (!r.ok) throw new Error(`vocab.json: ${r.status}`);
    const v = await r.json();
    $('s-status').replaceChildren(el('option', { value: '' }, 'any status'),
      el('optgroup', { label: 'status' }, v.session_statuses.map((x) => el('option', { value: x }, x))),
      el('optgroup', { label: 'outcome' }, v.outcomes.map((x) => el('option', { value: x }, x))));
  } catch (e) { showError(e); }
}

// Wiring.
for (const id of ['s-agent', 's-status', 's-since']) $(id).addEventListener('change', filtersChanged);
let typing = null;
$('s-q').addEventListener('input', () => { clearTimeout(typing); typing = setTimeout(filtersChanged, 250); });
$('start').addEventListener('submit', startTask);
$('t-task').addEventListener('keydown', (ev) => { if (ev.key === 'Enter' && (ev.ctrlKey || ev.metaKey)) $('start').requestSubmit(); });
$('d-cancel').addEventListener('click', cancelSession);
window.addEventListener('hashchange', route);
$('u-since').addEventListener('change', refresh);
$('m-search').addEventListener('submit', (e) => {
  e.preventDefault();
  if (location.hash !== '#/memory') history.pushState(null, '', '#/memory'); // from one entry's address back to the list's
  memoryLoaded = false;
  refresh();
});
for (const id of ['m-agent', 'm-kind', 'm-tier', 'm-status']) $(id).addEventListener('change', () => { memoryLoaded = false; refresh(); });
$('login-form').addEventListener('submit', (e) => {
  e.preventDefault();
  token = $('token').value.trim();
  sessionStorage.setItem('skein-token', token);
  $('login').hidden = true;
  route();
});
setInterval(() => { if (!document.hidden && view !== 'session' && view !== 'memory') refresh(); }, REFRESH_MS);
loadVocabulary().then(route);
