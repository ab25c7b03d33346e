// kafka-mirror-proxy dashboard. Polls /dashboard/api/state every second and renders mirrors,
// topics, partitions, lag charts, sync status and failures; the pause / resume / stop buttons
// POST to the /v1 REST routes. Every string from the server reaches the page through
// textContent / attributes only (never parsed as HTML). With a token-protected proxy the page
// asks for the admin token, keeps it in sessionStorage and sends it as a Bearer token.
'use strict';

(function () {
  const POLL_MS = 1000;
  const HISTORY = 120; // samples kept per mirror for the charts (2 minutes at one a second)
  const TOKEN_KEY = 'kmp-admin-token';
  const SVG = 'http://www.w3.org/2000/svg';
  // States in which the engine no longer fetches: the source offset (and so the lag) is stale.
  const STALE = new Set(['pausing', 'paused', 'stopping', 'stopped', 'failed']);
  const $ = (id) => document.getElementById(id);

  let token = sessionStorage.getItem(TOKEN_KEY) || '';
  let timer = null;
  let inflight = false;
  const history = new Map(); // mirror name -> [{records, seconds}]
  const views = new Map(); // mirror name -> {root, summary, charts, topics: Map, sync, buttons}

  // ---- small DOM helpers -------------------------------------------------------------------

  function el(tag, props, ...children) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(props || {})) {
      if (k === 'class') e.className = v;
      else if (k === 'text') e.textContent = v;
      else if (k === 'data') Object.assign(e.dataset, v);
      else e.setAttribute(k, v);
    }
    for (const c of children) e.append(c);
    return e;
  }

  function svg(tag, attrs) {
    const e = document.createElementNS(SVG, tag);
    for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, String(v));
    return e;
  }

  function show(node, visible) {
    node.classList.toggle('hidden', !visible);
  }

  function offset(n) {
    return typeof n === 'number' && n >= 0 ? String(n) : '–';
  }

  function seconds(s) {
    if (typeof s !== 'number') return '–';
    return s < 100 ? s.toFixed(1) + ' s' : Math.round(s) + ' s';
  }

  function ago(ms, now) {
    if (!ms) return 'never';
    const s = Math.max(0, Math.round((now - ms) / 1000));
    if (s < 60) return s + ' s ago';
    if (s < 3600) return Math.round(s / 60) + ' min ago';
    return Math.round(s / 3600) + ' h ago';
  }

  function authHeaders(extra) {
    const h = Object.assign({}, extra || {});
    if (token) h.Authorization = 'Bearer ' + token;
    return h;
  }

  async function bodyOf(r) {
    try {
      return await r.json();
    } catch (_) {
      return {};
    }
  }

  // ---- connection, token and notices ---------------------------------------------------------

  function setConnection(kind, text) {
    const c = $('connection');
    c.className = 'conn conn-' + kind;
    c.textContent = text;
  }

  function notice(kind, text) {
    const n = $('notice');
    n.className = 'notice notice-' + kind;
    n.textContent = text;
  }

  function needToken(status, message) {
    stopPolling();
    setConnection('error', status === 401 ? 'token needed' : 'refused');
    let why = message || 'The proxy refused the request.';
    if (token) why = 'The proxy refused the token given (HTTP ' + status + '). ' + why;
    $('auth-reason').textContent = why;
    show($('auth'), true);
    show($('forget-token'), !!token);
    $('token-input').focus();
  }

  function startPolling() {
    stopPolling();
    timer = setInterval(poll, POLL_MS);
    poll();
  }

  function stopPolling() {
    if (timer !== null) clearInterval(timer);
    timer = null;
  }

  async function poll() {
    if (inflight) return;
    inflight = true;
    try {
      const r = await fetch('/dashboard/api/state', { headers: authHeaders(), cache: 'no-store', credentials: 'omit' });
      if (r.status === 401 || r.status === 403) {
        needToken(r.status, (await bodyOf(r)).message);
        return;
      }
      if (!r.ok) {
        setConnection('error', 'HTTP ' + r.status + ': ' + ((await bodyOf(r)).message || r.statusText));
        return;
      }
      const data = await r.json();
      show($('auth'), false);
      show($('forget-token'), !!token);
      setConnection('ok', data.follower ? 'live · follower (read-only)' : 'live');
      $('updated').textContent = 'updated ' + new Date(data.now_ms).toLocaleTimeString();
      render(data);
    } catch (e) {
      setConnection('error', 'proxy unreachable');
    } finally {
      inflight = false;
    }
  }

  // ---- actions ---------------------------------------------------------------------------------

  async function act(mirror, op, topics) {
    if (op === 'stop' && !window.confirm('Stop (fail over) ' + topics.join(', ') + ' of mirror ' + mirror +
        '? The destination topics become writable and mirroring of them ends.')) {
      return;
    }
    notice('info', op + ' ' + topics.join(', ') + '…');
    try {
      const r = await fetch('/v1/mirrors/' + encodeURIComponent(mirror) + '/' + op, {
        method: 'POST',
        headers: authHeaders({ 'Content-Type': 'application/json' }),
        body: JSON.stringify({ topics: topics }),
        cache: 'no-store',
        credentials: 'omit',
      });
      const body = await bodyOf(r);
      if (r.status === 401 || r.status === 403) {
        notice('error', op + ' refused (HTTP ' + r.status + '): ' + (body.message || ''));
        needToken(r.status, body.message);
        return;
      }
      if (!r.ok) {
        notice('error', op + ' failed (HTTP ' + r.status + '): ' + (body.message || body.error || ''));
        return;
      }
      const bad = (body.results || []).filter((x) => x.error_code !== 0);
      if (bad.length) {
        notice('error', op + ': ' + bad.map((x) => x.topic + ': ' + x.error + (x.message ? ' (' + x.message + ')' : '')).join('; '));
      } else {
        notice('ok', op + ' accepted for ' + topics.join(', '));
      }
    } catch (e) {
      notice('error', op + ' failed: proxy unreachable');
    }
    poll();
  }

  function actionButtons(mirror, topicsOf, scope) {
    const box = el('span', { class: 'actions' });
    const buttons = {};
    for (const [op, label] of [['pause', 'Pause'], ['resume', 'Resume'], ['stop', 'Stop (failover)']]) {
      const b = el('button', { type: 'button', class: 'btn btn-' + op, text: scope ? label + ' all' : label, data: { action: op } });
      b.addEventListener('click', () => act(mirror, op, topicsOf()));
      buttons[op] = b;
      box.append(b);
    }
    return { box, buttons };
  }

  function enable(buttons, desired) {
    buttons.pause.disabled = !desired.has('mirroring');
    buttons.resume.disabled = !desired.has('paused');
    buttons.stop.disabled = desired.size === 0 || (desired.size === 1 && desired.has('stopped'));
  }

  // ---- rendering ------------------------------------------------------------------------------

  function render(data) {
    const names = new Set(data.mirrors.map((m) => m.name));
    for (const [name, v] of views) {
      if (!names.has(name)) {
        v.root.remove();
        views.delete(name);
        history.delete(name);
      }
    }
    const main = $('mirrors');
    for (const m of data.mirrors) {
      let v = views.get(m.name);
      if (!v) {
        v = mirrorView(m.name);
        views.set(m.name, v);
      }
      main.append(v.root); // keeps the sorted order
      updateMirror(v, m, data.now_ms, data.follower);
    }
    show($('empty'), data.mirrors.length === 0);
    renderFailed(data.mirrors);
  }

  function mirrorView(name) {
    const v = { name, topics: new Map(), current: [] };
    const all = actionButtons(name, () => v.current, true);
    v.buttons = all.buttons;
    v.source = el('span', { class: 'source' });
    v.summary = el('div', { class: 'summary' });
    v.chartRecords = chart('Lag (records, all partitions)', 'records');
    v.chartSeconds = chart('Lag (seconds, worst partition)', 'seconds');
    v.topicBox = el('div', { class: 'topics' });
    v.syncBody = el('tbody');
    v.root = el('section', { class: 'mirror', data: { mirror: name } },
      el('div', { class: 'mirror-head' },
        el('h2', { class: 'mirror-name', text: name }), v.source, all.box),
      v.summary,
      el('div', { class: 'charts' }, v.chartRecords.root, v.chartSeconds.root),
      v.topicBox,
      el('div', { class: 'sync' },
        el('h3', { text: 'Metadata sync' }),
        el('table', {},
          el('thead', {}, row('th', ['Kind', 'Interval', 'Runs', 'Last run', 'Last success', 'Synced', 'Skipped (active)', 'Applied', 'Errors', 'Last error'])),
          v.syncBody)));
    return v;
  }

  function row(cell, texts) {
    return el('tr', {}, ...texts.map((t) => el(cell, { text: t })));
  }

  function updateMirror(v, m, now, follower) {
    v.source.textContent = 'source: ' + m.source_bootstrap;
    v.current = m.topics.map((t) => t.topic);
    let records = 0;
    let worst = 0;
    let partitions = 0;
    const states = new Map();
    const desired = new Set();
    for (const t of m.topics) {
      if (t.desired) desired.add(t.desired);
      for (const p of t.partitions) {
        partitions += 1;
        states.set(p.state, (states.get(p.state) || 0) + 1);
        if (p.lag > 0) records += p.lag;
        worst = Math.max(worst, p.lag_seconds || 0);
      }
    }
    enable(v.buttons, follower ? new Set() : desired);
    v.summary.replaceChildren(
      el('span', { class: 'pill', text: m.topics.length + (m.topics.length === 1 ? ' topic' : ' topics') }),
      el('span', { class: 'pill', text: partitions + (partitions === 1 ? ' partition' : ' partitions') }),
      el('span', { class: 'pill pill-lag', data: { lagRecords: String(records) }, text: 'lag ' + records + ' records' }),
      el('span', { class: 'pill pill-lag', data: { lagSeconds: String(worst) }, text: 'lag ' + seconds(worst) }),
      ...[...states.entries()].sort().map(([s, n]) => el('span', { class: 'state state-' + s, text: n + ' ' + s.toUpperCase() })));

    const h = history.get(m.name) || [];
    h.push({ records, seconds: worst });
    while (h.length > HISTORY) h.shift();
    history.set(m.name, h);
    v.chartRecords.draw(h.map((x) => x.records), (x) => String(Math.round(x)));
    v.chartSeconds.draw(h.map((x) => x.seconds), seconds);

    const seen = new Set();
    for (const t of m.topics) {
      seen.add(t.topic);
      let tv = v.topics.get(t.topic);
      if (!tv) {
        tv = topicView(m.name, t.topic);
        v.topics.set(t.topic, tv);
      }
      v.topicBox.append(tv.root);
      updateTopic(tv, t, follower);
    }
    for (const [name, tv] of v.topics) {
      if (!seen.has(name)) {
        tv.root.remove();
        v.topics.delete(name);
      }
    }
    v.syncBody.replaceChildren(...m.sync.map((s) => {
      const off = s.interval_ms === 0 && s.runs === 0;
      const tr = el('tr', { data: { kind: s.kind }, class: s.last_error ? 'sync-error' : '' },
        el('td', { text: s.kind.replace(/_/g, ' ') }),
        el('td', { text: off ? 'off' : seconds(s.interval_ms / 1000) }),
        el('td', { text: String(s.runs) }),
        el('td', { text: ago(s.last_run_ms, now) }),
        el('td', { text: ago(s.last_success_ms, now) }),
        el('td', { text: String(s.synced) }),
        el('td', { text: String(s.skipped_active_groups) }),
        el('td', { text: String(s.applied_total) }),
        el('td', { text: String(s.errors_total) }),
        el('td', { class: 'reason', text: s.last_error || '' }));
      return tr;
    }));
  }

  function topicView(mirror, topic) {
    const tv = {};
    const acts = actionButtons(mirror, () => [topic], false);
    tv.buttons = acts.buttons;
    tv.desired = el('span', { class: 'desired' });
    tv.lag = el('span', { class: 'topic-lag' });
    tv.body = el('tbody');
    tv.root = el('div', { class: 'topic', data: { topic } },
      el('div', { class: 'topic-head' }, el('h3', { class: 'topic-name', text: topic }), tv.desired, tv.lag, acts.box),
      el('table', { class: 'partitions' },
        el('thead', {}, row('th', ['Partition', 'State', 'Source offset', 'Destination offset', 'Lag (records)', 'Lag (s)', 'Records copied', 'Fillers', 'Last error'])),
        tv.body));
    return tv;
  }

  function updateTopic(tv, t, follower) {
    tv.desired.textContent = t.desired ? 'desired: ' + t.desired.toUpperCase() : 'not running';
    tv.desired.className = 'desired desired-' + (t.desired || 'none');
    tv.root.dataset.desired = t.desired || '';
    const lag = t.partitions.reduce((a, p) => a + Math.max(0, p.lag), 0);
    tv.lag.textContent = 'lag ' + lag + ' records';
    enable(tv.buttons, follower || !t.desired ? new Set() : new Set([t.desired]));
    tv.body.replaceChildren(...t.partitions.map((p) => el('tr', { class: 'row-' + p.state, data: { partition: String(p.partition), state: p.state } },
      el('td', { class: 'num', text: p.partition < 0 ? 'topic' : String(p.partition) }),
      el('td', {}, el('span', { class: 'state state-' + p.state, text: p.state.toUpperCase() })),
      el('td', STALE.has(p.state)
        ? { class: 'num source-offset stale', title: 'as of the last fetch: not refreshed while the partition does not copy', text: offset(p.source_offset) }
        : { class: 'num source-offset', text: offset(p.source_offset) }),
      el('td', { class: 'num destination-offset', text: offset(p.destination_offset) }),
      el('td', { class: 'num lag-records', text: p.lag < 0 ? '?' : String(p.lag) }),
      el('td', { class: 'num lag-seconds', text: seconds(p.lag_seconds) }),
      el('td', { class: 'num', text: String(p.records) }),
      el('td', { class: 'num', text: String(p.fillers) }),
      el('td', { class: 'reason', text: p.last_error || '' }))));
  }

  function renderFailed(mirrors) {
    const rows = [];
    for (const m of mirrors) {
      for (const t of m.topics) {
        for (const p of t.partitions) {
          if (p.state !== 'failed') continue;
          rows.push(el('tr', { data: { mirror: m.name, topic: t.topic, partition: String(p.partition) } },
            el('td', { text: m.name }),
            el('td', { text: t.topic }),
            el('td', { class: 'num', text: p.partition < 0 ? 'whole topic' : String(p.partition) }),
            el('td', { class: 'reason', text: p.last_error || '(no reason recorded)' })));
        }
      }
    }
    $('failed-rows').replaceChildren(...rows);
    show($('failed'), rows.length > 0);
  }

  // ---- the lag chart: an inline SVG line over the last HISTORY samples -----------------------

  function chart(title, series) {
    const W = 560;
    const H = 130;
    const PAD = { l: 8, r: 8, t: 10, b: 18 };
    const root = el('figure', { class: 'chart', data: { series } });
    const caption = el('figcaption', {}, el('span', { text: title }));
    const current = el('span', { class: 'chart-now' });
    caption.append(current);
    const s = svg('svg', { viewBox: `0 0 ${W} ${H}`, preserveAspectRatio: 'none', role: 'img', 'aria-label': title, class: 'chart-svg' });
    const grid = svg('g', { class: 'grid' });
    const area = svg('path', { class: 'area' });
    const line = svg('polyline', { class: 'line', fill: 'none' });
    const maxLabel = svg('text', { x: PAD.l + 2, y: PAD.t + 9, class: 'axis' });
    const span = svg('text', { x: W - PAD.r - 2, y: H - 4, class: 'axis', 'text-anchor': 'end' });
    s.append(grid, area, line, maxLabel, span);
    root.append(caption, s);
    for (let i = 0; i <= 4; i++) {
      const y = PAD.t + ((H - PAD.t - PAD.b) * i) / 4;
      grid.append(svg('line', { x1: PAD.l, x2: W - PAD.r, y1: y, y2: y }));
    }
    function draw(values, fmt) {
      const max = Math.max(1, ...values);
      const n = HISTORY;
      const x = (i) => PAD.l + ((W - PAD.l - PAD.r) * (n - values.length + i)) / (n - 1);
      const y = (v) => PAD.t + (H - PAD.t - PAD.b) * (1 - v / max);
      const pts = values.map((v, i) => x(i).toFixed(1) + ',' + y(v).toFixed(1));
      line.setAttribute('points', pts.join(' '));
      if (values.length > 1) {
        area.setAttribute('d', 'M' + x(0).toFixed(1) + ',' + y(0) + ' L' + pts.join(' L') + ' L' + x(values.length - 1).toFixed(1) + ',' + y(0) + ' Z');
      } else {
        area.setAttribute('d', '');
      }
      maxLabel.textContent = 'max ' + fmt(max);
      span.textContent = 'last ' + Math.round((values.length * POLL_MS) / 1000) + ' s';
      const last = values.length ? values[values.length - 1] : 0;
      current.textContent = fmt(last);
      root.dataset.points = String(values.length);
      root.dataset.last = String(last);
    }
    return { root, draw };
  }

  // ---- start -----------------------------------------------------------------------------------

  $('auth-form').addEventListener('submit', (ev) => {
    ev.preventDefault();
    token = $('token-input').value.trim();
    $('token-input').value = '';
    if (token) sessionStorage.setItem(TOKEN_KEY, token);
    else sessionStorage.removeItem(TOKEN_KEY);
    show($('auth'), false);
    startPolling();
  });
  $('forget-token').addEventListener('click', () => {
    token = '';
    sessionStorage.removeItem(TOKEN_KEY);
    show($('forget-token'), false);
    startPolling();
  });
  startPolling();
})();
