// berth's status page: keeps the parts marked data-field live from /api/events (the
// same JSON as /api/apps), filters the apps as you type, and keeps ages current.
'use strict';
(() => {
  const body = document.body;
  const page = body.dataset.page;
  const only = body.dataset.app;
  const live = document.getElementById('live');
  const esc = (s) => String(s).replace(/[&<>"']/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' })[c]);
  const short = (s) => (s < 120 ? `${s}s` : s < 7200 ? `${Math.floor(s / 60)}m` : s < 172800 ? `${Math.floor(s / 3600)}h` : `${Math.floor(s / 86400)}d`);
  const age = (iso) => {
    const s = Math.round((Date.now() - Date.parse(iso)) / 1000);
    return s >= 0 ? `${short(s)} ago` : `in ${short(-s)}`;
  };
  const time = (iso) => `<time datetime="${esc(iso)}" title="${esc(iso)}">${age(iso)}</time>`;
  const word = (a) => (a.state !== 'idle' ? a.state : a.held ? 'held' : a.last ? a.last.outcome : 'never');
  const badge = (w) => `<span class="badge ${esc(w)}">${esc(w)}</span>`;

  // The same cells as the server renders (src/page/html.rs).
  const cells = {
    status(a) {
      const detail = a.state === 'syncing' ? (a.step || 'starting') + (a.activity ? `: ${a.activity}` : '')
        : a.state === 'waiting' ? a.waiting : a.state === 'suspended' ? a.suspended
        : a.held || (a.last && a.last.error);
      let html = badge(word(a));
      if (detail) html += ` <span class="detail">${esc(detail)}</span>`;
      if (a.state !== 'idle' && a.since) html += ` <span class="dim">${time(a.since)}</span>`;
      return html;
    },
    commit(a) {
      const c = a.last && a.last.commit;
      if (!c) return '-';
      // A commit's first 7 hex digits; a registry version and its digest's first 7.
      const at = c.sha.indexOf('sha256:');
      const short = c.sha.slice(0, at < 0 ? 7 : at + 14);
      return `<code title="${esc(c.sha)}">${esc(short)}</code> ${esc(c.subject)}<br>`
        + `<span class="dim">${esc(c.author.split(' <')[0])} · ${time(c.time)}</span>`;
    },
    health(a) {
      const h = a.health;
      if (!h) return '<span class="dim">…</span>';
      if (h.total === 0) return `${h.managed} objects`;
      const cls = h.failed > 0 ? 'bad' : h.ready < h.total ? 'warn' : 'good';
      const pods = h.pods > 0 ? `<br><span class="dim">${h.pods_ready}/${h.pods} pods ready</span>` : '';
      return `<span class="${cls}">${h.ready}/${h.total} objects ready</span>${pods}`;
    },
    next(a) {
      return a.state === 'idle' && a.next_sync ? time(a.next_sync) : '-';
    },
  };

  const nameInput = document.getElementById('filter-name');
  const outcomeInput = document.getElementById('filter-outcome');
  const clusterInput = document.getElementById('filter-cluster');
  const rows = () => Array.from(document.querySelectorAll('tr[data-app]'));
  function filter() {
    if (!nameInput) return;
    const name = nameInput.value.trim();
    const outcome = outcomeInput.value;
    const cluster = clusterInput ? clusterInput.value : '';
    let shown = 0;
    const all = rows();
    for (const row of all) {
      const keep = row.dataset.app.includes(name) && (!outcome || row.dataset.status === outcome)
        && (!cluster || row.dataset.cluster === cluster);
      row.hidden = !keep;
      if (keep) shown += 1;
    }
    // A page of many: the server's count of every page stands.
    const count = document.getElementById('count');
    if (!('paged' in count.dataset)) count.textContent = `${shown} of ${count.dataset.all} apps`;
    const query = new URLSearchParams();
    if (name) query.set('name', name);
    if (outcome) query.set('outcome', outcome);
    if (cluster) query.set('cluster', cluster);
    const number = new URLSearchParams(location.search).get('page');
    if (number) query.set('page', number);
    history.replaceState(null, '', query.size ? `?${query}` : location.pathname);
  }
  if (nameInput) {
    nameInput.addEventListener('input', filter);
    outcomeInput.addEventListener('change', filter);
    if (clusterInput) clusterInput.addEventListener('change', filter);
  }

  // The newest record the page shows.
  let lastRecord = document.querySelector('#history tr[data-record]')?.dataset.record ?? '';
  // A new record: the objects and history sections rendered again by the server.
  async function refreshSections() {
    const answer = await fetch(location.href, { headers: { accept: 'text/html' } });
    if (!answer.ok) return;
    const fresh = new DOMParser().parseFromString(await answer.text(), 'text/html');
    for (const section of ['objects-h', 'history-h']) {
      const now = document.getElementById(section);
      const next = fresh.getElementById(section);
      if (now && next) now.parentElement.replaceWith(next.parentElement);
    }
  }

  function update(a) {
    const scope = page === 'index' ? document.querySelector(`tr[data-app="${CSS.escape(a.name)}"]`) : a.name === only ? document : null;
    if (!scope) {
      if (page === 'index') location.reload(); // an app added by a reload
      return;
    }
    for (const el of scope.querySelectorAll('[data-field]')) {
      const html = cells[el.dataset.field](a);
      if (el.innerHTML !== html) el.innerHTML = html;
    }
    if (page === 'index') {
      scope.dataset.status = word(a);
      filter();
    } else if (page === 'app' && a.last && a.last.id !== lastRecord) {
      lastRecord = a.last.id;
      refreshSections();
    }
  }

  if (page === 'index' || page === 'app') {
    // The apps this page shows: one app, or this page of the list (its filter and number).
    const events = new EventSource(`/api/events${only ? `?app=${encodeURIComponent(only)}` : location.search}`);
    events.addEventListener('apps', (e) => {
      JSON.parse(e.data).forEach(update);
      live.textContent = 'live';
      live.className = 'live on';
    });
    events.addEventListener('app', (e) => JSON.parse(e.data).forEach(update));
    events.addEventListener('error', () => {
      live.textContent = 'reconnecting…';
      live.className = 'live off';
    });
  }
  setInterval(() => {
    for (const t of document.querySelectorAll('time[datetime]')) t.textContent = age(t.getAttribute('datetime'));
  }, 5000);
})();
