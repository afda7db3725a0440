// SPDX-License-Identifier: Apache-2.0
// The dashboard's page: polls the coordinator's JSON API and shows jobs,
// their curves (Chart.js), sites and datasets, policy versions and the audit
// trail. Every figure and name goes into the page as text (textContent),
// never as markup.
'use strict';

const POLL_MS = 2000;
const state = { job: null, userPicked: false, charts: {}, versions: '', notes: {} };

function el(tag, text, cls) {
  const e = document.createElement(tag);
  if (text !== undefined && text !== null) e.textContent = String(text);
  if (cls) e.className = cls;
  return e;
}

function fixed(v, digits) {
  return typeof v === 'number' && isFinite(v) ? v.toFixed(digits) : '–';
}

function bytes(n) {
  if (typeof n !== 'number') return '–';
  const units = ['B', 'kB', 'MB', 'GB', 'TB'];
  let i = 0;
  while (n >= 1000 && i < units.length - 1) { n /= 1000; i++; }
  return (i ? n.toFixed(1) : String(n)) + ' ' + units[i];
}

function setStatus(text, bad) {
  const s = document.getElementById('status');
  s.textContent = text;
  s.className = bad ? 'bad' : 'muted';
}

async function api(path) {
  const r = await fetch(path, { credentials: 'same-origin', cache: 'no-store' });
  if (r.status === 401) throw new Error('the session has ended: run "xfed dashboard" for a new URL');
  if (!r.ok) throw new Error(path + ' answered ' + r.status + ': ' + (await r.text()));
  return r.json();
}

function row(cells) {
  const tr = document.createElement('tr');
  for (const c of cells) {
    const td = el('td', c.text !== undefined ? c.text : c, c.cls);
    tr.appendChild(td);
  }
  return tr;
}

function fillBody(table, rows) {
  const body = document.querySelector('#' + table + ' tbody');
  body.replaceChildren(...rows);
}

// ---- jobs ------------------------------------------------------------------

function jobRound(j) {
  const shown = j.state === 'done' ? j.rounds_committed : Math.min(j.round, j.rounds);
  return shown + '/' + j.rounds;
}

function renderJobs(jobs) {
  if (!state.userPicked || !jobs.some(j => j.job_id === state.job)) {
    const running = jobs.find(j => j.state === 'running');
    state.job = running ? running.job_id : (jobs.length ? jobs[0].job_id : null);
  }
  fillBody('jobs', jobs.map(j => {
    const tr = row([
      { text: j.job_id, cls: 'num' }, j.name,
      j.state + (j.phase ? ' (' + j.phase + ')' : ''),
      { text: jobRound(j), cls: 'num' },
      j.sites,
      { text: fixed(j.test_accuracy, 4), cls: 'num' },
      j.train_loss_kept ? state.notes.train_loss_kept : { text: fixed(j.train_loss, 4), cls: 'num' },
      { text: fixed(j.epsilon, 3), cls: 'num' },
      { text: bytes(j.bytes_up), cls: 'num' },
      { text: bytes(j.bytes_down), cls: 'num' },
      j.message,
    ]);
    tr.className = 'job' + (j.job_id === state.job ? ' selected' : '');
    tr.dataset.job = j.job_id;
    tr.addEventListener('click', () => {
      state.job = j.job_id;
      state.userPicked = true;
      refresh();
    });
    return tr;
  }));
}

// ---- curves ----------------------------------------------------------------

// Per round: means over the round's sites weighted by their training
// records, epsilon the largest, bytes summed (as `xfed job report`).
function perRound(rows) {
  const by = new Map();
  for (const r of rows) {
    if (!by.has(r.round)) by.set(r.round, []);
    by.get(r.round).push(r);
  }
  const mean = (list, key) => {
    let s = 0, w = 0, n = 0, plain = 0;
    for (const r of list) {
      const v = r[key];
      if (typeof v !== 'number') continue;
      s += v * r.samples; w += r.samples; plain += v; n++;
    }
    return w > 0 ? s / w : (n ? plain / n : null);
  };
  return [...by.keys()].sort((a, b) => a - b).map(k => {
    const list = by.get(k);
    const eps = list.map(r => r.epsilon).filter(v => typeof v === 'number');
    return {
      round: k, sites: list.length,
      accuracy: mean(list, 'test_accuracy'), train_loss: mean(list, 'train_loss'),
      test_loss: mean(list, 'test_loss'), epsilon: eps.length ? Math.max(...eps) : null,
      up: list.reduce((a, r) => a + r.bytes_up, 0), down: list.reduce((a, r) => a + r.bytes_down, 0),
    };
  });
}

