// netproxy approvals page: loads the lists from the admin API with the
// session cookie, keeps them live over /api/events, and posts decisions with
// the CSRF token. Every value from the server is inserted as text, never HTML.
"use strict";

(function () {
  const state = {
    csrf: "",
    pending: new Map(),   // id -> approval
    executions: new Map(), // execution_id -> execution
    blocked: [],          // newest first
    decided: [],          // newest first
    source: null,
    authed: false,
    held: null,           // events held while the lists reload, or null
    gen: 0,               // reload generation: only the latest one applies
  };
  const MAX_BLOCKED = 200;
  const MAX_DECIDED = 30;
  const DECISION_LABEL = {
    allow_once: "allowed once", allow_session: "allowed for session", allow_always: "always allowed",
    deny: "denied", deny_always: "always denied", timeout: "timed out", abort: "aborted",
  };

  // What each button does, by approval kind. Network outcomes follow SPEC §5
  // step 7; exec outcomes follow approvalsvc's exec semantics (the session
  // cache is keyed by the command's approval identity: argv, working
  // directory and sandbox permissions).
  const HELP = {
    network: {
      allow_once: () => "Let this one request through; ask again next time.",
      allow_session: () => "Allow this host, port and protocol until the session ends.",
      allow_always: () => "Add the host to the allow list and save a rule (every port and protocol).",
      deny: () => "Block this request; a later request may ask again.",
      deny_always: () => "Add the host to the deny list and save a rule; nothing can override it.",
    },
    exec: {
      allow_once: () => "Run this command this one time; the same command asks again next time.",
      allow_session: () => "Run it, and run this same command (same arguments, working directory and sandbox permissions) without asking for the rest of the session.",
      allow_always: (a) => hasAmendment(a)
        ? "As Allow for session, and save the proposed prefix rule to $NETPROXY_HOME/rules: from then on, commands starting with " +
          commandText(a.proposed_amendment) + " run without asking, in every session (outside the sandbox when rules allow every part of the command line)."
        : "No rule is proposed for this command, so nothing is saved: the same as Allow for session.",
      deny: () => "Do not run it; the same command asks again next time.",
      deny_always: () => "Do not run it; this same command is refused without asking for the rest of the session (no rule is saved).",
    },
  };

  const $ = (id) => document.getElementById(id);

  function el(tag, cls, text) {
    const e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined && text !== null) e.textContent = String(text);
    return e;
  }

  function parseTime(v) {
    if (!v) return null;
    const t = new Date(v);
    return isNaN(t.getTime()) || t.getFullYear() < 2000 ? null : t;
  }

  function ago(t) {
    if (!t) return "";
    const s = Math.max(0, Math.round((Date.now() - t.getTime()) / 1000));
    if (s < 5) return "just now";
    if (s < 60) return s + "s ago";
    const m = Math.floor(s / 60);
    if (m < 60) return m + "m " + (s % 60) + "s ago";
    const h = Math.floor(m / 60);
    if (h < 24) return h + "h " + (m % 60) + "m ago";
    return Math.floor(h / 24) + "d ago";
  }

  function setAge(node, t) {
    node.dataset.ts = t ? String(t.getTime()) : "";
    node.textContent = ago(t);
    if (t) {
      node.title = t.toLocaleString();
      if (node.tagName === "TIME") node.dateTime = t.toISOString();
    }
  }

  function refreshAges() {
    document.querySelectorAll("[data-ts]").forEach((n) => {
      if (n.dataset.ts) n.textContent = ago(new Date(Number(n.dataset.ts)));
    });
  }

  function quoteArg(a) {
    a = String(a);
    return /^[A-Za-z0-9_@%+=:,./-]+$/.test(a) ? a : "'" + a.replace(/'/g, "'\\''") + "'";
  }

  function commandText(c) {
    if (Array.isArray(c)) return c.map(quoteArg).join(" ");
    return c ? String(c) : "";
  }

  function target(o) {
    const host = o.host || "";
    if (!host) return o.kind === "exec" ? (commandText(o.command) || "command approval") : "(unknown host)";
    const h = host.indexOf(":") >= 0 ? "[" + host + "]" : host;
    const t = o.port ? h + ":" + o.port : h;
    // An ask request rule's review: the method and path under review.
    return o.method ? o.method + " " + t + (o.path || "") : t;
  }

  // reasonText explains a network approval's reason code (SPEC §3.6) in words;
  // exec approvals already carry a sentence.
  function reasonText(a) {
    if (a.reason === "not_allowed") return (a.host || "the host") + " is not in the allow list (not_allowed)";
    if (a.reason === "request_denied" && a.rule != null) return "request rule " + a.rule + " asks for a review of this request (request_denied)";
    return dash(a.reason);
  }

  // waitingText says whether a request still waits on the review (SPEC §5:
  // a review whose requesters all left stays decidable; its retry gets the
  // decision).
  function waitingText(a) {
    const n = Number(a.waiting) || 0;
    if (n > 0) return n === 1 ? "1 request is waiting" : n + " requests are waiting";
    return a.kind === "exec" ? "nobody (the command's requester is gone)"
      : "nobody: the requester was told \"pending\"; a retry of the same request gets your decision (allow once: within 60 s)";
  }

  function hasAmendment(a) {
    return Array.isArray(a.proposed_amendment) && a.proposed_amendment.length > 0;
  }

  // prefixRule writes an amendment as the rule allow_always saves (as
  // execpolicy.FormatPrefixRule does).
  function prefixRule(tokens) {
    return "prefix_rule(pattern=[" + tokens.map((t) => JSON.stringify(String(t))).join(", ") + '], decision="allow")';
  }

  function sandboxText(p) {
    if (p === "require_escalated") return "require_escalated: asks to run outside the sandbox";
    if (p === "with_additional_permissions") return "with_additional_permissions: asks for more than the sandbox's defaults";
    return dash(p) + (p ? ": runs in the sandbox" : "");
  }

  function dash(v) { return v === undefined || v === null || v === "" ? "—" : String(v); }

  // ---- API ----------------------------------------------------------------

  class AuthError extends Error {}

  async function api(path, opts) {
    opts = opts || {};
    const headers = { "Accept": "application/json" };
    if (opts.body !== undefined) headers["Content-Type"] = "application/json";
    if (opts.method && opts.method !== "GET") headers["X-CSRF-Token"] = state.csrf;
    const resp = await fetch(path, {
      method: opts.method || "GET",
      headers: headers,
      body: opts.body === undefined ? undefined : JSON.stringify(opts.body),
      credentials: "same-origin",
      cache: "no-store",
    });
    if (resp.status === 401) throw new AuthError("signed out");
    let data = null;
    const text = await resp.text();
    if (text) {
      try { data = JSON.parse(text); } catch (e) { data = { error: text.slice(0, 200) }; }
    }
    if (!resp.ok) {
      const msg = (data && (data.error || data.message)) || resp.statusText;
      const err = new Error(resp.status + " " + msg);
      err.status = resp.status;
      throw err;
    }
    return data || {};
  }

  // ---- rendering ----------------------------------------------------------

  function renderPending() {
    const list = $("pending-list");
    const items = Array.from(state.pending.values());
    items.sort((a, b) => (timeOf(b) - timeOf(a)));
    const wanted = new Set(items.map((a) => a.id));
    Array.from(list.children).forEach((c) => { if (!wanted.has(c.dataset.id)) c.remove(); });
    let prev = null;
    for (const a of items) {
      let card = list.querySelector('[data-id="' + CSS.escape(a.id) + '"]');
      if (!card) card = buildCard(a);
      if (prev ? prev.nextSibling !== card : list.firstChild !== card) {
        list.insertBefore(card, prev ? prev.nextSibling : list.firstChild);
      }
      prev = card;
    }
    const n = items.length;
    $("pending-empty").hidden = n > 0;
    $("pending-count").textContent = n + " pending";
    document.title = (n ? "(" + n + ") " : "") + "netproxy approvals";
  }

  function timeOf(a) {
    const t = parseTime(a.created_at);
    return t ? t.getTime() : 0;
  }

  function buildCard(a) {
    const card = $("approval-tpl").content.firstElementChild.cloneNode(true);
    card.dataset.id = a.id;
    card.classList.add("new");
    card.querySelector(".target").textContent = target(a);
    const kind = a.kind === "exec" ? "exec" : "network";
    card.classList.add("card-" + kind);
    card.querySelector(".proto").textContent = a.protocol || "—";
    card.querySelector(".proto").hidden = kind === "exec";
    card.querySelector(".kind").textContent = kind;
    setAge(card.querySelector(".age"), parseTime(a.created_at));
    card.querySelector(".f-command").textContent = dash(commandText(a.command));
    card.querySelector(".f-cwd").textContent = dash(a.cwd);
    card.querySelector(".f-session").textContent = dash(a.session_id);
    card.querySelector(".f-env").textContent = dash(a.environment_id);
    card.querySelector(".f-exec").textContent = dash(a.execution_id);
    card.querySelector(".f-reason").textContent = kind === "exec" ? dash(a.reason) : reasonText(a);
    card.querySelector(".f-waiting").textContent = waitingText(a);
    if (kind === "exec") {
      card.querySelector(".f-justification").textContent = dash(a.justification);
      card.querySelector(".f-amendment").textContent = hasAmendment(a) ? prefixRule(a.proposed_amendment) : "none proposed";
      card.querySelector(".f-sandbox").textContent = sandboxText(a.sandbox_permissions);
    } else {
      card.querySelectorAll(".only-exec").forEach((n) => n.remove());
    }
    card.querySelectorAll("button[data-decision]").forEach((b) => {
      b.nextElementSibling.textContent = HELP[kind][b.dataset.decision](a);
      b.addEventListener("click", () => decide(a.id, b.dataset.decision, card));
    });
    return card;
  }

  function renderExecutions() {
    const ul = $("exec-list");
    ul.replaceChildren();
    const items = Array.from(state.executions.values());
    items.sort((a, b) => ((parseTime(b.started_at) || 0) - (parseTime(a.started_at) || 0)));
    for (const e of items) {
      const li = el("li");
      const l1 = el("div", "line1");
      l1.append(el("span", "mono", commandText(e.command) || e.execution_id));
      const age = el("span", "muted");
      setAge(age, parseTime(e.started_at));
      l1.append(age);
      li.append(l1);
      li.append(el("div", "sub", "session " + dash(e.session_id) + " · env " + dash(e.environment_id) +
        (e.cwd ? " · " + e.cwd : "") + " · " + e.execution_id));
      ul.append(li);
    }
    $("exec-empty").hidden = items.length > 0;
    $("exec-count").textContent = items.length ? "(" + items.length + ")" : "";
  }

  function renderDecided() {
    const ul = $("decided-list");
    ul.replaceChildren();
    for (const d of state.decided) {
      const li = el("li");
      const l1 = el("div", "line1");
      const verdict = String(d.decision || "");
      const allowed = verdict.indexOf("allow") === 0;
      const left = el("span");
      left.append(el("span", allowed ? "ok" : "no", DECISION_LABEL[verdict] || dash(verdict)), " ", el("span", "mono", target(d)));
      l1.append(left);
      const age = el("span", "muted");
      setAge(age, parseTime(d.decided_at) || d._seen);
      l1.append(age);
      li.append(l1);
      const who = d.reviewer ? "by " + d.reviewer : "";
      const cmd = commandText(d.command);
      if (who || cmd) li.append(el("div", "sub", [who, cmd].filter(Boolean).join(" · ")));
      ul.append(li);
    }
    $("decided-empty").hidden = state.decided.length > 0;
  }

  function renderBlocked() {
    const tb = $("blocked-body");
    tb.replaceChildren();
    for (const b of state.blocked) {
      const tr = el("tr");
      const when = el("td");
      setAge(when, parseTime(b.ts));
      tr.append(when, el("td", "mono", target(b)), el("td", "", dash(b.protocol)), el("td", "", dash(b.method)),
        el("td", "", dash(b.reason)), el("td", "", dash(b.decision)), el("td", "", dash(b.source)),
        el("td", "mono", [b.client, b.execution_id].filter(Boolean).join(" · ") || "—"));
      tb.append(tr);
    }
    $("blocked-empty").hidden = state.blocked.length > 0;
    $("blocked-table").hidden = state.blocked.length === 0;
  }

  function showBanner(msg) {
    const b = $("banner");
    b.textContent = msg || "";
    b.hidden = !msg;
  }

  function setConn(text, cls) {
    const c = $("conn");
    c.textContent = text;
    c.className = "pill " + cls;
  }

  // ---- actions ------------------------------------------------------------

  async function decide(id, decision, card) {
    const buttons = card.querySelectorAll("button[data-decision]");
    const errNode = card.querySelector(".card-error");
    buttons.forEach((b) => { b.disabled = true; });
    errNode.hidden = true;
    try {
      await api("/api/approvals/" + encodeURIComponent(id) + "/decision", { method: "POST", body: { decision: decision } });
      const a = state.pending.get(id);
      if (a) noteDecided(Object.assign({}, a, { decision: decision, status: "decided" }));
      state.pending.delete(id);
      renderPending();
    } catch (e) {
      if (e instanceof AuthError) { signedOut(); return; }
      if (e.status === 404 || e.status === 409) {
        // Decided elsewhere (another page, the CLI, or a timeout).
        state.pending.delete(id);
        renderPending();
        return;
      }
      errNode.textContent = "Could not record the decision: " + e.message;
      errNode.hidden = false;
      buttons.forEach((b) => { b.disabled = false; });
    }
  }

  function noteDecided(a) {
    if (!a || !a.id) return;
    state.decided = state.decided.filter((d) => d.id !== a.id);
    a._seen = new Date();
    state.decided.unshift(a);
    state.decided.length = Math.min(state.decided.length, MAX_DECIDED);
    renderDecided();
  }

  // ---- loading and live updates -------------------------------------------

  // fetchAll reads every list; applySnapshot replaces the page state.
  async function fetchAll() {
    const [p, b, x, d] = await Promise.all([
      api("/api/approvals?status=pending"),
      api("/api/blocked").catch((e) => { if (e instanceof AuthError) throw e; return { blocked: [] }; }),
      api("/api/executions").catch((e) => { if (e instanceof AuthError) throw e; return { executions: [] }; }),
      api("/api/approvals?status=decided").catch((e) => { if (e instanceof AuthError) throw e; return { approvals: [] }; }),
    ]);
    return { p: p, b: b, x: x, d: d };
  }

  function applySnapshot(snap) {
    const p = snap.p, b = snap.b, x = snap.x, d = snap.d;
    state.pending.clear();
    for (const a of (p.approvals || [])) {
      if (a && a.id && (!a.status || a.status === "pending")) state.pending.set(a.id, a);
    }
    state.blocked = (b.blocked || []).slice();
    state.blocked.sort((x1, x2) => ((parseTime(x2.ts) || 0) - (parseTime(x1.ts) || 0)));
    state.blocked.length = Math.min(state.blocked.length, MAX_BLOCKED);
    state.executions.clear();
    for (const e of (x.executions || [])) if (e && e.execution_id) state.executions.set(e.execution_id, e);
    const decided = (d.approvals || []).filter((a) => a && a.id && a.status === "decided");
    decided.sort((a1, a2) => ((parseTime(a2.decided_at) || 0) - (parseTime(a1.decided_at) || 0)));
    state.decided = decided.slice(0, MAX_DECIDED);
    renderPending();
    renderBlocked();
    renderExecutions();
    renderDecided();
  }

  function parseData(ev) {
    try { return JSON.parse(ev.data); } catch (e) { return null; }
  }

  function connectEvents() {
    if (state.source) state.source.close();
    const es = new EventSource("/api/events");
    state.source = es;
    es.addEventListener("open", () => {
      // Reload on every (re)connect: events missed while away are not
      // replayed. The stream is subscribed before the lists are read, so
      // events that arrive meanwhile are held and applied on top of the
      // snapshot, in order, and none is lost or undone by it.
      state.held = [];
      const gen = ++state.gen;
      setConn("loading…", "pill-off");
      fetchAll().then((snap) => {
        if (gen !== state.gen) return; // a newer reconnect reloads again
        applySnapshot(snap);
        const held = state.held || [];
        state.held = null;
        held.forEach((h) => h.fn(h.data));
        showBanner("");
        setConn("live", "pill-on");
      }).catch((e) => { if (gen === state.gen) { state.held = null; onLoadError(e); } });
    });
    // on registers a handler that is held back while a reload is running.
    const on = (name, fn) => es.addEventListener(name, (ev) => {
      const data = parseData(ev);
      if (!data) return;
      if (state.held) state.held.push({ fn: fn, data: data });
      else fn(data);
    });
    es.addEventListener("error", () => {
      if (es.readyState === EventSource.CLOSED) {
        // The browser gave up (e.g. 401): check the session, then retry.
        setConn("offline", "pill-bad");
        setTimeout(() => { if (state.source === es) start(); }, 3000);
      } else {
        setConn("reconnecting…", "pill-off");
      }
    });
    on("approval_created", (a) => {
      if (!a || !a.id || (a.status && a.status !== "pending")) return;
      state.pending.set(a.id, a);
      renderPending();
    });
    on("approval_waiting", (w) => {
      const a = w && state.pending.get(w.id);
      if (!a) return;
      a.waiting = w.waiting;
      const card = $("pending-list").querySelector('[data-id="' + CSS.escape(w.id) + '"]');
      if (card) card.querySelector(".f-waiting").textContent = waitingText(a);
    });
    on("approval_decided", (a) => {
      if (!a || !a.id) return;
      const known = state.pending.get(a.id);
      state.pending.delete(a.id);
      renderPending();
      noteDecided(Object.assign({}, known || {}, a));
    });
    on("blocked", (b) => {
      // A held event may already be in the snapshot.
      const key = blockedKey(b);
      if (state.blocked.some((x) => blockedKey(x) === key)) return;
      state.blocked.unshift(b);
      state.blocked.length = Math.min(state.blocked.length, MAX_BLOCKED);
      renderBlocked();
    });
    on("execution_started", (e) => {
      if (!e || !e.execution_id) return;
      state.executions.set(e.execution_id, e);
      renderExecutions();
    });
    on("execution_ended", (e) => {
      if (!e || !e.execution_id) return;
      state.executions.delete(e.execution_id);
      renderExecutions();
    });
  }

  function blockedKey(b) {
    return [b.ts, b.host, b.port, b.protocol, b.client, b.reason].join("|");
  }

  function onLoadError(e) {
    if (e instanceof AuthError) { signedOut(); return; }
    showBanner("Could not load the lists: " + e.message);
  }

  // signedOut shows only the sign-in form: what is pending is not known
  // without the token, so no count or list is shown (and none is kept).
  function signedOut() {
    state.authed = false;
    state.gen++; // a reload in flight must not fill the lists again
    if (state.source) { state.source.close(); state.source = null; }
    state.pending.clear();
    state.executions.clear();
    state.blocked = [];
    state.decided = [];
    $("pending-list").replaceChildren();
    $("pending-empty").hidden = true;
    $("pending-count").textContent = "sign in to see pending approvals";
    document.title = "netproxy approvals";
    $("app").hidden = true;
    $("logout").hidden = true;
    $("login").hidden = false;
    setConn("signed out", "pill-bad");
    $("login-token").focus();
  }

  async function start() {
    try {
      const s = await api("/api/session");
      state.csrf = s.csrf_token || "";
      state.authed = true;
      $("pending-count").textContent = "";
      $("login").hidden = true;
      $("app").hidden = false;
      $("logout").hidden = false;
      connectEvents();
    } catch (e) {
      if (e instanceof AuthError) { signedOut(); return; }
      setConn("offline", "pill-bad");
      $("login").hidden = true;
      $("app").hidden = false;
      showBanner("The admin API is not answering (" + e.message + "); retrying.");
      setTimeout(start, 3000);
    }
  }

  async function login(ev) {
    ev.preventDefault();
    const token = $("login-token").value.trim();
    if (!token) return;
    $("login-token").value = "";
    signIn(token);
  }

  // signIn trades the token for the HttpOnly session cookie.
  async function signIn(token) {
    const errNode = $("login-error");
    errNode.hidden = true;
    try {
      const resp = await fetch("/login", {
        method: "POST",
        headers: { "Content-Type": "application/x-www-form-urlencoded" },
        body: new URLSearchParams({ token: token }).toString(),
        credentials: "same-origin",
        redirect: "manual",
      });
      // A successful login answers 303 to "/" (an opaque redirect here).
      if (resp.type !== "opaqueredirect" && !resp.ok) {
        signedOut();
        errNode.textContent = resp.status === 401 ? "Token rejected. Check the token netproxy serve printed." : "Sign-in failed: " + resp.status;
        errNode.hidden = false;
        return;
      }
      start();
    } catch (e) {
      signedOut();
      errNode.textContent = "Sign-in failed: " + e.message;
      errNode.hidden = false;
    }
  }

  async function logout() {
    try { await api("/logout", { method: "POST" }); } catch (e) { /* signed out either way */ }
    signedOut();
  }

  document.addEventListener("DOMContentLoaded", () => {
    $("login-form").addEventListener("submit", login);
    $("logout").addEventListener("click", logout);
    setInterval(refreshAges, 5000);
    // `netproxy serve` prints a link with the token in the fragment (never
    // sent to the server): sign in with it and drop it from the address bar.
    const m = /^#token=([^&]+)/.exec(location.hash);
    if (m) {
      history.replaceState(null, "", location.pathname);
      signIn(decodeURIComponent(m[1]));
      return;
    }
    start();
  });
})();
