// rftbus studio: the few things a server-rendered page cannot do alone (no framework, no build step).
"use strict";
const base = document.body.dataset.base.replace(/\/$/, "");
const refreshMs = 1000 * parseFloat(document.body.dataset.refresh || "5");

async function call(path, body) {
  const opt = body === undefined ? {} : {method: "POST", headers: {"Content-Type": "application/json"}, body: JSON.stringify(body)};
  const r = await fetch(base + path, {credentials: "same-origin", ...opt});
  let data = null;
  try { data = await r.json(); } catch (e) { data = null; }
  if (!r.ok) {
    const msg = (data && data.error && data.error.message) || `${r.status} ${r.statusText}`;
    throw new Error(msg);
  }
  return data;
}

function fmtTimes(root) {
  root.querySelectorAll("time[data-ms]").forEach(t => { t.textContent = new Date(+t.dataset.ms).toLocaleTimeString(); });
}

// -- sign in ------------------------------------------------------------------------------------------
const loginForm = document.getElementById("login-form");
if (loginForm) {
  const status = document.getElementById("login-status");
  loginForm.addEventListener("submit", async ev => {
    ev.preventDefault();
    try {
      const r = await call("/api/login", {token: loginForm.token.value, name: loginForm.name.value});
      status.textContent = "signed in: " + r.scopes.join(", ");
      location.href = base + "/";
    } catch (e) { status.textContent = e.message; }
  });
  document.getElementById("logout").addEventListener("click", async () => {
    await call("/api/logout", {}); status.textContent = "signed out";
  });
}