// The chart's note where none of its curves has a point: the words of
// `xfed job report`'s empty panel, from the coordinator.
function note(id, datasets, text) {
  const empty = !datasets.some(d => d.data.some(v => typeof v === 'number'));
  const n = document.getElementById(id);
  n.textContent = empty ? text : '';
  n.hidden = !empty;
}

// yRange: fixed bounds of the left axis ({min, max}), or none.
function chart(id, datasets, labels, yTitle, yRange) {
  const existing = state.charts[id];
  if (existing) {
    existing.data.labels = labels;
    existing.data.datasets.forEach((d, i) => { d.data = datasets[i].data; });
    existing.update('none');
    return;
  }
  state.charts[id] = new Chart(document.getElementById(id), {
    type: 'line',
    data: { labels, datasets },
    options: {
      responsive: false, animation: false, spanGaps: false,
      scales: { x: { title: { display: true, text: 'round' } },
                y: { title: { display: true, text: yTitle }, ...(yRange || {}) },
                ...(datasets.some(d => d.yAxisID === 'y1')
                  ? { y1: { position: 'right', grid: { drawOnChartArea: false },
                            title: { display: true, text: 'loss' } } } : {}) },
    },
  });
}

function renderCurves(jobId, rows, kept) {
  document.getElementById('curves-job').textContent = jobId ? 'job ' + jobId : '';
  const rounds = perRound(rows);
  const labels = rounds.map(r => r.round);
  const accuracy = [
    { label: 'test accuracy', data: rounds.map(r => r.accuracy), borderColor: '#1f69b3', backgroundColor: '#1f69b3', yAxisID: 'y' },
    { label: 'test loss', data: rounds.map(r => r.test_loss), borderColor: '#e36e17', backgroundColor: '#e36e17', yAxisID: 'y1' },
    { label: 'train loss', data: rounds.map(r => r.train_loss), borderColor: '#8c3da3', backgroundColor: '#8c3da3', yAxisID: 'y1' },
  ];
  // An accuracy is within [0, 1] whatever points there are.
  chart('chart-accuracy', accuracy, labels, 'accuracy', { min: 0, max: 1 });
  note('note-accuracy', accuracy.slice(0, 1), state.notes.accuracy);
  const epsilon = [
    { label: 'ε spent', data: rounds.map(r => r.epsilon), borderColor: '#8c3da3', backgroundColor: '#8c3da3' },
  ];
  chart('chart-epsilon', epsilon, labels, 'ε', { min: 0 });
  note('note-epsilon', epsilon, state.notes.epsilon);
  fillBody('rounds', rounds.slice().reverse().map(r => row([
    { text: r.round, cls: 'num' }, { text: r.sites, cls: 'num' },
    { text: fixed(r.accuracy, 4), cls: 'num' },
    kept ? state.notes.train_loss_kept : { text: fixed(r.train_loss, 4), cls: 'num' },
    { text: fixed(r.test_loss, 4), cls: 'num' }, { text: fixed(r.epsilon, 3), cls: 'num' },
    { text: bytes(r.up), cls: 'num' }, { text: bytes(r.down), cls: 'num' },
  ])));
}

// ---- policy, sites, audit ----------------------------------------------------

