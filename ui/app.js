// Bulwark's web dashboard: polls the read-only JSON API (src/controller/dashboard_api.cc)
// every second while the job runs, renders a finished run once. No dependencies but
// uPlot (window.uPlot, embedded next to this file); no external network.
'use strict';

(() => {
  const POLL_MS = 1000;
  const RETRY_MS = 2000;
  const FETCH_TIMEOUT_MS = 5000;
  // The ledger's categories (docs/ettr.md), productive first, with their colours.
  const CATS = [
    ['productive', '#43a047'],
    ['checkpoint', '#1e88e5'],
    ['detection', '#fb8c00'],
    ['restart', '#e53935'],
    ['reinit', '#8e24aa'],
    ['rework', '#d81b60'],
    ['diagnosis', '#6d4c41'],
    ['idle', '#9e9e9e'],
  ];
  // Heatmap colours, fast to slow.
  const HEAT_STOPS = ['#2c7bb6', '#abd9e9', '#ffffbf', '#fdae61', '#d7191c'];

  const $ = (id) => document.getElementById(id);
  const state = {
    status: null,
    charts: {},
    incidentsKey: null,
    openStacks: new Map(), // incident index -> text shown (or a message)
    incidents: null,
    ranksKey: null,
    ranks: null,
    finished: false,
  };

  // ---------------------------------------------------------------- formatting

  const isNum = (v) => typeof v === 'number' && Number.isFinite(v);
  function fmtInt(v) {
    return isNum(v) ? Math.round(v).toLocaleString('en-US') : '—';
  }
  function fmtSI(v, digits = 3) {
    if (!isNum(v)) return '—';
    const a = Math.abs(v);
    const units = [[1e12, 'T'], [1e9, 'G'], [1e6, 'M'], [1e3, 'k']];
    for (const [d, u] of units) if (a >= d) return (v / d).toPrecision(digits) + u;
    return a >= 100 || v === 0 ? v.toFixed(0) : v.toPrecision(digits);
  }
  function fmtBytes(v) {
    if (!isNum(v)) return '—';
    const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB', 'PiB'];
    let i = 0;
    while (Math.abs(v) >= 1024 && i < units.length - 1) { v /= 1024; i++; }
    return (i === 0 ? v.toFixed(0) : v.toFixed(1)) + ' ' + units[i];
  }
  function fmtDur(s) {
    if (!isNum(s)) return '—';
    const a = Math.abs(s);
    if (a < 1e-3) return a === 0 ? '0 s' : (s * 1e6).toFixed(0) + ' µs';
    if (a < 1) return (s * 1e3).toPrecision(3) + ' ms';
    if (a < 60) return s.toFixed(a < 10 ? 2 : 1) + ' s';
    const t = Math.round(a);
    const h = Math.floor(t / 3600), m = Math.floor((t % 3600) / 60), sec = t % 60;
    const sign = s < 0 ? '-' : '';
    if (h > 0) return `${sign}${h}h ${String(m).padStart(2, '0')}m`;
    return `${sign}${m}m ${String(sec).padStart(2, '0')}s`;
  }
  // An axis label for elapsed seconds.
  function fmtClock(s) {
    if (!isNum(s)) return '';
    const t = Math.round(s);
    const h = Math.floor(t / 3600), m = Math.floor((t % 3600) / 60), sec = t % 60;
    return h > 0 ? `${h}:${String(m).padStart(2, '0')}:${String(sec).padStart(2, '0')}`
      : `${m}:${String(sec).padStart(2, '0')}`;
  }
  const fmtPct = (v, d = 1) => (isNum(v) ? (v * 100).toFixed(d) + '%' : '—');
  const fmtMoney = (v) => (isNum(v) ? '$' + (v >= 100 ? v.toFixed(0) : v.toFixed(2)) : '—');

  // h('td', {class: 'x', dataset: {testid: 'y'}}, 'text', childNode, ...)
  function h(tag, attrs, ...children) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === undefined || v === null || v === false) continue;
      if (k === 'dataset') Object.assign(e.dataset, v);
      else if (k === 'onclick') e.addEventListener('click', v);
      else e.setAttribute(k, v === true ? '' : String(v));
    }
    for (const c of children.flat()) {
      if (c === null || c === undefined || c === false) continue;
      e.append(c instanceof Node ? c : document.createTextNode(String(c)));
    }
    return e;
  }
  function setText(id, text, title) {
    const e = $(id);
    if (!e) return;
    const t = text === null || text === undefined ? '' : String(text);
    if (e.textContent !== t) e.textContent = t;
    if (title !== undefined) e.title = title;
  }

  // ---------------------------------------------------------------- fetching

  class HttpError extends Error {
    constructor(code, text) { super(`HTTP ${code}: ${text.slice(0, 200)}`); this.code = code; }
  }
  async function getJSON(path) {
    const ctl = new AbortController();
    const timer = setTimeout(() => ctl.abort(), FETCH_TIMEOUT_MS);
    try {
      const r = await fetch(path, { cache: 'no-store', signal: ctl.signal });
      if (!r.ok) throw new HttpError(r.status, await r.text());
      return await r.json();
    } finally {
      clearTimeout(timer);
    }
  }

  function setConn(kind, text) {
    const e = $('conn');
    e.className = 'conn ' + kind;
    e.dataset.state = kind;
    setText('conn', text || kind);
  }

  async function poll() {
    let next = POLL_MS;
    try {
      const [status, series, incidents, ranks, ckpts] = await Promise.all([
        getJSON('api/status'), getJSON('api/series'), getJSON('api/incidents'),
        getJSON('api/ranks'), getJSON('api/checkpoints'),
      ]);
      const ended = isNum(status.end_time) && status.end_time > 0;
      render(status, series, incidents, ranks, ckpts);
      if (ended) {
        // A finished run renders once (and once more, so that every endpoint was read
        // after the end); then polling stops.
        if (state.finished) { setConn('finished'); return; }
        state.finished = true;
        next = 0;
      } else {
        setConn('live');
      }
    } catch (e) {
      if (state.finished) { setConn('finished'); return; } // the run's port went away
      if (e instanceof HttpError && e.code === 503) setConn('connecting', 'starting…');
      else setConn('disconnected', 'disconnected — retrying');
      $('conn').title = String(e && e.message ? e.message : e);
      next = RETRY_MS;
    }
    setTimeout(poll, next);
  }

  // ---------------------------------------------------------------- rendering

  function render(status, series, incidents, ranks, ckpts) {
    state.status = status;
    // Incidents are marked on every chart, at their detection time.
    const t0 = isNum(status.start_time) ? status.start_time : 0;
    state.marks = ((incidents && incidents.incidents) || [])
      .filter((i) => isNum(i.detect_time) && i.detect_time > 0)
      .map((i) => ({ x: i.detect_time - t0, kind: i.kind || '?' }));
    renderHeader(status);
    renderBudget(status);
    renderCharts(status, (series && series.points) || []);
    renderIncidents(incidents || { incidents: [], costs: [] });
    renderRanks(ranks || {});
    renderCheckpoints(ckpts || {}, status);
  }

  function renderHeader(s) {
    const m = s.metrics || {};
    setText('job', s.job);
    document.title = `${s.job} · ${s.phase} · Bulwark`;
    const phase = s.stage && s.stage !== s.phase && s.stage !== 'Done'
      ? `${s.phase} · ${s.stage}` : s.phase;
    setText('phase', phase);
    $('phase').className = 'badge phase-' + String(s.phase || '').toLowerCase();
    const slots = (s.slot_nodes || []).join(', ') || '—';
    const spares = (s.spare_nodes || []).join(', ') || 'none';
    setText('meta', `nodes ${slots} · spares ${spares} · ${fmtInt(m.devices)} devices` +
      (m.inferred_steps ? ' · steps inferred from the optimizer (no SDK calls)' : ''));
    setText('message', s.message || '');

    setText('step', isNum(s.step) && s.step >= 0 ? fmtInt(s.step) : '—');
    $('step').dataset.value = String(s.step);
    setText('step-sub',
      `${fmtInt(s.steps_completed)} done · ${fmtInt(s.steps_reworked)} reworked`);

    setText('ettr', isNum(s.ettr) ? s.ettr.toFixed(3) : '—');
    $('ettr').dataset.value = String(s.ettr);
    const lost = isNum(s.wall_s) && isNum(s.ettr) ? s.wall_s * (1 - s.ettr) : NaN;
    setText('ettr-sub', `${fmtDur(lost)} lost of ${fmtDur(s.wall_s)}`);

    setText('tokens-per-s',
      isNum(m.tokens_per_s) && m.tokens_per_s > 0 ? fmtSI(m.tokens_per_s) : '—');
    setText('tokens-sub', `${fmtSI(m.tokens_total)} tokens` +
      (isNum(m.data_wait_ratio) && m.data_wait_ratio >= 0.005
        ? ` · data wait ${fmtPct(m.data_wait_ratio, 0)}` : ''));

    // MFU stays blank when unknown (no FLOPs/token declared, or no peak FLOPS).
    const mfuKnown = isNum(m.mfu) && m.mfu > 0;
    setText('mfu', mfuKnown ? fmtPct(m.mfu) : '');
    setText('mfu-sub', mfuKnown ? `${fmtSI(m.flops_per_token)} FLOP/token` : 'not known',
      mfuKnown ? '' : 'MFU needs the model\'s FLOPs/token (set_model_flops) and the ' +
        'devices\' peak FLOPS (monitoring.peakFlops or the GPU\'s name)');

    setText('loss', isNum(m.loss) ? m.loss.toPrecision(4) : '—');
    const extra = [];
    if (isNum(m.lr)) extra.push('lr ' + m.lr.toPrecision(3));
    if (isNum(m.grad_norm)) extra.push('‖g‖ ' + m.grad_norm.toPrecision(3));
    setText('loss-sub', extra.join(' · '));

    const cost = isNum(m.cost_total) && m.cost_total > 0;
    $('cost-tile').hidden = !cost;
    setText('cost', cost ? fmtMoney(m.cost_total) : '');
    setText('cost-sub', cost ? [
      m.cost_per_million_tokens > 0 ? `${fmtMoney(m.cost_per_million_tokens)}/M tokens` : '',
      m.cost_per_productive_gpu_hour > 0
        ? `${fmtMoney(m.cost_per_productive_gpu_hour)}/productive GPU-h` : '',
    ].filter(Boolean).join(' · ') : '');

    const c = s.last_checkpoint;
    if (c && isNum(c.step)) {
      const e = $('checkpoint');
      const key = `${c.step}/${c.tier}`;
      if (e.dataset.key !== key) {
        e.dataset.key = key;
        e.replaceChildren(fmtInt(c.step), h('span', { class: 'unit' }, c.tier || '?'));
      }
      setText('checkpoint-age', isNum(c.time) && isNum(s.now)
        ? `${fmtDur(Math.max(0, s.now - c.time))} ago` : '');
    } else {
      $('checkpoint').dataset.key = '';
      setText('checkpoint', 'none yet');
      setText('checkpoint-age', '');
    }

    setText('restarts', fmtInt(s.restarts));
    setText('restarts-sub', `attempt ${fmtInt(s.attempt)}`);

    const ended = isNum(s.end_time) && s.end_time > 0;
    const elapsed = (ended ? s.end_time : s.now) - s.start_time;
    setText('elapsed', isNum(s.start_time) && s.start_time > 0 ? fmtDur(elapsed) : '—');
    const started = new Date(s.start_time * 1000);
    setText('elapsed-sub', isNum(s.start_time) && s.start_time > 0
      ? 'started ' + started.toLocaleTimeString([], { hour: '2-digit', minute: '2-digit' })
      : '', isNum(s.start_time) ? started.toString() : '');
  }

  function renderBudget(s) {
    const sec = s.seconds || {};
    const total = CATS.reduce((a, [k]) => a + (isNum(sec[k]) ? sec[k] : 0), 0);
    const bar = $('budget-bar');
    const legend = $('budget-legend');
    bar.replaceChildren();
    legend.replaceChildren();
    for (const [k, color] of CATS) {
      const v = isNum(sec[k]) ? sec[k] : 0;
      const frac = total > 0 ? v / total : 0;
      if (frac > 0) {
        bar.append(h('div', {
          class: 'seg', style: `flex-grow:${frac};background:${color}`,
          title: `${k}: ${fmtDur(v)} (${fmtPct(frac)})`, dataset: { cat: k },
        }));
      }
      legend.append(h('span', { class: 'item' + (v > 0 ? '' : ' zero'), dataset: { cat: k } },
        h('span', { class: 'swatch', style: `background:${color}` }),
        `${k} `, h('b', {}, fmtDur(v)), ` ${total > 0 ? fmtPct(frac) : ''}`));
    }
    if (total === 0) bar.append(h('div', { class: 'seg empty-seg' }, 'no time accounted yet'));
  }

  // ------------------------------------------------------------------ charts

  function chartSize(el) {
    return { width: Math.max(200, el.clientWidth), height: 220 };
  }

  function makeChart(id, opts, data) {
    const el = $(id);
    const u = new uPlot({ ...chartSize(el), ...opts }, data, el);
    el.bwChart = u; // the element's current chart (a chart may be made again)
    if (window.ResizeObserver && !el.bwResize) {
      let last = el.clientWidth;
      el.bwResize = new ResizeObserver(() => {
        if (el.clientWidth === last) return;
        last = el.clientWidth;
        if (el.bwChart) el.bwChart.setSize(chartSize(el));
      });
      el.bwResize.observe(el);
    }
    return u;
  }

  // Elapsed-time ticks on whole seconds, minutes, hours.
  const X_INCRS = [1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800,
    21600, 43200, 86400, 172800, 604800];
  const xAxis = () => ({ values: (u, splits) => splits.map(fmtClock), incrs: X_INCRS,
    stroke: '#555',
    grid: { stroke: '#eee' }, ticks: { stroke: '#ddd' } });
  const yAxis = (fmt, extra) => ({ values: (u, splits) => splits.map(fmt), stroke: '#555',
    grid: { stroke: '#eee' }, ticks: { stroke: '#ddd' }, size: 60, ...extra });
  const xSeries = () => ({ label: 'elapsed', value: (u, v) => (v === null ? '—' : fmtClock(v)) });
  // A uPlot plugin drawing a dashed line and the kind at each incident.
  const incidentMarks = () => ({
    hooks: {
      draw: [(u) => {
        const marks = state.marks || [];
        if (!marks.length) return;
        const { ctx, bbox } = u;
        const dpr = uPlot.pxRatio || 1;
        ctx.save();
        ctx.strokeStyle = 'rgba(198,40,40,0.75)';
        ctx.fillStyle = 'rgba(198,40,40,0.9)';
        ctx.lineWidth = dpr;
        ctx.setLineDash([4 * dpr, 3 * dpr]);
        ctx.font = `${10 * dpr}px system-ui, sans-serif`;
        for (const m of marks) {
          const px = Math.round(u.valToPos(m.x, 'x', true));
          if (px < bbox.left || px > bbox.left + bbox.width) continue;
          ctx.beginPath();
          ctx.moveTo(px, bbox.top);
          ctx.lineTo(px, bbox.top + bbox.height);
          ctx.stroke();
          ctx.fillText(m.kind, px + 3 * dpr, bbox.top + 10 * dpr);
        }
        ctx.restore();
      }],
    },
  });
  const baseOpts = () => ({ scales: { x: { time: false } }, cursor: { drag: { x: true, y: false } },
    legend: { show: true }, plugins: [incidentMarks()] });

  function renderCharts(s, points) {
    const t0 = isNum(s.start_time) && s.start_time > 0 ? s.start_time
      : (points.length ? points[0].t : 0);
    const x = points.map((p) => p.t - t0);
    const num = (v) => (isNum(v) ? v : null);
    const loss = points.map((p) => num(p.loss));
    const tps = points.map((p) => num(p.tokens_per_s));
    const mfu = points.map((p) => (isNum(p.mfu) && p.mfu > 0 ? p.mfu * 100 : null));
    const ettr = points.map((p) => num(p.ettr));
    const C = state.charts;

    if (!C.loss) {
      C.loss = makeChart('chart-loss', {
        ...baseOpts(),
        series: [xSeries(), { label: 'loss', stroke: '#3949ab', width: 1.5, spanGaps: true,
          value: (u, v) => (v === null ? '—' : v.toPrecision(4)) }],
        axes: [xAxis(), yAxis((v) => fmtSI(v, 3))],
      }, [x, loss]);
    } else C.loss.setData([x, loss]);

    // MFU gets its axis only once there is any (its chart is made again then).
    const anyMfu = mfu.some((v) => v !== null);
    if (C.throughput && anyMfu && !C.throughputMfu) {
      C.throughput.destroy();
      C.throughput = null;
    }
    if (!C.throughput) {
      C.throughputMfu = anyMfu;
      C.throughput = makeChart('chart-throughput', {
        ...baseOpts(),
        scales: { x: { time: false }, mfu: { range: (u, lo, hi) => [0, Math.max(1, hi * 1.1)] } },
        series: [xSeries(),
          { label: 'tokens/s', stroke: '#00897b', width: 1.5, spanGaps: true,
            fill: 'rgba(0,137,123,0.08)', value: (u, v) => (v === null ? '—' : fmtSI(v)) },
          { label: 'MFU %', stroke: '#f4511e', width: 1.5, scale: 'mfu', spanGaps: true,
            show: anyMfu, value: (u, v) => (v === null ? '—' : v.toFixed(1) + '%') }],
        axes: [xAxis(), yAxis((v) => fmtSI(v, 3)),
          yAxis((v) => v.toFixed(0) + '%', { scale: 'mfu', side: 1, grid: { show: false },
            show: anyMfu })],
      }, [x, tps, mfu]);
    } else C.throughput.setData([x, tps, mfu]);

    // The spec's monitoring.ettrTarget as a dashed line (the alert's threshold).
    const target = points.map(() => (isNum(s.ettr_target) ? s.ettr_target : null));
    if (!C.ettr) {
      C.ettr = makeChart('chart-ettr', {
        ...baseOpts(),
        scales: { x: { time: false }, y: { range: [0, 1] } },
        series: [xSeries(), { label: 'ETTR', stroke: '#43a047', width: 1.5, spanGaps: true,
          fill: 'rgba(67,160,71,0.10)', value: (u, v) => (v === null ? '—' : v.toFixed(3)) },
        { label: 'target', stroke: '#e53935', width: 1, dash: [6, 4], points: { show: false },
          value: (u, v) => (v === null ? '—' : v.toFixed(2)) }],
        axes: [xAxis(), yAxis((v) => v.toFixed(2))],
      }, [x, ettr, target]);
    } else C.ettr.setData([x, ettr, target]);

    // Stacked: series k is the sum of categories 0..k, drawn largest first and each
    // filled down to 0 in an opaque colour, so every band shows one category.
    const raw = CATS.map(([k]) => points.map((p) => (p.seconds && isNum(p.seconds[k])
      ? p.seconds[k] : 0)));
    const cum = [];
    raw.forEach((vals, k) => cum.push(vals.map((v, i) => v + (k > 0 ? cum[k - 1][i] : 0))));
    const order = CATS.map((_, k) => CATS.length - 1 - k); // idle (top) first
    const tlData = [x, ...order.map((k) => cum[k])];
    state.timelineRaw = raw;
    if (!C.timeline) {
      C.timeline = makeChart('chart-timeline', {
        ...baseOpts(),
        series: [xSeries(), ...order.map((k) => ({
          label: CATS[k][0], stroke: CATS[k][1], fill: CATS[k][1], width: 1,
          points: { show: false },
          value: (u, v, si, di) => (di === null || di === undefined ? '—'
            : fmtDur(state.timelineRaw[k][di])),
        }))],
        axes: [xAxis(), yAxis((v) => fmtDur(v))],
      }, tlData);
    } else C.timeline.setData(tlData);
  }

  // --------------------------------------------------------------- incidents

  function culpritOf(detail) {
    const at = (detail || '').indexOf('localised: ');
    return at < 0 ? '' : detail.slice(at + 'localised: '.length).trim();
  }

  // What stop-diagnose tested and found for an incident (docs/diagnosis.md), or null.
  function diagnosisLine(dg) {
    if (!dg || !dg.run) return null;
    const checks = (dg.checks || []).map((c) => `${c.name} ${c.ok ? 'ok' : 'FAILED'}`);
    const verdict = dg.verdict ? `${dg.verdict} (${checks.join(', ')})` : 'testing…';
    return h('div', { class: 'reason', dataset: { testid: 'diagnosis' },
      title: dg.summary || dg.reason || '' },
    h('b', {}, 'tested '), `${dg.node_id}: ${verdict}` + (dg.action ? `; ${dg.action}` : ''));
  }

  // What a replay showed the incident's cause to be (data, code, hardware), or null.
  function causeLine(c) {
    if (!c || !c.cause) return null;
    return h('div', { class: 'reason', dataset: { testid: 'cause' }, title: c.evidence || '' },
      h('b', {}, 'cause '), `${c.cause}` + (c.action ? `; ${c.action}` : ''));
  }

  function renderIncidents(data) {
    const list = data.incidents || [];
    const costs = data.costs || [];
    const observations = data.observations || [];
    // Re-render only on change, so an open stacks view survives the next poll.
    const key = JSON.stringify([list.length, costs, observations.length,
      list.map((i) => [i.kind, i.detect_time, i.decision && i.decision.action, i.has_stacks,
        i.diagnosis && i.diagnosis.verdict, i.classification && i.classification.cause])]);
    state.incidents = list;
    setText('incident-count', list.length ? `${list.length}` : '');
    if (key === state.incidentsKey) return;
    state.incidentsKey = key;
    const body = $('incidents-body');
    body.replaceChildren();
    if (!list.length && !observations.length) {
      body.append(h('tr', { dataset: { testid: 'no-incidents' } },
        h('td', { colspan: 11, class: 'empty' }, 'no incidents — nothing has gone wrong yet')));
      return;
    }
    list.forEach((inc, n) => {
      const c = costs[n] || null;
      const d = inc.decision || {};
      const p = inc.processes || null;
      const culprit = culpritOf(inc.detail);
      const kind = h('td', { dataset: { col: 'kind' } },
        h('span', { class: 'kind kind-' + inc.kind }, inc.kind || '?'),
        inc.subtype ? h('span', { class: 'subtype' }, ' / ' + inc.subtype) : null,
        inc.chaos ? h('span', { class: 'chip chaos', title: 'injected by the spec\'s chaos' },
          'chaos') : null);
      const decision = h('td', { dataset: { col: 'decision' }, class: 'decision' },
        h('b', { dataset: { testid: 'decision-action' } }, d.action || '—'),
        d.reason ? h('div', { class: 'reason' }, d.reason) : null,
        isNum(d.backoff_s) && d.backoff_s > 0 ? h('div', { class: 'reason' },
          `backoff ${fmtDur(d.backoff_s)}`) : null,
        diagnosisLine(inc.diagnosis), causeLine(inc.classification));
      let procs = '—';
      if (p) {
        const keep = (p.keep || []).length, repl = (p.replace || []).length;
        procs = h('span', { title: p.reason || '' },
          p.in_process ? h('span', { class: 'chip ok' }, 'in process') : null,
          ` kept ${keep} · replaced ${repl}`,
          p.reason ? h('div', { class: 'reason' }, p.reason) : null);
      }
      let cost = '—';
      if (c) {
        const total = ['restart_s', 'reinit_s', 'rework_s', 'diagnosis_s'].reduce(
          (a, k) => a + (isNum(c[k]) ? c[k] : 0), isNum(c.detection_s) ? c.detection_s : 0);
        cost = h('span', {},
          h('b', {}, fmtDur(total)),
          h('div', { class: 'reason' },
            `detect ${fmtDur(c.detection_s)} · restart ${fmtDur(c.restart_s)} · ` +
            `reinit ${fmtDur(c.reinit_s)} · rework ${fmtDur(c.rework_s)}` +
            (isNum(c.diagnosis_s) && c.diagnosis_s > 0
              ? ` · diagnosis ${fmtDur(c.diagnosis_s)}` : '') +
            (isNum(c.rework_steps) ? ` (${fmtInt(c.rework_steps)} steps)` : '') +
            (isNum(c.resumed_from_step) && c.resumed_from_step >= 0
              ? ` · resumed after step ${fmtInt(c.resumed_from_step)}` : '')));
      }
      const btn = inc.has_stacks || inc.kind === 'hang'
        ? h('button', { type: 'button', class: 'stacks-btn',
          dataset: { testid: 'stacks-btn', incident: String(n) },
          onclick: () => toggleStacks(n) },
        state.openStacks.has(n) ? 'hide stacks' : 'stacks')
        : '';
      body.append(h('tr', { id: `incident-${n}`, class: 'incident',
        dataset: { testid: 'incident-row', kind: inc.kind || '', incident: String(n) } },
      h('td', { class: 'num' }, String(n)),
      kind,
      h('td', { dataset: { col: 'rank' } }, isNum(inc.rank) && inc.rank >= 0 ? inc.rank : '—'),
      h('td', { dataset: { col: 'node' } }, inc.node_id ? inc.node_id
        : isNum(inc.node) && inc.node >= 0 ? `slot ${inc.node}` : '—'),
      h('td', { dataset: { col: 'step' } }, isNum(inc.step) && inc.step >= 0
        ? fmtInt(inc.step) : '—'),
      h('td', { dataset: { col: 'detection' } }, fmtDur(inc.detection_s)),
      decision,
      h('td', { dataset: { col: 'processes' } }, procs),
      h('td', { dataset: { col: 'cost' } }, cost),
      h('td', { dataset: { col: 'culprit', testid: 'culprit' }, class: 'culprit',
        title: inc.detail || '' }, culprit || h('span', { class: 'muted' }, inc.detail || '')),
      h('td', {}, btn)));
      if (state.openStacks.has(n)) body.append(stacksRow(n, state.openStacks.get(n)));
    });
    // Faults found from the metrics (straggler, data starvation, loss spike): recorded
    // and alerted, nothing restarted.
    observations.forEach((o, n) => {
      const d = o.decision || {};
      body.append(h('tr', { id: `observation-${n}`, class: 'incident observation',
        dataset: { testid: 'observation-row', kind: o.kind || '' } },
      h('td', { class: 'num' }, '·'),
      h('td', { dataset: { col: 'kind' } },
        h('span', { class: 'kind kind-' + o.kind }, o.kind || '?'),
        o.chaos ? h('span', { class: 'chip chaos' }, 'chaos') : null),
      h('td', {}, isNum(o.rank) && o.rank >= 0 ? o.rank : '—'),
      h('td', {}, o.node_id || '—'),
      h('td', {}, isNum(o.step) && o.step >= 0 ? fmtInt(o.step) : '—'),
      h('td', {}, '—'),
      h('td', { class: 'decision' }, h('b', {}, d.action || '—'),
        d.reason ? h('div', { class: 'reason' }, d.reason) : null),
      h('td', {}, '—'),
      h('td', {}, 'none'),
      h('td', { class: 'culprit', title: o.detail || '' }, o.detail || ''),
      h('td', {}, '')));
    });
  }

  function stacksRow(n, text) {
    return h('tr', { class: 'stacks-row', id: `stacks-row-${n}` },
      h('td', { colspan: 11 },
        h('pre', { id: `stacks-${n}`, class: 'stacks', dataset: { testid: 'stacks' } }, text)));
  }

  // The incident's inline per-rank stacks, if the incidents payload carried them.
  function inlineStacks(n) {
    const inc = (state.incidents || [])[n];
    if (!inc || !inc.stacks || typeof inc.stacks !== 'object') return null;
    return Object.keys(inc.stacks).sort((a, b) => Number(a) - Number(b))
      .map((r) => `===== rank ${r} =====\n${inc.stacks[r]}`).join('\n');
  }

  async function toggleStacks(n) {
    const row = $(`stacks-row-${n}`);
    const btn = document.querySelector(`button[data-incident="${n}"]`);
    if (state.openStacks.has(n)) {
      state.openStacks.delete(n);
      if (row) row.remove();
      if (btn) btn.textContent = 'stacks';
      return;
    }
    state.openStacks.set(n, 'fetching stacks…');
    if (btn) btn.textContent = 'hide stacks';
    const tr = $(`incident-${n}`);
    if (tr) tr.after(stacksRow(n, 'fetching stacks…'));
    let text;
    try {
      const r = await getJSON(`api/stacks?incident=${n}`);
      text = typeof r.stacks === 'string' && r.stacks.length ? r.stacks
        : (inlineStacks(n) || 'no stacks were captured for this incident');
    } catch (e) {
      text = inlineStacks(n) || `could not fetch the stacks: ${e.message || e}`;
    }
    if (!state.openStacks.has(n)) return; // closed meanwhile
    state.openStacks.set(n, text);
    const pre = $(`stacks-${n}`);
    if (pre) pre.textContent = text;
  }

  // ------------------------------------------------------------------- ranks

  function heatColor(f) {
    const x = Math.min(1, Math.max(0, f)) * (HEAT_STOPS.length - 1);
    const i = Math.min(HEAT_STOPS.length - 2, Math.floor(x));
    const a = hexRgb(HEAT_STOPS[i]), b = hexRgb(HEAT_STOPS[i + 1]);
    const t = x - i;
    return `rgb(${a.map((v, k) => Math.round(v + (b[k] - v) * t)).join(',')})`;
  }
  function hexRgb(s) {
    return [1, 3, 5].map((i) => parseInt(s.slice(i, i + 2), 16));
  }
  const HEAT_LUT = Array.from({ length: 64 }, (_, i) => heatColor(i / 63));

  function renderRanks(data) {
    const ranks = data.ranks || {};
    const ids = Object.keys(ranks).map(Number).filter((r) => (ranks[r] || []).length)
      .sort((a, b) => a - b);
    state.ranks = { data, ids };
    drawHeatmap();
    renderStragglers(data);
  }

  function drawHeatmap() {
    const { data, ids } = state.ranks || { data: {}, ids: [] };
    const ranks = data.ranks || {};
    const canvas = $('heatmap');
    const empty = ids.length === 0;
    $('heatmap-empty').hidden = !empty;
    canvas.parentElement.parentElement.hidden = empty;
    document.querySelector('.heatmap-legend').hidden = empty;
    if (empty) {
      setText('heatmap-lo', ''); setText('heatmap-hi', ''); setText('heatmap-range', '');
      return;
    }
    let lo = Infinity, minStep = Infinity, maxStep = -Infinity;
    const vals = [];
    for (const r of ids) {
      for (const [step, t] of ranks[r]) {
        if (!isNum(step) || !isNum(t)) continue;
        minStep = Math.min(minStep, step); maxStep = Math.max(maxStep, step);
        lo = Math.min(lo, t); vals.push(t);
      }
    }
    const MAX_COLS = 2000; // keep the newest steps when windows differ widely
    if (maxStep - minStep + 1 > MAX_COLS) minStep = maxStep - MAX_COLS + 1;
    vals.sort((a, b) => a - b);
    // Colour up to the 98th percentile, so one very slow step does not flatten the rest.
    let hi = vals[Math.min(vals.length - 1, Math.floor(vals.length * 0.98))];
    const clamped = hi < vals[vals.length - 1];
    if (!(hi > lo)) hi = lo + Math.max(1e-6, lo * 0.01);
    const nCols = maxStep - minStep + 1;
    const plot = canvas.parentElement;
    const cssW = Math.max(100, plot.clientWidth);
    const rowH = Math.max(2, Math.min(18, Math.floor(320 / ids.length)));
    const cssH = rowH * ids.length;
    const dpr = window.devicePixelRatio || 1;
    canvas.style.width = cssW + 'px';
    canvas.style.height = cssH + 'px';
    canvas.width = Math.round(cssW * dpr);
    canvas.height = Math.round(cssH * dpr);
    const ctx = canvas.getContext('2d');
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    ctx.clearRect(0, 0, cssW, cssH);
    const colW = cssW / nCols;
    const gap = rowH >= 8 ? 1 : 0;
    ids.forEach((r, row) => {
      for (const [step, t] of ranks[r]) {
        if (!isNum(step) || !isNum(t) || step < minStep) continue;
        const f = (t - lo) / (hi - lo);
        ctx.fillStyle = HEAT_LUT[Math.round(Math.min(1, Math.max(0, f)) * 63)];
        const x0 = (step - minStep) * colW;
        ctx.fillRect(x0, row * rowH, Math.max(colW, 1), rowH - gap);
      }
    });
    state.heat = { ids, minStep, nCols, colW, rowH, ranks };

    // Rank labels (every k-th when rows are thin) and the step axis.
    const labels = $('heatmap-labels');
    labels.replaceChildren();
    labels.style.height = cssH + 'px';
    const every = Math.max(1, Math.ceil(12 / rowH));
    ids.forEach((r, row) => {
      if (row % every) return;
      labels.append(h('div', { class: 'hl', style: `top:${row * rowH}px;height:${rowH}px;` +
        `line-height:${rowH}px` }, `rank ${r}`));
    });
    const axis = $('heatmap-axis');
    axis.replaceChildren(h('span', {}, `step ${fmtInt(minStep)}`),
      h('span', {}, `${fmtInt(nCols)} steps`), h('span', {}, `step ${fmtInt(maxStep)}`));
    setText('heatmap-lo', fmtDur(lo));
    setText('heatmap-hi', (clamped ? '≥ ' : '') + fmtDur(hi));
    setText('heatmap-range',
      `${ids.length} ranks · steps ${fmtInt(minStep)}–${fmtInt(maxStep)}`);
  }

  function heatTip(ev) {
    const hm = state.heat;
    if (!hm) return;
    const rect = $('heatmap').getBoundingClientRect();
    const row = Math.floor((ev.clientY - rect.top) / hm.rowH);
    const step = hm.minStep + Math.floor((ev.clientX - rect.left) / hm.colW);
    const r = hm.ids[row];
    if (r === undefined) { setText('heatmap-tip', ''); return; }
    // A reworked step is there twice: its newest time.
    const hit = (hm.ranks[r] || []).findLast((p) => p[0] === step);
    setText('heatmap-tip', hit ? `rank ${r}, step ${fmtInt(step)}: ${fmtDur(hit[1])}`
      : `rank ${r}, step ${fmtInt(step)}: —`);
  }

  function renderStragglers(data) {
    const score = data.straggler_score || {};
    const busy = data.busy_median || {};
    const ids = [...new Set([...Object.keys(score), ...Object.keys(busy)])].map(Number);
    ids.sort((a, b) => (isNum(score[a]) ? score[a] : 2) - (isNum(score[b]) ? score[b] : 2) ||
      a - b);
    const body = $('stragglers-body');
    body.replaceChildren();
    if (!ids.length) {
      body.append(h('tr', {}, h('td', { colspan: 4, class: 'empty' }, 'no scores yet')));
      return;
    }
    const MAX = 16;
    for (const r of ids.slice(0, MAX)) {
      const s = score[r];
      const slow = isNum(s) && s < 0.8;
      body.append(h('tr', { dataset: { testid: 'straggler-row', rank: String(r) },
        class: slow ? 'slow' : '' },
      h('td', {}, `rank ${r}`),
      h('td', { class: 'num' }, isNum(s) ? s.toFixed(3) : '—'),
      h('td', { class: 'barcell' }, h('div', { class: 'bar',
        style: `width:${isNum(s) ? Math.round(Math.min(1, s) * 100) : 0}%` })),
      h('td', { class: 'num' }, fmtDur(busy[r]))));
    }
    if (ids.length > MAX) {
      body.append(h('tr', {}, h('td', { colspan: 4, class: 'muted' },
        `… ${ids.length - MAX} faster ranks not shown`)));
    }
  }

  // ------------------------------------------------------------- checkpoints

  function renderCheckpoints(c, s) {
    const steps = c.committed_steps || [];
    setText('ckpt-count', `${fmtInt(steps.length)} steps`);
    if (isNum(c.last_step) && c.last_step >= 0) {
      const age = isNum(c.last_time) && isNum(s.now)
        ? ` · ${fmtDur(s.now - c.last_time)} ago` : '';
      setText('ckpt-last', `step ${fmtInt(c.last_step)} on ${c.last_tier || '?'}${age}`);
    } else setText('ckpt-last', 'none yet');
    setText('ckpt-interval', isNum(c.interval_s) && c.interval_s > 0
      ? `every ${fmtDur(c.interval_s)} (expected)` : '—');
    const chips = $('ckpt-steps');
    chips.replaceChildren();
    const SHOW = 24;
    if (steps.length > SHOW) {
      chips.append(h('span', { class: 'muted' }, `${steps.length - SHOW} older … `));
    }
    for (const st of steps.slice(-SHOW)) chips.append(h('span', { class: 'chip' }, fmtInt(st)));
    const bytes = c.bytes_by_tier || {}, secs = c.seconds_by_tier || {};
    const tiers = [...new Set([...Object.keys(bytes), ...Object.keys(secs)])];
    const body = $('ckpt-tiers-body');
    body.replaceChildren();
    if (!tiers.length) {
      body.append(h('tr', {}, h('td', { colspan: 4, class: 'empty' }, 'nothing written yet')));
    }
    for (const t of tiers) {
      const b = bytes[t], sec = secs[t];
      body.append(h('tr', { dataset: { tier: t } }, h('td', {}, t),
        h('td', { class: 'num' }, fmtBytes(b)), h('td', { class: 'num' }, fmtDur(sec)),
        h('td', { class: 'num' }, isNum(b) && isNum(sec) && sec > 0
          ? fmtBytes(b / sec) + '/s' : '—')));
    }
  }

  // -------------------------------------------------------------------- start

  function start() {
    if (typeof uPlot !== 'function') {
      setConn('disconnected', 'uPlot failed to load');
      return;
    }
    $('heatmap').addEventListener('mousemove', heatTip);
    $('heatmap').addEventListener('mouseleave', () => setText('heatmap-tip', ''));
    let w = window.innerWidth;
    window.addEventListener('resize', () => {
      if (window.innerWidth !== w && state.ranks) { w = window.innerWidth; drawHeatmap(); }
    });
    poll();
  }
  start();
})();
