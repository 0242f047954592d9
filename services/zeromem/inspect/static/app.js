// zeromem inspector: the live tables (server-sent events) and the savings charts (uPlot).
// No framework: htmx does the partial page updates, this file only what htmx does not.
"use strict";

(function () {
  const MAX_ROWS = 200;

  function cell(text, cls) {
    const td = document.createElement("td");
    td.textContent = text == null ? "" : String(text);
    if (cls) td.className = cls;
    return td;
  }

  function clock(ts) {
    return new Date(ts * 1000).toISOString().substring(11, 23) + "Z";
  }

  function keyLink(tenant, key) {
    const td = document.createElement("td");
    td.className = "key";
    const a = document.createElement("a");
    a.href = "/t/" + encodeURIComponent(tenant) + "/memory?key=" + encodeURIComponent(key);
    a.textContent = key;
    td.appendChild(a);
    return td;
  }

  function prepend(tbody, tr) {
    const empty = tbody.querySelector(".empty-row");
    if (empty) empty.remove();
    tbody.insertBefore(tr, tbody.firstChild);
    tr.classList.add("fresh");
    while (tbody.rows.length > MAX_ROWS) tbody.deleteRow(tbody.rows.length - 1);
  }

  function changeRow(tenant, c) {
    const tr = document.createElement("tr");
    tr.className = "change s-" + c.status;
    tr.dataset.key = c.key;
    tr.dataset.position = c.position;
    tr.appendChild(cell(clock(c.time), "time"));
    tr.appendChild(keyLink(tenant, c.key));
    tr.appendChild(cell(c.op));
    tr.appendChild(cell(c.status === "applied" ? "v" + c.version : c.status + (c.reason ? ": " + c.reason : "")));
    tr.appendChild(cell(c.agent));
    tr.appendChild(cell(c.content || (c.keys && c.keys.length ? c.keys.length + " memories" : ""), "content"));
    return tr;
  }

  function deadRow(d, ops) {
    const tr = document.createElement("tr");
    tr.className = "dead-letter";
    tr.dataset.seq = d.seq;
    tr.appendChild(cell(clock(d.received_at), "time"));
    if (ops) {
      tr.appendChild(cell(d.tenant));
      tr.appendChild(cell(d.shard, "n"));
      tr.appendChild(cell(d.agent));
      tr.appendChild(cell(d.reason, "reason"));
      const raw = cell("", "");
      const code = document.createElement("code");
      code.className = "raw";
      code.textContent = d.raw;
      const size = document.createElement("span");
      size.className = "dim";
      size.textContent = " " + d.raw_bytes + " B";
      raw.append(code, size);
      tr.appendChild(raw);
    } else {
      tr.appendChild(cell(d.reason, "reason"));
      tr.appendChild(cell(d.subject));
    }
    return tr;
  }

  function stream(tbody, statusId, handlers) {
    const url = tbody.dataset.stream;
    const status = document.getElementById(statusId);
    if (!url) return;
    const source = new EventSource(url);
    source.addEventListener("ready", () => {
      if (!status) return;
      status.textContent = "live";
      status.classList.add("on");
    });
    source.onerror = () => {
      if (!status) return;
      status.classList.remove("on");
      status.textContent = source.readyState === EventSource.CLOSED
        ? "not available to this credential" : "reconnecting…";
    };
    for (const [name, fn] of Object.entries(handlers)) {
      source.addEventListener(name, (ev) => prepend(tbody, fn(JSON.parse(ev.data))));
    }
  }

  function startLive() {
    const tenant = (document.querySelector(".who .tenant") || {}).textContent || "";
    const changes = document.getElementById("changes");
    if (changes) stream(changes, "changes-status", { change: (c) => changeRow(tenant, c) });
    const dead = document.getElementById("dead");
    if (dead) {
      const ops = dead.dataset.kind === "ops";
      stream(dead, "dead-status", { dead: (d) => deadRow(d, ops) });
    }
  }

  // --- savings charts ----------------------------------------------------------------------

  const COLORS = ["#2f6fdf", "#e4572e", "#17a398", "#a05ad6", "#f2a541", "#5b6c7d", "#d64597", "#3bb273"];

  function chart(el, title, times, named) {
    const series = [{}];
    const data = [times];
    named.forEach(([label, values, color], i) => {
      series.push({ label, stroke: color || COLORS[i % COLORS.length], width: 2, points: { show: times.length < 80 } });
      data.push(values);
    });
    const size = () => ({ width: Math.max(260, el.clientWidth), height: 240 });
    const plot = new uPlot({
      ...size(), series,
      scales: { x: { time: true } },
      axes: [{}, { size: 60, values: (u, vals) => vals.map((v) => v >= 1000 ? (v / 1000) + "k" : v) }],
      legend: { live: true },
    }, data, el);
    new ResizeObserver(() => plot.setSize(size())).observe(el);
    el.dataset.series = named.map((n) => n[0]).join(",");
    return plot;
  }

  function startCharts() {
    const block = document.getElementById("savings-data");
    if (!block || typeof uPlot === "undefined") return;
    const s = JSON.parse(block.textContent);
    const total = document.getElementById("chart-total");
    chart(total, "tokens", s.times, [
      ["injected", s.total.injected, "#17a398"],
      ["baseline", s.total.baseline, "#f2a541"],
      ["history", s.total.history, "#e4572e"],
    ]);
    const agents = document.getElementById("chart-agents");
    chart(agents, "saved", s.times, Object.entries(s.agents).map(([agent, m]) => [agent, m.saved]));
  }

  document.addEventListener("DOMContentLoaded", () => { startLive(); startCharts(); });
})();
