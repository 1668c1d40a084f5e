// app.js: the console's page. It shows nothing without a bearer token:
// the token comes once in the address's fragment (#token=…, never sent
// to the service, removed from the address at once) or is pasted in,
// is kept in sessionStorage (this tab, until it closes) and sent as
// "Authorization: Bearer" on every call, which the service checks as it
// checks any client's. Everything shown is built as text (no HTML from
// data), and what can be checked is checked here (verify.js).

import * as V from "./verify.js";

const TOKEN = "sandbox.console.token";
const main = document.getElementById("main");
const nav = document.getElementById("nav");
const who = document.getElementById("who");
let hostKey = null;
let routeGen = 0;
let timer = null;

class AuthError extends Error {}

// ---- DOM, built from text only ----

function el(tag, attrs = {}, ...kids) {
  const e = document.createElement(tag);
  setAttrs(e, attrs);
  for (const k of kids.flat()) if (k !== null && k !== undefined && k !== false) e.append(k instanceof Node ? k : String(k));
  return e;
}

const SVG = "http://www.w3.org/2000/svg";
function svg(tag, attrs = {}, ...kids) {
  const e = document.createElementNS(SVG, tag);
  setAttrs(e, attrs);
  for (const k of kids.flat()) if (k !== null && k !== undefined) e.append(k instanceof Node ? k : String(k));
  return e;
}

function setAttrs(e, attrs) {
  for (const [k, v] of Object.entries(attrs)) {
    if (v === null || v === undefined || v === false) continue;
    if (k === "on") for (const [ev, f] of Object.entries(v)) e.addEventListener(ev, f);
    else if (k === "data") for (const [dk, dv] of Object.entries(v)) e.dataset[dk] = String(dv);
    else e.setAttribute(k, String(v));
  }
}

// ---- formatting ----

export function fmtUJ(uj) {
  if (uj < 1000) return `${uj} µJ`;
  if (uj < 1e6) return `${(uj / 1000).toFixed(2)} mJ`;
  return `${(uj / 1e6).toFixed(3)} J`;
}
const fmtTime = (s) => (s ? new Date(s).toISOString().replace("T", " ").replace(/\.\d+Z$/, "Z") : "");
const short = (a) => (a && a.length > 20 ? a.slice(0, 15) + "…" + a.slice(-4) : a || "");
const total = (e) => e.measured_uj + e.estimated_uj;
const energyText = (es) => (es && es.length ? es.map((e) => `${e.class} ${fmtUJ(total(e))}`).join(", ") : "none");

function badge(state, label) {
  return el("span", { class: `badge ${state}`, data: { state } }, label || state);
}

// ---- the API, with the token ----

const token = () => sessionStorage.getItem(TOKEN);

async function api(path, opts = {}) {
  const t = token();
  if (!t) { showLogin(); throw new AuthError("no token"); }
  const r = await fetch(path, {
    ...opts,
    headers: { ...(opts.headers || {}), Authorization: "Bearer " + t },
    cache: "no-store", credentials: "omit", redirect: "error",
  });
  if (r.status === 401) {
    sessionStorage.removeItem(TOKEN);
    showLogin("The service refused this token (401). Give one of its --token-file's tokens.");
    throw new AuthError("401");
  }
  if (!r.ok) {
    let msg = `${r.status} ${r.statusText}`;
    try { const e = await r.json(); msg = `${r.status} ${e.category}: ${e.message}`; } catch { /* not JSON */ }
    throw new Error(msg);
  }
  return r;
}
const getJSON = async (p) => (await api(p)).json();

// ---- token ----

