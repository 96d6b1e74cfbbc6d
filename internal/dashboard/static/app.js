// Turnstile dashboard: renders what the server's event stream says, and sends the user's
// actions back as plain API calls. Every value from the cluster is put in the page with
// textContent or a checked href, never parsed as HTML.
'use strict';

(() => {
  const params = new URLSearchParams(location.search);
  const token = params.get('token') || '';
  const ALL = '*';

  const state = {
    me: null,
    ns: params.has('ns') ? params.get('ns') : null, // null: the kubeconfig's namespace
    keys: new Map(),     // id -> key
    bodies: new Map(),   // id -> <tbody>
    freezes: [],
    collapsed: new Set(),
    offset: 0,           // server clock - browser clock, ms
    source: null,
    filter: '',
    namespaces: null,    // the selector's options as last sent
    tab: params.get('tab') === 'fleet' ? 'fleet' : 'locks',
    fleet: {served: false, spokes: new Map(), summary: null, problem: ''}, // spokes: name -> row
  };

  const $ = (id) => document.getElementById(id);

  // el builds an element: el('td', {class: 'x', 'data-label': 'Key'}, 'text', child...).
  function el(tag, attrs, ...children) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === undefined || v === null || v === false) continue;
      if (k === 'class') e.className = v;
      else if (k === 'hidden') e.hidden = true;
      else e.setAttribute(k, v === true ? '' : String(v));
    }
    for (const c of children) {
      if (c === undefined || c === null || c === false) continue;
      e.append(c instanceof Node ? c : document.createTextNode(String(c)));
    }
    return e;
  }

  // safeHref accepts only absolute http(s) URLs (the server checked too).
  function safeHref(u) {
    if (!u) return null;
    try {
      const p = new URL(u);
      return (p.protocol === 'http:' || p.protocol === 'https:') ? p.href : null;
    } catch (_) {
      return null;
    }
  }

  function who(name, url) {
    const href = safeHref(url);
    if (!href) return el('span', {class: 'who'}, name);
    return el('a', {class: 'who', href, rel: 'noopener noreferrer nofollow', target: '_blank'}, name);
  }

  // --- time -------------------------------------------------------------------------------

  const serverNow = () => Date.now() + state.offset;

  function fmtDur(ms) {
    let s = Math.max(0, Math.floor(ms / 1000));
    const d = Math.floor(s / 86400); s -= d * 86400;
    const h = Math.floor(s / 3600); s -= h * 3600;
    const m = Math.floor(s / 60); s -= m * 60;
    if (d > 0) return `${d}d ${h}h`;
    if (h > 0) return `${h}h ${String(m).padStart(2, '0')}m`;
    if (m > 0) return `${m}m ${String(s).padStart(2, '0')}s`;
    return `${s}s`;
  }

  // A <time> whose text counts: kind "in" (until a moment) or "ago" (since a moment).
  function clock(iso, kind) {
    if (!iso) return el('span', {class: 'none'}, '—');
    const t = el('time', {datetime: iso, title: new Date(iso).toLocaleString(), 'data-clock': kind});
    tickOne(t);
    return t;
  }

  function tickOne(t) {
    const at = Date.parse(t.getAttribute('datetime'));
    const left = at - serverNow();
    let text;
    if (t.dataset.clock === 'in') {
      text = left > 0 ? fmtDur(left) : 'expired';
      t.classList.toggle('soon', left > 0 && left < 60000);
      t.classList.toggle('past', left <= 0);
    } else {
      text = `${fmtDur(-left)} ago`;
    }
    if (t.textContent !== text) t.textContent = text;
  }

  function tickAll() {
    document.querySelectorAll('time[data-clock]').forEach(tickOne);
  }

  // --- rendering ----------------------------------------------------------------------------

  function isMine(owner) {
    return state.me && state.me.user && owner === state.me.user;
  }

  function button(label, action, focusId, attrs) {
    return el('button', Object.assign({type: 'button', 'data-action': action, 'data-focus': focusId}, attrs || {}), label);
  }

  function keyLabel(k) {
    return state.ns === ALL ? `${k.namespace}: ${k.key}` : k.key;
  }

  function renderKey(k) {
    const body = el('tbody', {class: 'key', 'data-id': k.id});
    const queueId = `queue-${cssId(k.id)}`;
    const open = !state.collapsed.has(k.id);

    const keyCell = el('th', {scope: 'rowgroup', class: 'key-name', 'data-label': 'Key'});
    if (state.ns === ALL) keyCell.append(el('span', {class: 'ns'}, k.namespace), ' ');
    keyCell.append(el('span', {class: 'key-text'}, k.key));
    if (k.deleting) keyCell.append(' ', el('span', {class: 'badge warn'}, 'force-unlock in progress'));
    else if (!k.uid) keyCell.append(' ', el('span', {class: 'badge'}, 'no ProjectLock yet'));

    const holderCell = el('td', {class: 'holder', 'data-label': 'Holder'});
    if (k.holder) {
      const h = k.holder;
      holderCell.append(who(h.who, h.url));
      if (h.workload) holderCell.append(' ', el('span', {class: 'badge workload', title: 'the gated Pod or Job that holds it'}, h.workload));
      if (h.command) holderCell.append(' ', el('span', {class: 'badge cmd'}, h.command));
      if (h.reason) holderCell.append(' ', el('span', {class: 'badge warn reason'}, h.reason));
      const via = h.requests.map((r) => r.name).join(', ');
      holderCell.append(el('div', {class: 'sub'}, `via ${via}, since `, clock(h.since, 'ago')));
    } else if (k.shared && k.shared.length) {
      holderCell.append(el('span', {class: 'badge shared'}, `shared by ${k.shared.length}`));
      for (const h of k.shared) {
        const line = el('div', {class: 'shared-holder'}, who(h.who, h.url));
        if (h.command) line.append(' ', el('span', {class: 'badge cmd'}, h.command));
        if (h.reason) line.append(' ', el('span', {class: 'badge warn reason'}, h.reason));
        line.append(el('div', {class: 'sub'}, `via ${h.requests.map((r) => r.name).join(', ')}, token ${h.token}, since `, clock(h.since, 'ago')));
        holderCell.append(line);
      }
    } else {
      holderCell.append(el('span', {class: 'free'}, 'free'));
    }

    const tokenCell = el('td', {class: 'token', 'data-label': 'Token'}, k.token || '—');
    const expiresCell = el('td', {class: 'expires', 'data-label': 'Expires in'},
      k.holder && k.holder.expires ? clock(k.holder.expires, 'in') : '—');

    const queueCell = el('td', {class: 'queue-count', 'data-label': 'Queue'});
    if (k.queueLength > 0) {
      queueCell.append(button(`${k.queueLength} waiting`, 'toggle', `toggle`,
        {'aria-expanded': String(open), 'aria-controls': queueId, class: 'linkish'}));
    } else {
      queueCell.append(el('span', {class: 'none'}, 'nobody waiting'));
    }

    const actions = el('td', {class: 'actions', 'data-label': 'Actions'});
    if (k.uid && !k.deleting) actions.append(button('Force-unlock', 'force-unlock', 'force-unlock', {class: 'danger'}));
    if (k.holder) {
      for (const r of k.holder.requests) {
        if (isMine(k.holder.owner)) actions.append(button(`Release ${r.name}`, 'release-holder', `release-${r.name}`, {'data-request': r.name}));
      }
    }
    for (const h of k.shared || []) {
      for (const r of h.requests) {
        if (isMine(h.owner)) actions.append(button(`Release ${r.name}`, 'release-holder', `release-${r.name}`, {'data-request': r.name}));
      }
    }

    body.append(el('tr', {class: 'key-row'}, keyCell, holderCell, tokenCell, expiresCell, queueCell, actions));

    if (k.queue.length > 0) {
      const qt = el('table', {class: 'queue', id: queueId});
      qt.append(el('caption', {class: 'visually-hidden'}, `Queue for ${keyLabel(k)}`));
      qt.append(el('thead', {}, el('tr', {},
        el('th', {scope: 'col'}, '#'), el('th', {scope: 'col'}, 'Request'), el('th', {scope: 'col'}, 'Who'),
        el('th', {scope: 'col'}, 'Priority'), el('th', {scope: 'col'}, 'Aged'), el('th', {scope: 'col'}, 'Waiting since'),
        el('th', {scope: 'col'}, 'Why'), el('th', {scope: 'col'}, el('span', {class: 'visually-hidden'}, 'Actions')))));
      const qb = el('tbody');
      for (const w of k.queue) {
        const mine = isMine(w.owner);
        const why = el('td', {class: 'why', 'data-label': 'Why'});
        if (w.reason) why.append(el('span', {class: `badge ${w.reason === 'CommandLocked' ? 'warn' : ''}`}, w.reason), ' ');
        if (w.message) why.append(w.message);
        const act = el('td', {class: 'actions', 'data-label': 'Actions'});
        if (mine && w.uid) act.append(button('Release', 'release', `release-${w.request}`, {'data-request': w.request}));
        const whoCell = el('td', {class: 'who-cell', 'data-label': 'Who'}, who(w.who, w.url));
        if (w.workload) whoCell.append(' ', el('span', {class: 'badge workload', title: 'the gated Pod or Job that waits'}, w.workload));
        if (w.command) whoCell.append(' ', el('span', {class: 'badge cmd'}, w.command));
        qb.append(el('tr', {class: mine ? 'waiter mine' : 'waiter', 'data-request': w.request},
          el('td', {class: 'pos', 'data-label': '#'}, w.position > 0 ? String(w.position) : 'new'),
          el('th', {scope: 'row', class: 'request', 'data-label': 'Request'}, w.request),
          whoCell,
          el('td', {class: 'priority', 'data-label': 'Priority'}, w.priority),
          el('td', {class: 'aged', 'data-label': 'Aged'}, w.aged),
          el('td', {class: 'since', 'data-label': 'Waiting since'}, clock(w.since, 'ago')),
          why, act));
      }
      qt.append(qb);
      const row = el('tr', {class: 'queue-row'}, el('td', {colspan: '6'}, qt));
      if (!open) row.hidden = true;
      body.append(row);
    }
    body.hidden = !matchesFilter(k);
    return body;
  }

  function cssId(s) {
    return s.replace(/[^A-Za-z0-9_-]/g, '_');
  }

  // matchesFilter reads the filter as words: cluster:NAME keeps the keys a holder or waiter in
  // that fleet cluster holds or waits for (the Fleet tab's "Show its requests"); the rest is
  // searched for in the key's text.
  function matchesFilter(k) {
    const words = state.filter.split(/\s+/).filter((w) => w);
    const clusters = words.filter((w) => w.startsWith('cluster:')).map((w) => w.slice('cluster:'.length));
    const f = words.filter((w) => !w.startsWith('cluster:')).join(' ');
    if (clusters.length) {
      const inKey = [k.holder, ...(k.shared || []), ...k.queue].filter((x) => x && x.cluster).map((x) => x.cluster);
      if (!clusters.some((c) => inKey.includes(c))) return false;
    }
    if (!f) return true;
    const hay = [k.key, k.namespace, k.name, k.holder && k.holder.who, k.holder && k.holder.workload, k.holder && k.holder.requests.map((r) => r.name).join(' '),
      ...(k.shared || []).map((h) => `${h.who} ${h.requests.map((r) => r.name).join(' ')}`),
      ...k.queue.map((w) => `${w.request} ${w.who} ${w.workload || ''}`)].join(' ').toLowerCase();
    return hay.includes(f);
  }

  // putKey renders a key and brings its rows up to date in place (morph): a control the update
  // does not change stays the same node, so keyboard focus stays on it, and a click whose press
  // and release straddle an update of a busy key still lands on it.
  function putKey(k) {
    state.keys.set(k.id, k);
    const old = state.bodies.get(k.id);
    const body = renderKey(k);
    if (!old) {
      state.bodies.set(k.id, body);
      return;
    }
    const focused = old.contains(document.activeElement) ? document.activeElement.getAttribute('data-focus') : null;
    const now = morph(old, body);
    state.bodies.set(k.id, now);
    if (focused && !now.contains(document.activeElement)) {
      const again = now.querySelector(`[data-focus="${CSS.escape(focused)}"]`);
      if (again) again.focus();
    }
  }

  // morph makes the node have look like want and returns the node that is then in the page. A
  // node of the same tag and identity (id, data-id, data-request) is kept, its attributes and
  // children brought up to date; any other is replaced by want.
  function morph(have, want) {
    const same = have.nodeType === want.nodeType && have.nodeName === want.nodeName &&
      (have.nodeType !== Node.ELEMENT_NODE || ['id', 'data-id', 'data-request'].every((a) => have.getAttribute(a) === want.getAttribute(a)));
    if (!same) {
      have.replaceWith(want);
      return want;
    }
    if (have.nodeType !== Node.ELEMENT_NODE) {
      if (have.nodeValue !== want.nodeValue) have.nodeValue = want.nodeValue;
      return have;
    }
    for (const a of [...have.attributes]) {
      if (!want.hasAttribute(a.name)) have.removeAttribute(a.name);
    }
    for (const a of want.attributes) {
      if (have.getAttribute(a.name) !== a.value) have.setAttribute(a.name, a.value);
    }
    const hc = [...have.childNodes];
    const wc = [...want.childNodes];
    wc.forEach((w, i) => (i < hc.length ? morph(hc[i], w) : have.append(w)));
    for (const h of hc.slice(wc.length)) h.remove();
    return have;
  }

  function compareKeys(a, b) {
    return a.namespace.localeCompare(b.namespace) || a.key.localeCompare(b.key) || a.name.localeCompare(b.name);
  }

  // order puts the key bodies in order, moving only when the order changed.
  function order() {
    const table = $('keys');
    const want = [...state.keys.values()].sort(compareKeys).map((k) => state.bodies.get(k.id));
    const have = [...table.tBodies];
    if (want.length !== have.length || want.some((b, i) => b !== have[i])) {
      for (const b of want) table.append(b);
    }
    const n = state.keys.size;
    $('no-keys').hidden = n > 0;
    table.hidden = n === 0;
    count();
  }

  // count says how many keys there are, and how many the filter shows.
  function count() {
    const n = state.keys.size;
    const shown = [...state.bodies.values()].filter((b) => !b.hidden).length;
    $('keys-count').textContent = shown === n ? `(${n})` : `(${shown} of ${n} shown)`;
  }

  function renderFreezes(list) {
    state.freezes = list;
    const tb = $('freezes').tBodies[0];
    tb.replaceChildren(...list.map((f) => {
      let drained = 'not yet reported';
      if (f.drained === 'True') drained = 'Drained';
      else if (f.drained === 'False') drained = `Draining: ${f.active} ${f.active === 1 ? 'holder' : 'holders'} left`;
      const reason = el('td', {class: 'reason', 'data-label': 'Reason'}, f.reason || el('span', {class: 'none'}, 'no reason given'));
      if (f.message && f.message !== '') reason.append(el('div', {class: 'sub'}, f.message));
      return el('tr', {class: 'freeze', 'data-command': f.command},
        el('th', {scope: 'row', 'data-label': 'Command'}, f.command),
        reason,
        el('td', {class: 'until', 'data-label': 'Until'}, f.until ? clock(f.until, 'in') : 'thawed by hand'),
        el('td', {class: 'active', 'data-label': 'Holders'}, String(f.active)),
        el('td', {class: 'blocked', 'data-label': 'Waiting'}, String(f.blocked)),
        el('td', {class: `drained ${f.drained === 'True' ? 'ok' : 'warn'}`, 'data-label': 'Drained'}, drained),
        el('td', {class: 'actions', 'data-label': 'Actions'}, button('Thaw', 'thaw', `thaw-${f.command}`, {'data-command': f.command})));
    }));
    $('freezes').hidden = list.length === 0;
    $('no-freezes').hidden = list.length > 0;
  }

  function renderEvents(list) {
    const tb = $('events').tBodies[0];
    tb.replaceChildren(...list.map((e) => el('tr', {class: 'event', 'data-reason': e.reason},
      el('td', {'data-label': 'When'}, clock(e.time, 'ago'), e.count > 1 ? ` (×${e.count})` : ''),
      el('td', {'data-label': 'Reason'}, el('span', {class: 'badge warn'}, e.reason)),
      el('td', {'data-label': 'Object'}, state.ns === ALL ? `${e.namespace}/${e.object}` : e.object),
      el('td', {class: 'message', 'data-label': 'Message'}, e.message))));
    $('events').hidden = list.length === 0;
    $('no-events').hidden = list.length > 0;
  }

  function renderProblems(list) {
    $('problems').replaceChildren(...list.map((p) => el('p', {class: 'problem', 'data-resource': p.resource}, p.message)));
  }

  function renderNamespaces(n) {
    state.namespaces = n;
    const sel = $('ns');
    if (state.ns === null) state.ns = n.default || '';
    const opts = [];
    opts.push(el('option', {value: ALL, disabled: !n.all && state.ns !== ALL}, n.all ? 'All namespaces' : 'All namespaces (not allowed)'));
    const names = n.items.map((i) => i.name);
    for (const i of n.items) {
      opts.push(el('option', {value: i.name, disabled: !i.allowed && i.name !== state.ns}, i.allowed ? i.name : `${i.name} (no access)`));
    }
    if (state.ns !== ALL && state.ns !== '' && !names.includes(state.ns)) {
      opts.push(el('option', {value: state.ns}, state.ns));
    }
    sel.replaceChildren(...opts);
    sel.value = state.ns === '' ? ALL : state.ns;
    const p = $('ns-problem');
    p.textContent = n.problem || '';
    p.hidden = !n.problem;
  }

  function applyView(v) {
    state.offset = Date.parse(v.now) - Date.now();
    for (const b of state.bodies.values()) b.remove();
    state.keys.clear();
    state.bodies.clear();
    for (const k of v.keys) putKey(k);
    order();
    renderFreezes(v.freezes);
    renderEvents(v.events);
    renderProblems(v.problems);
  }

  function applyPatch(p) {
    state.offset = Date.parse(p.now) - Date.now();
    for (const id of p.remove || []) {
      const b = state.bodies.get(id);
      if (b) b.remove();
      state.bodies.delete(id);
      state.keys.delete(id);
    }
    for (const k of p.upsert || []) putKey(k);
    if (p.upsert || p.remove) order();
    if (p.freezes) renderFreezes(p.freezes);
    if (p.events) renderEvents(p.events);
    if (p.problems) renderProblems(p.problems);
  }


  // --- the Fleet tab ------------------------------------------------------------------------

  const CONNECTION_CLASS = {Connected: 'ok', Unreachable: 'bad', Never: 'warn'};

  function fmtSkew(ms) {
    return ms < 1000 ? `${ms} ms` : `${(ms / 1000).toFixed(3)} s`;
  }

  function renderSpoke(s) {
    const name = el('th', {scope: 'row', class: 'cluster', 'data-label': 'Cluster'}, el('span', {class: 'cluster-name'}, s.name));
    if (s.stale) name.append(' ', el('span', {class: 'badge warn', title: 'the hub has not updated its status since the member changed'}, 'status not updated yet'));
    if (s.labels.length) name.append(el('div', {class: 'sub labels'}, s.labels.join(', ')));
    if (s.agentVersion) name.append(el('div', {class: 'sub agent', title: "the version of the spoke's agent"}, `agent ${s.agentVersion}`));
    const ready = el('td', {class: 'ready', 'data-label': 'Ready'});
    if (s.ready === 'True') ready.append(el('span', {class: 'ok'}, 'Ready'));
    else ready.append(el('span', {class: 'not-ready'}, s.ready === 'False' ? 'Not ready' : 'Not reported yet'));
    if (s.reason) ready.append(' ', el('span', {class: `badge ${s.connection === 'Unreachable' ? 'bad' : 'warn'} reason`}, s.reason));
    if (s.message) ready.append(el('div', {class: 'sub message'}, s.message));
    const actions = el('td', {class: 'actions', 'data-label': 'Actions'});
    if (s.holders + s.waiters > 0) {
      actions.append(button('Show its requests', 'spoke-requests', `requests-${s.name}`,
        {'data-cluster': s.name, title: `the keys ${s.name}'s requests on the hub hold or wait for`}));
    }
    return el('tr', {class: `spoke ${s.connection.toLowerCase()}`, 'data-name': s.name},
      name,
      el('td', {class: 'connection', 'data-label': 'Connection'}, el('span', {class: `badge ${CONNECTION_CLASS[s.connection] || ''}`}, s.connection)),
      el('td', {class: 'since', 'data-label': 'Since'}, clock(s.since, 'ago')),
      el('td', {class: 'heartbeat', 'data-label': 'Last heartbeat'}, clock(s.heartbeat, 'ago')),
      el('td', {class: 'skew', 'data-label': 'Clock skew'}, s.skewMilliseconds === undefined || s.skewMilliseconds === null ? '—' : fmtSkew(s.skewMilliseconds)),
      el('td', {class: 'holders', 'data-label': 'Holders'}, String(s.holders)),
      el('td', {class: 'waiters', 'data-label': 'Waiters'}, String(s.waiters)),
      ready, actions);
  }

  // renderFleet brings the Fleet tab, and whether it is offered, up to date. The rows are
  // morphed in place, so a focused button stays focused across a heartbeat.
  function renderFleet() {
    const f = state.fleet;
    const rows = [...f.spokes.values()].sort((a, b) => a.name.localeCompare(b.name));
    const table = $('fleet');
    morph(table.tBodies[0], el('tbody', {}, ...rows.map(renderSpoke)));
    table.hidden = rows.length === 0;
    const p = $('fleet-problem');
    p.textContent = f.problem || '';
    p.hidden = !f.problem;
    const sum = f.summary;
    $('fleet-count').textContent = rows.length ? `(${rows.length})` : '';
    $('fleet-summary').textContent = sum && sum.spokes ?
      `(${sum.spokes} ${sum.spokes === 1 ? 'spoke' : 'spokes'}: ${sum.connected} connected, ${sum.unreachable} unreachable, ${sum.never} never connected; ` +
      `${sum.holders} holding, ${sum.waiters} waiting)` : '';
    const alarm = $('fleet-alarm');
    alarm.textContent = sum && sum.unreachable ? `${sum.unreachable} unreachable` : '';
    alarm.hidden = !(sum && sum.unreachable);
    // A cluster that is no hub (no Spokes served, or none there) has no Fleet tab; one whose
    // Spokes the user may not list has one that says so.
    const offered = f.served && (rows.length > 0 || !!f.problem);
    $('tabs').hidden = !offered;
    if (!offered && state.tab === 'fleet') showTab('locks', false);
  }

  function applyFleet(m) {
    state.offset = Date.parse(m.now) - Date.now();
    state.fleet = {served: m.served, spokes: new Map(m.spokes.map((s) => [s.name, s])), summary: m.summary, problem: m.problem || ''};
    renderFleet();
  }

  function applyFleetPatch(p) {
    state.offset = Date.parse(p.now) - Date.now();
    for (const name of p.remove || []) state.fleet.spokes.delete(name);
    for (const s of p.upsert || []) state.fleet.spokes.set(s.name, s);
    state.fleet.summary = p.summary;
    if (p.problem !== undefined) state.fleet.problem = p.problem;
    renderFleet();
  }

  // showTab shows the Locks or the Fleet tab (the ARIA tabs pattern: one tab in the tab order).
  function showTab(name, focus) {
    state.tab = name;
    for (const [tab, panel] of [['locks', 'locks-panel'], ['fleet', 'fleet-panel']]) {
      const b = $(`tab-${tab}`);
      const on = tab === name;
      b.setAttribute('aria-selected', String(on));
      b.tabIndex = on ? 0 : -1;
      $(panel).hidden = !on;
      if (on && focus) b.focus();
    }
    history.replaceState(null, '', `?${pageQuery()}`);
  }

  // onSpokeRequests shows the keys a spoke's requests on the hub hold or wait for: the Locks
  // tab, filtered on the cluster, in all namespaces when the user may list them.
  function onSpokeRequests(btn) {
    const cluster = btn.dataset.cluster;
    state.filter = `cluster:${cluster}`;
    $('filter').value = state.filter;
    for (const [id, b] of state.bodies) b.hidden = !matchesFilter(state.keys.get(id));
    count();
    showTab('locks', false);
    if (state.namespaces && state.namespaces.all && state.ns !== ALL && state.ns !== '') selectNamespace(ALL);
    $('filter').focus();
  }

  // --- the stream ---------------------------------------------------------------------------

  function setConn(stateName, text) {
    const c = $('conn');
    c.dataset.state = stateName;
    c.textContent = text;
  }

  function connect() {
    if (state.source) state.source.close();
    const q = new URLSearchParams({token});
    if (state.ns !== null) q.set('ns', state.ns === ALL ? '' : state.ns);
    const src = new EventSource(`/api/stream?${q}`);
    state.source = src;
    setConn('connecting', 'Connecting…');
    src.addEventListener('hello', (e) => {
      const h = JSON.parse(e.data);
      state.me = h.me;
      $('me').textContent = h.me.user ? `Acting as ${h.me.user}` : (h.me.problem || '');
    });
    src.addEventListener('namespaces', (e) => renderNamespaces(JSON.parse(e.data)));
    src.addEventListener('view', (e) => {
      applyView(JSON.parse(e.data));
      setConn('live', `Live: ${state.ns === ALL || state.ns === '' ? 'all namespaces' : `namespace ${state.ns}`}`);
    });
    src.addEventListener('patch', (e) => applyPatch(JSON.parse(e.data)));
    src.addEventListener('fleet', (e) => applyFleet(JSON.parse(e.data)));
    src.addEventListener('fleetpatch', (e) => applyFleetPatch(JSON.parse(e.data)));
    src.onerror = () => {
      if (src.readyState === EventSource.CLOSED) {
        setConn('closed', 'Disconnected: the dashboard stopped, or this URL has the wrong token. Reload to try again.');
      } else {
        setConn('reconnecting', 'Reconnecting…');
      }
    };
  }

  // pageQuery is the page's own query: the token, the namespace chosen, the tab.
  function pageQuery() {
    const q = new URLSearchParams({token});
    if (state.ns !== null) q.set('ns', state.ns);
    if (state.tab === 'fleet') q.set('tab', 'fleet');
    return q;
  }

  function selectNamespace(ns) {
    state.ns = ns;
    history.replaceState(null, '', `?${pageQuery()}`);
    connect();
  }

  // --- actions ------------------------------------------------------------------------------

  // confirmAction opens the dialog naming what will change; resolves true on confirm.
  function confirmAction(title, changes, okLabel) {
    const d = $('confirm');
    $('confirm-title').textContent = title;
    $('confirm-changes').replaceChildren(...changes.map((c) => el('li', {}, c)));
    $('confirm-ok').textContent = okLabel;
    const back = document.activeElement;
    return new Promise((resolve) => {
      const done = (ok) => {
        $('confirm-ok').onclick = null;
        $('confirm-cancel').onclick = null;
        d.oncancel = null;
        if (d.open) d.close();
        if (back && back.isConnected) back.focus();
        resolve(ok);
      };
      $('confirm-ok').onclick = () => done(true);
      $('confirm-cancel').onclick = () => done(false);
      // Escape: handled as it happens, not on the close event that follows later (a stale one
      // would close the next dialog).
      d.oncancel = (e) => {
        e.preventDefault();
        done(false);
      };
      d.showModal();
      $('confirm-cancel').focus();
    });
  }

  // act sends an action; it shows the answer and resolves true when it was done.
  async function act(path, body) {
    $('alert').hidden = true;
    $('done').textContent = '';
    let res;
    let out;
    try {
      res = await fetch(path, {
        method: 'POST',
        headers: {'Content-Type': 'application/json', 'X-Turnstile-Token': token},
        body: JSON.stringify(body),
        credentials: 'same-origin',
      });
      out = await res.json().catch(() => ({message: `${res.status} ${res.statusText}`}));
    } catch (err) {
      out = {message: `The dashboard did not answer: ${err}`};
    }
    if (res && res.ok && out.ok) {
      $('done').textContent = out.message;
      return true;
    }
    const a = $('alert');
    const head = out.reason ? `The API server refused (${out.reason}, ${out.code}):` : 'Failed:';
    a.replaceChildren(el('strong', {}, head), ' ', el('span', {class: 'api-message'}, out.message));
    a.hidden = false;
    return false;
  }

  function nextAfter(k) {
    const w = k.queue[0];
    return w ? `${w.who} (${w.request}) is next in the queue.` : 'Nobody waits: the key becomes free.';
  }

  async function onKeyAction(btn) {
    const body = btn.closest('tbody.key');
    const k = body && state.keys.get(body.dataset.id);
    if (!k) return;
    const action = btn.dataset.action;
    if (action === 'toggle') {
      const open = btn.getAttribute('aria-expanded') !== 'true';
      if (open) state.collapsed.delete(k.id); else state.collapsed.add(k.id);
      btn.setAttribute('aria-expanded', String(open));
      const row = body.querySelector('tr.queue-row');
      if (row) row.hidden = !open;
      return;
    }
    if (action === 'force-unlock') {
      const changes = [`Deletes ProjectLock ${k.namespace}/${k.name} (the force-unlock).`];
      if (k.holder) {
        changes.push(`${k.holder.who} loses the lock${k.token ? ` (fencing token ${k.token})` : ''}: ` +
          `${k.holder.requests.map((r) => r.name).join(', ')} become Released with reason ForceUnlocked.`);
      }
      for (const h of k.shared || []) {
        changes.push(`${h.who} loses its shared lock (fencing token ${h.token}): ` +
          `${h.requests.map((r) => r.name).join(', ')} become Released with reason ForceUnlocked.`);
      }
      changes.push(nextAfter(k));
      if (await confirmAction(`Force-unlock ${keyLabel(k)}?`, changes, 'Force-unlock')) {
        await act('/api/force-unlock', {namespace: k.namespace, name: k.name, uid: k.uid});
      }
      return;
    }
    if (action === 'release' || action === 'release-holder') {
      const name = btn.dataset.request;
      let uid = '';
      const changes = [`Sets spec.release on lockrequest ${k.namespace}/${name}: it becomes Released.`];
      if (action === 'release') {
        const w = k.queue.find((x) => x.request === name);
        if (!w) return;
        uid = w.uid;
        changes.push(`It leaves the queue of ${keyLabel(k)} (position ${w.position || 'new'}) and of every other key it waits for.`);
      } else {
        const h = [k.holder, ...(k.shared || [])].find((x) => x && x.requests.some((y) => y.name === name));
        if (!h) return;
        const r = h.requests.find((x) => x.name === name);
        uid = r.uid;
        const others = (k.shared || []).length > 1 ? ' The other shared holders keep it.' : ` ${nextAfter(k)}`;
        changes.push(`${h.who} gives up ${keyLabel(k)} and every other key ${name} holds.${others}`);
      }
      if (await confirmAction(`Release ${name}?`, changes, 'Release')) {
        await act('/api/release', {namespace: k.namespace, name, uid});
      }
    }
  }

  async function onThaw(btn) {
    const f = state.freezes.find((x) => x.command === btn.dataset.command);
    if (!f) return;
    const changes = [`Sets locked: false on CommandLock ${f.command}.`,
      `${f.command === 'all' ? 'Every command' : `Requests for ${f.command}`} may be granted again: ${f.blocked} waiting now, granted in queue order.`];
    if (await confirmAction(`Thaw ${f.command}?`, changes, 'Thaw')) {
      await act('/api/thaw', {name: f.command, uid: f.uid});
    }
  }

  async function onFreeze(ev) {
    ev.preventDefault();
    const command = $('freeze-command').value.trim();
    const reason = $('freeze-reason').value;
    const until = $('freeze-until').value.trim();
    if (!command) {
      $('freeze-command').focus();
      return;
    }
    const changes = [`Creates or updates CommandLock ${command} with locked: true` +
      `${reason ? `, reason "${reason}"` : ''}${until ? `, until ${until}` : ''}.`,
    `${command === 'all' ? 'Every request that names a command' : `Every request for ${command}`}, in every namespace, waits (CommandLocked) until it is thawed; holders already granted keep their grant.`];
    if (await confirmAction(`Freeze ${command} cluster-wide?`, changes, 'Freeze')) {
      if (await act('/api/freeze', {name: command, reason, until})) $('freeze-form').reset();
    }
  }

  // --- wiring -------------------------------------------------------------------------------

  document.addEventListener('DOMContentLoaded', () => {
    if (!token) {
      setConn('closed', 'This page needs the URL that `kubectl turnstile dashboard` printed, with its ?token=…');
      return;
    }
    $('keys').addEventListener('click', (e) => {
      const b = e.target.closest('button[data-action]');
      if (b) onKeyAction(b);
    });
    $('freezes').addEventListener('click', (e) => {
      const b = e.target.closest('button[data-action="thaw"]');
      if (b) onThaw(b);
    });
    $('freeze-form').addEventListener('submit', onFreeze);
    $('fleet').addEventListener('click', (e) => {
      const b = e.target.closest('button[data-action="spoke-requests"]');
      if (b) onSpokeRequests(b);
    });
    for (const tab of ['locks', 'fleet']) $(`tab-${tab}`).addEventListener('click', () => showTab(tab, true));
    $('tabs').addEventListener('keydown', (e) => {
      const order = ['locks', 'fleet'];
      const i = order.indexOf(state.tab);
      const next = {ArrowRight: order[(i + 1) % order.length], ArrowLeft: order[(i + order.length - 1) % order.length], Home: order[0], End: order[order.length - 1]}[e.key];
      if (!next) return;
      e.preventDefault();
      showTab(next, true);
    });
    $('ns').addEventListener('change', (e) => selectNamespace(e.target.value));
    $('ns-other-form').addEventListener('submit', (e) => {
      e.preventDefault();
      const v = $('ns-other').value.trim();
      if (v) selectNamespace(v);
    });
    $('filter').addEventListener('input', (e) => {
      state.filter = e.target.value.trim().toLowerCase();
      for (const [id, b] of state.bodies) b.hidden = !matchesFilter(state.keys.get(id));
      count();
    });
    $('expand-all').addEventListener('click', () => {
      state.collapsed.clear();
      for (const k of state.keys.values()) putKey(k);
    });
    $('collapse-all').addEventListener('click', () => {
      for (const k of state.keys.values()) state.collapsed.add(k.id);
      for (const k of state.keys.values()) putKey(k);
    });
    if (state.tab === 'fleet') showTab('fleet', false); // shown once the stream says there is a fleet
    connect();
    setInterval(tickAll, 1000);
  });
})();
