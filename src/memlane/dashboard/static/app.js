// memlane dashboard: actions (same-origin JSON calls to the daemon's API) and charts (uPlot).
// Memory text is data: it is only ever set with textContent, never as HTML.
"use strict";

(function () {
  const flash = document.getElementById("flash");

  function say(text, isError) {
    if (!flash) return;
    flash.textContent = text;
    flash.classList.toggle("error", Boolean(isError));
    flash.focus && flash.setAttribute("tabindex", "-1");
  }

  async function call(method, url, body) {
    // X-Memlane-Client: a state-changing request without a JSON body (DELETE) passes the
    // daemon's CSRF check only with it; a cross-site page cannot send it without a preflight.
    const init = { method, credentials: "same-origin",
                   headers: { "Accept": "application/json", "X-Memlane-Client": "dashboard" } };
    if (body !== undefined) {
      init.headers["Content-Type"] = "application/json";
      init.body = JSON.stringify(body);
    }
    const resp = await fetch(url, init);
    let data = null;
    try { data = await resp.json(); } catch (e) { data = null; }
    if (!resp.ok) {
      const msg = data && data.error ? data.error.message : ("HTTP " + resp.status);
      throw new Error(msg);
    }
    return data;
  }

  function memoryId(el) {
    const holder = el.closest("[data-memory]");
    return holder ? holder.getAttribute("data-memory") : null;
  }

  async function run(fn, done) {
    try {
      const out = await fn();
      if (done) done(out); else location.reload();
    } catch (e) {
      say(e.message, true);
    }
  }

  document.addEventListener("click", function (ev) {
    const btn = ev.target.closest("[data-action]");
    if (!btn) return;
    const action = btn.getAttribute("data-action");
    const id = memoryId(btn);
    const enc = id ? encodeURIComponent(id) : "";
    if (action === "logout") {
      run(() => call("POST", "/api/dashboard/logout", {}), () => { location.href = "/"; });
    } else if (action === "edit-open") {
      document.getElementById("edit-form").classList.remove("hidden");
      document.querySelector("#edit-form textarea").focus();
    } else if (action === "edit-cancel") {
      document.getElementById("edit-form").classList.add("hidden");
    } else if (action === "pin") {
      const pinned = btn.getAttribute("data-pinned") === "true";
      run(() => call("PATCH", "/api/memory/" + enc, { pinned: pinned, who: "dashboard", why: pinned ? "pinned" : "unpinned" }));
    } else if (action === "forget") {
      run(() => call("DELETE", "/api/memory/" + enc + "?who=dashboard&why=" + encodeURIComponent("forgotten in the dashboard")));
    } else if (action === "recover") {
      run(() => call("POST", "/api/memory/" + enc + "/recover", { who: "dashboard", why: "recovered in the dashboard" }));
    } else if (action === "flag-open") {
      document.getElementById("flag-dialog").showModal();
    } else if (action === "flag-cancel") {
      document.getElementById("flag-dialog").close();
    } else if (action === "drift-resolve") {
      run(() => call("POST", "/api/drift/errors/" + encodeURIComponent(btn.getAttribute("data-error")) + "/resolve", {}));
    } else if (action === "review") {
      run(() => call("POST", "/api/dashboard/review/" + enc, { action: btn.getAttribute("data-review") }));
    } else if (action === "review-edit-open") {
      const form = btn.closest(".review-item").querySelector("[data-form=review-edit]");
      form.classList.remove("hidden");
      form.querySelector("textarea").focus();
    }
  });

  document.addEventListener("submit", function (ev) {
    const form = ev.target;
    const kind = form.getAttribute("data-form");
    if (!kind) return;
    ev.preventDefault();
    const f = new FormData(form);
    const id = memoryId(form) || (document.querySelector("[data-memory]") || { getAttribute: () => null }).getAttribute("data-memory");
    const enc = id ? encodeURIComponent(id) : "";
    if (kind === "teach") {
      const body = { content: f.get("content"), type: f.get("type"), importance: Number(f.get("importance") || 0.5),
                     pinned: f.get("pinned") === "on", who: "dashboard", why: "taught in the dashboard", source_type: "user_taught" };
      if (f.get("project")) body.project = f.get("project");
      run(() => call("POST", "/api/memory/remember", body), (out) => { location.href = "/memories/" + encodeURIComponent(out.id); });
    } else if (kind === "edit") {
      run(() => call("PATCH", "/api/memory/" + enc, { content: f.get("content"), who: "dashboard", why: "edited in the dashboard" }));
    } else if (kind === "flag") {
      const body = { reason: f.get("reason") };
      if (f.get("corrected")) body.corrected = f.get("corrected");
      if (f.get("original_id")) body.original_id = f.get("original_id").trim();
      if (f.get("note")) body.note = f.get("note");
      run(() => call("POST", "/api/dashboard/memories/" + enc + "/flag-wrong", body), (out) => {
        document.getElementById("flag-dialog").close();
        location.href = out.new ? "/memories/" + encodeURIComponent(out.new.id) : location.pathname;
      });
    } else if (kind === "review-edit") {
      const item = form.closest("[data-memory]");
      const mid = encodeURIComponent(item.getAttribute("data-memory"));
      run(() => call("POST", "/api/dashboard/review/" + mid, { action: "edit", content: f.get("content") }));
    }
  });

  // -- charts ---------------------------------------------------------------------------------
  if (typeof uPlot === "undefined") return;
  const css = getComputedStyle(document.documentElement);
  const color = (name) => css.getPropertyValue(name).trim() || "#888";
  const data = (id) => {
    const el = document.getElementById(id);
    return el ? JSON.parse(el.textContent) : null;
  };
  const axes = (yLabel) => [
    { stroke: color("--muted"), grid: { stroke: color("--line") } },
    { stroke: color("--muted"), grid: { stroke: color("--line") }, label: yLabel },
  ];
  const width = (el) => Math.max(280, el.clientWidth || 480);

  document.querySelectorAll("[data-spark]").forEach(function (el) {
    const pts = data(el.getAttribute("data-spark"));
    if (!pts || !pts.length) return;
    const x = pts.map((p) => p.t), p50 = pts.map((p) => p.p50), p95 = pts.map((p) => p.p95);
    // The x range is the last hour, so that a few minutes of data sit at the right end.
    const last = x[x.length - 1];
    new uPlot({ width: 220, height: 40, legend: { show: false }, cursor: { show: false },
      axes: [{ show: false }, { show: false }],
      scales: { x: { time: true, range: () => [last - 3600, last + 60] }, y: { range: (u, lo, hi) => [0, Math.max(1, hi * 1.1)] } },
      series: [{}, { stroke: color("--accent"), width: 1.5, points: { show: pts.length < 3, size: 5, fill: color("--accent") } },
               { stroke: color("--mid"), width: 1, points: { show: pts.length < 3, size: 5, fill: color("--mid") } }] },
      [x, p50, p95], el);
  });

  const winloss = document.getElementById("winloss");
  if (winloss) {
    const s = data("winloss-data");
    const dots = (stroke, fill) => ({ stroke: stroke, fill: fill, width: 0, paths: () => null, points: { show: true, size: 8, stroke: stroke, fill: fill } });
    // Dots at each session's NDCG@10 margin (predictor - baseline, left axis); the running
    // success rate on the right axis.
    const plot = new uPlot({ width: width(winloss), height: 240,
      scales: { x: { time: false }, m: { range: [-1, 1] }, rate: { range: [0, 1] } },
      axes: [{ stroke: color("--muted"), grid: { stroke: color("--line") } },
             { scale: "m", stroke: color("--muted"), grid: { stroke: color("--line") }, label: "margin" },
             { scale: "rate", side: 1, stroke: color("--muted"), grid: { show: false }, label: "success rate" }],
      series: [{ label: "session" },
        Object.assign({ label: "won", scale: "m" }, dots(color("--good"), color("--good"))),
        Object.assign({ label: "lost", scale: "m" }, dots(color("--warn"), color("--warn"))),
        Object.assign({ label: "tie", scale: "m" }, dots(color("--tie"), color("--tie"))),
        Object.assign({ label: "excluded", scale: "m" }, dots(color("--muted"), "transparent")),
        { label: "success rate", scale: "rate", stroke: color("--accent"), width: 2 }] },
      [s.x, s.won, s.lost, s.tie, s.excluded, s.success_rate], winloss);
    // Click a session's point: open its comparison inspector.
    plot.over.addEventListener("click", function () {
      const i = plot.cursor.idx;
      if (i != null && s.keys[i]) location.href = "/sessions/" + encodeURIComponent(s.keys[i]) + "#insp-h";
    });
  }

  const ndcg = document.getElementById("ndcg");
  if (ndcg) {
    const s = data("ndcg-data");
    new uPlot({ width: width(ndcg), height: 240, scales: { x: { time: false }, y: { range: [0, 1] } }, axes: axes("NDCG@10"),
      series: [{ label: "session" }, { label: "baseline", stroke: color("--bar-baseline"), width: 2 },
        { label: "predictor", stroke: color("--accent"), width: 2 }, { label: "fused", stroke: color("--good"), width: 2, dash: [6, 3] }] },
      [s.x, s.ndcg_baseline, s.ndcg_predictor, s.ndcg_fused], ndcg);
  }

  const training = document.getElementById("training");
  if (training) {
    const rows = data("training-data");
    const x = rows.map((r, i) => i + 1);
    const loss = rows.map((r) => (r.loss == null ? null : r.loss));
    const accepted = rows.map((r) => (r.accepted && r.loss != null ? r.loss : null));
    const resets = [];
    rows.forEach((r, i) => { if (i > 0 && r.drift_resets > rows[i - 1].drift_resets) resets.push(i + 1); });
    new uPlot({ width: width(training), height: 220, scales: { x: { time: false } }, axes: axes("loss"),
      series: [{ label: "run" }, { label: "loss", stroke: color("--accent"), width: 2 },
        { label: "accepted (new model version)", stroke: color("--good"), paths: () => null, points: { show: true, size: 9, fill: color("--good") } }],
      hooks: { draw: [function (u) {
        const ctx = u.ctx;
        ctx.save();
        ctx.setLineDash([6, 4]);
        ctx.strokeStyle = color("--warn");
        resets.forEach(function (rx) {
          const px = u.valToPos(rx, "x", true);
          ctx.beginPath(); ctx.moveTo(px, u.bbox.top); ctx.lineTo(px, u.bbox.top + u.bbox.height); ctx.stroke();
        });
        ctx.restore();
      }] } }, [x, loss, accepted], training);
  }
})();