// The sites the coordinator knows (what they announced; with or without a
// residency policy), then the policy's sites that have not announced
// themselves; a dataset the policy lists carries its classification.
function renderSites(known, doc) {
  const classified = new Map();
  for (const d of doc.datasets || []) classified.set(d.site + '\n' + d.name, d.classification);
  const named = (site, name) => {
    const c = classified.get(site + '\n' + name);
    return c ? name + ' (' + c + ')' : name;
  };
  const rows = known.sites.map(s => row([
    s.name, s.region,
    (s.connected ? 'connected' : 'not connected') + (s.via ? ' via ' + s.via : ''),
    s.datasets.map(d => named(s.name, d.name) + ', ' + d.train_records + ' training records').join('; '),
  ]));
  const seen = new Set(known.sites.map(s => s.name));
  const policySets = new Map();
  for (const d of doc.datasets || []) {
    if (!policySets.has(d.site)) policySets.set(d.site, []);
    policySets.get(d.site).push(named(d.site, d.name));
  }
  for (const s of doc.sites || []) {
    if (!seen.has(s.name))
      rows.push(row([s.name, s.region, 'not announced (in the policy)', (policySets.get(s.name) || []).join('; ')]));
  }
  fillBody('sites', rows);
}

function renderPolicy(p, enforced) {
  document.getElementById('policy-note').textContent = p.versions.length ? '' :
    'no policy version yet' + (enforced ? '' : ': the coordinator runs with the residency policy off');
  fillBody('versions', p.versions.slice().reverse().map(v => row([
    { text: v.version, cls: 'num' }, new Date(v.at * 1000).toISOString(), v.author, v.reason,
  ])));
  const key = p.versions.map(v => v.version).join(',');
  if (key !== state.versions) {
    state.versions = key;
    for (const id of ['diff-from', 'diff-to']) {
      const sel = document.getElementById(id);
      sel.replaceChildren(...p.versions.map(v => {
        const o = el('option', v.version);
        o.value = String(v.version);
        return o;
      }));
    }
    const n = p.versions.length;
    if (n) {
      document.getElementById('diff-from').value = String(p.versions[Math.max(0, n - 2)].version);
      document.getElementById('diff-to').value = String(p.versions[n - 1].version);
      showDiff();
    }
  }
}

async function showDiff() {
  const from = document.getElementById('diff-from').value;
  const to = document.getElementById('diff-to').value;
  if (!from || !to) return;
  try {
    const d = await api('/api/policy/diff?from=' + encodeURIComponent(from) + '&to=' + encodeURIComponent(to));
    document.getElementById('diff').textContent = d.diff || '(no difference)';
  } catch (e) {
    setStatus(e.message, true);
  }
}

function renderAudit(a) {
  const dl = document.getElementById('audit');
  const items = [];
  const add = (k, v, cls) => { items.push(el('dt', k)); items.push(el('dd', v, cls)); };
  if (!a.allowed) {
    add('state', a.why, 'muted');
  } else {
    add('verified', a.intact ? 'chain intact' : 'NOT intact: ' + a.fault, a.intact ? 'ok' : 'bad');
    add('rows', a.rows);
    add('head', a.head_seq + ' ' + a.head_digest);
    add('verdict', a.what);
  }
  dl.replaceChildren(...items);
}

// ---- polling -------------------------------------------------------------------

async function refresh() {
  try {
    const jobs = await api('/api/jobs');
    state.notes = jobs.notes;
    renderJobs(jobs.jobs);
    const shown = jobs.jobs.find(j => j.job_id === state.job);
    if (state.job) renderCurves(state.job, (await api('/api/jobs/' + encodeURIComponent(state.job) + '/metrics')).rows, shown && shown.train_loss_kept);
    const policy = await api('/api/policy');
    const sites = await api('/api/sites');
    renderPolicy(policy, sites.residency_policy);
    renderSites(sites, policy.document || {});
    renderAudit(await api('/api/audit'));
    setStatus('updated ' + new Date().toLocaleTimeString(), false);
  } catch (e) {
    setStatus(e.message, true);
  }
}

async function start() {
  try {
    const me = await api('/api/whoami');
    document.getElementById('who').textContent = me.coordinator + ' · ' + me.role;
  } catch (e) {
    setStatus(e.message, true);
  }
  document.getElementById('diff-from').addEventListener('change', showDiff);
  document.getElementById('diff-to').addEventListener('change', showDiff);
  await refresh();
  setInterval(refresh, POLL_MS);
}

start();