// -- the feedback queue -------------------------------------------------------------------------------
const queuePage = document.getElementById("queue-page");
if (queuePage) {
  const list = document.getElementById("queue"), mine = document.getElementById("mine");
  const order = document.getElementById("queue-order"), taskSel = document.getElementById("queue-task");
  const shown = new Map();   // group_id -> card
  const done = new Set();    // experience ids graded from this page (analytics may not have them yet)
  let current = null;

  function select(card) {
    if (current) current.classList.remove("current");
    current = card;
    if (card) { card.classList.add("current"); card.focus({preventScroll: true}); card.scrollIntoView({block: "nearest"}); }
  }

  function addMine(g) {
    const li = document.createElement("li");
    const what = g.kind === "thumbs" ? (g.thumbs_up ? "✓ up" : "✗ down") : g.kind === "rating" ? `rated ${g.rating}`
      : g.kind === "correction" ? `corrected: “${g.correction}”` : g.kind === "preference" ? "preferred" : `${g.kind} ${g.reward ?? ""}`;
    li.dataset.experience = g.experience_id;
    li.textContent = `${what} · ${g.experience_id}` + (g.response ? ` · “${g.response}”` : "");
    mine.prepend(li);
  }

  // One grade: a sample's (thumbs, rating, correction) or the pair's (a preference). The card is done when
  // every sample has one, or the pair was decided.
  async function grade(card, body, label, sample) {
    const scope = sample || card;
    if (scope.classList.contains("sending") || scope.dataset.graded) return;
    const state = card.querySelector(".state");
    scope.classList.add("sending"); card.classList.remove("failed");
    state.textContent = "sending…";
    try {
      const r = await call("/api/feedback", body);
      scope.classList.remove("sending");
      scope.dataset.graded = r.feedback_id;
      state.textContent = `${label}: acknowledged by Kafka on ${r.topic} (${r.feedback_id})`;
      scope.querySelectorAll("button, textarea").forEach(b => { b.disabled = true; });
      const samples = [...card.querySelectorAll(".sample")];
      const graded = sample ? [sample] : samples;
      graded.forEach(s => { s.dataset.graded = r.feedback_id; done.add(s.dataset.experience); });
      addMine({...body, experience_id: r.experience_id, kind: r.kind, thumbs_up: body.thumbs === "up",
               response: graded[0].querySelector(".response").textContent});
      if (samples.every(s => s.dataset.graded)) {
        card.classList.add("graded");
        card.dataset.graded = r.feedback_id;
        card.querySelectorAll("button, textarea").forEach(b => { b.disabled = true; });
        const next = card.nextElementSibling;
        setTimeout(() => { card.remove(); shown.delete(card.dataset.group); }, 1500);
        if (current === card) select(next);
      }
    } catch (e) {
      scope.classList.remove("sending"); card.classList.add("failed");
      state.textContent = "not accepted: " + e.message;
    }
  }

  function card(g) {
    const c = document.getElementById("group-tpl").content.firstElementChild.cloneNode(true);
    c.dataset.group = g.group_id;
    c.querySelector(".task").textContent = g.task_id;
    c.querySelector(".version").textContent = "v" + g.version;
    c.querySelector(".age").textContent = `${Math.round(g.age_s)} s ago`;
    c.querySelector(".prompt").textContent = g.prompt;
    const pics = c.querySelector(".pictures");
    for (let k = 0; k < (g.images || 0); k++) {  // the picture beside the answers to grade
      const img = document.createElement("img");
      img.src = `${base}/api/image/${encodeURIComponent(g.group_id)}/${k}`; img.alt = `image ${k + 1} of the prompt`;
      pics.appendChild(img);
    }
    const box = c.querySelector(".samples");
    g.samples.forEach((s, i) => {
      const el = document.getElementById("sample-tpl").content.firstElementChild.cloneNode(true);
      el.dataset.experience = s.experience_id;
      el.querySelector(".label").textContent = g.samples.length > 1 ? "ABCDEFGH"[i] || String(i) : "";
      el.querySelector(".response").textContent = s.response;
      const id = s.experience_id;
      el.querySelector(".up").onclick = () => grade(c, {experience_id: id, thumbs: "up"}, "thumbs up", el);
      el.querySelector(".down").onclick = () => grade(c, {experience_id: id, thumbs: "down"}, "thumbs down", el);
      el.querySelectorAll(".rate").forEach(b => { b.onclick = () => grade(c, {experience_id: id, rating: +b.dataset.rating}, "rated " + b.dataset.rating, el); });
      const ta = el.querySelector("textarea");
      const send = () => grade(c, {experience_id: id, correction: ta.value}, "correction", el);
      el.querySelector(".send-correction").onclick = send;
      ta.addEventListener("keydown", ev => { if (ev.key === "Enter" && (ev.ctrlKey || ev.metaKey)) { ev.preventDefault(); send(); } });
      box.appendChild(el);
    });
    if (g.samples.length === 2) {
      const [a, b] = g.samples.map(s => s.experience_id);
      c.querySelector(".pair").hidden = false;
      c.querySelector(".prefer-a").onclick = () => grade(c, {preferred_id: a, rejected_id: b}, "A preferred");
      c.querySelector(".prefer-b").onclick = () => grade(c, {preferred_id: b, rejected_id: a}, "B preferred");
    }
    c.addEventListener("click", () => select(c));
    return c;
  }

  async function refresh(reset) {
    try {
      const q = await call(`/api/queue?order=${order.value}&task=${encodeURIComponent(taskSel.value)}`);
      if (reset) { list.innerHTML = ""; shown.clear(); select(null); }
      for (const g of q.groups) {
        if (shown.has(g.group_id) || g.samples.some(s => done.has(s.experience_id))) continue;
        const c = card(g);
        shown.set(g.group_id, c);
        if (order.value === "newest" && !reset) list.prepend(c); else list.appendChild(c);
      }
      const keep = taskSel.value;
      taskSel.innerHTML = '<option value="">all tasks</option>' + q.tasks.map(t => `<option></option>`).join("");
      q.tasks.forEach((t, i) => { const o = taskSel.options[i + 1]; o.value = t.task_id; o.textContent = `${t.task_id} (${t.n})`; });
      taskSel.value = keep;
      document.getElementById("queue-count").textContent = `${shown.size} waiting`;
      if (!current && list.firstElementChild) select(list.firstElementChild);
      queuePage.dataset.loaded = "1";
    } catch (e) {
      document.getElementById("queue-count").textContent = "queue not available: " + e.message;
    }
  }

  async function loadMine() {
    try { const m = await call("/api/mine"); m.grades.slice().reverse().forEach(addMine); } catch (e) { /* shown on grade */ }
  }

  document.addEventListener("keydown", ev => {
    if (ev.target.tagName === "TEXTAREA" || ev.target.tagName === "INPUT" || ev.target.tagName === "SELECT") return;
    if (!current && (ev.key === "j" || ev.key === "k")) { select(list.firstElementChild); return; }
    if (!current) return;
    const samples = current.querySelectorAll(".sample");
    const first = [...samples].find(s => !s.dataset.graded) || samples[0];
    const press = sel => { const b = first.querySelector(sel); if (b && !b.disabled) b.click(); };
    if (ev.key === "j") select(current.nextElementSibling || current);
    else if (ev.key === "k") select(current.previousElementSibling || current);
    else if (ev.key === "u") press(".up");
    else if (ev.key === "d") press(".down");
    else if (/^[1-5]$/.test(ev.key)) press(`.rate[data-rating="${ev.key}"]`);
    else if (ev.key === "c") { ev.preventDefault(); const d = first.querySelector("details"); d.open = true; d.querySelector("textarea").focus(); }
    else if (ev.key === "a" && samples.length === 2) current.querySelector(".prefer-a").click();
    else if (ev.key === "b" && samples.length === 2) current.querySelector(".prefer-b").click();
  });
  order.onchange = () => refresh(true);
  taskSel.onchange = () => refresh(true);
  refresh(true); loadMine();
  setInterval(() => refresh(false), refreshMs);
}

// -- the dashboard: panels re-rendered by the server, swapped in place ----------------------------------
const panels = document.getElementById("panels");
if (panels) {
  setInterval(async () => {
    try {
      const r = await fetch(base + "/fragments/dashboard?window=" + panels.dataset.window, {credentials: "same-origin"});
      if (r.ok) { panels.innerHTML = await r.text(); fmtTimes(panels); document.getElementById("dash-updated").textContent = "updated " + new Date().toLocaleTimeString(); }
    } catch (e) { /* keep the last panels */ }
  }, refreshMs);
}
fmtTimes(document);