function showLogin(msg) {
  routeGen++;
  clearInterval(timer);
  hostKey = null;
  nav.hidden = true;
  who.replaceChildren();
  const input = el("input", { type: "password", id: "token-input", autocomplete: "off", "aria-label": "bearer token", size: 48 });
  const form = el("form", { id: "login", on: { submit: (ev) => {
    ev.preventDefault();
    if (!input.value.trim()) return;
    sessionStorage.setItem(TOKEN, input.value.trim());
    start();
  } } },
  el("h2", {}, "A bearer token is needed"),
  el("p", {}, "The console shows only what the service shows this token: give one of the tokens of its --token-file. It is kept in this tab alone (sessionStorage) and sent to this service only."),
  msg ? el("p", { class: "error", id: "login-error" }, msg) : null,
  el("label", {}, "Token ", input), " ", el("button", { type: "submit" }, "Open"));
  main.replaceChildren(form);
}

async function start() {
  try {
    hostKey = (await getJSON("/v1/key")).key;
  } catch (e) {
    if (!(e instanceof AuthError)) main.replaceChildren(el("p", { class: "error" }, `GET /v1/key: ${e.message}`));
    return;
  }
  nav.hidden = false;
  who.replaceChildren(
    el("span", { id: "host-key", title: hostKey }, "host key ", short(hostKey)), " ",
    el("button", { id: "logout", type: "button", on: { click: () => { sessionStorage.removeItem(TOKEN); showLogin("Token forgotten."); } } }, "Forget token"));
  if (!/^#\/\w/.test(location.hash)) history.replaceState(null, "", location.pathname + "#/sandboxes");
  route();
}

// takeToken moves a token given in the fragment (#token=…) into the
// tab's sessionStorage and out of the address (and its history).
function takeToken() {
  const m = /^#token=([^&]*)/.exec(location.hash);
  if (!m) return false;
  if (m[1]) sessionStorage.setItem(TOKEN, decodeURIComponent(m[1]));
  history.replaceState(null, "", location.pathname + "#/sandboxes");
  return true;
}

function boot() {
  takeToken();
  window.addEventListener("hashchange", () => {
    if (takeToken()) start();
    else if (hostKey) route();
  });
  if (!token()) return showLogin();
  start();
}

// ---- routes ----

async function route() {
  const gen = ++routeGen;
  clearInterval(timer);
  const [view, id, sub] = location.hash.replace(/^#\/?/, "").split("/").map((p) => decodeURIComponent(p));
  for (const a of nav.querySelectorAll("a")) a.classList.toggle("current", a.dataset.nav === (view || "sandboxes"));
  const section = el("section", { id: "view", data: { view: view || "sandboxes" } }, el("p", { class: "loading" }, "Loading…"));
  main.replaceChildren(section);
  const current = () => gen === routeGen;
  try {
    switch (view) {
      case "runs": await (id ? runView(section, id, current) : runsView(section, current)); break;
      case "records": await (id ? recordView(section, id, current) : recordsView(section, current)); break;
      case "fleets": await (id ? fleetView(section, id, sub, current) : fleetsView(section, current)); break;
      default: await (id ? sandboxView(section, id, current) : sandboxesView(section, current));
    }
  } catch (e) {
    if (!(e instanceof AuthError) && current()) section.replaceChildren(el("p", { class: "error", id: "view-error" }, e.message));
  }
}

function table(head, rows, empty) {
  if (!rows.length) return el("p", { class: "empty" }, empty);
  return el("table", {}, el("thead", {}, el("tr", {}, head.map((h) => el("th", {}, h)))), el("tbody", {}, rows));
}

// ---- sandboxes ----

async function sandboxesView(section, current) {
  const render = async () => {
    const sbs = await getJSON("/v1/sandboxes");
    if (!current()) return;
    section.replaceChildren(
      el("h2", {}, "Sandboxes ", el("button", { type: "button", id: "refresh", on: { click: render } }, "Refresh")),
      table(["Sandbox", "State", "Tier", "Execs", "Running", "Created"], sbs.map((s) =>
        el("tr", { data: { sandbox: s.id } },
          el("td", {}, el("a", { href: `#/sandboxes/${encodeURIComponent(s.id)}`, class: "id" }, s.id)),
          el("td", {}, badge(`state-${s.state}`, s.state)),
          el("td", {}, s.tier),
          el("td", { class: "num" }, s.execs),
          el("td", { class: "num" }, s.running || 0),
          el("td", {}, fmtTime(s.created)))), "This token has no sandboxes."));
  };
  await render();
  timer = setInterval(() => render().catch(() => {}), 5000);
}

async function sandboxView(section, id, current) {
  const sb = await getJSON(`/v1/sandboxes/${encodeURIComponent(id)}`);
  if (!current()) return;
  const screen = el("pre", { class: "screen", id: "screen", "aria-live": "polite" });
  const input = el("input", { id: "cmd", autocomplete: "off", spellcheck: "false", "aria-label": "command", placeholder: "a command line, e.g. echo hello" });
  const stop = el("button", { type: "button", id: "stop-cmd", disabled: true }, "Interrupt");
  const form = el("form", { class: "prompt", id: "prompt", on: { submit: (ev) => { ev.preventDefault(); exec(sb.id, input, screen, stop); } } },
    el("span", {}, "$"), input, el("button", { type: "submit", id: "run-cmd" }, "Run"), stop);
  if (sb.state !== "live") { input.disabled = true; input.placeholder = `a ${sb.state} sandbox: resume it to exec`; }
  section.replaceChildren(
    el("h2", {}, "Sandbox ", el("span", { class: "id", id: "sandbox-id" }, sb.id), " ", badge(`state-${sb.state}`, sb.state)),
    el("dl", {},
      el("dt", {}, "Tier"), el("dd", {}, sb.tier),
      el("dt", {}, "Execs"), el("dd", { id: "sandbox-execs" }, sb.execs),
      el("dt", {}, "Created"), el("dd", {}, fmtTime(sb.created)),
      el("dt", {}, "Grants"), el("dd", {}, sb.grants.length ? sb.grants.join(" ") : "none beyond its workspace"),
      el("dt", {}, "Workspace"), el("dd", {}, sb.workspace || ""),
      el("dt", {}, "Record"), el("dd", {}, el("a", { href: `#/records/${encodeURIComponent(sb.id)}`, id: "sandbox-record" }, "its run record"))),
    el("div", { class: "term" }, screen, form));
  input.focus();
}

// shellSplit splits a command line as a shell would its words: quotes
// ('…' literal, "…" with \ escapes) and backslashes; no expansion.
export function shellSplit(line) {
  const out = [];
  let cur = null, i = 0;
  const push = (c) => { cur = (cur ?? "") + c; };
  while (i < line.length) {
    const c = line[i++];
    if (/\s/.test(c)) { if (cur !== null) { out.push(cur); cur = null; } continue; }
    if (c === "\\") { if (i >= line.length) throw new Error("a backslash at the end of the line"); push(line[i++]); continue; }
    if (c === "'") {
      const j = line.indexOf("'", i);
      if (j < 0) throw new Error("an unclosed '");
      push(line.slice(i, j)); i = j + 1; continue;
    }
    if (c === '"') {
      cur = cur ?? "";
      for (;;) {
        if (i >= line.length) throw new Error('an unclosed "');
        const d = line[i++];
        if (d === '"') break;
        if (d === "\\" && i < line.length && '"\\$`'.includes(line[i])) { cur += line[i++]; continue; }
        cur += d;
      }
      continue;
    }
    push(c);
  }
  if (cur !== null) out.push(cur);
  return out;
}

// exec runs line in sandbox id, streaming its output to screen; stop
// interrupts it by its key (POST /v1/interrupts/{key}): it is still
// sealed, and its result still comes.
async function exec(id, input, screen, stop) {
  const line = input.value;
  let args;
  try { args = shellSplit(line); } catch (e) { screen.append(el("span", { class: "err" }, `console: ${e.message}\n`)); return; }
  if (!args.length) return;
  input.value = "";
  input.disabled = true;
  screen.append(el("span", { class: "cmd" }, `$ ${line}\n`));
  const out = new TextDecoder(), errd = new TextDecoder();
  const key = "console-" + V.hex(crypto.getRandomValues(new Uint8Array(12)));
  stop.onclick = async () => {
    stop.disabled = true;
    // 404 until the service has the call in flight: asked again, a while.
    for (let i = 0; ; i++) {
      try { await api(`/v1/interrupts/${key}`, { method: "POST" }); return; } catch (e) {
        if (e instanceof AuthError) return;
        if (!e.message.startsWith("404") || i >= 20) { screen.append(el("span", { class: "err" }, `console: interrupt: ${e.message}\n`)); return; }
      }
      await new Promise((r) => setTimeout(r, 150));
    }
  };
  stop.disabled = false; // the response's headers come with its first frame
  try {
    const r = await api(`/v1/sandboxes/${encodeURIComponent(id)}/exec`, {
      method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify({ args, interrupt_key: key }),
    });
    const reader = r.body.getReader();
    const dec = new TextDecoder();
    let buf = "", done = false, result = null;
    while (!done) {
      const { value, done: end } = await reader.read();
      done = end;
      buf += dec.decode(value || new Uint8Array(), { stream: !end });
      let nl;
      while ((nl = buf.indexOf("\n")) >= 0) {
        const f = JSON.parse(buf.slice(0, nl));
        buf = buf.slice(nl + 1);
        if (f.stdout !== undefined) screen.append(el("span", { class: "out" }, out.decode(V.b64(f.stdout), { stream: true })));
        if (f.stderr !== undefined) screen.append(el("span", { class: "err" }, errd.decode(V.b64(f.stderr), { stream: true })));
        if (f.result) result = f.result;
        if (f.error) screen.append(el("span", { class: "err" }, `console: ${f.error.category}: ${f.error.message}\n`));
      }
      screen.scrollTop = screen.scrollHeight;
    }
    if (result) {
      const o = result.outcome || {};
      const uj = (result.energy || []).reduce((a, e) => a + total(e), 0);
      screen.append(el("span", { class: "result", data: { run: result.run, exit: result.exit_status, uj } },
        `[${o.status}${o.status === "exited" ? " " + o.exit_code : ""} · ${result.duration_ms} ms · ${energyText(result.energy)} · `,
        el("a", { href: `#/runs/${encodeURIComponent(result.run)}`, class: "run-link" }, `run ${short(result.run)}`), "]\n"));
    } else {
      screen.append(el("span", { class: "err" }, "console: the stream ended without a result (the connection broke)\n"));
    }
  } catch (e) {
    if (!(e instanceof AuthError)) screen.append(el("span", { class: "err" }, `console: ${e.message}\n`));
  } finally {
    stop.disabled = true;
    stop.onclick = null;
    input.disabled = false;
    input.focus();
  }
}

// ---- runs ----

const COLORS = ["#0969da", "#8250df", "#1a7f37", "#bc4c00", "#cf222e", "#4d2d00", "#116329", "#6e7781"];

// energyChart draws each device class's energy over time: for each class
// the cumulative sum of the runs' receipts, a point per run.
export function energyChart(runs) {
  const pts = [];
  for (const r of runs) {
    const t = Date.parse(r.started);
    if (!Number.isFinite(t)) continue;
    for (const e of r.energy || []) pts.push({ t, run: r.run, cls: e.class, uj: total(e) });
  }
  const W = 760, H = 280, ml = 70, mr = 150, mt = 20, mb = 40;
  const root = svg("svg", { id: "energy-chart", viewBox: `0 0 ${W} ${H}`, width: W, height: H, role: "img", "aria-label": "energy per device class over time" });
  if (!pts.length) { root.append(svg("text", { x: ml, y: H / 2, class: "axis" }, "no energy yet")); return root; }
  pts.sort((a, b) => a.t - b.t || (a.run < b.run ? -1 : 1));
  const classes = [...new Set(pts.map((p) => p.cls))].sort();
  const series = new Map(classes.map((c) => [c, []]));
  const cum = new Map(classes.map((c) => [c, 0]));
  for (const p of pts) { cum.set(p.cls, cum.get(p.cls) + p.uj); series.get(p.cls).push({ ...p, cum: cum.get(p.cls) }); }
  let t0 = pts[0].t, t1 = pts[pts.length - 1].t;
  if (t1 === t0) { t0 -= 1000; t1 += 1000; }
  const ymax = Math.max(1, ...cum.values());
  const x = (t) => ml + ((t - t0) / (t1 - t0)) * (W - ml - mr);
  const y = (v) => H - mb - (v / ymax) * (H - mt - mb);
  root.append(svg("line", { x1: ml, y1: H - mb, x2: W - mr, y2: H - mb, class: "axis-line" }), svg("line", { x1: ml, y1: mt, x2: ml, y2: H - mb, class: "axis-line" }));
  for (let i = 0; i <= 4; i++) {
    const v = (ymax * i) / 4;
    root.append(svg("line", { x1: ml - 4, y1: y(v), x2: W - mr, y2: y(v), class: "grid" }), svg("text", { x: ml - 6, y: y(v) + 4, class: "axis", "text-anchor": "end" }, fmtUJ(Math.round(v))));
  }
  const tl = (t) => new Date(t).toISOString().slice(11, 19);
  root.append(svg("text", { x: ml, y: H - mb + 18, class: "axis" }, tl(t0)), svg("text", { x: W - mr, y: H - mb + 18, class: "axis", "text-anchor": "end" }, tl(t1) + " UTC"));
  classes.forEach((c, i) => {
    const col = COLORS[i % COLORS.length];
    const s = series.get(c);
    let d = `M ${x(t0)} ${y(0)}`;
    let prev = 0;
    for (const p of s) { d += ` L ${x(p.t)} ${y(prev)} L ${x(p.t)} ${y(p.cum)}`; prev = p.cum; }
    d += ` L ${x(t1)} ${y(prev)}`;
    root.append(svg("path", { d, fill: "none", stroke: col, "stroke-width": 2, class: "series", data: { class: c } }));
    for (const p of s) {
      root.append(svg("circle", { cx: x(p.t), cy: y(p.cum), r: 4, fill: col, class: "point", data: { run: p.run, class: c, uj: p.uj, cum: p.cum } },
        svg("title", {}, `${c} ${fmtUJ(p.uj)} · run ${short(p.run)} · ${new Date(p.t).toISOString()}`)));
    }
    root.append(svg("rect", { x: W - mr + 12, y: mt + i * 20, width: 12, height: 12, fill: col }),
      svg("text", { x: W - mr + 30, y: mt + i * 20 + 11, class: "legend", data: { class: c, uj: cum.get(c) } }, `${c} ${fmtUJ(cum.get(c))}`));
  });
  return root;
}

async function runsView(section, current) {
  const runs = await getJSON("/ui/api/runs");
  if (!current()) return;
  section.replaceChildren(
    el("h2", {}, "Runs"),
    el("figure", {}, energyChart(runs), el("figcaption", {}, "Energy per device class over time: the cumulative sum of the runs' receipts (measured + estimated), a point per run.")),
    table(["Run", "Started", "Outcome", "Energy", "Service"], runs.map((r) =>
      el("tr", { data: { run: r.run } },
        el("td", {}, el("a", { href: `#/runs/${encodeURIComponent(r.run)}`, class: "id", title: r.run }, short(r.run))),
        el("td", {}, fmtTime(r.started)),
        el("td", {}, r.outcome ? `${r.outcome.status}${r.outcome.status === "exited" ? " " + r.outcome.exit_code : ""}` : ""),
        el("td", { data: { uj: (r.energy || []).reduce((a, e) => a + total(e), 0) } }, energyText(r.energy)),
        el("td", {}, r.verified ? badge("ok", "verified") : badge("fail", "problems")))), "This token has no runs yet."));
}

function checkList(id) {
  const ol = el("ol", { class: "checks", id });
  const show = (c) => {
    let li = ol.querySelector(`li[data-name="${CSS.escape(c.name)}"]`);
    if (!li) { li = el("li", { data: { name: c.name } }); ol.append(li); }
    li.dataset.state = c.state;
    li.replaceChildren(badge(c.state, { pending: "PENDING", running: "…", ok: "OK", fail: "FAIL", skipped: "SKIPPED" }[c.state]), " ", el("span", { class: "check-name" }, c.name), c.detail ? el("span", { class: "check-detail" }, ` — ${c.detail}`) : null);
  };
  return { ol, show };
}

function verdict(id, ok, what) {
  return el("p", { id, class: `verdict ${ok ? "ok" : "fail"}`, data: { verdict: ok ? "ok" : "fail" } },
    ok ? `${what}: every check passed, in this browser.` : `${what}: NOT verified (see the failed check above).`);
}

async function runView(section, id, current) {
  const rep = await getJSON(`/v1/runs/${encodeURIComponent(id)}`);
  if (!current()) return;
  const { ol, show } = checkList("run-checks");
  const o = rep.outcome || {};
  section.replaceChildren(
    el("h2", {}, "Run ", el("span", { class: "id", id: "run-id" }, rep.run)),
    el("dl", {},
      el("dt", {}, "Outcome"), el("dd", { id: "run-outcome" }, `${o.status || ""}${o.status === "exited" ? " " + o.exit_code : ""}${o.detail ? " (" + o.detail + ")" : ""}`),
      el("dt", {}, "Started"), el("dd", {}, fmtTime(rep.started)),
      el("dt", {}, "Ended"), el("dd", {}, fmtTime(rep.ended)),
      el("dt", {}, "Unit"), el("dd", { class: "id" }, rep.unit || ""),
      el("dt", {}, "Signer"), el("dd", { class: "id" }, rep.signer || ""),
      el("dt", {}, "The service says"), el("dd", { id: "service-verdict" }, rep.verified ? "verified" : `not verified: ${(rep.problems || []).join("; ")}`),
      (rep.notes || []).length ? [el("dt", {}, "Notes"), el("dd", {}, rep.notes.join(" · "))] : null),
    el("h3", {}, "Receipt: energy per device class"),
    table(["Class", "Measured", "Estimated", "Provenance"], (rep.energy || []).map((e) =>
      el("tr", { data: { class: e.class, measured: e.measured_uj, estimated: e.estimated_uj } },
        el("td", {}, e.class), el("td", { class: "num" }, `${e.measured_uj} µJ`), el("td", { class: "num" }, `${e.estimated_uj} µJ`),
        el("td", {}, (e.provenance || []).join("; ")))), "No energy account."),
    el("h3", {}, "Verification in this browser"), ol);
  const checks = V.runChecksFor(rep.run, async () => (await api(`/v1/runs/${encodeURIComponent(rep.run)}/bundle`)).arrayBuffer(), hostKey, rep);
  const ok = await V.runChecks(checks, show);
  if (current()) section.append(verdict("run-verdict", ok, "This run"));
}

// ---- records ----

async function recordsView(section, current) {
  const recs = await getJSON("/v1/records");
  if (!current()) return;
  section.replaceChildren(
    el("h2", {}, "Run records"),
    table(["Record", "Phase", "Segments", "Executed", "Idle", "Total", "Head"], recs.map((r) =>
      el("tr", { data: { record: r.id } },
        el("td", {}, el("a", { href: `#/records/${encodeURIComponent(r.id)}`, class: "id" }, r.id)),
        el("td", {}, badge(`phase-${r.phase}`, r.phase)),
        el("td", { class: "num" }, r.segments), el("td", { class: "num" }, r.executed),
        el("td", { class: "num", data: { uj: r.idle_uj } }, fmtUJ(r.idle_uj)),
        el("td", { class: "num", data: { uj: r.total_uj } }, fmtUJ(r.total_uj)),
        el("td", { class: "id", title: r.head }, short(r.head)))), "This token has no run records."));
}

function segmentBox(e, n, head) {
  const kind = n === 0 ? "genesis" : e.kind;
  const body = [];
  const snap = (s) => (s ? `snapshot ${short(s.root)}${s.memory ? " + memory" : ""}` : "");
  const idle = (uj, prov) => el("div", { class: "idle", data: { uj } }, `idle ${fmtUJ(uj)}`, prov ? el("small", {}, ` ${prov}`) : null);
  switch (kind) {
    case "genesis": body.push(el("div", {}, `unit ${short(e.unit)}`), el("div", {}, `grants ${short(e.grants)}`)); break;
    case "executed": body.push(el("div", {}, el("a", { href: `#/runs/${encodeURIComponent(e.attestation)}`, class: "run-link" }, `run ${short(e.attestation)}`)), el("div", { class: "energy" }, "…")); break;
    case "suspended": body.push(el("div", {}, snap(e.snapshot))); break;
    case "resumed": body.push(el("div", {}, snap(e.snapshot)), idle(e.idle_uj, e.idle_provenance)); break;
    case "claimed": body.push(el("div", {}, `from pool ${e.pool}`), idle(e.idle_uj, e.idle_provenance)); break;
    case "closed": body.push(el("div", {}, e.reason || "closed"), e.idle_uj !== undefined ? idle(e.idle_uj, e.idle_provenance) : null); break;
    case "forked": body.push(el("div", {}, "from ", el("a", { href: `#/records/${encodeURIComponent(e.parent.record)}` }, e.parent.record)), el("div", {}, snap(e.snapshot))); break;
    case "placed": body.push(el("div", {}, `on ${short(e.placement.host)}`), el("div", {}, e.placement.why)); break;
    case "exposed": body.push(el("div", {}, `port ${e.port} until ${new Date(e.until * 1000).toISOString()}`), el("div", {}, `preview ${short(e.preview)}`)); break;
    case "unexposed": body.push(el("div", {}, `port ${e.port}: ${e.reason}`), el("div", {}, `preview ${short(e.preview)}`)); break;
  }
  return el("div", { class: `seg seg-${kind}`, data: { kind, entry: n + 1 } },
    el("div", { class: "seg-kind" }, `${n + 1}. ${kind}`), body, head ? el("div", { class: "seg-head", title: head }, `head ${short(head)}`) : null);
}

async function recordView(section, id, current) {
  const [list, rec] = await Promise.all([getJSON("/v1/records"), getJSON(`/ui/api/records/${encodeURIComponent(id)}`)]);
  if (!current()) return;
  const listed = list.find((r) => r.id === id);
  if (!listed) throw new Error(`record ${id}: not among this token's records`);
  const { ol, show } = checkList("record-checks");
  const chain = el("div", { class: "chain", id: "record-chain" });
  section.replaceChildren(
    el("h2", {}, "Run record ", el("span", { class: "id", id: "record-id" }, id), " ", badge(`phase-${listed.phase}`, listed.phase)),
    el("p", {}, `${listed.segments} segments, ${listed.executed} executed; active ${fmtUJ(listed.active_uj)}, idle `, el("span", { id: "record-idle", data: { uj: listed.idle_uj } }, fmtUJ(listed.idle_uj)), `, total ${fmtUJ(listed.total_uj)}.`),
    el("h3", {}, "Verification in this browser"), ol,
    el("h3", {}, "Its chain of segments"), chain);
  const rc = V.recordChecks(id, rec.entries, rec.seals, listed.head, hostKey);
  const ok = await V.runChecks(rc.checks, show);
  if (!current()) return;
  rec.entries.forEach((line, n) => {
    let e;
    try { e = JSON.parse(line); } catch { e = { kind: "unreadable" }; }
    if (n > 0) chain.append(el("div", { class: "link", "aria-hidden": "true" }, "→"));
    chain.append(segmentBox(e, n, rc.heads[n]));
  });
  section.append(verdict("record-verdict", ok, "This record"));
  // Each executed segment's energy, from its run's receipt.
  for (const box of chain.querySelectorAll(".seg-executed")) {
    const a = box.querySelector(".run-link").getAttribute("href").slice("#/runs/".length);
    getJSON(`/v1/runs/${a}`).then((r) => {
      const uj = (r.energy || []).reduce((s, e) => s + total(e), 0);
      const x = box.querySelector(".energy");
      x.dataset.uj = uj;
      x.textContent = energyText(r.energy);
    }).catch((e) => { box.querySelector(".energy").textContent = e.message; });
  }
}

// ---- fleets ----

async function fleetsView(section, current) {
  const fls = await getJSON("/ui/api/fleets");
  if (!current()) return;
  section.replaceChildren(
    el("h2", {}, "Fleets"),
    table(["Fleet", "Items", "Made", "Checkpoint"], fls.map((f) =>
      el("tr", { data: { fleet: f.id } },
        el("td", {}, el("a", { href: `#/fleets/${encodeURIComponent(f.id)}`, class: "id" }, f.id)),
        el("td", { class: "num" }, f.items), el("td", {}, fmtTime(f.made)),
        el("td", {}, f.checkpoint ? "signed" : "none yet (running)"))), "This token has no fleets."));
}

async function fleetView(section, id, item, current) {
  const fls = await getJSON("/ui/api/fleets");
  if (!current()) return;
  const f = fls.find((x) => x.id === id);
  if (!f) throw new Error(`fleet ${id}: not among this token's fleets`);
  const input = el("input", { type: "number", id: "item-input", min: 0, max: Math.max(0, f.items - 1), value: item || 0 });
  section.replaceChildren(
    el("h2", {}, "Fleet ", el("span", { class: "id", id: "fleet-id" }, id)),
    el("p", {}, `${f.items} items. Its signed checkpoint:`),
    el("pre", { class: "note", id: "fleet-checkpoint" }, f.checkpoint || "(none yet)"),
    el("form", { id: "item-form", on: { submit: (ev) => { ev.preventDefault(); location.hash = `#/fleets/${encodeURIComponent(id)}/${Number(input.value)}`; } } },
      el("label", {}, "Item ", input), " ", el("button", { type: "submit", id: "check-item" }, "Check its inclusion")));
  if (item === undefined || item === "") return;
  const proof = await getJSON(`/ui/api/fleets/${encodeURIComponent(id)}/items/${encodeURIComponent(item)}`);
  if (!current()) return;
  const { ol, show } = checkList("fleet-checks");
  section.append(
    el("h3", {}, `Item ${proof.item.index}`),
    el("dl", { id: "fleet-item", data: { index: proof.item.index, run: proof.item.run } },
      el("dt", {}, "Input"), el("dd", { class: "id" }, proof.item.input),
      el("dt", {}, "Run"), el("dd", {}, el("a", { href: `#/runs/${encodeURIComponent(proof.item.run)}`, class: "id" }, proof.item.run)),
      el("dt", {}, "Path"), el("dd", {}, `${proof.path.length} hashes in a tree of ${proof.size}`)),
    el("h3", {}, "Inclusion, checked in this browser"), ol);
  const ok = await V.runChecks(V.fleetChecks(id, proof, hostKey), show);
  if (current()) section.append(verdict("fleet-verdict", ok, `Item ${proof.item.index}`));
}

boot();
